"""The few fields of an object body that an export reads, standing in for the body it only copies.

An export writes most events exactly as the segments stored them, and of a body it reads only what its
filters and the owner rule look at: the namespace, the owner references, the labels (see
:mod:`pipeline.store.export` and :func:`pipeline.formats.assemble.assemble_window`). Building the
whole body for that was most of an export's time, so the C scan (:func:`.native.light`) builds a
:class:`BodySkeleton` instead, for events whose bytes are in msgpack's own form (what packing their
decoded value gives): those bytes are then the event's encoding, and writing them is exact.

A skeleton compares as the body it stands for (it decodes that body from its bytes to compare: rare,
only objects without a resourceVersion are compared by content). The encoder refuses to pack one
(:func:`.codec.event_to_wire`): an event with a skeleton is written from its bytes or not at all.
"""

from __future__ import annotations

from typing import Any

import msgpack

BODY_FIELD = 6
"""The index of the object body in an event's wire list."""


class BodySkeleton(dict[str, Any]):
    """``{"metadata": {...}}`` with only ``namespace``, ``ownerReferences`` and (when asked for)
    ``labels`` of the body's metadata, those present, as decoding the body gives them; ``wire`` holds
    the event's bytes (built by the C scan, see the module docstring)."""

    __slots__ = ("wire",)
    wire: bytes

    def full(self) -> Any:
        """The whole body (decoded from the event's bytes, which the scan found in msgpack's form)."""
        return msgpack.unpackb(self.wire, raw=False, strict_map_key=False)[BODY_FIELD]

    def __eq__(self, other: object) -> bool:
        theirs = other.full() if isinstance(other, BodySkeleton) else other
        return bool(self.full() == theirs)

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = None  # a dict: unhashable
