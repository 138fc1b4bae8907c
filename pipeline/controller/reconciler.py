"""One reconcile pass over every Simulation: read the cluster, derive each status, act, write back.

Level-based: a pass looks only at what the apiserver holds (Simulations, their Jobs and pods), never at
what an earlier pass remembered, so a restarted controller continues where the last one stopped and
running a pass twice changes nothing. Simulations run one at a time, oldest first: the *active* one is
the Simulation that has started (``status.startTime``) and not finished; the others wait as Pending.

Per Simulation: a spec that cannot run → Failed with the reason; a failed repetition → Failed with the
replayer's error; all repetitions succeeded → Succeeded; otherwise the next repetition's Job is created
unless one is running or the Simulation is paused. Events are posted on phase changes and finished
repetitions. A deleted Simulation (finalizer) has its Jobs deleted and the replayed objects of every
repetition removed (their ReplayRoots are not owned by the Simulation) before it goes.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from pipeline.controller.lease import format_time
from pipeline.controller.objects import (
    FINALIZER,
    MANAGED_BY_SELECTOR,
    REPETITION_LABEL,
    REPLAY_LABEL,
    REPLAY_PAUSE_ANNOTATION,
    REPLAY_ROOT_API_VERSION,
    REPLAY_ROOT_KIND,
    job_name,
    node_pools_config_map,
    owned_by,
    replay_config_map,
    replay_root_name,
    replayer_job,
)
from pipeline.controller.part import ControllerPart
from pipeline.controller.progress import RepetitionResult, repetition_result
from pipeline.controller.spec import (
    API_VERSION,
    KIND,
    MAX_REPETITIONS,
    SegmentsSource,
    SimulationSpec,
    SimulationSpecError,
    parse_spec,
)
from pipeline.model.errors import ConflictError, NotFoundError, ObjectRejectedError, UnknownKindError

log = logging.getLogger(__name__)

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
_PHASE_EVENTS = {
    "Pending": ("Normal", "Queued"),
    "Running": ("Normal", "Running"),
    "Paused": ("Normal", "Paused"),
    "Succeeded": ("Normal", "Succeeded"),
    "Failed": ("Warning", "Failed"),
}


def _sort_key(sim: Mapping[str, Any]) -> tuple[str, str]:
    meta = sim["metadata"]
    return (meta.get("creationTimestamp") or "", meta["name"])


def _is_active(sim: Mapping[str, Any]) -> bool:
    status = sim.get("status") or {}
    return bool(status.get("startTime")) and status.get("phase") not in TERMINAL_PHASES


class Reconciler(ControllerPart):
    """Runs :meth:`reconcile_all`; holds no state between passes except the settings and the clock."""

    async def reconcile_all(self) -> str | None:
        """One pass; returns the name of the active Simulation (None when the cluster is free)."""
        cluster, namespace = self._cluster, self._settings.namespace
        simulations = sorted(await cluster.list_objects(API_VERSION, KIND), key=_sort_key)
        jobs = await cluster.list_objects(
            "batch/v1", "Job", label_selector=MANAGED_BY_SELECTOR, namespace=namespace
        )
        pods = await cluster.list_objects(
            "v1", "Pod", label_selector=MANAGED_BY_SELECTOR, namespace=namespace
        )
        live = [s for s in simulations if not s["metadata"].get("deletionTimestamp")]
        for sim in simulations:
            if sim["metadata"].get("deletionTimestamp"):
                await self._clean_up(sim, [j for j in jobs if owned_by(j, sim)])
        # started Simulations first (oldest first): one that finishes in this pass frees the cluster
        # for the next one in the same pass
        active: str | None = None
        for sim in sorted(live, key=lambda s: (not _is_active(s), _sort_key(s))):
            if await self._reconcile_one(sim, jobs, pods, active) and active is None:
                active = sim["metadata"]["name"]
        return active

    # ---- one Simulation ---------------------------------------------------------------------------
    async def _reconcile_one(
        self,
        sim: dict[str, Any],
        jobs: Sequence[Mapping[str, Any]],
        pods: Sequence[Mapping[str, Any]],
        active: str | None,
    ) -> bool:
        """Reconcile ``sim``; True if it is (now) the active Simulation."""
        old = sim.get("status") or {}
        if old.get("phase") in TERMINAL_PHASES:
            return False
        await self._ensure_finalizer(sim)
        name = sim["metadata"]["name"]
        try:
            spec = parse_spec(sim)
        except SimulationSpecError as exc:
            await self._write_status(sim, {**old, "phase": "Failed", "message": str(exc)})
            return False
        results = self._results(sim, jobs, pods)
        status: dict[str, Any] = {
            "startTime": old.get("startTime"),
            "completedRepetitions": sum(r.phase == "Succeeded" for r in results),
            "repetitions": [r.to_status() for r in results],
        }
        failed = next((r for r in results if r.phase == "Failed"), None)
        running = next((r for r in results if r.phase == "Running"), None)
        done = status["completedRepetitions"]
        if failed is not None:
            status |= {"phase": "Failed", "message": f"repetition {failed.index}: {failed.message}"}
        elif done >= spec.repetitions:
            status |= {"phase": "Succeeded", "message": f"{done} of {spec.repetitions} repetitions succeeded"}
        elif running is not None:
            status |= self._running_status(spec, running.index)
            await self._pause_running_replay(name, running.index, paused=spec.paused)
        elif active not in (None, name):
            status |= {
                "phase": "Pending",
                "message": f"waiting for Simulation {active} to finish (one simulation at a time)",
            }
        elif spec.paused:
            status |= {
                "phase": "Paused",
                "message": f"paused before repetition {done + 1} of {spec.repetitions}",
            }
        else:
            status |= await self._start_repetition(sim, spec, done + 1)
            if status["phase"] == "Running":  # the new Job shows in the status of this very pass
                results.append(RepetitionResult(done + 1, job_name(name, done + 1), "Running"))
                status["repetitions"] = [r.to_status() for r in results]
        if status["phase"] in TERMINAL_PHASES:
            status["completionTime"] = old.get("completionTime") or format_time(self._clock())
        await self._write_status(sim, status, results)
        return status["phase"] not in TERMINAL_PHASES and bool(status.get("startTime"))

    async def _pause_running_replay(self, name: str, index: int, *, paused: bool) -> None:
        """Set or clear the pause annotation on the running repetition's replay root, which the replayer
        reads at every sample (a pod cannot be signalled from here)."""
        root = replay_root_name(name, index)
        try:
            live = await self._cluster.get(REPLAY_ROOT_API_VERSION, REPLAY_ROOT_KIND, None, root)
        except UnknownKindError:  # the replayer installs the root's CRD when it creates its root
            live = None
        if live is None:
            return  # the replay has not created its root yet: the next pass sets it
        annotations = live["metadata"].get("annotations") or {}
        if (annotations.get(REPLAY_PAUSE_ANNOTATION) == "true") == paused:
            return
        value = "true" if paused else None  # null removes it in a merge patch
        patch = {"metadata": {"annotations": {REPLAY_PAUSE_ANNOTATION: value}}}
        try:
            await self._cluster.merge_patch(REPLAY_ROOT_API_VERSION, REPLAY_ROOT_KIND, None, root, patch)
        except ObjectRejectedError as exc:  # gone meanwhile: the replay ended
            log.info("cannot (un)pause replay %s: %s", root, exc)

    @staticmethod
    def _running_status(spec: SimulationSpec, index: int) -> dict[str, Any]:
        if spec.paused:
            return {
                "phase": "Paused",
                "message": f"paused: repetition {index} of {spec.repetitions} holds its trace clock",
            }
        return {"phase": "Running", "message": f"repetition {index} of {spec.repetitions} running"}

    def _results(
        self, sim: Mapping[str, Any], jobs: Sequence[Mapping[str, Any]], pods: Sequence[Mapping[str, Any]]
    ) -> list[RepetitionResult]:
        results = []
        for job in jobs:
            if not owned_by(job, sim):
                continue  # a Job of an earlier Simulation of the same name, being garbage-collected
            index_text = (job["metadata"].get("labels") or {}).get(REPETITION_LABEL, "")
            if not index_text.isdigit():
                continue
            job_pods = [
                p
                for p in pods
                if (p["metadata"].get("labels") or {}).get("job-name") == job["metadata"]["name"]
            ]
            results.append(repetition_result(int(index_text), job, job_pods))
        return sorted(results, key=lambda r: r.index)

    async def _start_repetition(
        self, sim: dict[str, Any], spec: SimulationSpec, index: int
    ) -> dict[str, Any]:
        """Create repetition ``index``'s Job (with its replay document's ConfigMap, and the node-pool
        ConfigMap); a bad source fails the run."""
        problem = await self._source_problem(spec)
        if problem:
            return {"phase": "Failed", "message": problem}
        account, namespace = self._settings.service_account, self._settings.namespace
        if await self._cluster.get("v1", "ServiceAccount", namespace, account) is None:
            # without it the Job could create no pod and the Simulation would look Running for ever
            return {
                "phase": "Pending",
                "message": f"waiting for ServiceAccount {namespace}/{account}, which the replayer Jobs "
                f"run as: kubectl apply -k k8s/sim, or start the controller with --service-account",
            }
        config_map = node_pools_config_map(sim, spec, self._settings)
        if config_map is not None:
            await self._create_if_missing(config_map)
        # the Job's replay document (kubetape replay --spec), there before the pod that mounts it
        await self._create_if_missing(replay_config_map(sim, index, spec, self._settings))
        job = replayer_job(sim, index, spec, self._settings)
        if await self._create_if_missing(job):
            await self._event(
                sim, "Normal", "JobCreated", f"repetition {index}: Job {job['metadata']['name']}"
            )
        now = format_time(self._clock())
        return {
            "phase": "Running",
            "message": f"repetition {index} of {spec.repetitions} running",
            "startTime": (sim.get("status") or {}).get("startTime") or now,
        }

    async def _source_problem(self, spec: SimulationSpec) -> str:
        """What makes the source unusable before any Job runs ('' when nothing is known to be wrong)."""
        source, namespace = spec.source, self._settings.namespace
        if isinstance(source, SegmentsSource) and source.claim_name:
            claim = await self._cluster.get("v1", "PersistentVolumeClaim", namespace, source.claim_name)
            if claim is None:
                return (
                    f"spec.source.segments.claimName: PersistentVolumeClaim {source.claim_name!r} does not "
                    f"exist in namespace {namespace!r}; create it (the sink's segment volume) or fix the name"
                )
        return ""

    async def _create_if_missing(self, obj: dict[str, Any]) -> bool:
        try:
            await self._cluster.create(obj)
        except ConflictError:
            return False  # created by an earlier pass whose status write was lost
        return True

    async def _ensure_finalizer(self, sim: dict[str, Any]) -> None:
        finalizers = list(sim["metadata"].get("finalizers") or [])
        if FINALIZER in finalizers:
            return
        meta = sim["metadata"]
        patch = {
            "metadata": {"finalizers": [*finalizers, FINALIZER], "resourceVersion": meta["resourceVersion"]}
        }
        updated = await self._cluster.merge_patch(API_VERSION, KIND, None, meta["name"], patch)
        sim["metadata"] = updated.get("metadata") or meta

    async def _write_status(
        self, sim: dict[str, Any], status: dict[str, Any], results: Sequence[RepetitionResult] = ()
    ) -> None:
        old = sim.get("status") or {}
        status = {k: v for k, v in status.items() if v is not None}
        status["observedGeneration"] = sim["metadata"].get("generation", 0)
        if status == old:
            return
        # a merge patch would merge the repetitions list item by item; send every key, null the dropped
        patch = {**dict.fromkeys(old, None), **status}
        await self._cluster.patch_status(API_VERSION, KIND, sim["metadata"]["name"], patch)
        sim["status"] = status
        if status.get("phase") != old.get("phase"):
            event_type, reason = _PHASE_EVENTS[status["phase"]]
            await self._event(sim, event_type, reason, status.get("message", ""))
        before = {r.get("index"): r.get("phase") for r in old.get("repetitions") or []}
        for result in results:
            if result.phase != "Running" and before.get(result.index) != result.phase:
                detail = result.message or (
                    f"{result.applied} applied, {result.failed} failed, "
                    f"lateness p99 {result.lateness_p99_ms} ms"
                )
                event_type = "Warning" if result.phase == "Failed" else "Normal"
                await self._event(
                    sim, event_type, f"Repetition{result.phase}", f"repetition {result.index}: {detail}"
                )

    async def _event(self, sim: dict[str, Any], event_type: str, reason: str, message: str) -> None:
        log.info("simulation %s: %s: %s", sim["metadata"]["name"], reason, message)
        await self._cluster.record_event(sim, event_type, reason, message)

    # ---- deletion ---------------------------------------------------------------------------------
    async def _clean_up(self, sim: dict[str, Any], jobs: Sequence[Mapping[str, Any]]) -> None:
        """Stop the Jobs and delete every repetition's replayed objects; then let the Simulation go."""
        meta = sim["metadata"]
        finalizers = list(meta.get("finalizers") or [])
        if FINALIZER not in finalizers:
            return
        for job in jobs:
            if not job["metadata"].get("deletionTimestamp"):
                await self._cluster.delete(
                    "batch/v1",
                    "Job",
                    job["metadata"]["namespace"],
                    job["metadata"]["name"],
                    propagation="Background",
                )
        repetitions = (sim.get("spec") or {}).get("repetitions") or MAX_REPETITIONS
        if not isinstance(repetitions, int) or not 1 <= repetitions <= MAX_REPETITIONS:
            repetitions = MAX_REPETITIONS
        names = ",".join(job_name(meta["name"], i) for i in range(1, repetitions + 1))
        selector = f"{REPLAY_LABEL} in ({names})"
        # The replays' namespaces go first, while their virtual nodes still exist: KWOK finishes the
        # deletion of pods on nodes it manages at once, but a pod whose node went first stays
        # Terminating until the pod garbage collector force-deletes it, a minute or more later (the
        # root's foreground deletion would remove nodes and namespaces together). The replayer's own
        # cleanup keeps the same order; this is for a replayer that could not clean up (killed).
        namespaces = await self._cluster.list_objects("v1", "Namespace", label_selector=selector)
        if namespaces:
            for namespace in namespaces:
                if not namespace["metadata"].get("deletionTimestamp"):
                    await self._cluster.delete("v1", "Namespace", None, namespace["metadata"]["name"])
            log.info(
                "simulation %s: waiting for %d replay namespaces to be deleted", meta["name"], len(namespaces)
            )
            return  # the next pass looks again; the roots go once the namespaces are gone
        try:
            roots = await self._cluster.list_objects(
                REPLAY_ROOT_API_VERSION, REPLAY_ROOT_KIND, label_selector=selector
            )
        except UnknownKindError:  # no replay ever created a root here: its CRD comes with the first
            roots = []
        if roots:
            for root in roots:
                if not root["metadata"].get("deletionTimestamp"):
                    await self._cluster.delete(
                        REPLAY_ROOT_API_VERSION,
                        REPLAY_ROOT_KIND,
                        None,
                        root["metadata"]["name"],
                        propagation="Foreground",
                    )
            log.info("simulation %s: waiting for %d replay roots to be deleted", meta["name"], len(roots))
            return  # the next pass looks again; the finalizer stays until every root is gone
        finalizers.remove(FINALIZER)
        patch = {"metadata": {"finalizers": finalizers, "resourceVersion": meta["resourceVersion"]}}
        # deleted or changed meanwhile: the next pass sees the current state
        with contextlib.suppress(NotFoundError, ConflictError):
            await self._cluster.merge_patch(API_VERSION, KIND, None, meta["name"], patch)
        log.info("simulation %s: cleaned up", meta["name"])
