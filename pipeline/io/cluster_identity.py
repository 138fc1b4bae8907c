"""Which cluster the watcher records: the UID of its ``kube-system`` namespace, unless configured.

Every cluster has that namespace from its creation to its end and Kubernetes gives it a UID unique across
clusters, so it names a fleet member without any configuration (the same choice as kubectl's and several
operators' "cluster id"). Reading it needs one read-only grant: ``get`` on that one namespace
(``k8s/prod/rbac.yaml``).
"""

from __future__ import annotations

from pipeline.io.kube.cluster import ClusterReads
from pipeline.io.kube.types import ApiResource
from pipeline.model.errors import ConfigError
from pipeline.model.keys import ClusterId, parse_cluster_id

NAMESPACES = ApiResource("v1", "Namespace", "namespaces", namespaced=False)
_NAME = "kube-system"


async def kube_system_uid(cluster: ClusterReads) -> ClusterId:
    """The UID of the cluster's ``kube-system`` namespace, as a :data:`ClusterId`.

    Errors are the client's reads': a refused request is a ``ConfigError``, an unreachable or failing
    apiserver a retriable ``WatchBrokenError``."""
    try:
        found = await cluster.get_object(NAMESPACES, None, _NAME)
    except ConfigError as exc:
        raise ConfigError(
            f"{exc}. The watcher names its cluster by the kube-system namespace UID: grant get on that "
            "namespace (k8s/prod/rbac.yaml) or pass --cluster-id"
        ) from None
    if found is None:
        raise ConfigError("the cluster has no kube-system namespace to name it by; pass --cluster-id")
    uid = (found.get("metadata") or {}).get("uid")
    return parse_cluster_id(str(uid).lower(), "the kube-system namespace UID")
