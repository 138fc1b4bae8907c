"""What the Kubernetes clients of :mod:`pipeline.io` and the stages share about the API itself (no
third-party imports, so stages and their in-memory fakes use it freely)."""

from __future__ import annotations

from dataclasses import dataclass

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
