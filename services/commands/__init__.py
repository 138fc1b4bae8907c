"""Subcommands of the ``kubetape`` CLI, one module each."""
