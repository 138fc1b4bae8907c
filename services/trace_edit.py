"""Loading a transform file for ``kubetape transform`` and ``export --transform``: a SKEL program given
in a file not named ``.skel`` is recognised and the error says how to pass it, instead of only that the
file is not valid YAML."""

from __future__ import annotations

import re
from pathlib import Path

from pipeline.model.errors import ConfigError
from pipeline.validate.transform import TraceEdit, load_trace_edit

_SKEL_STATEMENT = re.compile(r"^\s*(?:remove|modify|delete)\s*\(", re.MULTILINE)
"""The start of a SKEL statement at the start of a line: no YAML transform has one."""


def looks_like_skel(path: Path) -> bool:
    """Whether ``path`` holds SKEL statements (``remove(…);``, ``modify(…);``, ``delete(…);``)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return False
    return _SKEL_STATEMENT.search(text) is not None


def load_edit(path: Path, *, as_skel: str) -> TraceEdit:
    """The transform of ``path`` (SKEL for ``.skel``, else YAML). A YAML file that does not load but holds
    SKEL statements raises ConfigError saying so, with ``as_skel``: how this command takes a SKEL
    program from a file of another name."""
    try:
        return load_trace_edit(path)
    except ConfigError as exc:
        if path.suffix.lower() == ".skel" or not looks_like_skel(path):
            raise
        raise ConfigError(
            f"{path}: this is a SKEL program (remove/modify/delete statements), read as a YAML transform "
            f"because its name does not end in .skel; {as_skel}"
        ) from exc
