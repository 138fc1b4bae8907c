"""The local stack's Karpenter restarted at a replay's speed: the
:class:`~pipeline.replay.ports.AutoscalerProcess` that ``kubetape replay``, ``kubetape sweep`` and the
autoscaler benchmark hand to :class:`pipeline.replay.run.ReplayRun` (the replay stage cannot import the
stack layer)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pipeline.replay.autoscale.provider import autoscaler_provider
from pipeline.replay.autoscale.settings import ScaledSetting, unscaled_karpenter_timers
from pipeline.stack.progress import Reporter, stderr_reporter
from pipeline.stack.stack import LocalStack
from pipeline.stack.state import StackState


@dataclasses.dataclass(frozen=True, slots=True)
class LocalKarpenter:
    """The Karpenter that the local stack in ``stack_dir`` (None: ``$KUBETAPE_STACK_DIR`` or the
    default stack) runs beside the cluster of ``kubeconfig``."""

    stack_dir: Path | None
    kubeconfig: Path | None
    report: Reporter = stderr_reporter

    def restart_at(
        self, speed: float, instance_types: Mapping[str, Any] | None = None
    ) -> list[ScaledSetting]:
        """Restart it with its timers divided by ``speed`` and, when given, other instance types; the
        settings as given and applied (or why they were not scaled: no such Karpenter runs)."""
        if self.kubeconfig is None:  # inside a cluster (a Simulation's Job): its Karpenter is deployed there
            return unscaled_karpenter_timers(
                "not scaled: the cluster's own Karpenter runs as deployed; kubetape restarts only a local "
                "stack's Karpenter at the replay's speed"
            )
        stack = LocalStack(self.stack_dir, report=self.report)
        cluster = stack.karpenter_for(self.kubeconfig)
        if cluster is None:
            return unscaled_karpenter_timers(
                f"not scaled: no Karpenter of the local stack in {stack.stack_dir} runs beside this "
                "kubeconfig"
            )
        # the local stack runs Karpenter only (pipeline/stack/karpenter.py): its provider's timers
        timers, settings = autoscaler_provider("karpenter").process_timers(speed)
        running = StackState.load(stack.state_path).karpenter[cluster].settings()
        types_path = running.instance_types
        if instance_types is not None:
            types_path = stack.stack_dir / f"karpenter-instance-types-{cluster}.json"
            types_path.write_text(json.dumps(instance_types["types"], indent=2) + "\n")
            names = ", ".join(t["name"] for t in instance_types["types"])
            settings.append(ScaledSetting("Karpenter instance types", instance_types["source"], names))
        stack.start_karpenter(
            cluster,
            dataclasses.replace(
                running,
                batch_idle_s=timers["batch_idle_s"],
                batch_max_s=timers["batch_max_s"],
                polling_period_s=timers["polling_period_s"],
                validation_delay_s=timers["validation_delay_s"],
                instance_types=types_path,
            ),
        )
        return settings
