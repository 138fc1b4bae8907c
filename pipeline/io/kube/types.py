"""What the Kubernetes client and the stages share about the API itself: resources, watch events, lists
(no third-party imports, so stages and their in-memory fakes use it freely)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, NewType

from pipeline.model.keys import group_of, version_of

ResourceVersion = NewType("ResourceVersion", str)

WatchEventType = Literal["ADDED", "MODIFIED", "DELETED", "BOOKMARK"]


@dataclass(frozen=True, slots=True)
class ApiResource:
    """One kind as the apiserver serves it (from discovery): where its objects live."""

    api_version: str
    kind: str
    plural: str
    namespaced: bool
    listable: bool = field(default=True, compare=False)
    """Whether the kind can be listed (and so watched); a few served kinds (``TokenReview``) cannot."""

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


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """One decoded watch line; ``obj`` is the plain dict the API server sent (TypeMeta filled in)."""

    type: WatchEventType
    obj: dict[str, Any]
    resource_version: ResourceVersion


@dataclass(frozen=True, slots=True)
class ListPage:
    """One page of a paged list of one kind, as it arrives: a reader keeps only what it must remember
    across pages, so a list of 50,000 pods is never held whole. Every page of one snapshot carries the
    snapshot's ``resource_version``; the last page's is where a watch continues."""

    items: list[dict[str, Any]]
    resource_version: ResourceVersion
    restarted: bool = False
    """The list started over from a fresh snapshot (the continue token expired mid-list): what the
    earlier pages showed is superseded, and objects they listed may be gone from the new snapshot."""


@dataclass(frozen=True, slots=True)
class ListResult:
    """A complete (all pages) list of one kind, consistent at ``resource_version``."""

    items: list[dict[str, Any]]
    resource_version: ResourceVersion
