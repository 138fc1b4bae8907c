"""The watcher: one list+watch stream per tracked kind plus one on all pods, feeding the shaper and the bus.

Each stream continues from its resume point (the last resourceVersion stored in ``kubetape.watch-resume``)
when there is one, and otherwise lists first. When a watch cannot continue — 410 Gone / expired
resourceVersion, or a dropped connection — the stream re-lists, publishes the differences against what was
already published (applies for changed objects, deletes for vanished ones) and a ``GAP`` event naming the
old and new resourceVersion. It never resumes silently from an expired version.

An observation that cannot be shaped (an object of unexpected shape) is counted and logged, and the stream
goes on: one odd object must never stop the recording.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import orjson

from pipeline.formats.wire.codec import encode_event
from pipeline.io.kafka.message import Record
from pipeline.io.kafka.settings import EVENTS_TOPIC, RESUME_TOPIC
from pipeline.io.kube.types import ApiResource, ResourceVersion, WatchEvent
from pipeline.io.metrics import Metrics
from pipeline.model.errors import ConfigError, FormatError, GoneError, TransientError, WatchBrokenError
from pipeline.model.events import Event
from pipeline.model.keys import GroupVersionKind, ObjectKey, key_of, kind_key
from pipeline.model.tracer_config import TracerConfig
from pipeline.watch.ports import Bus, Cluster, PodMetricsSource
from pipeline.watch.shaper import Shaped, Shaper
from pipeline.watch.usage import UsageSampler, UsageSettings

log = logging.getLogger("kubetape.watcher")

POD_GVK = GroupVersionKind("", "v1", "Pod")
RV_PREFIX = "rv/"
"""Resume-topic key prefix of a stream's last resourceVersion (value: ``{"v": 1, "rv": "…"}``)."""
RESUME_VERSION = 1


def wall_ms() -> int:
    """Event time: the watcher's wall clock at receipt, in milliseconds (SimKube uses seconds)."""
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class WatchSettings:
    """How the streams pace themselves."""

    resume_every_s: float = 1.0
    """A stream stores its resourceVersion at most this often (and on every bookmark); a restart replays
    at most this much, which the shaper's de-duplication absorbs."""
    retry_min_s: float = 0.5
    retry_max_s: float = 15.0
    usage: UsageSettings = field(default_factory=UsageSettings)
    """How often the pods' usage is sampled (with a ``pod_metrics`` source; see pipeline.watch.usage)."""


@dataclass(slots=True)
class _Stream:
    res: ApiResource
    tracked: bool  # objects of this kind are published
    lifecycles: bool  # this is the pod stream (lifecycles derived)
    resume_key: str
    rv: ResourceVersion | None = None
    last_resume_write: float = 0.0
    synced: bool = False


def encode_resume(rv: str) -> bytes:
    return orjson.dumps({"v": RESUME_VERSION, "rv": rv})


def decode_resume(value: bytes) -> str | None:
    """The resourceVersion of a resume record, or None for an unknown version (then the stream re-lists)."""
    try:
        doc = orjson.loads(value)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(doc, dict) or doc.get("v") != RESUME_VERSION or not isinstance(doc.get("rv"), str):
        return None
    rv: str = doc["rv"]
    return rv


class Watcher:
    """Runs every stream until :meth:`stop`; :attr:`ready` once each has listed or resumed."""

    def __init__(
        self,
        config: TracerConfig,
        cluster: Cluster,
        bus: Bus,
        metrics: Metrics,
        *,
        settings: WatchSettings | None = None,
        clock: Callable[[], int] = wall_ms,
        pod_metrics: PodMetricsSource | None = None,
    ) -> None:
        """``pod_metrics``: where the pods' usage is read (the Metrics API); None records no usage."""
        self.config = config
        self.shaper = Shaper(config, cluster)
        self._cluster = cluster
        self._bus = bus
        self._metrics = metrics
        self._settings = settings or WatchSettings()
        self._clock = clock
        self._resume: dict[str, str] = {}
        self._streams: list[_Stream] = []
        self._tasks: list[asyncio.Task[None]] = []
        self.usage: UsageSampler | None = None
        if pod_metrics is not None and self._settings.usage.every_s > 0:
            self.usage = UsageSampler(
                self.shaper,
                pod_metrics,
                bus,
                metrics,
                clock,
                settings=self._settings.usage,
                ready=lambda: self.ready,
            )
        self._declare_metrics()

    def _declare_metrics(self) -> None:
        m = self._metrics
        m.counter("events_published_total", "events published on kubetape.events, by kind and type")
        m.counter("relists_total", "re-lists after a watch could not continue, by kind and reason")
        m.counter("watch_errors_total", "watch streams that broke or expired, by kind and error")
        m.counter("malformed_objects_total", "observations skipped because of an unexpected shape, by kind")
        m.gauge("watch_streams_synced", "streams that have listed or resumed")

    @property
    def ready(self) -> bool:
        return bool(self._streams) and all(s.synced for s in self._streams)

    def restore(self, state: dict[str, bytes], resume: dict[str, bytes]) -> None:
        """What earlier runs published (from the compacted topics), before :meth:`run`."""
        skipped = self.shaper.restore(state, resume)
        if self.usage is not None and (state or resume):
            # an earlier run recorded here: the load series resume, after an outage (pipeline.watch.usage)
            self.usage.resumed(self._clock())
        if skipped:
            log.warning("skipped %d undecodable state/resume records", skipped)
        for key, value in resume.items():
            if key.startswith(RV_PREFIX):
                rv = decode_resume(value)
                if rv is not None:
                    self._resume[key] = rv
        log.info(
            "restored %d objects, %d pod lifecycles, %d resume points",
            len(self.shaper.index),
            len(self.shaper.pods),
            len(self._resume),
        )

    async def _resolve_streams(self) -> list[_Stream]:
        streams: list[_Stream] = []
        gvks = [entry.gvk for entry in self.config.tracked]
        if POD_GVK not in gvks:
            gvks.append(POD_GVK)
        for gvk in gvks:
            res = await self._cluster.resolve(gvk)
            if res is None:
                raise ConfigError(
                    f"tracer config {self.config.source}: {gvk} is not served by the API server; "
                    f"install its CustomResourceDefinition or remove it from trackedObjects"
                )
            tracked = self.config.tracked_kind(gvk) is not None
            key = RV_PREFIX + kind_key(res.api_version, res.kind)
            streams.append(_Stream(res, tracked, gvk == POD_GVK, key, self._resume_rv(key)))
        return streams

    def _resume_rv(self, key: str) -> ResourceVersion | None:
        rv = self._resume.get(key)
        return ResourceVersion(rv) if rv else None

    async def run(self) -> None:
        """Start every stream and wait for them (they run until :meth:`stop` or a fatal error)."""
        self._streams = await self._resolve_streams()
        self._tasks = [
            asyncio.create_task(self._run_stream(s), name=f"watch {s.res.label}") for s in self._streams
        ]
        if self.usage is not None:
            self._tasks.append(asyncio.create_task(self.usage.run(), name="sample usage"))
        try:
            await asyncio.gather(*self._tasks)
        finally:
            await self.stop()

    async def stop(self) -> None:
        """Stop reading (intake); units already submitted stay with the bus to be flushed."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.usage is not None:
            await self.usage.stopping()  # the load is unknown from here until a next run resumes it

    # ---- one stream ------------------------------------------------------------------------------
    async def _run_stream(self, s: _Stream) -> None:
        delay = self._settings.retry_min_s
        pending_reason: str | None = None if s.rv is not None else "initial"
        while True:
            try:
                if pending_reason is not None:
                    await self._relist(s, pending_reason)
                    pending_reason = None
                self._mark_synced(s)
                assert s.rv is not None
                async for event in self._cluster.watch_objects(s.res, s.rv):
                    await self._handle(s, event)
                    delay = self._settings.retry_min_s
                # the server ended the watch (its timeout): resume from the last version seen
            except GoneError as exc:
                self._metrics.inc("watch_errors_total", labels={"kind": s.res.label, "error": "expired"})
                log.warning("watch %s from %s expired (%s); re-listing", s.res.label, s.rv, exc)
                pending_reason = "expired"
            except WatchBrokenError as exc:
                self._metrics.inc("watch_errors_total", labels={"kind": s.res.label, "error": "broken"})
                log.warning("watch %s broken (%s); re-listing in %.1fs", s.res.label, exc, delay)
                pending_reason = pending_reason or "broken"
                await asyncio.sleep(delay)
                delay = min(delay * 2, self._settings.retry_max_s)

    def _mark_synced(self, s: _Stream) -> None:
        if not s.synced:
            s.synced = True
            # a float: Metrics renders values with float.is_integer (ints lack it before Python 3.12)
            synced = float(sum(x.synced for x in self._streams))
            self._metrics.set("watch_streams_synced", synced)

    async def _handle(self, s: _Stream, event: WatchEvent) -> None:
        ts = self._clock()
        shaped = Shaped()
        if event.type != "BOOKMARK":
            shaped = await self._shape(s, event.type, event.obj, ts)
            if log.isEnabledFor(logging.DEBUG):
                meta = event.obj.get("metadata")
                name = meta.get("name") if isinstance(meta, dict) else None
                published = [f"{e.type.value} {e.key}" for e in shaped.events]
                log.debug(
                    "%s %s %s rv=%s -> %s", s.res.label, event.type, name, event.resource_version, published
                )
        if event.resource_version:
            s.rv = event.resource_version
        now = time.monotonic()
        if event.type == "BOOKMARK" or now - s.last_resume_write >= self._settings.resume_every_s:
            s.last_resume_write = now
            shaped.records.append(Record(RESUME_TOPIC, s.resume_key, encode_resume(s.rv or ""), ts))
        await self._submit(s, shaped)

    async def _shape(self, s: _Stream, event_type: str, obj: dict[str, object], ts: int) -> Shaped:
        try:
            # the pod side first: its owner lookup may fail transiently, and must do so before the object
            # side has recorded anything as published
            out = await self.shaper.observe_pod(event_type, obj, ts) if s.lifecycles else Shaped()
            if s.tracked:
                out.extend(self.shaper.observe_object(event_type, obj, ts))
        except TransientError:
            raise  # the API server is unreachable: the stream re-lists, which recovers this observation
        except Exception as exc:  # any odd shape is skipped, counted and logged; never fatal
            self._metrics.inc("malformed_objects_total", labels={"kind": s.res.label})
            log.warning(
                "skipped a %s %s of unexpected shape (%s: %s)",
                s.res.label,
                event_type,
                type(exc).__name__,
                exc,
            )
            return Shaped()
        return out

    async def _submit(self, s: _Stream, shaped: Shaped) -> None:
        if not shaped.records:
            return
        await self._bus.submit(shaped.records)
        for e in shaped.events:
            self._metrics.inc("events_published_total", labels={"kind": s.res.label, "type": e.type.value})

    async def _relist(self, s: _Stream, reason: str) -> None:
        """List ``s``'s kind and publish the differences as one unit: a ``GAP`` first when something was
        recorded before, then what each page shows, then the deletions of what no page listed, then the
        resume point.

        Each page is shaped as it arrives and dropped: what is kept across pages is the records to
        publish, the keys listed (to find deletions) and the resourceVersion, never the listed objects
        (10.5 KiB a pod parsed; a 50,000-pod list would need 512 MiB). A list that fails after pages
        were shaped publishes what they showed (the shaper counts it as published) without deletions
        or resume point, then re-raises: the stream lists again."""
        old_rv = s.rv
        ts = 0
        gap_due = False
        to_rv: ResourceVersion | None = None
        out = Shaped()
        present: list[ObjectKey] = []
        try:
            async for page in self._cluster.list_pages(s.res):
                if to_rv is None:  # the first page: the time and the gap as when the list was whole
                    ts = self._clock()
                    gap_due = old_rv is not None or (s.tracked and self._has_published(s.res))
                if page.restarted:  # a fresh snapshot: deletions are judged against it alone, at its time
                    present = []
                    ts = self._clock()
                to_rv = page.resource_version
                for item in page.items:
                    with contextlib.suppress(FormatError):  # counted and logged by _shape below
                        present.append(key_of(item))
                    out.extend(await self._shape(s, "ADDED", item, ts))
                del page  # one page at a time: the next replaces it
        except Exception:
            if out.records and to_rv is not None:
                if gap_due:
                    self._prepend_gap(s, out, reason=reason, old_rv=old_rv, to_rv=to_rv, ts=ts)
                await self._submit(s, out)
            raise
        if to_rv is None:
            raise WatchBrokenError(f"listing {s.res.label} ended without a page")
        if gap_due:
            self._prepend_gap(s, out, reason=reason, old_rv=old_rv, to_rv=to_rv, ts=ts)
            self._metrics.inc("relists_total", labels={"kind": s.res.label, "reason": reason})
            log.warning("%s re-listed after %s: gap from %s to %s", s.res.label, reason, old_rv, to_rv)
        if s.tracked:
            out.extend(self.shaper.vanished(s.res.group, s.res.kind, present, ts))
        if s.lifecycles:
            out.extend(self.shaper.pods_vanished(present, ts))
        s.rv = to_rv
        s.last_resume_write = time.monotonic()
        out.records.append(Record(RESUME_TOPIC, s.resume_key, encode_resume(s.rv), ts))
        await self._submit(s, out)

    @staticmethod
    def _prepend_gap(
        s: _Stream,
        out: Shaped,
        *,
        reason: str,
        old_rv: ResourceVersion | None,
        to_rv: ResourceVersion,
        ts: int,
    ) -> None:
        """The ``GAP`` from ``old_rv`` to the list's version, ahead of what the list showed."""
        gap = Event.gap(
            ts, kind_key(s.res.api_version, s.res.kind), reason=reason, from_rv=old_rv, to_rv=to_rv
        )
        out.events.insert(0, gap)
        out.records.insert(0, Record(EVENTS_TOPIC, gap.key, encode_event(gap), ts))

    def _has_published(self, res: ApiResource) -> bool:
        prefix = f"{res.group or 'core'}/{res.kind}/"
        return any(k.startswith(prefix) for k in self.shaper.index)
