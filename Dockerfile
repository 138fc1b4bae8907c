# kubetape services (watcher, sink, replayer, controller) as one slim, non-root image.
#   docker build -t kubetape:dev .
#
# The builder stage has a C compiler to build the sink's ingest path
# (pipeline/formats/wire/_wirescan.c, declared in setup.py); the runtime stage gets only the installed result, no compiler. setup.py marks the
# extension optional so that a laptop without a compiler still installs kubetape; here a missing
# extension is a broken build, so the builder checks that the module imports.
FROM python:3.11-slim AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc libc6-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY pipeline ./pipeline
COPY services ./services
# a shared object built on the host (another libc, another Python) must never ride along
RUN find pipeline -name '*.so' -delete \
 && pip install --no-cache-dir --prefix=/install . \
 && cd / \
 && PYTHONPATH=/install/lib/python3.11/site-packages \
    python -c "import pipeline.formats.wire._wirescan as m; print('C ingest path built:', m.__file__)"

FROM python:3.11-slim
# no .pyc writes (the manifests mount the root filesystem read-only), logs straight to the container log
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
RUN useradd --uid 10001 --create-home --shell /usr/sbin/nologin kubetape
COPY --from=build /install /usr/local
USER 10001
WORKDIR /home/kubetape
ENTRYPOINT ["kubetape"]
CMD ["--help"]
