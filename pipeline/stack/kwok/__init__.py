"""KWOK clusters on loopback: a real control plane (etcd, apiserver, controller-manager, scheduler)
with fake nodes, created and deleted with ``kwokctl`` using only locally built binaries.

The parts: :mod:`.cluster` (one cluster's files and its kwokctl/kubectl), :mod:`.profiles` (the
settings a cluster is created with), :mod:`.kwokctl_config` (the configuration kwokctl reads),
:mod:`.lifecycle` (create, stop, start, delete), :mod:`.components` (one component restarted with
other flags) and :mod:`.nodes` (fake nodes). Callers use the names
below as ``kwok.NAME``."""

from pipeline.stack.kwok.cluster import DEFAULT_NODE_SKELETON, LIFETIME_ANNOTATION, RESOURCES, KwokCluster
from pipeline.stack.kwok.components import (
    component_command,
    flag_values,
    restart_component,
    start_stopped_components,
    wait_serving,
    with_flags,
)
from pipeline.stack.kwok.kwokctl_config import (
    KWOK_METRICS_CRDS,
    KWOK_METRICS_RESOURCES,
    KWOK_STAGES,
    METRICS_SERVER_MANIFESTS,
    write_kwokctl_config,
)
from pipeline.stack.kwok.lifecycle import (
    cluster_exists,
    cluster_processes,
    create_cluster,
    created_profile,
    created_with_metrics,
    delete_cluster,
    kwok_controller_problem,
    start_cluster,
    stop_cluster,
)
from pipeline.stack.kwok.nodes import (
    NODES_PER_REQUEST,
    RESOURCE_METRICS_PATH_ANNOTATION,
    add_nodes,
    resource_metrics_path,
)
from pipeline.stack.kwok.profiles import (
    PROFILE_CONFIGMAP,
    PROFILES,
    SCHEDULER_CLIENT,
    ClusterProfile,
    profile_configmap,
    profile_named,
    scheduler_configuration,
)

__all__ = [
    "DEFAULT_NODE_SKELETON",
    "KWOK_METRICS_CRDS",
    "KWOK_METRICS_RESOURCES",
    "KWOK_STAGES",
    "LIFETIME_ANNOTATION",
    "METRICS_SERVER_MANIFESTS",
    "NODES_PER_REQUEST",
    "PROFILES",
    "PROFILE_CONFIGMAP",
    "RESOURCES",
    "RESOURCE_METRICS_PATH_ANNOTATION",
    "SCHEDULER_CLIENT",
    "ClusterProfile",
    "KwokCluster",
    "add_nodes",
    "cluster_exists",
    "cluster_processes",
    "component_command",
    "create_cluster",
    "created_profile",
    "created_with_metrics",
    "delete_cluster",
    "flag_values",
    "kwok_controller_problem",
    "profile_configmap",
    "profile_named",
    "resource_metrics_path",
    "restart_component",
    "scheduler_configuration",
    "start_cluster",
    "start_stopped_components",
    "stop_cluster",
    "wait_serving",
    "with_flags",
    "write_kwokctl_config",
]
