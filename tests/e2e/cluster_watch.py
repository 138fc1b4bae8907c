"""The end-to-end oracle's own eyes on the simulated cluster: a watch of its pods, with a client of its
own (``kubernetes_asyncio``, not the replayer's pod watch), kept as a history of Running pods per
recorded owner against this process's monotonic clock.

A pod is counted for its recorded owner by what the cluster says of it, not by what the replay stamped
on it: a pod owned by a ReplicaSet ``<deployment>-<pod-template-hash>`` counts for that Deployment, a pod
owned by no ReplicaSet for itself; its namespace ``<prefix>-<recorded namespace>`` names the recorded
one (the replay's documented mapping). Running: phase Running and not being deleted.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from bisect import bisect_right
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client, config, watch
from kubernetes_asyncio.client.api_client import ApiClient
from kubernetes_asyncio.client.exceptions import ApiException

Counts = dict[str, int]


def recorded_owner(pod: dict[str, Any], namespace_prefix: str, recorded: frozenset[str]) -> str | None:
    """The recorded owner's key a pod of the simulated cluster counts for (None: not in the replay's
    namespace of one of the ``recorded`` namespaces)."""
    meta = pod.get("metadata") or {}
    namespace = str(meta.get("namespace") or "")
    recorded_ns = namespace.removeprefix(namespace_prefix + "-")
    if namespace == recorded_ns or recorded_ns not in recorded:
        return None
    for ref in meta.get("ownerReferences") or []:
        if ref.get("kind") == "ReplicaSet":
            template_hash = (meta.get("labels") or {}).get("pod-template-hash", "")
            deployment = str(ref.get("name", "")).removesuffix(f"-{template_hash}")
            return f"apps/Deployment/{recorded_ns}/{deployment}"
    return f"core/Pod/{recorded_ns}/{meta.get('name')}"


def is_running(pod: dict[str, Any]) -> bool:
    meta = pod.get("metadata") or {}
    return (pod.get("status") or {}).get("phase") == "Running" and not meta.get("deletionTimestamp")


class ClusterWatch:
    """Pods of the replay's namespaces (``<namespace_prefix>-<recorded>`` for each of ``recorded``),
    watched from a thread of its own between :meth:`start` and :meth:`stop`; :attr:`history` holds
    (monotonic s, Running pods per owner) at every change."""

    def __init__(self, kubeconfig: Path, namespace_prefix: str, recorded: frozenset[str]) -> None:
        self._kubeconfig = kubeconfig
        self._prefix = namespace_prefix
        self._recorded = recorded
        self._pods: dict[str, tuple[str, bool]] = {}
        self.history: list[tuple[float, Counts]] = [(time.monotonic(), {})]
        self._ready = threading.Event()
        self._stopping = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="e2e-cluster-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()
        if not self._ready.wait(60):
            raise AssertionError(f"the oracle's watch of {self._kubeconfig} did not start in 60 s")
        self._raise_if_failed()

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(30)
        self._raise_if_failed()

    def counts_at(self, wall_s: float) -> Counts:
        """Running pods per owner as the watch had them at ``wall_s`` (monotonic)."""
        index = bisect_right([at for at, _ in self.history], wall_s)
        return self.history[max(index - 1, 0)][1]

    def counts_over(self, start_s: float, end_s: float, owner: str) -> tuple[int, ...]:
        """``owner``'s counts from ``start_s`` to ``end_s`` (monotonic), in order, each once."""
        seen = [self.counts_at(start_s).get(owner, 0)]
        seen += [counts.get(owner, 0) for at, counts in self.history if start_s < at <= end_s]
        return tuple(dict.fromkeys(seen))

    def changes_between(self, start_s: float, end_s: float, owner: str) -> bool:
        """Whether ``owner``'s count changed in (start_s, end_s]."""
        before = self.counts_at(start_s).get(owner, 0)
        return any(counts.get(owner, 0) != before for at, counts in self.history if start_s < at <= end_s)

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise AssertionError(f"the oracle's watch of the simulated cluster failed: {self._error!r}")

    def _run(self) -> None:
        try:
            asyncio.run(self._watch_forever())
        except BaseException as exc:  # reported to the test by start/stop
            self._error = exc
            self._ready.set()

    async def _watch_forever(self) -> None:
        api_client = await config.new_client_from_config(config_file=str(self._kubeconfig))
        async with api_client:
            core = client.CoreV1Api(api_client)
            while not self._stopping.is_set():
                listed = await core.list_pod_for_all_namespaces()
                self._replace({p["metadata"]["uid"]: p for p in _plain(api_client, listed)["items"]})
                self._ready.set()
                await self._follow(core, listed.metadata.resource_version)

    async def _follow(self, core: client.CoreV1Api, resource_version: str) -> None:
        """Apply watch events until the watch ends (then the caller lists again) or :meth:`stop`."""
        try:
            async with watch.Watch().stream(
                core.list_pod_for_all_namespaces,
                resource_version=resource_version,
                timeout_seconds=5,  # ends the watch now and then: a stop is seen, the list is fresh
            ) as events:
                async for event in events:
                    if event["type"] == "ERROR":
                        return
                    pod = event["raw_object"]
                    self._update(pod["metadata"]["uid"], None if event["type"] == "DELETED" else pod)
                    if self._stopping.is_set():
                        return
        except ApiException as exc:
            if exc.status != 410:  # 410: the resource version expired, list again
                raise

    def _replace(self, pods: dict[str, dict[str, Any]]) -> None:
        self._pods = {}
        for uid, pod in pods.items():
            self._track(uid, pod)
        self._note()

    def _update(self, uid: str, pod: dict[str, Any] | None) -> None:
        if pod is None:
            self._pods.pop(uid, None)
        else:
            self._track(uid, pod)
        self._note()

    def _track(self, uid: str, pod: dict[str, Any]) -> None:
        owner = recorded_owner(pod, self._prefix, self._recorded)
        if owner is not None:
            self._pods[uid] = (owner, is_running(pod))

    def _note(self) -> None:
        counts: Counts = {}
        for owner, running in self._pods.values():
            if running:
                counts[owner] = counts.get(owner, 0) + 1
        if counts != self.history[-1][1]:
            self.history.append((time.monotonic(), counts))


def _plain(api_client: ApiClient, listed: Any) -> dict[str, Any]:
    """A listed object as the plain dict the API sent (camelCase keys, like the watch's raw objects)."""
    plain: dict[str, Any] = api_client.sanitize_for_serialization(listed)
    return plain


@contextlib.contextmanager
def watching(kubeconfig: Path, namespace_prefix: str, recorded: frozenset[str]) -> Iterator[ClusterWatch]:
    cluster = ClusterWatch(kubeconfig, namespace_prefix, recorded)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()
