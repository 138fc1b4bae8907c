"""The machine-wide locks: a second builder of the same cache entry waits for the first instead of
building beside it."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from pipeline.stack.machine_locks import build_lock, build_once


def test_second_builder_waits_for_the_first_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBETAPE_CACHE", str(tmp_path))
    order: list[str] = []
    messages: list[str] = []
    first_holds = threading.Event()
    release_first = threading.Event()

    def first_builder() -> None:
        with build_lock("k8s-v1", order.append):
            order.append("first in")
            first_holds.set()
            release_first.wait(timeout=30)
            order.append("first out")

    thread = threading.Thread(target=first_builder)
    thread.start()
    assert first_holds.wait(timeout=30), "the first builder never took the lock"

    def release_when_second_waits(message: str) -> None:
        messages.append(message)
        release_first.set()

    with build_lock("k8s-v1", release_when_second_waits):
        order.append("second in")
    thread.join(timeout=30)

    assert order == ["first in", "first out", "second in"], order
    assert messages, "the waiting builder said nothing"
    assert "another process is building it" in messages[0], messages


def test_other_entries_do_not_wait(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBETAPE_CACHE", str(tmp_path))
    messages: list[str] = []
    with build_lock("kafka-4", messages.append), build_lock("s3proxy-4", messages.append):
        pass
    assert messages == []


def test_an_entry_is_built_once_and_a_waiting_builder_takes_what_the_first_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBETAPE_CACHE", str(tmp_path))
    done = tmp_path / "entry" / ".complete"
    builds: list[str] = []

    def build() -> Path:
        builds.append("built")
        done.parent.mkdir(parents=True, exist_ok=True)
        done.write_text("{}")
        return done.parent

    assert build_once("entry-1", done, build, print, result=done.parent) == done.parent
    assert build_once("entry-1", done, build, print, result=done.parent) == done.parent
    assert builds == ["built"]

    def made_while_waiting() -> Path:
        raise AssertionError("built again although the build it waited for made the entry")

    # the entry appears while this builder waits for the lock: it is taken, not built again
    other = tmp_path / "other.jar"
    holds, release = threading.Event(), threading.Event()

    def first_builder() -> None:
        with build_lock("entry-2", print):
            holds.set()
            release.wait(timeout=30)

    def first_finishes_while_this_one_waits(message: str) -> None:
        other.write_text("jar")
        release.set()

    thread = threading.Thread(target=first_builder)
    thread.start()
    assert holds.wait(timeout=30), "the first builder never took the lock"
    taken = build_once("entry-2", other, made_while_waiting, first_finishes_while_this_one_waits)
    thread.join(timeout=30)
    assert taken == other
    assert builds == ["built"]
