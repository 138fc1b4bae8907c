"""The local stack's HPA processes run at a replay's speed: the
:class:`~pipeline.replay.ports.PodAutoscalerProcess` that ``kubetape replay`` hands to
:class:`pipeline.replay.run.ReplayRun` (the replay stage cannot import the stack layer).

A replay with ``--autoscaler hpa`` at speed S restarts the simulated cluster's kube-controller-manager
and metrics-server with the HPA's timers divided by S (:func:`pipeline.replay.hpa.timing.process_flags`);
a plain replay asks for speed 1, which puts back the defaults an earlier replay changed. A process
already running with the wanted values is not restarted: repeated replays at one speed cost nothing.
metrics-server is restarted with the stack's build (:func:`pipeline.stack.build.ensure_metrics_server`,
whose resolution floor is 1 s, not upstream's 10 s) when it runs another binary.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path

from pipeline.model.errors import ConfigError
from pipeline.model.timespec import parse_go_duration
from pipeline.replay.autoscale.settings import ScaledSetting
from pipeline.replay.hpa.timing import (
    KUBE_CONTROLLER_MANAGER,
    METRICS_SERVER,
    HpaProcessTimers,
    process_flags,
    scale_hpa_process_timers,
    unscaled_hpa_process_timers,
)
from pipeline.stack import kwok
from pipeline.stack.progress import Reporter, stderr_reporter
from pipeline.stack.stack import LocalStack

DEFAULT_FLAGS = process_flags(HpaProcessTimers())
"""What a process without the flag runs with (Kubernetes' and metrics-server's defaults)."""

RESTART_ONLY_FLAGS = {KUBE_CONTROLLER_MANAGER: {"leader-elect": "false"}}
"""Set on a restart beside the timers. The controller-manager a restart stops keeps its leader lease
until it expires, so a successor that elects waits ~17 s before any controller runs (measured); the
cluster runs one controller-manager, so there is nobody to elect against."""


def needs_restart(running: Mapping[str, str], wanted: Mapping[str, str], defaults: Mapping[str, str]) -> bool:
    """Whether a process with the flags ``running`` runs other durations than ``wanted`` (a flag it
    does not set has its value in ``defaults``; a value that is not a duration differs)."""
    for name, value in wanted.items():
        have = running.get(name, defaults.get(name))
        if have is None:
            return True
        try:
            if abs(parse_go_duration(have, name) - parse_go_duration(value, name)) > 1e-9:
                return True
        except ConfigError:  # a running value this grammar does not read
            return True
    return False


@dataclasses.dataclass(frozen=True, slots=True)
class LocalPodAutoscaler:
    """The kube-controller-manager and metrics-server of the local stack's cluster whose kubeconfig is
    ``kubeconfig`` (``stack_dir`` None: ``$KUBETAPE_STACK_DIR`` or the default stack)."""

    stack_dir: Path | None
    kubeconfig: Path | None
    report: Reporter = stderr_reporter

    def restart_at(self, speed: float) -> list[ScaledSetting]:
        """Run the processes with the HPA's timers divided by ``speed``; each flag as given and applied
        (or why it was not: no such cluster, metrics-server not running)."""
        if self.kubeconfig is None:  # inside a cluster (a Simulation's Job)
            return unscaled_hpa_process_timers(
                "not scaled: the cluster's own controller-manager and metrics-server run as deployed; "
                "kubetape restarts only a local stack cluster's at the replay's speed"
            )
        stack = LocalStack(self.stack_dir, report=self.report)
        cluster = stack.cluster_for(self.kubeconfig)
        if cluster is None:
            return unscaled_hpa_process_timers(
                f"not scaled: no cluster of the local stack in {stack.stack_dir} has this kubeconfig"
            )
        timers, settings = scale_hpa_process_timers(speed)
        not_running = []
        for component, flags in process_flags(timers).items():
            argv = kwok.component_command(cluster, component)
            if argv is None and (component != METRICS_SERVER or kwok.created_with_metrics(cluster)):
                log = cluster.cluster_dir / "logs" / f"{component}.log"
                self.report(
                    f"cluster {cluster.name!r}: {component} is not running (its log: {log}); starting it"
                )
                kwok.start_stopped_components(cluster)
                kwok.wait_serving(cluster, component)
                argv = kwok.component_command(cluster, component)
            if argv is None:
                not_running.append(component)
                continue
            # metrics-server runs the stack's build, whose resolution floor is 1 s (a cluster created
            # before that build runs upstream's, which refuses a resolution under 10 s)
            binary = stack.build_metrics_server() if component == METRICS_SERVER else None
            # kwokctl runs it through a link in the cluster's bin/ to the binary it was created with
            other_binary = binary is not None and Path(argv[0]).resolve() != binary.resolve()
            if not other_binary and not needs_restart(
                kwok.flag_values(argv), flags, DEFAULT_FLAGS[component]
            ):
                continue
            self.report(
                f"cluster {cluster.name!r}: restarting {component} with the HPA's timers at speed {speed:g}"
                + (" (its defaults)" if speed == 1 else "")
                + (f", running {binary}" if other_binary else "")
            )
            kwok.restart_component(
                cluster, component, {**flags, **RESTART_ONLY_FLAGS.get(component, {})}, binary=binary
            )
        return [_not_running(s, not_running) for s in settings]


def _not_running(setting: ScaledSetting, components: list[str]) -> ScaledSetting:
    for component in components:
        if setting.name.startswith(component + " --"):
            return ScaledSetting(
                setting.name,
                setting.given,
                "not running",
                f"the cluster runs no {component} (`kubetape stack up --metrics` starts one)",
            )
    return setting
