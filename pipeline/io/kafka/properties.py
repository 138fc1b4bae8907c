"""Java's properties file syntax, read as ``java.util.Properties.load`` reads it: users copy their Java
Kafka clients' files, so every line those clients accept reads here with the same key and value.

* A key ends at the first unescaped ``=``, ``:`` or whitespace (space, tab, form feed); whitespace
  around the separator is skipped, so ``k=v``, ``k: v``, ``k v`` and ``k<TAB>v`` are the same.
* ``#`` or ``!`` as the first non-blank character makes a comment line; blank lines are skipped.
* A line ending in an odd number of backslashes continues on the next one, whose leading whitespace is
  dropped (a comment line does not continue).
* ``\\t``, ``\\n``, ``\\r``, ``\\f`` and ``\\uXXXX`` are escapes; a backslash before any other character
  stands for that character (``\\=``, ``\\:``, ``\\ ``, ``\\#``, ``\\\\``).
* The value keeps its trailing whitespace, as Java's does (Kafka's clients trim it; so do the callers).

A value may be a password, so no error quotes one: a mistake names the line number and the key.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

WHITESPACE = " \t\f"
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


class PropertiesError(ValueError):
    """A line Java refuses too (a malformed ``\\uXXXX``); the message never holds the value."""


@dataclass(frozen=True, slots=True)
class Property:
    key: str
    value: str
    line: int
    """The (first) line number of the logical line, from 1."""
    has_separator: bool
    """False for a line holding a key alone (Java reads it as the key with an empty value)."""


def parse_properties(text: str) -> list[Property]:
    """Every key/value of ``text`` in the file's order (a later key overrides an earlier one, as in
    Java: :func:`properties_dict`)."""
    return [_split(logical, number) for logical, number in _logical_lines(text)]


def properties_dict(entries: list[Property]) -> dict[str, Property]:
    return {entry.key: entry for entry in entries}


def _natural_lines(text: str) -> list[str]:
    # \n, \r and \r\n end a line, as in Java (str.splitlines also splits at \v, \x1c… which Java keeps)
    return text.replace("\r\n", "\n").replace("\r", "\n").split("\n")


def _continues(line: str) -> bool:
    trailing = len(line) - len(line.rstrip("\\"))
    return trailing % 2 == 1


def _logical_lines(text: str) -> Iterator[tuple[str, int]]:
    lines = _natural_lines(text)
    i = 0
    while i < len(lines):
        number = i + 1
        line = lines[i].lstrip(WHITESPACE)
        i += 1
        if not line or line[0] in "#!":
            continue
        while _continues(line):
            line = line[:-1]
            if i >= len(lines):
                break  # a backslash ending the file ends the line, as in Java
            line += lines[i].lstrip(WHITESPACE)
            i += 1
        yield line, number


def _split(line: str, number: int) -> Property:
    i = 0
    while i < len(line):
        char = line[i]
        if char == "\\":
            i += 2
            continue
        if char in "=:" or char in WHITESPACE:
            break
        i += 1
    raw_key, rest = line[:i], line[i:]
    key = _unescape(raw_key, f"line {number}: a malformed \\uXXXX escape in the key")
    rest = rest.lstrip(WHITESPACE)
    has_separator = bool(rest)
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(WHITESPACE)
    value = _unescape(rest, f"line {number}: {key}: a malformed \\uXXXX escape in the value")
    return Property(key, value, number, has_separator)


def _unescape(text: str, where: str) -> str:
    if "\\" not in text:
        return text
    out: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        i += 1
        if char != "\\":
            out.append(char)
            continue
        if i >= len(text):
            break  # a lone backslash at the end stands for nothing
        escaped = text[i]
        i += 1
        if escaped == "u":
            digits = text[i : i + 4]
            if len(digits) != 4 or any(d not in "0123456789abcdefABCDEF" for d in digits):
                raise PropertiesError(f"{where}; write four hex digits")
            out.append(chr(int(digits, 16)))
            i += 4
        else:
            out.append(_ESCAPES.get(escaped, escaped))
    return "".join(out)
