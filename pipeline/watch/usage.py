"""Recording the load: the pods' usage from the Metrics API, per tracked owner, as UsageSamples.

Every ``every_s`` (default 15 s, metrics-server's resolution: sampling faster only repeats its values)
the sampler lists the PodMetrics of every namespace, attributes each pod to the owner its lifecycles are
published under (the shaper's owner resolution: a Deployment's pod to the Deployment, through its
ReplicaSet) and to its pod-template hash, sums each container's usage over the owner's pods, and
publishes one :class:`~pipeline.model.usage.UsageSample` per owner and hash on ``kubetape.usage``, keyed
by the owner (so one owner's samples stay ordered in one partition).

Bad input never stops the watch; each is logged, counted, and where load becomes unknown a *gap* sample
(``gap=True``) says so, so that a replay holds the last load instead of reading zero:

* the Metrics API is not served (404), down (503) or unreachable: one warning per outage
  (``usage_api_errors_total``, ``usage_api_up`` 0), a gap for every owner with recorded load, and
  sampling goes on at its pace until the API answers again (one line says so);
* a pod's usage that does not parse, is negative, exceeds Kubernetes' largest quantity (``1e1000000``:
  see :mod:`pipeline.model.quantity`), or sums to more than the model's bounds: a warning naming the pod
  or owner and the value, cut short (``usage_rejected_total``), and a gap for that owner and hash; the
  other owners of the round are published as usual;
* an owner whose pods are still running but no longer reported: a gap (an owner whose pods are all gone
  gets one last sample of zero pods: its load ended, it is not unknown);
* the watcher itself was down: a watcher that stops publishes a gap for every owner with recorded load
  (:meth:`UsageSampler.stopping`), and a watcher that resumes a recording (it restored the state of an
  earlier run) publishes, before the first sample of each owner once the Metrics API answers, a gap
  dated at its own start (:meth:`UsageSampler.resumed`): the series resumed, the load between the last
  sample of the earlier run and this one is unknown. A crash leaves no stop gap; the resume gap still
  marks the outage's end. A replay holds the last load across such gaps as across any other
  (:mod:`pipeline.replay.hpa.load`) and counts them in its report; the analytics timeline shows the
  load unknown;
* PodMetrics of a pod the watcher does not know (not seen yet, or of a filtered DaemonSet): skipped,
  counted (``usage_pods_skipped_total``) and logged once per pod. Pods in namespaces or with labels
  the tracer config filters out, and pods of owners that are not tracked, are skipped and counted only:
  they are not bad, just not recorded.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from pipeline.formats.wire.usage import encode_usage
from pipeline.io.kafka.message import Record
from pipeline.io.kafka.settings import USAGE_TOPIC
from pipeline.io.metrics import Metrics
from pipeline.model.errors import FormatError
from pipeline.model.keys import ObjectKey, object_key
from pipeline.model.quantity import cpu_millicores, memory_bytes, parse_quantity
from pipeline.model.tracer_config import TracerConfig
from pipeline.model.usage import CONTAINERS_MAX, ContainerUsage, UsageSample
from pipeline.watch.pod_track import template_hash_of
from pipeline.watch.ports import Bus, PodMetricsSource
from pipeline.watch.shaper import Shaper

log = logging.getLogger("kubetape.watcher.usage")

DEFAULT_USAGE_EVERY_S = 15.0
"""metrics-server's resolution: it scrapes every 15 s, so sampling more often only repeats values."""
STOP_GAPS_TIMEOUT_S = 5.0
"""How long a stopping watcher waits for the bus to take its stop gaps (see UsageSampler.stopping)."""
MAX_WARNED_PODS = 10_000
"""Pods whose skipped usage was already logged; beyond this the memory starts over (bounded)."""

OwnerHash = tuple[ObjectKey, str]


@dataclass(frozen=True, slots=True)
class UsageSettings:
    every_s: float = DEFAULT_USAGE_EVERY_S
    """Seconds between samples; 0 turns usage recording off."""


@dataclass(slots=True)
class _Sum:
    """One owner and hash's usage summed so far in a sampling round, exactly (cores, bytes)."""

    pods: int = 0
    containers: dict[str, list[Decimal]] = field(default_factory=dict)


@dataclass(slots=True)
class Attributed:
    """One round's PodMetrics by owner and hash: the sums, the owners whose input was bad (with why),
    and the pods skipped by reason."""

    sums: dict[OwnerHash, _Sum] = field(default_factory=dict)
    bad: dict[OwnerHash, str] = field(default_factory=dict)
    skipped: dict[str, list[ObjectKey]] = field(default_factory=dict)

    def skip(self, reason: str, pod: ObjectKey) -> None:
        self.skipped.setdefault(reason, []).append(pod)


def _pod_usage(item: Mapping[str, Any]) -> dict[str, tuple[Decimal, Decimal]]:
    """One PodMetrics' containers: name → (CPU cores, memory bytes); FormatError names what is wrong."""
    containers = item.get("containers")
    if not isinstance(containers, list) or len(containers) > CONTAINERS_MAX:
        raise FormatError(f"containers are not a list of at most {CONTAINERS_MAX}")
    usage: dict[str, tuple[Decimal, Decimal]] = {}
    for container in containers:
        if not isinstance(container, Mapping) or not isinstance(container.get("name"), str):
            raise FormatError("a container entry has no name")
        values = container.get("usage")
        if not isinstance(values, Mapping):
            raise FormatError(f"container {container['name']!r} has no usage")
        cpu = _quantity(container["name"], "cpu", values)
        memory = _quantity(container["name"], "memory", values)
        if cpu < 0 or memory < 0:
            raise FormatError(f"container {container['name']!r}: negative usage cpu={cpu} memory={memory}")
        usage[container["name"]] = (cpu, memory)
    return usage


def _quantity(container: str, resource: str, values: Mapping[str, Any]) -> Decimal:
    """One resource of one container's usage; FormatError names both and the value (cut short)."""
    try:
        return parse_quantity(values.get(resource, "0"))
    except FormatError as exc:
        raise FormatError(f"container {container!r}: {resource} {exc}") from None


def attribute(items: Iterable[Mapping[str, Any]], shaper: Shaper, config: TracerConfig) -> Attributed:
    """Sums ``items`` (PodMetrics) by the owner and pod-template hash of each pod, as the shaper knows
    them; see the module docstring for what is skipped."""
    out = Attributed()
    for item in items:
        meta = item.get("metadata")
        if not isinstance(meta, Mapping) or not isinstance(meta.get("name"), str):
            out.skip("malformed", ObjectKey("?"))
            continue
        namespace = meta.get("namespace")
        namespace = namespace if isinstance(namespace, str) else None
        labels = meta.get("labels")
        labels = labels if isinstance(labels, Mapping) else {}
        pod = object_key("v1", "Pod", namespace, meta["name"])
        if not config.is_namespace_allowed(namespace) or not config.is_labels_allowed(labels):
            out.skip("filtered", pod)
            continue
        track = shaper.pods.get(pod)
        if track is None:
            out.skip("unknown pod", pod)
            continue
        if track.owner is None:
            out.skip("owner not published yet" if track.waiting_for else "no tracked owner", pod)
            continue
        if track.lifecycle is not None and track.lifecycle.finished:
            out.skip("finished", pod)
            continue
        if not track.template_hash:  # a pod restored after a restart and not observed since
            track.template_hash = template_hash_of(labels)
        which = (track.owner, track.template_hash)
        if which in out.bad:
            continue
        try:
            _add_pod(out.sums.setdefault(which, _Sum()), _pod_usage(item))
        except (FormatError, ArithmeticError) as exc:  # the owner's sums are unknown: a gap, not a round lost
            out.bad[which] = f"pod {pod}: {exc}"
            out.sums.pop(which, None)
    return out


def _add_pod(total: _Sum, usage: Mapping[str, tuple[Decimal, Decimal]]) -> None:
    total.pods += 1
    for name, (cpu, memory) in usage.items():
        sums = total.containers.setdefault(name, [Decimal(0), Decimal(0)])
        sums[0] += cpu
        sums[1] += memory


def sample_of(ts_ms: int, which: OwnerHash, total: _Sum) -> UsageSample:
    """The sample of one owner and hash; FormatError when a sum is out of the model's bounds."""
    containers = tuple(
        ContainerUsage(name, cpu_millicores(cpu), memory_bytes(memory))
        for name, (cpu, memory) in sorted(total.containers.items())
    )
    return UsageSample(ts_ms, which[0], which[1], total.pods, containers)


def gap_of(ts_ms: int, which: OwnerHash) -> UsageSample:
    return UsageSample(ts_ms, which[0], which[1], 0, (), gap=True)


class UsageSampler:
    """Samples usage every ``settings.every_s`` once ``ready()`` (the watch streams have synced: before,
    the shaper does not know the pods yet) until cancelled."""

    def __init__(
        self,
        shaper: Shaper,
        source: PodMetricsSource,
        bus: Bus,
        metrics: Metrics,
        clock: Callable[[], int],
        *,
        settings: UsageSettings | None = None,
        ready: Callable[[], bool] = lambda: True,
    ) -> None:
        self._shaper = shaper
        self._source = source
        self._bus = bus
        self._metrics = metrics
        self._clock = clock
        self._settings = settings or UsageSettings()
        self._ready = ready
        self.recorded: dict[OwnerHash, bool] = {}
        """Owner and hash → whether its last published sample was a gap (absent: none published, or its
        load ended)."""
        self._api_up: bool | None = None  # None until the first answer
        self._resumed_at_ms: int | None = None  # set by resumed() until the first round answered
        self._warned_pods: set[ObjectKey] = set()
        self._warned_bad: set[OwnerHash] = set()
        m = metrics
        m.counter("usage_samples_published_total", "usage samples published on kubetape.usage, by gap")
        m.counter("usage_api_errors_total", "Metrics API requests that failed, by error")
        m.counter("usage_rejected_total", "owners' usage rejected as malformed, negative or absurd")
        m.counter("usage_pods_skipped_total", "PodMetrics not attributed to a tracked owner, by reason")
        m.gauge("usage_api_up", "1 while the Metrics API answers, 0 while it does not")

    def resumed(self, at_ms: int) -> None:
        """This watcher continues an earlier one's recording from ``at_ms`` (its start): the first sample
        of each owner is preceded by a gap at that time (see the module docstring)."""
        self._resumed_at_ms = at_ms

    async def stopping(self, timeout_s: float = STOP_GAPS_TIMEOUT_S) -> list[UsageSample]:
        """The watcher stops: a gap for every owner with recorded load, so the recording says its load
        is unknown from now on (queued on the bus, which is flushed after). Idempotent. A bus that does
        not take them within ``timeout_s`` (Kafka down and its queue full) does not hold the stop up."""
        ts = self._clock()
        gaps = [gap_of(ts, which) for which, gap in self.recorded.items() if not gap]
        try:
            async with asyncio.timeout(timeout_s):
                return await self._publish(gaps)
        except Exception as exc:  # stopping goes on: the resume gap of the next run still marks the outage
            log.warning(
                "the usage gaps of the watcher's stop were not published (%s); the next run's resume "
                "gaps mark the outage",
                type(exc).__name__,
            )
            return []

    async def run(self) -> None:
        every = self._settings.every_s
        while not self._ready():  # noqa: ASYNC110 - readiness is a polled property, not an event
            await asyncio.sleep(min(every, 0.5))
        deadline = time.monotonic()
        while True:
            try:
                await self.sample_once()
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug here must not end the object watch beside it
                self._metrics.inc("usage_api_errors_total", labels={"error": "internal"})
                log.exception("sampling usage failed; trying again in %.0fs", every)
            deadline += every
            await asyncio.sleep(max(0.0, deadline - time.monotonic()))

    async def sample_once(self) -> list[UsageSample]:
        """One round: read, attribute, publish; returns what was published."""
        try:
            items = await self._source.pod_metrics()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # any failure of the Metrics API is a gap in the load, never fatal
            return await self._publish(self._api_down(exc))
        ts = self._clock()
        self._api_answers()
        attributed = attribute(items, self._shaper, self._shaper.config)
        self._count_skipped(attributed.skipped)
        samples: list[UsageSample] = []
        bad = dict(attributed.bad)
        for which, total in attributed.sums.items():
            try:
                samples.append(sample_of(ts, which, total))
            except (FormatError, ArithmeticError) as exc:  # this owner only: the others are published
                bad[which] = str(exc)
        for which, problem in bad.items():
            self._metrics.inc("usage_rejected_total")
            if which not in self._warned_bad:
                self._warned_bad.add(which)
                log.warning(
                    "usage of %s (template %s) rejected, recorded as a gap until it is valid again: %s",
                    which[0],
                    which[1] or "-",
                    problem,
                )
            if self.recorded.get(which) is not True:
                samples.append(gap_of(ts, which))
        self._warned_bad &= set(bad)  # a valid sample ends the streak: warn again at the next
        samples += self._unreported(ts, set(attributed.sums) | set(bad))
        if self._resumed_at_ms is not None:
            samples = self._after_resume(samples, min(self._resumed_at_ms, ts - 1))
            self._resumed_at_ms = None
        return await self._publish(samples)

    def _after_resume(self, samples: list[UsageSample], gap_ms: int) -> list[UsageSample]:
        """``samples`` of the first answered round after a resume, each owner's load preceded by a gap
        at ``gap_ms``: the load since the earlier run's last sample is unknown."""
        resuming = sorted(
            {(s.owner_key, s.template_hash) for s in samples if not s.gap and s.pods} - set(self.recorded)
        )
        return [gap_of(gap_ms, which) for which in resuming] + samples

    def _unreported(self, ts: int, reported: set[OwnerHash]) -> list[UsageSample]:
        """Owners with recorded load and no PodMetrics now: a gap while their pods still run, else a last
        sample of zero pods (their load ended)."""
        missing = [which for which in self.recorded if which not in reported]
        if not missing:
            return []
        running = {
            (track.owner, track.template_hash)
            for track in self._shaper.pods.values()
            if track.owner is not None and not (track.lifecycle is not None and track.lifecycle.finished)
        }
        out: list[UsageSample] = []
        for which in missing:
            if which in running:
                if not self.recorded[which]:
                    out.append(gap_of(ts, which))
            else:
                out.append(UsageSample(ts, which[0], which[1], 0, ()))
        return out

    def _api_down(self, exc: Exception) -> list[UsageSample]:
        self._metrics.inc("usage_api_errors_total", labels={"error": type(exc).__name__})
        self._metrics.set("usage_api_up", 0.0)
        if self._api_up is not False:
            self._api_up = False
            log.warning(
                "the Metrics API (metrics.k8s.io PodMetrics) does not answer (%s: %s); usage is recorded "
                "as a gap for %d owners until it does. Is metrics-server installed and running, and may "
                "the watcher list pods.metrics.k8s.io (k8s/prod/rbac.yaml)?",
                type(exc).__name__,
                exc,
                sum(not gap for gap in self.recorded.values()),
            )
        ts = self._clock()
        return [gap_of(ts, which) for which, gap in self.recorded.items() if not gap]

    def _api_answers(self) -> None:
        self._metrics.set("usage_api_up", 1.0)
        if self._api_up is False:
            log.info("the Metrics API answers again; recording usage")
        self._api_up = True

    def _count_skipped(self, skipped: Mapping[str, list[ObjectKey]]) -> None:
        for reason, pods in skipped.items():
            self._metrics.inc("usage_pods_skipped_total", len(pods), {"reason": reason})
        new = [pod for pod in skipped.get("unknown pod", []) if pod not in self._warned_pods]
        if new:
            if len(self._warned_pods) + len(new) > MAX_WARNED_PODS:
                self._warned_pods.clear()
            self._warned_pods.update(new)
            log.warning(
                "PodMetrics of %d pods the watcher does not know (not seen yet, or of a filtered "
                "DaemonSet) skipped, e.g. %s; a pod seen later is recorded from its next sample",
                len(new),
                ", ".join(new[:3]),
            )

    async def _publish(self, samples: list[UsageSample]) -> list[UsageSample]:
        if not samples:
            return samples
        records = [Record(USAGE_TOPIC, s.owner_key, encode_usage(s), s.ts_ms) for s in samples]
        await self._bus.submit(records)
        for s in samples:
            which = (s.owner_key, s.template_hash)
            if s.gap:
                self.recorded[which] = True
            elif s.pods == 0:
                self.recorded.pop(which, None)  # its load ended
            else:
                self.recorded[which] = False
            self._metrics.inc("usage_samples_published_total", labels={"gap": str(s.gap).lower()})
        return samples
