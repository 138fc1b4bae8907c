"""Waiting for a condition in the tests: poll until it holds or a deadline passes.

A test that waits for a cluster, a broker or a process must not depend on how fast the machine is that
day, and when it does give up, its message must say what it last saw, so that a red run explains itself.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

S = TypeVar("S")


async def eventually(
    observe: Callable[[], Awaitable[S]],
    done: Callable[[S], bool],
    what: str,
    *,
    timeout_s: float = 60.0,
    interval_s: float = 0.5,
) -> S:
    """Poll ``observe`` until ``done`` holds for what it returned; that state is returned.

    Raises ``AssertionError`` naming ``what`` and the last state seen once ``timeout_s`` has passed.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        state = await observe()
        if done(state):
            return state
        if time.monotonic() > deadline:
            raise AssertionError(_gave_up(what, timeout_s, state))
        await asyncio.sleep(interval_s)


def eventually_sync(
    observe: Callable[[], S],
    done: Callable[[S], bool],
    what: str,
    *,
    timeout_s: float = 60.0,
    interval_s: float = 0.5,
) -> S:
    """``eventually`` for code outside an event loop (fixtures that drive ``kubectl``)."""
    deadline = time.monotonic() + timeout_s
    while True:
        state = observe()
        if done(state):
            return state
        if time.monotonic() > deadline:
            raise AssertionError(_gave_up(what, timeout_s, state))
        time.sleep(interval_s)


def _gave_up(what: str, timeout_s: float, state: object) -> str:
    return f"timed out after {timeout_s:.0f} s waiting for {what}; last seen: {state!r}"


def crd_established(kubectl: Callable[..., str], crd: str, *, timeout_s: float = 60.0) -> None:
    """Wait until the apiserver serves ``crd``.

    ``kubectl wait --for=condition=Established`` fails at once, instead of waiting, while a new CRD
    has no conditions yet (``.status.conditions accessor error: <nil>``), which a busy apiserver shows
    for a while after the create. So the conditions are polled here.
    """
    path = '{.status.conditions[?(@.type=="Established")].status}'
    eventually_sync(
        lambda: kubectl("get", f"crd/{crd}", "-o", f"jsonpath={path}").strip(),
        lambda status: status == "True",
        f"CRD {crd} to be Established",
        timeout_s=timeout_s,
    )
