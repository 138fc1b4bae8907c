"""One table of valid and invalid event messages, driven through every implementation of the wire's
validity rules: the definition (:func:`pipeline.formats.wire.rules.admitted_event`), the probe's
inline common case and its rule-following path (:class:`~pipeline.formats.wire.probe.WireProbe`) and
the C scan (:func:`pipeline.formats.wire.native.scan`).

A new rule is a new row here: every implementation then has to agree on it, or this test says which
one does not.
"""

from __future__ import annotations

from typing import Any

import msgpack
import pytest

from pipeline.formats.wire.codec import WIRE_VERSION
from pipeline.formats.wire.native import NATIVE, scan
from pipeline.formats.wire.probe import EventHead, WireProbe
from pipeline.formats.wire.rules import admitted_event
from pipeline.model.errors import FormatError, KubetapeError, UnknownVersionError
from pipeline.model.events import RV_MAX_DIGITS, TS_MAX_MS, U64_MAX

KEY = "apps/Deployment/ns/web"
BODY = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "ns"}}
NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}
V = WIRE_VERSION


def _obj(**fields: Any) -> list[Any]:
    """An applied event's wire list (code 1), with ``fields`` replacing those named."""
    wire = {"version": V, "code": 1, "ts": 5, "key": KEY, "uid": "u", "rv": "7", "obj": BODY, "hash": 3}
    wire.update(fields)
    return list(wire.values())


def _pod(owner: Any = KEY, pod_hash: Any = 1, start: Any = 10, end: Any = None, **fields: Any) -> list[Any]:
    """A pod lifecycle's wire list (code 3)."""
    return [*_obj(code=3, key="core/Pod/ns/p", obj=None, hash=0, **fields), owner, pod_hash, start, end]


def _gap(from_rv: Any = "1", to_rv: Any = "9", reason: Any = "410", **fields: Any) -> list[Any]:
    """A gap's wire list (code 4)."""
    return [*_obj(code=4, key="apps/Deployment/*/*", obj=None, hash=0, **fields), from_rv, to_rv, reason]


VALID: list[tuple[str, Any]] = [
    ("applied", _obj()),
    ("deleted", _obj(code=2)),
    ("cluster-scoped object", _obj(key="core/Node/_/n1", obj=NODE)),
    ("no uid, no resourceVersion", _obj(uid="", rv="")),
    ("the latest time", _obj(ts=TS_MAX_MS)),
    ("the longest resourceVersion", _obj(rv="9" * RV_MAX_DIGITS)),
    ("the largest spec hash", _obj(hash=U64_MAX)),
    ("a body with more fields", _obj(obj={**BODY, "spec": {"replicas": 2}, "status": None})),
    ("a running pod", _pod()),
    ("an ended pod", _pod(end=20)),
    ("a gap", _gap()),
    ("a gap without versions", _gap(from_rv=None, to_rv=None)),
]

INVALID: list[tuple[str, Any, type[KubetapeError], str]] = [
    ("not a list", {"not": "a list"}, FormatError, "not a kubetape event"),
    ("too few fields", [V, 1, 0, KEY], FormatError, "not a kubetape event"),
    ("another version", _obj(version=V + 1), UnknownVersionError, "is not supported"),
    ("a version that is not an int", _obj(version="1"), FormatError, "is not a version"),
    ("type code 0", _obj(code=0), FormatError, "unknown event type code 0"),
    ("type code 9", _obj(code=9), FormatError, "unknown event type code 9"),
    ("type code as a bool", _obj(code=True), FormatError, "unknown event type code True"),
    ("an object event with a lifecycle's fields", [*_obj(), KEY, 1, 10, None], FormatError, "has 8 fields"),
    ("a lifecycle without its fields", _obj(code=3, obj=None), FormatError, "has 12 fields, got 8"),
    ("a negative time", _obj(ts=-5), FormatError, "ts_ms must be a non-negative"),
    ("a time past year 9999", _obj(ts=TS_MAX_MS + 1), FormatError, "ts_ms must be .*year 9999"),
    ("a time as a float", _obj(ts=5.0), FormatError, "ts_ms must be"),
    ("a time as a bool", _obj(ts=True), FormatError, "ts_ms must be"),
    ("a key of three parts", _obj(key="apps/Deployment/web"), FormatError, "key must be"),
    ("a key with an empty part", _obj(key="core/ConfigMap//x"), FormatError, "four non-empty parts"),
    ("a key that is not a string", _obj(key=7), FormatError, "key must be"),
    ("a uid that is not a string", _obj(uid=1), FormatError, "uid and resource_version must be strings"),
    ("a resourceVersion as an int", _obj(rv=7), FormatError, "uid and resource_version must be strings"),
    ("a non-ASCII digit", _obj(rv="²"), FormatError, "resource_version must be empty or .* digits"),
    ("a resourceVersion too long", _obj(rv="9" * 21), FormatError, "resource_version must be empty or"),
    ("a negative spec hash", _obj(hash=-1), FormatError, "spec_hash must be an unsigned 64-bit"),
    ("an object event without a body", _obj(obj=None), FormatError, "obj must be the"),
    ("a body that is a list", _obj(obj=[BODY]), FormatError, "obj must be the"),
    ("a body of another object", _obj(key="apps/Deployment/ns/api"), FormatError, "not the one its key"),
    ("a body with a non-string key", _obj(obj={**BODY, 1: "x"}), FormatError, "must be strings"),
    ("metadata that is not a map", _obj(obj={**BODY, "metadata": "web"}), FormatError, "not a Kubernetes"),
    (
        "a body without a kind",
        _obj(obj={"apiVersion": "v1", "metadata": {"name": "web"}}),
        FormatError,
        "obj",
    ),
    ("a lifecycle with a body", [*_obj(code=3, hash=0), KEY, 1, 10, None], FormatError, "obj must be None"),
    ("a lifecycle ending before it starts", _pod(end=5), FormatError, "pod_end_ms must be"),
    ("a lifecycle with a bad owner", _pod(owner="o/B//d"), FormatError, "owner_key must be"),
    ("a lifecycle with a negative pod hash", _pod(pod_hash=-1), FormatError, "pod_spec_hash must be"),
    ("a lifecycle starting past year 9999", _pod(start=TS_MAX_MS + 1), FormatError, "pod_start_ms"),
    ("a gap without a reason", _gap(reason=None), FormatError, "gap_reason must be a string"),
    ("a gap to a non-numeric version", _gap(to_rv="x"), FormatError, "gap_to_rv must be"),
    ("a gap with a body", [*_obj(code=4, hash=0), "1", "9", "410"], FormatError, "obj must be None"),
]


def _packed(wire: Any) -> bytes:
    data: bytes = msgpack.packb(wire, use_bin_type=True)
    return data


@pytest.mark.parametrize(("name", "wire"), VALID, ids=[row[0] for row in VALID])
def test_every_implementation_admits_a_valid_message(name: str, wire: Any) -> None:
    data = _packed(wire)
    event = admitted_event(data)  # the definition
    head = WireProbe().head(data)
    assert head[:-1] == EventHead.of(event)[:-1]  # every field the definition decoded, read alike
    assert head.wire is data
    if NATIVE:
        (scanned,), undecided = scan([data])
        assert undecided == []  # valid messages are the common case the C scan takes alone
        assert scanned is not None
        assert tuple(scanned) == tuple(head)
        assert [type(x) for x in scanned] == [type(x) for x in head]


@pytest.mark.parametrize(("name", "wire", "error", "message"), INVALID, ids=[row[0] for row in INVALID])
def test_every_implementation_refuses_an_invalid_message(
    name: str, wire: Any, error: type[KubetapeError], message: str
) -> None:
    data = _packed(wire)
    with pytest.raises(error, match=message) as defined:
        admitted_event(data, where="msg@3")
    with pytest.raises(error) as probed:
        WireProbe().head(data, where="msg@3")
    assert str(probed.value) == str(defined.value)  # the same words, wherever the message is refused
    if NATIVE:
        (scanned,), undecided = scan([data])
        assert scanned is None
        assert undecided == [0]


@pytest.mark.parametrize(
    "damage",
    [lambda d: d[:-1], lambda d: d + b"\x00", lambda d: b"\xc1" + d[1:]],
    ids=["truncated", "bytes after the event", "an undecodable byte"],
)
def test_every_implementation_refuses_damaged_bytes(damage: Any) -> None:
    data = damage(_packed(_obj()))
    with pytest.raises(FormatError, match="undecodable msgpack"):
        admitted_event(data)
    with pytest.raises(FormatError, match="undecodable msgpack"):
        WireProbe().head(data)
    if NATIVE:
        assert scan([data]) == ([None], [0])
