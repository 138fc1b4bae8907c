"""Cluster profiles: the control-plane and KWOK settings a simulated cluster is created with
(``kubetape stack up --profile NAME``), and the ConfigMap by which a cluster states its profile."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from pipeline.model.errors import StackError

PROFILE_CONFIGMAP = ("kube-system", "kubetape-cluster-profile")
"""Where a cluster states the profile it was created with; the replayer reads it for its report (the
name is repeated in pipeline.replay.profile, which must not import the stack layer)."""


@dataclass(frozen=True, slots=True)
class ClusterProfile:
    """Control-plane and KWOK settings of a simulated cluster (``kubetape stack up --profile NAME``).

    ``changes_scheduling`` names the settings that can change where pods land (not only how fast):
    they stay out of every profile but the ones named for them, and the replay report lists them.
    ``changes_scheduling_on_zoned_nodes`` names the settings that place pods as Kubernetes' defaults
    do on nodes labelled with a hostname and no zone (every stack node), and differently elsewhere:
    the replay report lists them once the cluster has any other node."""

    name: str
    apiserver_args: dict[str, str] = field(default_factory=dict)
    controller_manager_args: dict[str, str] = field(default_factory=dict)
    scheduler_config: dict[str, Any] = field(default_factory=dict)
    """Fields of a KubeSchedulerConfiguration (kubescheduler.config.k8s.io/v1); empty: none."""
    kwok_options: dict[str, Any] = field(default_factory=dict)
    """Options of a KwokConfiguration (the kwok controller)."""
    etcd_args: dict[str, str] = field(default_factory=dict)
    changes_scheduling: tuple[str, ...] = ()
    changes_scheduling_on_zoned_nodes: tuple[str, ...] = ()

    def settings(self) -> dict[str, dict[str, Any]]:
        """Every setting, by component: what the profile ConfigMap and the report show."""
        parts = {
            "kube-apiserver": self.apiserver_args,
            "kube-controller-manager": self.controller_manager_args,
            "kube-scheduler": self.scheduler_config,
            "kwok": self.kwok_options,
            "etcd": self.etcd_args,
        }
        return {k: v for k, v in parts.items() if v}


# Throughput settings for 1k-5k fake nodes and tens of thousands of pods. None of them changes a
# scheduling decision: more controller workers, more KWOK workers, the scheduler filtering and scoring
# with more goroutines, a larger etcd quota. The apiserver's in-flight limits are not among them:
# kwokctl's disableQPSLimits (every profile) already starts it with --max-requests-inflight=0 and
# --max-mutating-requests-inflight=0 (no limit) and without priority and fairness, and client QPS of
# the controllers and the scheduler at 5000. Measured with bench/bench_scale.py.
#
# The feature gates turn off Kubernetes 1.36's stale-read guard in four workload controllers (beta, on by
# default): a sync whose informer has not yet seen the controller's own last write fails and is
# retried through the workqueue's rate limiter (per item 5 ms doubling to 1,000 s, and 10 per second
# overall). On a control plane this loaded the informers always trail, so the ReplicaSet syncs failed
# by the thousand, their retries were spread over minutes, and no pod was created meanwhile (measured:
# the 1,000-node case stood at 4,793 Running pods for 62 s with the scheduler's queue empty, after
# 1,112 such failures). Without the guard the controllers act as before 1.36, where expectations
# already keep a ReplicaSet from creating a pod twice; what they converge to is the same.
_STALE_READ_GUARDS = ("DaemonSet", "Job", "ReplicaSet", "StatefulSet")
#
# The scheduler spreads by hostname only. Kubernetes' system-default spreading is two soft constraints,
# by kubernetes.io/hostname (maxSkew 3) and by topology.kubernetes.io/zone (maxSkew 5), for every pod
# of a ReplicaSet, StatefulSet or Service. On nodes without a zone label the zone constraint never
# scores (PodTopologySpread.Score skips a node without the key), but its PreScore still counts the
# matching pods on every node of the cluster, for every pod it schedules: a scan of all pods per pod,
# so scheduling slows as the cluster fills. Measured at 1,000 nodes: 59 % of the scheduler's CPU at
# 9,000-12,000 pods, binding 17-22 pods/s with its queue full; restarted with hostname-only spreading,
# the same scheduler in the same run bound 37 pods/s and emptied its queue. On nodes with a hostname
# and no zone label (every node the stack makes) the scores, and so the placements, are the
# default's; on zoned nodes zone spreading is lost, and the report says so
# (changes_scheduling_on_zoned_nodes).
_HOSTNAME_SPREADING = {
    "name": "PodTopologySpread",
    "args": {
        "defaultingType": "List",
        "defaultConstraints": [
            {"maxSkew": 3, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway"}
        ],
    },
}
_LARGE_SCHEDULER = {
    "parallelism": 32,
    "profiles": [{"schedulerName": "default-scheduler", "pluginConfig": [_HOSTNAME_SPREADING]}],
}
_ZONE_SPREADING_DROPPED = (
    "kube-scheduler default topology spreading by hostname only (the default also spreads by "
    "topology.kubernetes.io/zone)",
)
_LARGE = ClusterProfile(
    name="large",
    controller_manager_args={
        "feature-gates": ",".join(f"StaleControllerConsistency{kind}=false" for kind in _STALE_READ_GUARDS),
        "concurrent-deployment-syncs": "25",
        "concurrent-replicaset-syncs": "25",
        "concurrent-statefulset-syncs": "10",
        "concurrent-job-syncs": "25",
        "concurrent-gc-syncs": "50",
        "concurrent-namespace-syncs": "25",
    },
    scheduler_config=_LARGE_SCHEDULER,
    changes_scheduling_on_zoned_nodes=_ZONE_SPREADING_DROPPED,
    kwok_options={
        "podPlayStageParallelism": 16,
        "nodePlayStageParallelism": 8,
        "nodeLeaseParallelism": 8,
        "podsOnNodeSyncParallelism": 4,
    },
    etcd_args={"quota-backend-bytes": str(8 * 1024**3)},
)
PROFILES: dict[str, ClusterProfile] = {
    "default": ClusterProfile(name="default"),
    "large": _LARGE,
    # the scheduler scores 10% of the feasible nodes (at least 100) instead of its adaptive 50%..5%:
    # a different node may win, so this one is named for what it changes
    "large-sampled": ClusterProfile(
        name="large-sampled",
        apiserver_args=_LARGE.apiserver_args,
        controller_manager_args=_LARGE.controller_manager_args,
        scheduler_config={**_LARGE.scheduler_config, "percentageOfNodesToScore": 10},
        kwok_options=_LARGE.kwok_options,
        etcd_args=_LARGE.etcd_args,
        changes_scheduling=("kube-scheduler percentageOfNodesToScore=10",),
        changes_scheduling_on_zoned_nodes=_LARGE.changes_scheduling_on_zoned_nodes,
    ),
}


def profile_named(name: str) -> ClusterProfile:
    try:
        return PROFILES[name]
    except KeyError:
        raise StackError(
            f"unknown stack profile {name!r}: choose one of {', '.join(PROFILES)} (see docs/stack.md, "
            f"'A simulated cluster sized for scale')"
        ) from None


SCHEDULER_CLIENT = {"qps": 5000, "burst": 10000}
"""The scheduler's client limits with a configuration file: kwokctl's disableQPSLimits, restated.

kube-scheduler ignores ``--kube-api-qps`` and ``--kube-api-burst`` once it has a ``--config``, so
kwokctl's flags stop applying to a profile's scheduler and it falls back to the configuration's
default of 50 requests per second, one per pod bound. Measured at 1,000 nodes in profile large
before this was set: the scheduler's bindings waited up to 33 s on client-side throttling, and its
ceiling was 51 pods per second, its request limit."""


def scheduler_configuration(profile: ClusterProfile) -> dict[str, Any]:
    """The profile's KubeSchedulerConfiguration (kwokctl fills in clientConnection.kubeconfig)."""
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": dict(SCHEDULER_CLIENT),
        **profile.scheduler_config,
    }


def profile_configmap(profile: ClusterProfile) -> dict[str, Any]:
    """The ConfigMap stating the cluster's profile, for the replay report (k8s/sim ships the same)."""
    namespace, name = PROFILE_CONFIGMAP
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/part-of": "kubetape"},
        },
        "data": {
            "profile": profile.name,
            "settings": json.dumps(profile.settings(), sort_keys=True),
            "changesScheduling": json.dumps(list(profile.changes_scheduling)),
            "changesSchedulingOnZonedNodes": json.dumps(list(profile.changes_scheduling_on_zoned_nodes)),
        },
    }
