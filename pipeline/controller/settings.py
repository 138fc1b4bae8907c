"""The controller's settings: one frozen object, built once by ``kubetape controller``."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_NAMESPACE = "kubetape"
DEFAULT_IMAGE = "kubetape:dev"
DEFAULT_SERVICE_ACCOUNT = "kubetape-replayer"
DEFAULT_LEASE_NAME = "kubetape-simulation"


@dataclass(frozen=True, slots=True)
class ControllerSettings:
    """Every knob of ``kubetape controller``; ``kubetape controller --help`` documents each default."""

    identity: str
    """Who holds the Lease (the pod name in a cluster): a restarted instance with the same identity
    takes its Lease back at once, any other waits until the Lease expires."""
    namespace: str = DEFAULT_NAMESPACE
    """Where replayer Jobs, node-pool ConfigMaps and the Lease live."""
    image: str = DEFAULT_IMAGE
    """The kubetape image the replayer Jobs run."""
    image_pull_policy: str = "IfNotPresent"
    service_account: str = DEFAULT_SERVICE_ACCOUNT
    """Service account of the replayer Jobs, bound to the kubetape-replayer role (k8s/sim/rbac.yaml): the
    kinds the shipped tracer config tracks; `kubetape sim rbac --config` makes the role for another."""
    lease_name: str = DEFAULT_LEASE_NAME
    lease_duration_s: int = 15
    """A holder that has not renewed for this long has lost the Lease."""
    renew_interval_s: float = 5.0
    """How often the holder renews the Lease; also the longest time between two reconcile passes."""
    job_cpu_request: str = "250m"
    job_memory_request: str = "256Mi"
    job_memory_limit: str = "1Gi"
