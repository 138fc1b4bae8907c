"""One label's pods, listed once and then watched: what the replay's sampler keeps its counts from.

Built on the one client's reads (:meth:`~pipeline.io.kube.client.KubeClient.list_all` and
:meth:`~pipeline.io.kube.client.KubeClient.watch_objects`: paged lists, bookmarks, 410 and dropped
streams mapped to :class:`~pipeline.model.errors.GoneError` and
:class:`~pipeline.model.errors.WatchBrokenError`), so a pod watch behaves as every other watch of
kubetape. The label is a selector the apiserver applies, so other replays' pods (a sweep runs one
replay after another, each with its own label, while the last one's pods drain) never cross the wire
or the loop; the check here only guards against a server that ignores it.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

from kubernetes_asyncio import client

from pipeline.io.kube.client import KubeClient
from pipeline.io.kube.types import ApiResource, ListResult, ResourceVersion, WatchEvent

log = logging.getLogger(__name__)
PODS = ApiResource("v1", "Pod", "pods", namespaced=True)


def _skipped(what: str) -> None:
    log.warning("pod watch skipped an event of unknown shape", extra={"ctx": {"event": what}})


class PodWatch:
    """The pods labelled ``label`` = ``value`` on the cluster behind ``api``."""

    def __init__(self, api: client.ApiClient, label: str, value: str) -> None:
        self._cluster = KubeClient(api, on_malformed=_skipped)
        self._label, self._value = label, value
        self._selector = f"{label}={value}"

    def _labelled(self, pod: dict[str, Any]) -> bool:
        labels = (pod.get("metadata") or {}).get("labels") or {}
        return bool(labels.get(self._label) == self._value)

    async def list_pods(self) -> ListResult:
        listed = await self._cluster.list_all(PODS, label_selector=self._selector)
        return ListResult([p for p in listed.items if self._labelled(p)], listed.resource_version)

    async def watch_pods(self, since: ResourceVersion) -> AsyncIterator[WatchEvent]:
        async for event in self._cluster.watch_objects(PODS, since, label_selector=self._selector):
            # bookmarks carry no labels but move the version on: pass them through
            if event.type == "BOOKMARK" or self._labelled(event.obj):
                yield event
