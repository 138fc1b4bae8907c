"""Kubernetes API access with kubernetes-asyncio: one client per kubeconfig, closed with ``async with``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from kubernetes_asyncio import client, config

from pipeline.model.errors import ConfigError


@asynccontextmanager
async def kube_api(kubeconfig: Path, context: str | None = None) -> AsyncIterator[client.ApiClient]:
    """An ``ApiClient`` for ``kubeconfig``; the connection pool is closed on exit."""
    if not kubeconfig.exists():
        raise ConfigError(f"kubeconfig {kubeconfig} does not exist; pass --kubeconfig or run "
                          f"`kubetape stack up` for a local cluster")
    configuration = client.Configuration()
    await config.load_kube_config(config_file=str(kubeconfig), context=context,
                                  client_configuration=configuration)
    api = client.ApiClient(configuration)
    try:
        yield api
    finally:
        await api.close()
