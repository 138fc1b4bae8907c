"""The default cluster id: the kube-system namespace UID, read through the kube client's ``get_object``
(here the shared in-memory cluster); a refused or missing namespace says to pass --cluster-id."""

from __future__ import annotations

from typing import Any

import pytest

from pipeline.io.cluster_identity import kube_system_uid
from pipeline.io.kube.types import ApiResource
from pipeline.model.errors import ConfigError
from tests.fakes.cluster import MemoryCluster

UID = "0D9D7C56-52E0-4C61-A3AD-3B4F1F5EA3C1"


async def test_the_cluster_is_named_by_its_kube_system_uid_lower_cased() -> None:
    cluster = MemoryCluster()
    cluster.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kube-system", "uid": UID}})
    assert await kube_system_uid(cluster) == UID.lower()


async def test_a_cluster_without_kube_system_asks_for_a_cluster_id() -> None:
    with pytest.raises(ConfigError, match="--cluster-id"):
        await kube_system_uid(MemoryCluster())


class _Refusing(MemoryCluster):
    async def get_object(self, res: ApiResource, namespace: str | None, name: str) -> dict[str, Any] | None:
        raise ConfigError("the API server refused get namespaces/kube-system: HTTP 403 Forbidden")


async def test_a_refused_get_names_the_grant_and_the_flag() -> None:
    with pytest.raises(ConfigError, match=r"HTTP 403.*grant get on that namespace.*--cluster-id"):
        await kube_system_uid(_Refusing())
