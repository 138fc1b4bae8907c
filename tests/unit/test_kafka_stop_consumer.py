"""Stopping a consumer whose fetch task is in its retry backoff: aiokafka's close lets that task's
CancelledError out, and it must not end the caller (the sink's loop ended there after a rotated
password), while a cancellation of the caller itself still goes on."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from pipeline.io.kafka.clients import stop_consumer


class BackoffFetchConsumer:
    """What aiokafka 0.14's ``Fetcher.close`` does with a fetch that failed and sleeps its backoff:
    cancel the task, then await it, so the task's CancelledError comes out of ``stop``."""

    def __init__(self) -> None:
        self.stopped = False
        self._client = self  # aiokafka's close never reaches its client's close in that case
        self.connections_closed = False

    async def close(self) -> None:
        self.connections_closed = True

    async def stop(self) -> None:
        async def fetch() -> None:
            try:
                raise OSError("the brokers refused it")
            except OSError:
                await asyncio.sleep(3600)  # the retry backoff, inside the handler

        task = asyncio.create_task(fetch())
        await asyncio.sleep(0)  # the fetch task reaches its backoff
        task.cancel()
        self.stopped = True
        await task


async def test_a_fetch_tasks_cancellation_does_not_end_the_caller() -> None:
    consumer = BackoffFetchConsumer()
    with pytest.raises(asyncio.CancelledError):
        await consumer.stop()  # what the sink's loop met: a CancelledError nobody asked for
    assert not consumer.connections_closed
    await stop_consumer(cast(Any, consumer))
    assert consumer.stopped
    assert consumer.connections_closed, "the rest of the close is done: no connection of it lingers"


async def test_a_cancellation_of_the_caller_still_goes_on() -> None:
    started = asyncio.Event()

    class SlowConsumer:
        async def stop(self) -> None:
            started.set()
            await asyncio.sleep(3600)

    task = asyncio.create_task(stop_consumer(cast(Any, SlowConsumer())))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert task.cancelled()
