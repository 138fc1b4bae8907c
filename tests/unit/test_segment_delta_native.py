"""Segment format 3's C row encoder (``pipeline/formats/segment/_deltarows.c``) writes the very table the
Python definition (:func:`pipeline.formats.segment.delta._encode_python`) writes, on event lists made
to meet its hard cases: keys met again with the same or another object, fields Python calls equal
that pack differently (1 and True and 1.0, -0.0 and 0.0, maps in another order), odd shapes."""

from __future__ import annotations

import os
from typing import Any

import msgpack
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from pipeline.formats.segment import delta, delta_patch
from tests.unit.test_model_events import JSON, JSON_SCALARS

pytestmark = pytest.mark.skipif(
    not delta.NATIVE and os.environ.get("CI", "").lower() not in {"1", "true", "yes"},
    reason="the C row encoder was not built (no compiler at install time)",
)

START = 1_750_000_000_000
KEYS = st.sampled_from(["core/Pod/ns/a", "core/Pod/ns/b", "apps/Deployment/ns/d", "core/Pod/ns/ü"])
UIDS = st.sampled_from(
    ["", "8f0e2b52-5c1e-4f55-9d4e-3f1d2a0b7c11", "8F0E2B52-5C1E-4F55-9D4E-3F1D2A0B7C11", "x" * 36, None, 7]
)
RVS = st.sampled_from(["", "0", "007", "12", "13", "99999999999999999999", "9223372036854775808", 5, None])
TWINS = st.sampled_from([1, True, 1.0, 0.0, -0.0, float("nan"), {"a": 1, "b": 2}, {"b": 2, "a": 1}])
VERSIONS: st.SearchStrategy[Any] = st.sampled_from([{"s": {"r": 1}}, {"s": {"r": 2}}, {"s": {"r": True}}])
OBJECTS = VERSIONS | TWINS | JSON
SPEC_HASHES = st.sampled_from([0, 1, True, 1.0, "h", None])
TIMES = st.integers(min_value=START - 10, max_value=START + 10)
TIMES = TIMES | st.sampled_from([None, (1 << 64) - 1, -(1 << 63)])


@st.composite
def rows(draw: st.DrawFn) -> list[Any]:
    code = draw(st.sampled_from([1, 2, 3, 4]))
    head = [
        draw(st.sampled_from([1, 1, 1, True, 2])),
        code,
        draw(st.integers(min_value=START - 5, max_value=START + 5) | st.sampled_from([1 << 63, -(1 << 63)])),
        draw(KEYS),
        draw(UIDS),
        draw(RVS),
        draw(OBJECTS),
        draw(SPEC_HASHES),
    ]
    if code == 3:
        owner = draw(st.sampled_from([None, "apps/Deployment/ns/d", "apps/Deployment/ns/e", 3]))
        ext = [owner, draw(SPEC_HASHES), draw(TIMES), draw(TIMES)]
        return head + ext[: draw(st.sampled_from([4, 4, 4, 3]))]
    if code == 4:
        return [*head, draw(st.sampled_from(["1", "2"])), draw(st.sampled_from(["3", 3])), draw(TWINS)]
    return head


def _strict(value: Any) -> Any:
    """``value`` as a tree that is equal only for the same types, map orders and float bits (the
    tables are compared as is: some hold numbers msgpack cannot pack, which the writer refuses later)."""
    if type(value) is dict:
        return ("map", [(_strict(k), _strict(v)) for k, v in value.items()])
    if type(value) is list:
        return ("list", [_strict(v) for v in value])
    if type(value) is float:
        return ("float", value.hex())
    return (type(value).__name__, value)


def _tables(values: list[Any]) -> tuple[Any, Any]:
    blob = b"".join(msgpack.packb(v, use_bin_type=True) for v in values)
    native = delta.encode_events(blob, len(values), START)
    python = delta._encode_python(blob, len(values), START)
    return _strict(native), _strict(python)


def test_the_c_row_encoder_is_built() -> None:
    """In CI it must exist: a silent fallback would hide a broken build and a format 3 several times
    slower."""
    assert delta.NATIVE


@given(st.lists(rows(), max_size=14))
@settings(max_examples=200, deadline=None)
def test_the_c_encoder_writes_the_table_python_writes(values: list[Any]) -> None:
    native, python = _tables(values)
    assert native == python


def test_common_rows_and_patches_are_taken_in_c_and_loose_equality_left_to_python() -> None:
    pod = [1, 3, START, "core/Pod/ns/a", "8f0e2b52-5c1e-4f55-9d4e-3f1d2a0b7c11", "12", None, 0]
    lifecycle = [*pod, "apps/Deployment/ns/d", 42, START, None]
    ended = [*pod[:2], START + 5, *pod[3:], "apps/Deployment/ns/d", 42, START, START + 5]
    deployment = [1, 1, START, "apps/Deployment/ns/d", "", "13", {"spec": {"replicas": 1}}, 9]
    scaled = [*deployment[:6], {"spec": {"replicas": 2}}, 9]
    loose = [*deployment[:6], {"spec": {"replicas": 2.0}}, 9]  # Python: 2 == 2.0, the same
    values = [lifecycle, ended, deployment, scaled, loose]
    table = delta._encode_native(values, len(values), START)
    assert table["obj"][-1] == [delta_patch._MAP_PATCH, {"spec": [1, {"replicas": [0, 2]}, []]}, []]
    assert table["raw"] == [msgpack.packb(loose)]  # Python's rule: the same, but it does not rebuild
    native, python = _tables(values)
    assert native == python
    from pipeline.formats.segment import _deltarows  # type: ignore[attr-defined]  # C, no stubs

    t = delta._Columns(START)
    columns = tuple(t.cols[name] for name in delta._NATIVE_COLUMNS)
    stop, _, _ = _deltarows.encode_rows(
        values, 0, columns, t.key_index, t.keys, t.bases, t.spec_hash_index, t.prev_ts, t.prev_rv
    )
    assert stop == 4  # the last one's sameness is Python's to decide


def _round_trips(blob: bytes, count: int) -> bool | None:
    """Whether the values of ``blob`` pack back to it; None if they do not unpack (text not UTF-8)."""
    try:
        values = msgpack.unpackb(delta._array_header(count) + blob, raw=False, strict_map_key=False)
    except Exception:
        return None
    return bool(msgpack.packb(values, use_bin_type=True) == delta._array_header(count) + blob)


ANY_KEYS = st.text(max_size=3) | st.integers(min_value=-2, max_value=2) | st.booleans() | st.floats(0, 1)


def _containers(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.lists(inner, max_size=20) | st.dictionaries(ANY_KEYS, inner, max_size=20)


ODD = st.recursive(
    JSON_SCALARS | st.binary(max_size=300) | st.text(min_size=30, max_size=300) | st.just(float("nan")),
    _containers,
    max_leaves=25,
)


# the strategy's repr is long (hypothesis warns when it shows it); the values stay small
@pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisWarning")
@given(st.lists(ODD, max_size=4), st.sampled_from(["bin", "str", "single"]))
@settings(max_examples=200, deadline=None)
def test_bytes_called_canonical_pack_back_to_themselves(values: list[Any], packer: str) -> None:
    """Packed as the sink's events are (bin type on) or otherwise (raw strings, 32-bit floats): the C
    check never calls canonical what unpacks and does not pack back to the same bytes, and calls
    canonical what does (but maps with keys other than text, NaN: they go to Python's check)."""
    options = {"bin": {}, "str": {"use_bin_type": False}, "single": {"use_single_float": True}}[packer]
    try:
        blob = b"".join(msgpack.packb(v, **({"use_bin_type": True} | options)) for v in values)
    except OverflowError:  # a double too large for 32 bits
        assume(False)
    if _deltarows_module().canonical(blob, len(values)):  # text is checked by unpacking, after it
        assert _round_trips(blob, len(values)) in (True, None)
    elif packer == "bin" and _round_trips(blob, len(values)):
        assert any(type(k) is not str for v in values for k in _map_keys(v)) or "nan" in repr(values), (
            "canonical bytes called not canonical"
        )


def test_hand_made_forms_msgpack_does_not_write_are_not_canonical() -> None:
    odd = [
        b"\xcc\x05",  # 5 as a uint8
        b"\xd0\x05",  # 5 as an int8
        b"\xd1\xff\xf0",  # -16 as an int16
        b"\xca\x3f\x80\x00\x00",  # 1.0 as a float32
        b"\xd9\x01a",  # "a" as a str8
        b"\xc5\x00\x01a",  # b"a" as a bin16
        b"\xdc\x00\x01\x01",  # [1] as an array16
        b"\x82\xa1a\x01\xa1a\x02",  # {"a": 1, "a": 2}
        b"\x81\x01\x01",  # {1: 1}
        b"\xd4\x01\x00",  # an ext
        b"\x92\x01",  # truncated
    ]
    for blob in odd:
        assert not _deltarows_module().canonical(blob, 1), blob
    assert _deltarows_module().canonical(b"\x01\x02", 2)
    assert not _deltarows_module().canonical(b"\x01\x02", 1)  # a value too many


def _map_keys(value: Any) -> list[Any]:
    if type(value) is dict:
        return [*value, *(k for v in value.values() for k in _map_keys(v))]
    if type(value) is list:
        return [k for v in value for k in _map_keys(v)]
    return []


def _deltarows_module() -> Any:
    from pipeline.formats.segment import _deltarows  # type: ignore[attr-defined]  # C, no stubs

    return _deltarows
