"""``kubetape export`` as a SimKube user drives it: skctl's time flags and default excluded namespaces,
a span that starts where the recording did, the summary's event count as ``inspect`` counts, and an
output suffix that decides (or refuses) the format."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from pipeline.formats.inspect import inspect_file
from pipeline.formats.segment.decode import read_segment
from pipeline.formats.segment.encode import encode_segment
from pipeline.formats.simkube import read_simkube_trace
from pipeline.model.events import Event
from pipeline.model.keys import ObjectKey
from pipeline.sink.compactor import CompactionSettings, PartitionCompactor
from pipeline.sink.synthetic import applied, deployment, synthetic_events
from pipeline.store.local_store import LocalSegmentStore
from services.cli import main

RECORDED_AT = 1_763_700_000_000 - 1_763_700_000_000 % 60_000 + 13_000
"""The recording's first event: 13 s into a 60 s segment window, so the store's first segment starts
before it (as a sink's does)."""
RECORDED_S = 27
RECORDED_END = RECORDED_AT + RECORDED_S * 1000
MINUTE = 60_000


def fill_store(store_dir: Path, events: list[Event]) -> None:
    """The segments a sink writes for ``events`` (one partition)."""
    store = LocalSegmentStore(store_dir)
    compactor = PartitionCompactor(0, CompactionSettings())
    closed = []
    for offset, e in enumerate(events):
        closed += compactor.add(offset, e, 0.0)
    last = compactor.flush()
    assert last is not None
    for c in [*closed, last]:
        store.put(c.name, encode_segment(c.segment))


def recording(tmp_path: Path) -> Path:
    """A 27-second recording (objects, updates, deletions, pod lifecycles) in ``tmp_path/segments``."""
    store = tmp_path / "segments"
    fill_store(store, synthetic_events(120, RECORDED_AT, RECORDED_S * 1000))
    return store


def export(store: Path, *flags: str) -> int:
    return main(["export", "--segment-dir", str(store), *flags])


def test_a_range_starting_before_the_recording_starts_at_its_first_event(tmp_path: Path) -> None:
    """--from 30 minutes before a 27-second recording: the trace spans the recording, not 30 minutes
    of which 29.5 are empty (xray then started at +1386 s)."""
    store = recording(tmp_path)
    out = tmp_path / "out.kts"
    assert (
        export(store, "--from", str(RECORDED_END - 30 * MINUTE), "--to", str(RECORDED_END), "-o", str(out))
        == 0
    )
    header = read_segment(out).header
    assert (header.start_ms, header.end_ms) == (RECORDED_AT, RECORDED_END)
    # a range inside the recording keeps its start: the state there is folded into the first events
    assert export(store, "--from", str(RECORDED_AT + 10_000), "--to", str(RECORDED_END), "-o", str(out)) == 0
    assert read_segment(out).header.start_ms == RECORDED_AT + 10_000


def test_a_pod_created_in_the_second_before_its_first_event_keeps_its_start(tmp_path: Path) -> None:
    """A pod's start is its creationTimestamp, whole seconds, so it can precede the first event that saw
    it (its Deployment's, 177 ms into that second): the trace starts at that second, and the pod's start
    is exported as recorded, not moved to the trace's start."""
    store = tmp_path / "segments"
    owner = deployment("shop", "web", 1)
    first_seen = RECORDED_AT + 177
    created = RECORDED_AT  # the creationTimestamp's second
    pod = Event.pod_lifecycle(
        first_seen + 400,
        ObjectKey("core/Pod/shop/web-1"),
        owner_key=ObjectKey("apps/Deployment/shop/web"),
        pod_spec_hash=7,
        start_ms=created,
        end_ms=None,
    )
    fill_store(store, [applied(first_seen, owner, 100), pod])
    out = tmp_path / "out.kts"
    since = str(RECORDED_AT - 30 * MINUTE)
    assert export(store, "--from", since, "--to", str(RECORDED_END), "-o", str(out)) == 0
    trace = read_segment(out)
    assert trace.header.start_ms == created
    assert [e.pod_start_ms for e in trace.events if e.key == pod.key] == [created]


def test_skctl_start_time_counts_back_from_the_end_time(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = recording(tmp_path)
    out = tmp_path / "out.kts"
    end = str(RECORDED_END)
    assert export(store, "-s", "-10s", "-t", end, "-o", str(out)) == 0
    assert read_segment(out).header.start_ms == RECORDED_END - 10_000
    assert export(store, "--start-time", "-20s", "--end-time", end, "-o", str(out)) == 0
    assert read_segment(out).header.start_ms == RECORDED_END - 20_000
    # skctl's default start is -30m before the end: no start flag at all is a valid export
    assert export(store, "-t", end, "-o", str(out)) == 0
    assert read_segment(out).header.start_ms == RECORDED_AT
    # an absolute --start-time is absolute
    assert export(store, "-s", str(RECORDED_AT + 5_000), "-t", end, "-o", str(out)) == 0
    assert read_segment(out).header.start_ms == RECORDED_AT + 5_000
    # kubetape's --from counts from now: 10 s before now is after this old recording's end
    capsys.readouterr()
    assert export(store, "--from", "-10s", "-t", end, "-o", str(out)) == 2
    assert "range is empty" in capsys.readouterr().err


def test_from_and_start_time_together_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = recording(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        export(store, "--from=-1h", "-s", "-30m", "-o", str(tmp_path / "out.kts"))
    assert exit_info.value.code == 2
    assert "argument -s/--start-time: not allowed with argument --from" in capsys.readouterr().err


def namespaced_store(tmp_path: Path) -> Path:
    store = tmp_path / "segments"
    objects = [deployment(ns, "app", 1) for ns in ("default", "kube-system", "monitoring", "shop")]
    fill_store(store, [applied(RECORDED_AT + i, obj, 100 + i) for i, obj in enumerate(objects)])
    return store


def exported_namespaces(path: Path) -> set[str]:
    return {e.obj["metadata"]["namespace"] for e in read_segment(path).events if e.obj is not None}


def test_skctl_default_namespaces_are_left_out_unless_a_namespace_flag_is_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = namespaced_store(tmp_path)
    out = tmp_path / "out.kts"
    window = ["--from", str(RECORDED_AT), "--to", str(RECORDED_END), "-o", str(out)]
    assert export(store, *window) == 0
    assert exported_namespaces(out) == {"shop"}
    err = capsys.readouterr().err
    assert "leaving out skctl's default namespaces cert-manager,default,kube-public" in err
    assert "--exclude-namespace '' keeps them" in err
    assert export(store, *window, "--exclude-namespace", "") == 0
    assert exported_namespaces(out) == {"default", "kube-system", "monitoring", "shop"}
    assert export(store, *window, "--excluded-namespaces", "kube-system,monitoring") == 0  # skctl's flag
    assert exported_namespaces(out) == {"default", "shop"}
    assert export(store, *window, "--include-namespace", "default") == 0  # asked for: not left out
    assert exported_namespaces(out) == {"default"}
    assert export(store, *window, "--excluded-labels", "app=app", "--exclude-namespace", "") == 0
    assert exported_namespaces(out) == set()  # skctl's label filter: every Deployment is labelled app=app
    assert "leaving out" not in capsys.readouterr().err


@pytest.mark.parametrize(("fmt", "name"), [("kubetape", "out.kts"), ("simkube", "out.sktrace")])
def test_the_summary_counts_events_as_inspect_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str, name: str
) -> None:
    store = recording(tmp_path)
    out = tmp_path / name
    assert (
        export(store, "--from", str(RECORDED_AT), "--to", str(RECORDED_END), "--format", fmt, "-o", str(out))
        == 0
    )
    written = re.search(r"wrote .*: (\d+) events over ([0-9.]+) s from", capsys.readouterr().err)
    assert written is not None
    report = inspect_file(out)
    assert report.start_ms is not None
    assert report.end_ms is not None
    assert int(written.group(1)) == report.events
    assert float(written.group(2)) == (report.end_ms - report.start_ms) / 1000


def test_the_summary_counts_the_events_a_transform_leaves(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = recording(tmp_path)
    out = tmp_path / "out.sktrace"
    program = tmp_path / "drop.skel"
    program.write_text('delete(metadata.namespace == "ns-1");\n')
    args = ["--from", str(RECORDED_AT), "--to", str(RECORDED_END), "--format", "simkube"]
    assert export(store, *args, "--transform", str(program), "-o", str(out)) == 0
    written = re.search(r": (\d+) events over", capsys.readouterr().err)
    assert written is not None
    assert int(written.group(1)) == inspect_file(out).events


def test_a_json_output_is_json_in_the_version_asked(tmp_path: Path) -> None:
    store = namespaced_store(tmp_path)  # no pod lifecycles, which JSON cannot hold
    out = tmp_path / "out.json"
    args = ["--from", str(RECORDED_AT), "--to", str(RECORDED_END), "--format", "simkube"]
    assert export(store, *args, "--simkube-version", "3", "-o", str(out)) == 0
    assert json.loads(out.read_bytes())["version"] == 3
    assert read_simkube_trace(out).read_from_version == 3
    assert export(store, *args, "-o", str(out)) == 0
    assert json.loads(out.read_bytes())["version"] == 2


def test_a_json_output_of_a_trace_with_lifecycles_is_refused_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = recording(tmp_path)
    out = tmp_path / "out.json"
    assert export(store, "--from", str(RECORDED_AT), "--format", "simkube", "-o", str(out)) == 2
    assert f"{out}: this trace has pod lifecycles, which JSON cannot represent" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize(
    ("flags", "name", "message"),
    [
        (
            (),
            "out.sktrace",
            "out.sktrace: .sktrace names a SimKube trace but --format is kubetape (the default); "
            "add --format simkube",
        ),
        ((), "out.json", ".json names a SimKube trace but --format is kubetape"),
        (
            ("--format", "simkube"),
            "out.kts",
            ".kts names a kubetape trace but --format is simkube; write to a .sktrace",
        ),
    ],
)
def test_an_output_suffix_of_the_other_format_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: tuple[str, ...], name: str, message: str
) -> None:
    store = recording(tmp_path)
    assert export(store, "--from", str(RECORDED_AT), *flags, "-o", str(tmp_path / name)) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / name).exists()


def test_export_names_a_skel_program_in_a_file_not_named_skel(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = recording(tmp_path)
    program = tmp_path / "sanitize.txt"
    program.write_text("remove(status);\n")
    args = ["--from", str(RECORDED_AT), "--transform", str(program), "-o", str(tmp_path / "out.kts")]
    assert export(store, *args) == 2
    err = capsys.readouterr().err
    assert "sanitize.txt: this is a SKEL program" in err
    assert "export --transform reads SKEL from a file named .skel: rename it" in err


def test_skctl_output_path_is_taken_and_tracer_address_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = recording(tmp_path)
    out = tmp_path / "out.kts"
    assert export(store, "-t", str(RECORDED_END), "--output-path", str(out)) == 0
    assert read_segment(out).header.start_ms == RECORDED_AT
    with pytest.raises(SystemExit) as exit_info:
        export(store, "--tracer-address", "http://localhost:7777", "-o", str(out))
    assert exit_info.value.code == 2
    assert (
        "--tracer-address is skctl's and has no counterpart here: kubetape export reads the segment store"
        in (capsys.readouterr().err)
    )
