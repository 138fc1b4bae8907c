# kubetape services (watcher, sink, replayer, controller) as one slim, non-root image.
#   docker build -t kubetape:dev .
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY pipeline ./pipeline
COPY services ./services
RUN pip install --no-cache-dir --prefix=/install .

FROM python:3.11-slim
# no .pyc writes (the manifests mount the root filesystem read-only), logs straight to the container log
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
RUN useradd --uid 10001 --create-home --shell /usr/sbin/nologin kubetape
COPY --from=build /install /usr/local
USER 10001
WORKDIR /home/kubetape
ENTRYPOINT ["kubetape"]
CMD ["--help"]
