"""Reading a delta table back (:func:`decode_events`), and the rules a row is read by: its code and
flags, its columns, its base and how it rebuilds to its event's wire list (:func:`_rebuild`).

Apart from :mod:`.delta`, the encoder, because a reader needs none of the encoder's machinery (the C
row encoder, the dictionaries of keys and hashes being built, the patches being made). The row rules
live here rather than with the encoder because they are the reading rules: the encoder checks every
row it writes by rebuilding it with the same :func:`_rebuild`, and imports them from here. The table's
layout is described in :mod:`.delta`.
"""

from __future__ import annotations

from typing import Any

import msgpack

from pipeline.formats.segment.delta_patch import apply_patch
from pipeline.model.errors import FormatError

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

_RV_INT_LIMIT = 1 << 63
"""resourceVersions below it are coded as numbers: any difference of two fits msgpack's int64."""
_COLUMNS = ("op", "ts", "key", "uid", "rv", "sh", "obj", "ext", "own", "psh", "st", "en", "raw")
_INT_MIN, _INT_MAX = -(1 << 63), (1 << 64) - 1  # what msgpack packs as an integer


def _pack(value: Any) -> bytes:
    packed: bytes = msgpack.packb(value, use_bin_type=True)
    return packed


def _uid_text(b: bytes) -> str:
    h = b.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _base_slot(key_index: int, code: int) -> int:
    """Where a row's base is kept: per key, APPLIED and DELETED events (both carry the object) apart
    from a pod's lifecycles and from gaps, so that a pod's object versions are patched against each
    other even when lifecycle events come between them."""
    return key_index * 3 + (0 if code <= 2 else code - 2)


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
    if type(ts) is not int or not _INT_MIN <= prev_ts + ts <= _INT_MAX:
        raise FormatError(
            f"{where}: event time step {str(ts)[:30]!r} is not a whole number that keeps the time in range"
        )
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
        try:
            wire = reader.row(op, f"{where} #{n}")
        except (FormatError, MemoryError):
            raise
        except Exception as exc:  # a value no check of the row foresaw (msgpack refuses to pack it)
            raise FormatError(f"{where} #{n}: malformed row ({type(exc).__name__}: {exc})") from None
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
