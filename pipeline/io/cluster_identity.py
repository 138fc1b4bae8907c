"""Which cluster the watcher records: the UID of its ``kube-system`` namespace, unless configured.

Every cluster has that namespace from its creation to its end and Kubernetes gives it a UID unique across
clusters, so it names a fleet member without any configuration (the same choice as kubectl's and several
operators' "cluster id"). Reading it needs one read-only grant: ``get`` on that one namespace
(``k8s/prod/rbac.yaml``).
"""

from __future__ import annotations

import aiohttp
import orjson
from kubernetes_asyncio import client

from pipeline.io.kube import error_for_status, open_get
from pipeline.model.errors import AccessDeniedError, ConfigError, TransientError
from pipeline.model.keys import ClusterId, parse_cluster_id

_PATH = "/api/v1/namespaces/kube-system"
_LIMITS = aiohttp.ClientTimeout(total=30)


async def kube_system_uid(api: client.ApiClient) -> ClusterId:
    """The UID of the cluster's ``kube-system`` namespace, as a :data:`ClusterId`."""
    try:
        response = await open_get(api, _PATH, [], _LIMITS)
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        raise TransientError(
            f"cannot reach the API server for GET {_PATH} ({type(exc).__name__}: {exc})"
        ) from None
    try:
        data = await response.read()
    finally:
        response.release()
    if response.status != 200:
        error = error_for_status(f"GET {_PATH}", response.status, data)
        if isinstance(error, AccessDeniedError):
            raise ConfigError(
                f"the API server refused {error}; the watcher names its cluster by the kube-system namespace "
                "UID: grant get on that namespace (k8s/prod/rbac.yaml) or pass --cluster-id"
            )
        raise error
    uid = orjson.loads(data).get("metadata", {}).get("uid")
    return parse_cluster_id(str(uid).lower(), "the kube-system namespace UID")
