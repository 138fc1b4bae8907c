"""What the Kubernetes clients of :mod:`pipeline.io` and the stages share about the API itself (no
third-party imports, so stages and their in-memory fakes use it freely)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from pipeline.model.keys import group_of, version_of


@dataclass(frozen=True, slots=True)
class ApiResource:
    """One kind as the apiserver serves it (from discovery): where its objects live."""

    api_version: str
    kind: str
    plural: str
    namespaced: bool

    @property
    def group(self) -> str:
        """The API group (``""`` for the core group)."""
        return group_of(self.api_version)

    @property
    def version(self) -> str:
        return version_of(self.api_version)

    @property
    def label(self) -> str:
        """``apps/v1.Deployment``: how logs and metrics name the kind."""
        return f"{self.api_version}.{self.kind}"

    def path(self, namespace: str | None = None, name: str | None = None) -> str:
        """The URL path of the collection (in ``namespace`` when the kind is namespaced), or of one object."""
        base = f"/apis/{self.api_version}" if self.group else f"/api/{self.api_version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        return f"{base}/{name}" if name else base


class ClusterObjects(Protocol):
    """The object verbs every stage that works on a cluster uses (:class:`pipeline.io.kube_apply.KubeApplier`
    has them); each stage's own port adds what else it needs. Errors are those of
    :mod:`pipeline.model.errors` (``NotFoundError``, ``ConflictError``, ``ApiUnavailableError``…)."""

    async def get(
        self, api_version: str, kind: str, namespace: str | None, name: str
    ) -> dict[str, Any] | None: ...

    async def list_objects(
        self, api_version: str, kind: str, *, label_selector: str = "", namespace: str | None = None
    ) -> list[dict[str, Any]]: ...

    async def delete(
        self,
        api_version: str,
        kind: str,
        namespace: str | None,
        name: str,
        *,
        propagation: str = "Background",
    ) -> bool:
        """False when the object did not exist."""
        ...
