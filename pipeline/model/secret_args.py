"""Secrets on a container's command line, masked before it enters a trace (``redactArgs``, on by default).

The rule (docs/redaction.md states it for users), applied to every string of ``args`` and ``command``:

* A **secret name** is a flag or variable name one of whose words (split at ``-``, ``_``, ``.`` and
  camelCase, compared case-insensitively) contains ``password``, ``passwd`` or ``passphrase``; ends in
  ``secret(s)``, ``token``, ``credential(s)`` or ``creds``; is ``pass``, ``pwd`` or ``key``; or is a
  ``…key`` compound of :data:`KEY_COMPOUNDS` (``apikey``, ``accessKey``, ``privatekey``, ``signingKey``…).
* ``--NAME=VALUE`` / ``-NAME=VALUE`` with a secret NAME → ``--NAME=<redacted>``; ``--NAME VALUE`` →
  ``--NAME <redacted>``, whatever VALUE starts with (``-x…`` too), except an option (``--x…`` or a
  one-letter ``-x``), which then is no value.
* ``NAME=VALUE`` (an environment assignment, ``env PASSWORD=x app``, ``--set db.password=x``) with a
  secret NAME → ``NAME=<redacted>``.
* ``-p VALUE`` (and ``-p=VALUE``): a password for sshpass, mongo and others, a port for ssh, psql or
  redis-cli, "parents" for mkdir: VALUE is masked unless it is a port or port mapping (``5432``,
  ``8080:80/tcp``) or a path (``/x``, ``./x``, ``~/x``).
* ``scheme://user:PASSWORD@host`` anywhere in a string → ``scheme://user:<redacted>@host``.
* A string holding whitespace (the script of ``sh -c``/``bash -c``, given in ``command`` or ``args``) is
  split into shell words (quotes and operators honoured) and the same rules apply to its words, nested
  quoted scripts included; the rest of the script is kept byte for byte.
* A value that is only a reference (``$VAR``, ``${VAR}``, Kubernetes' ``$(VAR)``) is no secret and stays.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from pipeline.model.tracer_config import REDACTED

KEY_COMPOUNDS = frozenset(
    f"{prefix}key"
    for prefix in (
        "api", "access", "private", "secret", "signing", "sign", "master", "encryption", "auth",
        "ssh", "hmac", "license", "client", "session", "shared", "crypt", "account", "storage",
    )
)  # fmt: skip
"""Single words ending in ``key`` that name a secret (``--privatekey``); ``monkey``, ``hotkey`` do not."""

_CONTAINS = ("password", "passwd", "passphrase")
_ENDS = ("secret", "secrets", "token", "credential", "credentials", "creds")
_EXACT = frozenset({"pass", "pwd", "key"})

_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")
_FLAG = re.compile(r"-{1,2}[A-Za-z][^=\s]*")
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")
_OPTION = re.compile(r"--[A-Za-z].*|-[A-Za-z]", re.S)
_REFERENCE = re.compile(r"\$(?:[A-Za-z_]\w*|\{[A-Za-z_]\w*\}|\([A-Za-z_]\w*\))")
_PORT = re.compile(r"(?:[\d.]+:)?\d{1,5}(?:-\d{1,5})?(?::\d{1,5}(?:-\d{1,5})?)?(?:/(?:tcp|udp|sctp))?")
_PATH = re.compile(r"(?:/|\./|\.\./|~)")
_URL_PASSWORD = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^/\s:@'\"]*:)[^@\s/'\"]+@")
_SHELL = re.compile(
    r"""(?P<op>[;&|()<>]+)"""
    r"""|(?P<word>(?:[^\s'"\\;&|()<>$]|\$\([^()]*\)|\$|\\.|'[^']*'|"(?:[^"\\]|\\.)*")+)"""
    r"""|(?P<other>\S)""",
    re.S,
)
_QUOTING = re.compile(r"""\\(.)|['"]""", re.S)


def secret_name(name: str) -> bool:
    """Whether a flag or variable name says it holds a secret (see the module docstring)."""
    for part in re.split(r"[^A-Za-z0-9]+", name):
        for word in (w.lower() for w in _WORD.findall(part)):
            if any(s in word for s in _CONTAINS) or word.endswith(_ENDS):
                return True
            if word in _EXACT or word in KEY_COMPOUNDS:
                return True
    return False


def mask_secret_args(argv: Any) -> Any:
    """``argv`` with the values of secret flags, assignments and URL passwords masked; not a list: as is."""
    if not isinstance(argv, list):
        return argv
    strings = [a for a in argv if isinstance(a, str)]
    masked = iter(_mask_tokens([(s, s) for s in strings]))
    return [next(masked) if isinstance(a, str) else a for a in argv]


def mask_script(script: str) -> str:
    """A shell script with the rule applied to its words; everything else kept as written."""
    spans: list[tuple[int, int]] = []
    tokens: list[tuple[str, str | None]] = []
    for match in _SHELL.finditer(script):
        raw = match.group()
        spans.append(match.span())
        tokens.append((raw, None if match.lastgroup == "op" else _unquote(raw)))
    out, end = [], 0
    for (start, stop), replacement in zip(spans, _mask_tokens(tokens, quoted=True), strict=True):
        out += [script[end:start], replacement]
        end = stop
    out.append(script[end:])
    return "".join(out)


def _unquote(word: str) -> str:
    return _QUOTING.sub(lambda m: m.group(1) or "", word)


def _mask_tokens(tokens: list[tuple[str, str | None]], *, quoted: bool = False) -> Iterator[str]:
    """Each token's replacement. A token is (as written, its plain text or None for a shell operator);
    in an argv both are the same string."""
    pending: str | None = None  # the secret flag whose value is the next token ("-p" or another)
    for raw, plain in tokens:
        flag, pending = pending, None
        if plain is None:  # ;, &&, | … end a command: no value follows
            yield raw
        elif flag is not None and not _OPTION.fullmatch(plain):
            yield raw if _kept_value(flag, plain) else REDACTED
        else:
            name, eq, value = plain.partition("=")
            is_flag = bool(_FLAG.fullmatch(name))
            if (is_flag or (eq and _ASSIGNMENT.fullmatch(name))) and (
                secret_name(name) or (is_flag and name == "-p")
            ):
                if eq:  # the whole value, spaces included: ``--password=two words`` is one value
                    yield raw if _kept_value(name, value) else f"{name}={REDACTED}"
                else:
                    pending = name
                    yield raw
            elif re.search(r"\s", plain):
                yield _mask_nested(raw, quoted=quoted)
            else:
                yield _mask_url(raw)


def _mask_nested(raw: str, *, quoted: bool) -> str:
    """A string holding whitespace: in an argv, a script; in a script, a quoted script (``'…'``/``"…"``)."""
    if not quoted:
        return mask_script(raw)
    if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "'\"":
        return raw[0] + mask_script(raw[1:-1]) + raw[0]
    return _mask_url(raw)


def _kept_value(flag: str, value: str) -> bool:
    """A value that stays: a variable reference; for ``-p``, a port or a path."""
    if _REFERENCE.fullmatch(value):
        return True
    return flag == "-p" and bool(_PORT.fullmatch(value) or _PATH.match(value))


def _mask_url(text: str) -> str:
    return _URL_PASSWORD.sub(lambda m: f"{m.group(1)}{REDACTED}@", text)
