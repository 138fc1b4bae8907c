"""A port handed to one stack is not handed to another while the first may still be binding it."""

from __future__ import annotations

import json
import multiprocessing
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pipeline.model.errors import StackError
from pipeline.stack import ports
from pipeline.stack.ports import free_port
from pipeline.stack.versions import cache_root

# a port range no test binds: the draws below are scripted, never bound
BASE = 40_000


def _scripted(*answers: int) -> Callable[[], int]:
    """A kernel that answers ``answers`` in turn, then the last one for ever."""
    queue: Iterator[int] = iter(answers)
    last = answers[-1]

    def draw() -> int:
        nonlocal last
        last = next(queue, last)
        return last

    return draw


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBETAPE_CACHE", str(tmp_path))


def test_a_port_the_kernel_offers_twice_is_handed_out_once() -> None:
    draw = _scripted(BASE, BASE, BASE + 1)
    assert free_port(draw) == BASE
    assert free_port(draw) == BASE + 1


def test_a_reservation_ends_after_its_time() -> None:
    registry = cache_root() / "locks" / "ports.json"
    registry.parent.mkdir(parents=True)
    ended, running = time.time() - 1, time.time() + ports.RESERVED_S
    registry.write_text(json.dumps({str(BASE): ended, str(BASE + 1): running}))
    assert free_port(_scripted(BASE)) == BASE, "an ended reservation still held its port"
    assert free_port(_scripted(BASE + 1, BASE + 2)) == BASE + 2, "a running reservation was ignored"


def test_when_every_draw_is_reserved_the_error_names_the_registry() -> None:
    assert free_port(_scripted(BASE)) == BASE
    with pytest.raises(StackError, match=r"ports\.json.*delete that file"):
        free_port(_scripted(BASE))


def test_an_unreadable_registry_holds_no_reservation() -> None:
    registry = cache_root() / "locks" / "ports.json"
    registry.parent.mkdir(parents=True)
    registry.write_text('{"40000": "tomorrow", [')
    assert free_port(_scripted(BASE)) == BASE
    assert free_port(_scripted(BASE, BASE + 1)) == BASE + 1, "the rewritten registry lost the reservation"


def test_the_kernel_draw_is_a_port_that_can_be_bound() -> None:
    port = free_port()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", port))


def _draw_five(cache: str, out: multiprocessing.Queue[list[int]]) -> None:
    import os

    os.environ["KUBETAPE_CACHE"] = cache
    # every process's kernel offers the same ports in the same order: the worst case for two stacks
    draw = _scripted(*range(BASE, BASE + 20))
    out.put([free_port(draw) for _ in range(5)])


def test_stacks_starting_at_once_in_other_processes_get_distinct_ports(tmp_path: Path) -> None:
    context = multiprocessing.get_context("fork")
    out: multiprocessing.Queue[list[int]] = context.Queue()
    workers = [context.Process(target=_draw_five, args=(str(tmp_path), out)) for _ in range(3)]
    for worker in workers:
        worker.start()
    drawn = [port for _ in workers for port in out.get(timeout=60)]
    for worker in workers:
        worker.join(timeout=60)
    assert len(drawn) == 15
    assert len(set(drawn)) == 15, f"a port went to two processes: {sorted(drawn)}"
