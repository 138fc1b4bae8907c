"""Which HPA processes a replay restarts at its speed, and when: only a local stack cluster's, found
by the kubeconfig, and only when they run other timers than the replay wants."""

from __future__ import annotations

from pathlib import Path

from pipeline.replay.autoscale.settings import ScaledSetting
from pipeline.replay.hpa.load import LoadModel
from pipeline.replay.hpa.timing import (
    HpaProcessTimers,
    applied_process_timers,
    scale_hpa_process_timers,
    unscaled_hpa_process_timers,
)
from pipeline.replay.run import LoadedTrace, PodAutoscaling, ReplayRun, ReplaySpec
from pipeline.replay.settings import ReplaySettings
from services.local_pod_autoscaler import DEFAULT_FLAGS, LocalPodAutoscaler, needs_restart
from tests import hpa_recording as rec

SYNC = "horizontal-pod-autoscaler-sync-period"


def test_a_process_that_runs_the_wanted_timers_is_not_restarted() -> None:
    assert not needs_restart({SYNC: "1.5s"}, {SYNC: "1s500ms"}, {SYNC: "15s"}), "the same duration"
    assert needs_restart({SYNC: "1s500ms"}, {SYNC: "3s"}, {SYNC: "15s"}), "another speed: its own values"


def test_a_flag_the_process_does_not_set_counts_as_its_default() -> None:
    """A new cluster's controller-manager has none of the HPA flags: a plain replay (speed 1, the
    defaults) leaves it alone, a replay at x10 restarts it, and a plain replay after that puts the
    defaults back."""
    defaults = DEFAULT_FLAGS["kube-controller-manager"]
    assert not needs_restart({"kubeconfig": "/k"}, defaults, defaults)
    scaled = {**defaults, SYNC: "1s500ms"}
    assert needs_restart({"kubeconfig": "/k"}, scaled, defaults)
    assert needs_restart(scaled, defaults, defaults)


def test_a_running_value_that_is_not_a_duration_is_replaced() -> None:
    assert needs_restart({SYNC: "soon"}, {SYNC: "15s"}, {SYNC: "15s"})


def test_inside_a_cluster_the_timers_are_reported_as_the_clusters_own(tmp_path: Path) -> None:
    settings = LocalPodAutoscaler(stack_dir=tmp_path, kubeconfig=None).restart_at(10.0)
    sync = next(s for s in settings if s.name == f"kube-controller-manager --{SYNC}")
    assert sync.applied == "as deployed"
    assert "run as deployed" in sync.note
    assert str(tmp_path) not in sync.note


def test_beside_no_stack_cluster_the_note_names_the_stack_looked_in(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("")
    settings = LocalPodAutoscaler(stack_dir=tmp_path, kubeconfig=kubeconfig).restart_at(10.0)
    resolution = next(s for s in settings if s.name == "metrics-server --metric-resolution")
    assert resolution.applied == "as deployed"
    assert resolution.note.startswith(f"not scaled: no cluster of the local stack in {tmp_path.resolve()}")


class _Processes:
    """A PodAutoscalerProcess that records the speeds it is asked for."""

    def __init__(self) -> None:
        self.speeds: list[float] = []

    def restart_at(self, speed: float) -> list[ScaledSetting]:
        self.speeds.append(speed)
        return scale_hpa_process_timers(speed)[1]


async def test_a_replay_with_the_hpa_restarts_its_processes_at_its_speed_and_a_plain_one_at_one() -> None:
    """Each replay sets the timers it needs: a replay at another speed gets its own, and a plain
    replay after one with the HPA does not run on the scaled timers it left."""
    trace = rec.recording([(30_000, 3)], span_ms=300_000)
    processes = _Processes()
    with_hpa = ReplaySpec(
        LoadedTrace(trace),
        ReplaySettings(speed=10.0),
        pod_autoscaling=PodAutoscaling(LoadModel.CONSERVE, rec.rising_load(300_000)),
    )
    run = ReplayRun(with_hpa, pod_autoscaler=processes)
    await run.prepare()
    hpa = run.settings.pod_autoscaling
    assert hpa is not None
    sync = next(s for s in hpa.process_settings if s.name.endswith("--horizontal-pod-autoscaler-sync-period"))
    assert (sync.given, sync.applied) == ("15s", "1s500ms"), "the report lists the flag given and applied"
    await ReplayRun(
        ReplaySpec(LoadedTrace(trace), ReplaySettings(speed=5.0)), pod_autoscaler=processes
    ).prepare()
    assert processes.speeds == [10.0, 1.0]


def test_the_timers_applied_are_read_from_what_the_port_did() -> None:
    """The reaction time the verdict allows follows what runs: scaled timers where the processes were
    restarted, the defaults where they run as deployed."""
    scaled, settings = scale_hpa_process_timers(10.0)
    assert applied_process_timers(settings) == scaled
    assert applied_process_timers(unscaled_hpa_process_timers("not scaled")) == HpaProcessTimers()


class _AsDeployed:
    def restart_at(self, speed: float) -> list[ScaledSetting]:
        return unscaled_hpa_process_timers("not scaled: not a stack cluster")


async def test_a_replay_whose_processes_run_as_deployed_allows_their_reaction_time() -> None:
    trace = rec.recording([(30_000, 3)], span_ms=300_000)
    spec = ReplaySpec(
        LoadedTrace(trace),
        ReplaySettings(speed=10.0),
        pod_autoscaling=PodAutoscaling(LoadModel.CONSERVE, rec.rising_load(300_000)),
    )
    run = ReplayRun(spec, pod_autoscaler=_AsDeployed())
    await run.prepare()
    assert run.settings.pod_autoscaling is not None
    assert run.settings.pod_autoscaling.reaction_ms == 450_000, "2 x 15 s + 15 s, times 10"
