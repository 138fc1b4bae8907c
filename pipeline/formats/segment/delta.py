"""Delta-coded event lists (segment format version 3): each version of an object after its first in a
segment is stored as the difference from the previous one, and the small fields in columns.

Most of a cluster's history is the same object written again with one field changed; storing each
version whole paid for the object every time. The transform works on the events' wire bytes (what the
sink consumed), so it is exact by construction: :func:`encode_events` returns a table and
:func:`decode_events` gives back the *same bytes*, which the version-2 reader then decodes. An event
whose bytes would not come back identical (msgpack written by another encoder, text that is not UTF-8,
anything unusual) is kept as its bytes (a "raw" row): the encoder checks every row by rebuilding it.

The table (a msgpack map inside the zstd body), one row per event in file order; each column holds the
values of the rows that use it, in order:

* ``op``: per row, ``0`` for a raw row, else the wire type code (1-4) plus ``_F_*`` flags times 8;
* ``ts``: event time minus the previous row's (the first row's minus the segment start);
* ``key``: the index of the row's key among the keys met so far, or the key itself when it is new;
* ``uid``, ``rv``, ``sh``: the UID (16 bytes when it is a canonical UUID), the resourceVersion (as the
  difference from the previous numeric one when it is a canonical decimal), the spec hash; each left
  out when equal to the base's;
* ``obj`` and ``ext`` (a gap's own fields, or a lifecycle's that do not fit the columns below): the
  value whole, or a patch of the base's (:func:`diff`), or nothing when equal;
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
"""

from __future__ import annotations

import contextlib
import gc
import re
from collections.abc import Iterator
from typing import Any

import msgpack

from pipeline.model.errors import FormatError

try:
    from pipeline.formats.segment import _deltarows  # type: ignore[attr-defined]  # C, no stubs
except ImportError:  # pragma: no cover - only without a C compiler at install time
    _deltarows = None

DELTA_ROWS = 1
"""The version of the rules ``_deltarows.c`` implements (this module's format-3 rows): raise both
together whenever a rule changes; a build from another version is not used."""
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


_F_UID_SAME = 1
_F_UID_BIN = 2
_F_RV_INT = 4
_F_SH_SAME = 8
_F_OBJ_SAME = 16
_F_OBJ_PATCH = 32
_F_EXT_SAME = 64
_F_EXT_PATCH = 128
_F_EXT_COLUMNS = 256
_FLAGS_MAX = 511

_REPLACE, _MAP_PATCH, _LIST_PATCH = 0, 1, 2
MAX_PATCH_DEPTH = 64
"""Patches nest at most this deep (Kubernetes objects are far shallower): a crafted patch cannot exhaust
the stack."""
_RV_MAX_DIGITS = 20  # resourceVersions are at most 20 ASCII digits (the sink's ingest rule)
_RV_INT_LIMIT = 1 << 63
"""resourceVersions below it are coded as numbers: any difference of two fits msgpack's int64."""
_COLUMNS = ("op", "ts", "key", "uid", "rv", "sh", "obj", "ext", "own", "psh", "st", "en", "raw")
_INT_MIN, _INT_MAX = -(1 << 63), (1 << 64) - 1  # what msgpack packs as an integer


def _pack(value: Any) -> bytes:
    packed: bytes = msgpack.packb(value, use_bin_type=True)
    return packed


def _same(a: Any, b: Any) -> bool:
    """Equal, and of the same type at the top (``1 == True == 1.0`` in Python, not in msgpack); deeper
    differences of type alone are caught by the encoder's check of every rebuilt row."""
    return a is b or (type(a) is type(b) and a == b)


def diff(base: Any, new: Any) -> list[Any]:
    """A patch that turns ``base`` into ``new``: ``[0, value]`` replaces; ``[1, {key: patch}, [deleted
    keys]]`` patches a map (kept keys in the base's order, then added keys in ``new``'s order: any other
    order is a replacement); ``[2, {index: patch}]`` patches a list of the same length."""
    if type(base) is dict and type(new) is dict:
        changed: dict[Any, Any] = {}
        added: list[Any] = []
        for k, v in new.items():
            if k in base:
                if not _same(base[k], v):
                    changed[k] = diff(base[k], v)
            else:
                changed[k] = [_REPLACE, v]
                added.append(k)
        deleted = [k for k in base if k not in new]
        kept = [k for k in base if k in new] if deleted else list(base)
        if kept + added != list(new):
            return [_REPLACE, new]
        return [_MAP_PATCH, changed, deleted]
    if type(base) is list and type(new) is list and len(base) == len(new):
        items = {i: diff(a, b) for i, (a, b) in enumerate(zip(base, new, strict=True)) if not _same(a, b)}
        if 2 * len(items) > len(new) + 1:  # a list of one changed item is still patched
            return [_REPLACE, new]
        return [_LIST_PATCH, items]
    return [_REPLACE, new]


def apply_patch(base: Any, patch: Any, where: str, depth: int = 0) -> Any:
    """``base`` changed by ``patch`` (see :func:`diff`); the base is not modified (unchanged parts are
    shared). FormatError naming ``where`` if the patch is malformed or does not fit the base."""
    if depth > MAX_PATCH_DEPTH:
        raise FormatError(f"{where}: patch nested deeper than {MAX_PATCH_DEPTH} levels")
    if type(patch) is not list or not patch or type(patch[0]) is not int:
        raise FormatError(f"{where}: malformed patch {str(patch)[:80]!r}")
    tag = patch[0]
    if tag == _REPLACE and len(patch) == 2:
        return patch[1]
    if tag == _MAP_PATCH and len(patch) == 3 and type(patch[1]) is dict and type(patch[2]) is list:
        if type(base) is not dict:
            raise FormatError(f"{where}: a map patch does not apply to a base {type(base).__name__}")
        changed, deleted = patch[1], patch[2]
        gone = set()
        for k in deleted:
            if type(k) is not str or k not in base:  # decoded map keys of objects are text
                raise FormatError(f"{where}: the patch deletes key {str(k)[:80]!r}, which the base lacks")
            gone.add(k)
        out = {}
        for k, v in base.items():
            if k not in gone:
                out[k] = apply_patch(v, changed[k], where, depth + 1) if k in changed else v
        for k, p in changed.items():
            if k in gone:
                raise FormatError(f"{where}: the patch both deletes and changes key {str(k)[:80]!r}")
            if k not in base:
                if type(p) is not list or len(p) != 2 or p[0] != _REPLACE:
                    raise FormatError(f"{where}: the patch changes key {str(k)[:80]!r}, which the base lacks")
                out[k] = p[1]
        return out
    if tag == _LIST_PATCH and len(patch) == 2 and type(patch[1]) is dict:
        if type(base) is not list:
            raise FormatError(f"{where}: a list patch does not apply to a base {type(base).__name__}")
        items = list(base)
        for i, p in patch[1].items():
            if type(i) is not int or not 0 <= i < len(items):
                raise FormatError(f"{where}: the patch changes item {str(i)[:20]} of a list of {len(items)}")
            items[i] = apply_patch(items[i], p, where, depth + 1)
        return items
    raise FormatError(f"{where}: malformed patch (tag {tag!r})")


def _uid_bytes(uid: Any) -> bytes | None:
    """The 16 bytes of a canonical (lowercase, hyphenated) UUID text, else None."""
    if type(uid) is not str or len(uid) != 36 or _UUID_TEXT.fullmatch(uid) is None:
        return None
    return bytes.fromhex(uid.replace("-", ""))


_UUID_TEXT = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _uid_text(b: bytes) -> str:
    h = b.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


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


def _base_slot(key_index: int, code: int) -> int:
    """Where a row's base is kept: per key, APPLIED and DELETED events (both carry the object) apart
    from a pod's lifecycles and from gaps, so that a pod's object versions are patched against each
    other even when lifecycle events come between them."""
    return key_index * 3 + (0 if code <= 2 else code - 2)


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


def _rebuild(
    op: int,
    row: dict[str, Any],
    base: list[Any] | None,
    *,
    prev: tuple[int, int],
    key: str,
    where: str,
) -> list[Any]:
    """The wire list of a row (``row`` maps a column to this row's value in it)."""
    code, flags = op & 7, op >> 3
    prev_ts, prev_rv = prev
    uid = base[4] if flags & _F_UID_SAME and base is not None else row.get("uid")
    if flags & _F_UID_BIN:
        if type(uid) is not bytes or len(uid) != 16:
            raise FormatError(f"{where}: a binary UID is not 16 bytes")
        uid = _uid_text(uid)
    rv = row.get("rv")
    if flags & _F_RV_INT:
        if type(rv) is not int or not 0 <= prev_rv + rv < _RV_INT_LIMIT:
            raise FormatError(f"{where}: resourceVersion step {str(rv)[:30]} is not a whole number in range")
        rv = str(prev_rv + rv)
    ts = row.get("ts")
    if type(ts) is not int:
        raise FormatError(f"{where}: event time step {str(ts)[:30]!r} is not a whole number")
    needs_base = flags & (_F_UID_SAME | _F_SH_SAME | _F_OBJ_SAME | _F_OBJ_PATCH | _F_EXT_SAME | _F_EXT_PATCH)
    if needs_base and base is None:
        raise FormatError(f"{where}: a delta of {key[:200]!r} names a base the segment does not hold")
    assert base is not None or not needs_base
    sh = base[7] if flags & _F_SH_SAME and base is not None else row.get("sh")
    obj = _value(flags, _F_OBJ_SAME, base[6] if base is not None else None, row.get("obj"), where)
    head = [1, code, prev_ts + ts, key, uid, rv, obj, sh]
    if flags & _F_EXT_COLUMNS:
        if code != 3 or flags & (_F_EXT_SAME | _F_EXT_PATCH):
            raise FormatError(f"{where}: only a lifecycle's own fields are stored in columns")
        owner, spec_hash = row.get("own"), row.get("psh")
        if not (owner is None or type(owner) is str) or type(spec_hash) is not int:
            raise FormatError(f"{where}: a lifecycle's owner or spec hash is not of its type")
        head += [owner, spec_hash, _from_offset(head[2], row.get("st"), where)]
        head.append(_from_offset(head[2], row.get("en"), where))
    elif "ext" in row or flags & (_F_EXT_SAME | _F_EXT_PATCH):
        ext = _value(flags, _F_EXT_SAME, base[8:] if base is not None else None, row.get("ext"), where)
        if type(ext) is not list:
            raise FormatError(f"{where}: an event's own fields are not a list")
        head += ext
    return head


def _from_offset(ts: int, offset: Any, where: str) -> int | None:
    """A lifecycle's start or end from its offset to the event time (None stays None)."""
    if offset is None:
        return None
    if type(offset) is not int or not _INT_MIN <= ts - offset <= _INT_MAX:
        raise FormatError(
            f"{where}: a lifecycle time offset {str(offset)[:30]} is not a whole number in range"
        )
    return ts - offset


def _value(flags: int, same_flag: int, base: Any, stored: Any, where: str) -> Any:
    if flags & same_flag:
        return base
    if flags & (same_flag << 1):
        return apply_patch(base, stored, where)
    return stored


def decode_events(packed: Any, count: int, start_ms: int, max_bytes: int, where: str) -> bytes:
    """The wire bytes of :func:`encode_events`'s table (``packed``: its msgpack bytes), concatenated;
    FormatError naming ``where`` if the table is malformed, holds other than ``count`` rows, or
    rebuilds to more than ``max_bytes``."""
    if type(packed) is not bytes:
        raise FormatError(f"{where}: malformed delta table (not bytes)")
    try:
        table = msgpack.unpackb(
            packed,
            raw=False,
            strict_map_key=False,
            max_bin_len=len(packed),
            max_str_len=len(packed),
            max_array_len=len(packed),
            max_map_len=len(packed),
            max_ext_len=0,
        )
    except Exception as exc:  # msgpack raises several unrelated types for corrupt data
        raise FormatError(f"{where}: undecodable delta table ({type(exc).__name__}: {exc})") from None
    if type(table) is not dict or table.get("n") != count:
        raise FormatError(f"{where}: malformed delta table (not {count} rows)")
    cols = {name: table.get(name, []) for name in _COLUMNS}
    if any(type(c) is not list for c in cols.values()) or len(cols["op"]) != count:
        raise FormatError(f"{where}: malformed delta table (columns are not lists of {count} rows)")
    reader = _RowReader(cols, start_ms)
    out: list[bytes] = []
    size = 0
    for n, op in enumerate(cols["op"]):
        wire = reader.row(op, f"{where} #{n}")
        size += len(wire)
        if size > max_bytes:
            raise FormatError(
                f"{where}: the events rebuild to more than the {max_bytes} bytes the header declares "
                f"(at row #{n}): refused"
            )
        out.append(wire)
    leftover = [name for name in _COLUMNS if name != "op" and reader.cursor[name] != len(cols[name])]
    if leftover:
        raise FormatError(f"{where}: malformed delta table ({', '.join(leftover)} hold values no row uses)")
    return b"".join(out)


class _RowReader:
    """Rebuilds rows one by one: the columns' cursors, the keys met, the bases, the running values."""

    def __init__(self, cols: dict[str, list[Any]], start_ms: int) -> None:
        self.cols = cols
        self.cursor = dict.fromkeys(_COLUMNS, 0)
        self.keys: list[str] = []
        self.spec_hashes: list[int] = []
        self.bases: dict[int, list[Any]] = {}
        self.prev_ts, self.prev_rv = start_ms, 0

    def key(self, ref: Any, where: str) -> tuple[int, str]:
        """The key a ``key`` or ``own`` column's value names, and its index (a new key is met)."""
        keys = self.keys
        if type(ref) is str:
            keys.append(ref)
            return len(keys) - 1, ref
        if type(ref) is int and 0 <= ref < len(keys):
            return ref, keys[ref]
        raise FormatError(f"{where}: key reference {str(ref)[:30]} names no earlier key ({len(keys)} known)")

    def spec_hash(self, ref: Any, where: str) -> int:
        known = self.spec_hashes
        if type(ref) is list and len(ref) == 1 and type(ref[0]) is int:
            known.append(ref[0])
            return int(ref[0])
        if type(ref) is int and 0 <= ref < len(known):
            return known[ref]
        raise FormatError(
            f"{where}: spec hash reference {str(ref)[:30]} names no earlier hash ({len(known)} known)"
        )

    def take(self, name: str, where: str) -> Any:
        i = self.cursor[name]
        column = self.cols[name]
        if i >= len(column):
            raise FormatError(f"{where}: the {name} column ends early")
        self.cursor[name] = i + 1
        return column[i]

    def row(self, op: Any, where: str) -> bytes:
        """The wire bytes of the next row, whose code is ``op``."""
        if type(op) is not int or not 0 <= op <= (_FLAGS_MAX << 3 | 7) or (op and not 1 <= op & 7 <= 4):
            raise FormatError(f"{where}: malformed row code {str(op)[:30]!r}")
        if op == 0:
            wire = self.take("raw", where)
            if type(wire) is not bytes:
                raise FormatError(f"{where}: a raw row is not bytes")
            return wire
        flags = op >> 3
        row = {"ts": self.take("ts", where)}
        index, key = self.key(self.take("key", where), where)
        for name, absent in (("uid", _F_UID_SAME), ("rv", 0), ("sh", _F_SH_SAME), ("obj", _F_OBJ_SAME)):
            if not flags & absent:
                row[name] = self.take(name, where)
        if flags & _F_EXT_COLUMNS:
            own = self.take("own", where)
            row["own"] = None if own is None else self.key(own, where)[1]
            row["psh"] = self.spec_hash(self.take("psh", where), where)
            row["st"], row["en"] = self.take("st", where), self.take("en", where)
        elif flags & _F_EXT_PATCH or _has_ext(op):
            row["ext"] = self.take("ext", where)
        slot = _base_slot(index, op & 7)
        rebuilt = _rebuild(
            op, row, self.bases.get(slot), prev=(self.prev_ts, self.prev_rv), key=key, where=where
        )
        self.prev_ts = rebuilt[2]
        if flags & _F_RV_INT:
            self.prev_rv = int(rebuilt[5])
        self.bases[slot] = rebuilt
        return _pack(rebuilt)


def _has_ext(op: int) -> bool:
    """Lifecycle and gap events have fields of their own: a row stores them unless they equal the base's."""
    return op & 7 in (3, 4) and not (op >> 3) & _F_EXT_SAME
