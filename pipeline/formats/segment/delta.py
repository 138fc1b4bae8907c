"""Delta-coded event lists (segment format version 3): each version of an object after its first in a
segment is stored as the difference from the previous one, and the small fields in columns.

Most of a cluster's history is the same object written again with one field changed; storing each
version whole paid for the object every time. The transform works on the events' wire bytes (what the
sink consumed), so it is exact by construction: :func:`encode_events` returns a table and
:func:`.delta_decode.decode_events` gives back the *same bytes*, which the version-2 reader then
decodes. An event whose bytes would not come back identical (msgpack written by another encoder, text
that is not UTF-8, anything unusual) is kept as its bytes (a "raw" row): the encoder checks every row
by rebuilding it.

The table (a msgpack map inside the zstd body), one row per event in file order; each column holds the
values of the rows that use it, in order:

* ``op``: per row, ``0`` for a raw row, else the wire type code (1-4) plus ``_F_*`` flags times 8;
* ``ts``: event time minus the previous row's (the first row's minus the segment start);
* ``key``: the index of the row's key among the keys met so far, or the key itself when it is new;
* ``uid``, ``rv``, ``sh``: the UID (16 bytes when it is a canonical UUID), the resourceVersion (as the
  difference from the previous numeric one when it is a canonical decimal), the spec hash; each left
  out when equal to the base's;
* ``obj`` and ``ext`` (a gap's own fields, or a lifecycle's that do not fit the columns below): the
  value whole, or a patch of the base's (:func:`.delta_patch.diff`), or nothing when equal;
* ``own``, ``psh``, ``st``, ``en`` (a lifecycle's own fields, flag ``_F_EXT_COLUMNS``; added after
  the first format-3 tables, which do not use them and still read): the owner key as in ``key`` (the
  keys met are one list), the pod spec hash as the index of an earlier row's or ``[hash]``, the start
  and end as the event time minus them (``None`` stays ``None``). In ``bench/bench_storage.py`` they
  took a segment of the codec workload from 206.6 to 191.6 KB: the whole lists had cost 24 % of it;
* ``raw``: the bytes of raw rows.

The **base** of a row is the latest earlier non-raw row with the same key (and, for a pod, the same
sort of event: its object versions, its lifecycle): it is implicit, so a
patch can only name an earlier row of the same segment (no reference forward, no cycle). A patch that
does not fit its base (a map patch on a list, an index past the end, a key deleted that is not there),
a row that needs a base without one, more rows or bytes than the header declares: refused with a
FormatError before the patch is applied or the bytes grow further.

This module is the encoder. Reading a table back, with the row rules both directions share, is
:mod:`.delta_decode`; the patches of one value against another are :mod:`.delta_patch`.
"""

from __future__ import annotations

import contextlib
import gc
import re
from collections.abc import Iterator
from typing import Any

import msgpack

from pipeline.formats.segment.delta_decode import (
    _COLUMNS,
    _F_EXT_COLUMNS,
    _F_EXT_SAME,
    _F_OBJ_SAME,
    _F_RV_INT,
    _F_SH_SAME,
    _F_UID_BIN,
    _F_UID_SAME,
    _INT_MAX,
    _INT_MIN,
    _RV_INT_LIMIT,
    _base_slot,
    _pack,
    _rebuild,
)
from pipeline.formats.segment.delta_patch import _REPLACE, _same, diff

try:
    from pipeline.formats.segment import _deltarows  # type: ignore[attr-defined]  # C, no stubs
except ImportError:  # pragma: no cover - only without a C compiler at install time
    _deltarows = None

DELTA_ROWS = 1
"""The version of the rules ``_deltarows.c`` implements (this module's format-3 rows, with the patches
of :mod:`.delta_patch`): raise both together whenever a rule changes; a build from another version is
not used."""
if _deltarows is not None and getattr(_deltarows, "DELTA_ROWS", None) != DELTA_ROWS:  # pragma: no cover
    _deltarows = None

NATIVE: bool = _deltarows is not None
"""Whether the C row encoder (``_deltarows.c``) is built; without it every row is encoded in Python
(the same table, several times the CPU)."""


@contextlib.contextmanager
def python_rows_only() -> Iterator[None]:
    """Every row is encoded by the Python definition while inside (``bench/bench_storage.py`` compares
    both in one run). Not for threads that encode meanwhile."""
    global _deltarows  # noqa: PLW0603 - the one switch of the C encoder, for the benchmark
    native, _deltarows = _deltarows, None
    try:
        yield
    finally:
        _deltarows = native


_RV_MAX_DIGITS = 20  # resourceVersions are at most 20 ASCII digits (the sink's ingest rule)


def _uid_bytes(uid: Any) -> bytes | None:
    """The 16 bytes of a canonical (lowercase, hyphenated) UUID text, else None."""
    if type(uid) is not str or len(uid) != 36 or _UUID_TEXT.fullmatch(uid) is None:
        return None
    return bytes.fromhex(uid.replace("-", ""))


_UUID_TEXT = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _rv_int(rv: Any) -> int | None:
    if type(rv) is str and 0 < len(rv) <= _RV_MAX_DIGITS and rv.isascii() and rv.isdigit():
        value = int(rv)
        if (rv[0] != "0" or rv == "0") and value < _RV_INT_LIMIT:
            return value
    return None


class _Columns:
    """The columns being filled, and the running values (previous time, previous numeric rv, keys)."""

    def __init__(self, start_ms: int) -> None:
        self.cols: dict[str, list[Any]] = {name: [] for name in _COLUMNS}
        self.prev_ts = start_ms
        self.prev_rv = 0
        self.key_index: dict[str, int] = {}
        self.keys: list[str] = []
        self.bases: dict[int, list[Any]] = {}
        self.spec_hash_index: dict[int, int] = {}

    def key_ref(self, key: str | None) -> int | str | None:
        """A key as the ``key`` and ``own`` columns hold it: its index if met before, else itself (it
        is then met)."""
        if key is None:
            return None
        index = self.key_index.get(key)
        if index is not None:
            return index
        self.key_index[key] = len(self.keys)
        self.keys.append(key)
        return key

    def spec_hash_ref(self, value: int) -> int | list[int]:
        """A pod spec hash as the ``psh`` column holds it: its index among those met before, else
        ``[value]`` (a hash repeats for every pod of a template, but its 5 bytes are shorter than the
        match zstd looks for, see :data:`~.encode.ZSTD_MIN_MATCH`)."""
        index = self.spec_hash_index.get(value)
        if index is not None:
            return index
        self.spec_hash_index[value] = len(self.spec_hash_index)
        return [value]


def encode_events(blob: bytes, count: int, start_ms: int) -> dict[str, Any] | None:
    """The delta table of a version-2 event list (``count`` events' wire bytes, concatenated), or None
    if it does not split into ``count`` msgpack values (the segment then holds the blob as it is)."""
    # Unpacking allocates many containers that all survive until the table is packed: the cyclic GC
    # would rescan them again and again for nothing (as in decoding, see decode.decode_segment).
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        if _deltarows is not None:
            values = _values_packing_back(blob, count)
            if values is not None:
                return _encode_native(values, count, start_ms)
        return _encode_python(blob, count, start_ms)
    finally:
        if gc_was_enabled:
            gc.enable()


def _array_header(count: int) -> bytes:
    """A msgpack array header of ``count`` items: followed by their bytes, it makes the list of them."""
    if count < 16:
        return bytes((0x90 | count,))
    return (b"\xdc" + count.to_bytes(2, "big")) if count < 1 << 16 else (b"\xdd" + count.to_bytes(4, "big"))


def _values_packing_back(blob: bytes, count: int) -> list[Any] | None:
    """The ``count`` values of ``blob`` if each packs back to exactly its bytes (the common case, where
    every row's check of :func:`_encode_row` passes for rows without a base), else None. The C side
    checks the bytes are in the form msgpack packs (``canonical``, no object built) before they are
    unpacked."""
    assert _deltarows is not None
    if not _deltarows.canonical(blob, count):
        return None
    try:
        values = msgpack.unpackb(_array_header(count) + blob, raw=False, strict_map_key=False)
    except Exception:  # text that is not UTF-8
        return None
    return values if type(values) is list else None


_NATIVE_COLUMNS = _COLUMNS[:-1]  # every column but ``raw``, in the C encoder's order


def _encode_native(values: list[Any], count: int, start_ms: int) -> dict[str, Any]:
    """:func:`encode_events`' table, the common rows encoded in C (see ``_deltarows.c``) and the others
    by :func:`_encode_row`, in order. Each value packs back to its bytes (see
    :func:`_values_packing_back`), so a row's bytes are its value packed."""
    assert _deltarows is not None
    t = _Columns(start_ms)
    columns = tuple(t.cols[name] for name in _NATIVE_COLUMNS)
    i = 0
    while True:
        if type(t.prev_ts) is int and -(1 << 63) <= t.prev_ts < 1 << 63:
            i, t.prev_ts, t.prev_rv = _deltarows.encode_rows(
                values, i, columns, t.key_index, t.keys, t.bases, t.spec_hash_index, t.prev_ts, t.prev_rv
            )
        if i == count:
            return {"n": count, **{k: v for k, v in t.cols.items() if v}}
        value = values[i]
        wire = _pack(value)
        if not _encode_row(t, value, wire):
            t.cols["op"].append(0)
            t.cols["raw"].append(wire)
        i += 1


def _encode_python(blob: bytes, count: int, start_ms: int) -> dict[str, Any] | None:
    """:func:`encode_events` row by row in Python (the definition; also without the C encoder)."""
    try:
        unpacker = msgpack.Unpacker(raw=False, strict_map_key=False, max_buffer_size=max(len(blob), 1))
        unpacker.feed(blob)
        values, ends = [], []
        for value in unpacker:
            values.append(value)
            ends.append(unpacker.tell())
    except Exception:  # text that is not UTF-8, keys Python cannot hash: kept as bytes, see the module doc
        return None
    if len(values) != count or (ends[-1] if ends else 0) != len(blob):
        return None
    table = _Columns(start_ms)
    start = 0
    for value, end in zip(values, ends, strict=True):
        wire = blob[start:end]
        start = end
        if not _encode_row(table, value, wire):
            table.cols["op"].append(0)
            table.cols["raw"].append(wire)
    return {"n": count, **{k: v for k, v in table.cols.items() if v}}


def _encode_row(t: _Columns, value: Any, wire: bytes) -> bool:
    """Append ``value``'s row to the columns if it is an event that rebuilds to exactly ``wire``."""
    if (
        type(value) is not list
        or len(value) < 8
        or value[0] != 1
        or type(value[0]) is not int  # True == 1 in Python, not in msgpack
        or type(value[1]) is not int
        or not 1 <= value[1] <= 4
        or type(value[2]) is not int
        or type(value[3]) is not str
        or (len(value) == 8) != (value[1] in (1, 2))  # only lifecycles and gaps have fields of their own
    ):
        return False
    _, code, ts, key, uid, rv, obj, sh = value[:8]
    ext = value[8:]
    index = t.key_index.get(key)
    base = None if index is None else t.bases.get(_base_slot(index, code))
    flags = 0
    row: dict[str, Any] = {"ts": ts - t.prev_ts, "key": key if index is None else index}
    if base is not None and _same(base[4], uid):
        flags |= _F_UID_SAME
    elif (uid_bytes := _uid_bytes(uid)) is not None:
        flags |= _F_UID_BIN
        row["uid"] = uid_bytes
    else:
        row["uid"] = uid
    rv_int = _rv_int(rv)
    if rv_int is not None:
        flags |= _F_RV_INT
        row["rv"] = rv_int - t.prev_rv
    else:
        row["rv"] = rv
    if base is not None and _same(base[7], sh):
        flags |= _F_SH_SAME
    else:
        row["sh"] = sh
    flags |= _part(
        row,
        "obj",
        base[6] if base is not None else None,
        obj,
        has_base=base is not None,
        same_flag=_F_OBJ_SAME,
    )
    base_ext = base[8:] if base is not None else None
    if code == 3 and _lifecycle_columns(ext, ts):
        flags |= _lifecycle_row(row, ext, ts)
    elif ext:
        flags |= _part(row, "ext", base_ext, ext, has_base=base is not None, same_flag=_F_EXT_SAME)
    if base is None:
        # Without a base every field is stored whole or by a transform that checks its own round trip
        # (binary UIDs, numeric resourceVersions): the row rebuilds to ``value`` itself, so only
        # ``value`` needs to pack to ``wire`` (msgpack written as this encoder writes it).
        if _pack(value) != wire:
            return False
        rebuilt = value
    else:
        rebuilt = _rebuild(
            code | flags << 3, row, base, prev=(t.prev_ts, t.prev_rv), key=key, where="encoding"
        )
        if _pack(rebuilt) != wire:
            return False
    # Checked: now the row is written, and the keys it meets are met (the row's own, then its owner's,
    # the order the reader meets them in).
    if index is None:
        index = len(t.keys)
        t.key_ref(key)
    if flags & _F_EXT_COLUMNS:
        row["own"] = t.key_ref(row["own"])
        row["psh"] = t.spec_hash_ref(row["psh"])
    t.cols["op"].append(code | flags << 3)
    for name, item in row.items():
        t.cols[name].append(item)
    t.prev_ts = ts
    if rv_int is not None:
        t.prev_rv = rv_int
    t.bases[_base_slot(index, code)] = rebuilt
    return True


def _lifecycle_columns(ext: list[Any], ts: int) -> bool:
    """Whether a lifecycle's own fields (owner key, pod spec hash, start, end) fit the columns: of the
    types an event has, with offsets from ``ts`` that msgpack packs as integers."""
    if len(ext) != 4:
        return False
    owner, spec_hash, pod_start, pod_end = ext
    return (
        (owner is None or type(owner) is str)
        and type(spec_hash) is int
        and all(
            t is None or (type(t) is int and _INT_MIN <= ts - t <= _INT_MAX) for t in (pod_start, pod_end)
        )
    )


def _lifecycle_row(row: dict[str, Any], ext: list[Any], ts: int) -> int:
    """A lifecycle's own fields in columns of their own: the owner as a key, the spec hash from a
    dictionary, start and end as offsets from the event time (a pod is seen when it starts and when it
    ends), whatever the base (a patch of the end alone cost more). The owner and the hash are values
    here, references once the row is written. Returns the row's flag."""
    owner, spec_hash, pod_start, pod_end = ext
    row.update(
        own=owner,
        psh=spec_hash,
        st=None if pod_start is None else ts - pod_start,
        en=None if pod_end is None else ts - pod_end,
    )
    return _F_EXT_COLUMNS


def _part(row: dict[str, Any], name: str, base: Any, new: Any, *, has_base: bool, same_flag: int) -> int:
    """Store ``new`` in column ``name``: nothing when it equals the base, a patch when one is smaller
    than the value, else the value whole; the flags that say which."""
    if has_base:
        if _same(base, new):
            return same_flag
        if type(base) is type(new) and type(new) in (dict, list):
            patch = diff(base, new)
            if patch[0] != _REPLACE:
                row[name] = patch
                return same_flag << 1  # the PATCH flag is the SAME flag's neighbour
    row[name] = new
    return 0
