"""The one consume loop: fetch from a reader, hand each batch to a handler, and at checkpoints make the
handler's work durable before committing what it was handed.

The handler contract is a streaming sink's (quix-streams' ``add`` / ``flush``): :meth:`Handler.add` folds
a batch (fast, no I/O); :meth:`Handler.flush` makes everything added so far durable; only after it
returned are the offsets of those messages committed. A crash between two checkpoints therefore
re-delivers what came since the last one (handlers tolerate seeing a message twice) and never skips
any. A checkpoint is due every ``flush_every_s`` seconds or ``flush_every_messages`` messages, and once
more when the loop ends (stopped, the reader's end reached, or an error), before
:meth:`Handler.close`.

Written against :class:`Source` (:class:`~pipeline.io.kafka.reader.TopicReader` implements it) so a
handler runs in unit tests over a list.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from pipeline.io.kafka.message import Message


class Source(Protocol):
    """Where the loop reads from and commits to (one consumer group on one topic)."""

    async def fetch(self, timeout_ms: int, max_records: int) -> list[Message]: ...

    def finished(self) -> bool:
        """True once a bounded read has been read completely; never for a live topic."""
        ...

    async def commit(self, next_offsets: Mapping[int, int]) -> None:
        """Commit, per partition, the offset of the next message to read."""
        ...


class Handler(Protocol):
    """What the loop drives; see the module docstring for the contract."""

    def add(self, messages: Sequence[Message]) -> None:
        """Fold a batch (in offset order per partition) into the handler's state; fast, no I/O."""
        ...

    def flush(self) -> None:
        """Make everything added so far durable; offsets are committed only after this returns."""
        ...

    def close(self) -> None:
        """Release resources after the final flush."""
        ...


@dataclass(frozen=True, slots=True)
class LoopSettings:
    """Fetch limits and checkpoint frequency; the defaults bound re-delivery after a crash to a few
    seconds."""

    max_batch: int = 1000
    fetch_timeout_ms: int = 500
    flush_every_s: float = 5.0
    flush_every_messages: int = 20_000


class ConsumeLoop:
    """``await ConsumeLoop(source, handler).run()`` until :meth:`stop` or the end of a bounded read."""

    def __init__(self, source: Source, handler: Handler, settings: LoopSettings | None = None) -> None:
        self.source = source
        self.handler = handler
        self.settings = settings or LoopSettings()
        self._stopping = asyncio.Event()
        self._uncommitted: dict[int, int] = {}

    def stop(self) -> None:
        """Stop after the current batch; the final flush and commit still run."""
        self._stopping.set()

    async def run(self) -> None:
        last_flush = time.monotonic()
        since_flush = 0
        try:
            while not self._stopping.is_set() and not self.source.finished():
                messages = await self.source.fetch(self.settings.fetch_timeout_ms, self.settings.max_batch)
                if messages:
                    for message in messages:
                        self._uncommitted[message.partition] = message.offset + 1
                    self.handler.add(messages)
                    since_flush += len(messages)
                due = time.monotonic() - last_flush >= self.settings.flush_every_s
                if self._uncommitted and (due or since_flush >= self.settings.flush_every_messages):
                    await self._flush()
                    last_flush, since_flush = time.monotonic(), 0
        finally:
            await self._flush()
            self.handler.close()

    async def _flush(self) -> None:
        self.handler.flush()
        if self._uncommitted:
            await self.source.commit(dict(self._uncommitted))
            self._uncommitted.clear()
