"""Only the C extensions live here (setuptools has no stable pyproject.toml form for it yet)."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        # The sink's ingest hot path (pipeline/formats/wire/native.py). Optional: without a C compiler
        # kubetape still installs and runs the same rules in Python, several times slower.
        Extension(
            "pipeline.formats.wire._wirescan",
            sources=["pipeline/formats/wire/_wirescan.c"],
            optional=True,
            extra_compile_args=["-O2", "-Wall"],
        ),
        # Segment format 3's row encoder (pipeline/formats/segment/delta.py). Optional in the same way:
        # without it the same tables are encoded in Python, about 15 times slower.
        Extension(
            "pipeline.formats.segment._deltarows",
            sources=["pipeline/formats/segment/_deltarows.c"],
            optional=True,
            extra_compile_args=["-O2", "-Wall"],
        ),
    ]
)
