"""Kinds resolved to resources (plural, namespaced, listable) through the apiserver's discovery, once per
group/version, so any kind it serves works, custom resources included."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from pipeline.io.kube.types import ApiResource
from pipeline.model.errors import NotFoundError
from pipeline.model.keys import group_of, version_of

FetchJson = Callable[[str, str], Awaitable[dict[str, Any]]]
"""GET a path as JSON, ``(path, what)`` → the decoded object; raises the client's errors."""


def discovery_path(api_version: str) -> str:
    return f"/apis/{api_version}" if group_of(api_version) else f"/api/{version_of(api_version)}"


class Discovery:
    """The kinds of each group/version, fetched on first use and kept until looked up again."""

    def __init__(self, fetch: FetchJson, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._fetch = fetch
        self._clock = clock
        self._kinds: dict[str, dict[str, ApiResource]] = {}
        self._fetched_at: dict[str, float] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def kinds(self, api_version: str) -> dict[str, ApiResource]:
        """The kinds served in ``api_version`` (empty when the group/version is not served)."""
        kinds = self._kinds.get(api_version)
        if kinds is None:
            async with self._locks.setdefault(api_version, asyncio.Lock()):
                kinds = self._kinds.get(api_version)
                if kinds is None:
                    kinds = await self.refresh(api_version)
        return kinds

    def age(self, api_version: str) -> float:
        """Seconds since ``api_version`` was last discovered (infinite if never)."""
        fetched = self._fetched_at.get(api_version)
        return float("inf") if fetched is None else self._clock() - fetched

    async def refresh(self, api_version: str) -> dict[str, ApiResource]:
        """Discover ``api_version`` again (a CRD may have been installed since)."""
        try:
            listing = await self._fetch(discovery_path(api_version), f"discovery of {api_version}")
        except NotFoundError:
            listing = {}  # the whole group/version is unknown: every kind in it is
        kinds: dict[str, ApiResource] = {}
        for entry in listing.get("resources") or []:
            name = entry.get("name", "")
            if "/" in name:  # subresources (pods/status, deployments/scale)
                continue
            listable = "list" in (entry.get("verbs") or [])
            kinds.setdefault(
                entry["kind"],
                ApiResource(api_version, entry["kind"], name, bool(entry.get("namespaced")), listable),
            )
        self._kinds[api_version] = kinds
        self._fetched_at[api_version] = self._clock()
        return kinds

    def forget(self) -> None:
        """Drop everything discovered (after a CRD is installed, for example)."""
        self._kinds.clear()
        self._fetched_at.clear()
