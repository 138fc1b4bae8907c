"""Text from a trace in a comment of a file kubetape writes for people to review and then apply (a SKEL
program, a YAML fix file): a comment ends at a line break, so text that holds one would become program
text (an object named ``"web\\ndelete(*);\\n#"`` would delete every object)."""

from __future__ import annotations


def one_line(text: str) -> str:
    """``text`` safe inside a ``#`` comment of SKEL or YAML: every character that is not printable (line
    breaks of any kind: ``\\n``, ``\\r``, ``\\u2028``, ``\\x85``..., and other control characters), and the
    backslash, written as a Python escape (``\\n``, ``\\x00``, ``\\\\``), so the comment stays one line and
    reads back unambiguously."""
    return "".join(
        ch if ch.isprintable() and ch != "\\" else ch.encode("unicode_escape").decode("ascii") for ch in text
    )
