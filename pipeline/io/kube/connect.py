"""Connecting to a Kubernetes apiserver with kubernetes-asyncio: one ``ApiClient`` per kubeconfig, closed
with ``async with``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client, config

from pipeline.model.errors import ConfigError


@asynccontextmanager
async def kube_api(kubeconfig: Path | None, context: str | None = None) -> AsyncIterator[client.ApiClient]:
    """An ``ApiClient`` for ``kubeconfig`` (None: the pod's service account, inside a cluster); the
    connection pool is closed on exit."""
    configuration = client.Configuration()
    if kubeconfig is None:
        try:
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]  # untyped in kubernetes-asyncio
        except config.ConfigException as exc:
            raise ConfigError(
                f"no --kubeconfig given and not running inside a cluster ({exc}); pass --kubeconfig"
            ) from None
    elif not kubeconfig.exists():  # noqa: ASYNC240 - one stat before connecting, not a hot path
        raise ConfigError(
            f"kubeconfig {kubeconfig} does not exist; pass --kubeconfig or run "
            f"`kubetape stack up` for a local cluster"
        )
    else:
        await config.load_kube_config(
            config_file=str(kubeconfig), context=context, client_configuration=configuration
        )
    api = client.ApiClient(configuration)
    try:
        yield api
    finally:
        await api.close()


def body(manifest: Mapping[str, Any]) -> Any:
    """Pass a plain-dict manifest where kubernetes-asyncio's signatures name a generated model.

    The client serialises dicts as they are; kubetape keeps Kubernetes objects as plain dicts
    end to end and never builds the generated model classes.
    """
    return manifest
