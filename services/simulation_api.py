"""The Simulation resource as the commands reach it: its kind, a client of the cluster that holds it,
and one call whose refusals become errors saying what to do.

``kubetape sim`` creates and drives Simulations; ``kubetape list`` and ``kubetape describe`` read them;
all three talk to the cluster through this module.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from pipeline.model.errors import ConfigError

if TYPE_CHECKING:
    from pipeline.io.kube.client import KubeClient

API_VERSION = "kubetape.dev/v1"
KIND = "Simulation"

T = TypeVar("T")


@asynccontextmanager
async def simulation_cluster(kubeconfig: Path | None, context: str | None) -> AsyncIterator[KubeClient]:
    """A client of the cluster the Simulations live in ($KUBECONFIG, else in-cluster credentials)."""
    from pipeline.io.kube.client import controller_client
    from pipeline.io.kube.connect import kube_api

    async with kube_api(kubeconfig, context) as api:
        yield controller_client(api)


async def call_simulation_api(awaitable: Awaitable[T], what: str) -> T:
    """Run one API call; a missing CRD or a refusal becomes an error saying what to do."""
    from pipeline.model.errors import ConflictError, NotFoundError, ObjectRejectedError, UnknownKindError

    try:
        return await awaitable
    except UnknownKindError:
        raise ConfigError(
            f"{what}: the cluster does not know Simulations; install the CRD: "
            f"kubectl apply -f k8s/sim/simulation-crd.yaml (or kubectl apply -k k8s/sim)"
        ) from None
    except NotFoundError:
        raise ConfigError(f"{what}: not found; `kubetape sim list` shows the Simulations") from None
    except ConflictError:
        raise ConfigError(f"{what}: a Simulation of that name exists; pick another or delete it") from None
    except ObjectRejectedError as exc:
        raise ConfigError(str(exc)) from None
