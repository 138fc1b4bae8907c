"""Process entrypoints and the ``kubetape`` command line."""
