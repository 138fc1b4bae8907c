"""Reading a Simulation's spec: validated once into a frozen :class:`SimulationSpec`.

The CRD's OpenAPI schema already refuses most bad shapes at admission; this module checks again (the
controller must not trust stored objects: the schema may be older, or validation skipped) and adds what
a schema cannot say, such as whether ``from``/``to`` are times ``kubetape replay`` understands. Every
problem is a :class:`SimulationSpecError` naming the field and what to write instead.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pipeline.io.kafka.settings import EVENTS_TOPIC
from pipeline.model.errors import ConfigError
from pipeline.model.hooks import Hook, parse_hooks_config
from pipeline.model.keys import cluster_id_problem
from pipeline.model.lifecycle_delays import LifecycleDelays, parse_lifecycle_params
from pipeline.model.replay_document import LOAD_MODELS, read_fields
from pipeline.model.speed import SpeedWords, check_speed
from pipeline.model.timespec import check_time, parse_duration
from pipeline.store.store_url import S3Location, parse_store_url

API_GROUP = "kubetape.dev"
API_VERSION = f"{API_GROUP}/v1"
KIND = "Simulation"
PLURAL = "simulations"

MAX_REPETITIONS = 100
_BOOTSTRAP = re.compile(r"^[^\s,:]+:[0-9]+(,[^\s,:]+:[0-9]+)*$")


class SimulationSpecError(ConfigError):
    """A Simulation's spec cannot be run as written; the message names the field and the fix."""


SIMULATION_WORDS = SpeedWords(
    not_positive="spec.speed: {speed!r} must be a number above 0, e.g. 10",
    max_without_lag="spec.maxSpeed: replaying as fast as the cluster keeps up needs spec.maxLag (e.g. 5s), "
    "which measures whether it keeps up",
    lag_not_positive="spec.maxLag: must be a duration above 0, e.g. 5s",
    autoscaled_at_max="spec.autoscaler: its timers are divided by one fixed speed, which spec.maxSpeed "
    "does not have; give spec.speed instead",
    follow_not_at_one="spec.source: a Simulation replays a range, it does not follow a live topic",
    error=SimulationSpecError,
)
"""The speed rules (:mod:`pipeline.model.speed`) in the words of a Simulation's spec."""


@dataclass(frozen=True, slots=True)
class SegmentsSource:
    """A range of the sink's segment store: a claim and/or path, or an object store ``url``
    (``s3://bucket/prefix``) read with the AWS_* keys of the Secret ``credentials_secret``."""

    claim_name: str | None
    path: str | None
    time_from: str
    time_to: str
    url: str | None = None
    credentials_secret: str | None = None
    cluster: str | None = None
    """Which recorded cluster of a fleet's store (``--cluster``); None: the store's only one."""


@dataclass(frozen=True, slots=True)
class TopicSource:
    bootstrap: str
    topic: str
    time_from: str
    time_to: str
    cluster: str | None = None
    """Which recorded cluster of a fleet's topic (``--cluster``); None: the topic's only one."""
    kafka_config_secret: str | None = None
    """A Secret holding ``client.properties`` (and the CA, certificate and key files it names), mounted
    as files in the replayer Job: how it authenticates to a secured Kafka."""


@dataclass(frozen=True, slots=True)
class TraceSource:
    url: str


TraceSourceSpec = SegmentsSource | TopicSource | TraceSource


@dataclass(frozen=True, slots=True)
class NodePool:
    skeleton: Mapping[str, Any]
    count: int


AUTOSCALER_PROVIDERS = ("karpenter",)
"""Autoscalers a replay can run with (``kubetape replay --autoscaler``)."""
NODEPOOL_API_VERSION = "karpenter.sh/v1"


@dataclass(frozen=True, slots=True)
class AutoscalerSpec:
    """``spec.autoscaler``: the provider, its NodePools (created per repetition, timers scaled by the
    speed) and optional prices ($/hour by instance type) for the report's cost."""

    provider: str
    node_pools: tuple[Mapping[str, Any], ...]
    prices: Mapping[str, float] | None = None


POD_AUTOSCALERS = ("hpa",)
"""Pod autoscalers a replay can let decide (``kubetape replay --autoscaler hpa``)."""


@dataclass(frozen=True, slots=True)
class PodAutoscalerSpec:
    """``spec.podAutoscaler``: the simulated cluster's HPA decides the recorded HPAs' owners from the
    recorded load (the cluster must serve the Metrics API over KWOK's emulated kubelet metrics)."""

    provider: str = "hpa"
    load_model: str = "conserve"


REPLAY_SETTINGS = (
    "maxInFlight",
    "qps",
    "sampleInterval",
    "settle",
    "requireFidelity",
    "hookTimeout",
    "hookPassEnv",
)
"""``spec.replay``: the replay document's keys (:mod:`pipeline.model.replay_document`) a Simulation
passes to every repetition's document as written; they have no field of their own."""
SET_BY_SIMULATION = {
    **dict.fromkeys(("trace", "segments", "topic", "from", "to", "cluster", "bootstrap"), "spec.source"),
    "kafkaConfig": "spec.source.topic.kafkaConfigSecret",
    "speed": "spec.speed or spec.maxSpeed",
    "duration": "spec.duration",
    "maxLag": "spec.maxLag",
    "namespacePrefix": "spec.namespacePrefix",
    "expectProfile": "spec.clusterProfile",
    "nodes": "spec.nodePools",
    "autoscalers": "spec.autoscaler or spec.podAutoscaler",
    "loadModel": "spec.podAutoscaler.loadModel",
    "nodepools": "spec.autoscaler.nodePools",
    "prices": "spec.autoscaler.prices",
    **dict.fromkeys(
        ("imagePullDelay", "imagePullJitter", "podStartupDelay", "podStartupJitter"), "spec.lifecycleParams"
    ),
    "hooks": "spec.hooks",
    "name": "the controller: the repetition's Job name",
    "reportJson": "the controller: the Job's termination log",
    "runDir": "the controller: /tmp in the Job",
}
"""The replay document's keys a Simulation writes from its own fields (or the controller sets)."""
NOT_IN_A_SIMULATION = {
    "follow": "a Simulation replays a range; it does not follow a live topic",
    "lag": "a Simulation replays a range; it does not follow a live topic",
    "kubeconfig": "the replayer Job reaches the cluster with its service account",
    "context": "the replayer Job reaches the cluster with its service account",
    "config": "the replayer Job reads the store with the built-in tracer config",
    "keep": "the controller deletes a repetition's objects; pause the Simulation to look at them",
    "crds": "a file in the replayer's image; the trace's own CRDs are installed from the trace",
    "instanceTypes": "a file in the replayer's image; the trace's recorded Nodes give the instance types",
    "hooksFiles": "spec.hooks holds the hooks themselves",
}
"""The replay document's keys a Simulation has no use for, and why (``spec.replay`` refuses them)."""


@dataclass(frozen=True, slots=True)
class SimulationSpec:
    source: TraceSourceSpec
    speed: float = 1.0
    duration_s: float | None = None
    repetitions: int = 1
    namespace_prefix: str | None = None
    node_pools: tuple[NodePool, ...] = ()
    paused: bool = False
    max_lag_s: float | None = None
    """Convergence-aware time scaling (``kubetape replay --max-lag``): None, the clock never waits."""
    max_speed: bool = False
    """``spec.maxSpeed``: replay as fast as the cluster keeps up (``--speed max``; needs ``maxLag``)."""
    cluster_profile: str | None = None
    """``spec.clusterProfile``: the profile the simulation cluster must state (``--expect-profile``)."""
    autoscaler: AutoscalerSpec | None = None
    """``spec.autoscaler``: nodes made by an autoscaler for pending pods (``--autoscaler``)."""
    pod_autoscaler: PodAutoscalerSpec | None = None
    """``spec.podAutoscaler``: the simulated HPA decides (``--autoscaler hpa --load-model``)."""
    hooks: tuple[Hook, ...] = ()
    """``spec.hooks``: SimKube's hooks, run by the replay Job (``--hook``)."""
    lifecycle_delays: LifecycleDelays = field(default_factory=LifecycleDelays)
    """``spec.lifecycleParams``: SimKube's image-pull and pod-startup delays (``--pod-startup-delay`` …)."""
    replay: Mapping[str, Any] = field(default_factory=dict)
    """``spec.replay``: replay document fields (of :data:`REPLAY_SETTINGS`), checked, as written."""


def _duration(text: str, where: str) -> float:
    """Seconds of ``text`` in the one duration grammar (:mod:`pipeline.model.timespec`)."""
    try:
        return parse_duration(text, where)
    except ConfigError as exc:
        raise SimulationSpecError(str(exc)) from None


def _time(text: str, where: str) -> str:
    """``text`` once it is a time ``kubetape replay --from/--to`` reads; resolved when the replay starts."""
    try:
        return check_time(text, where)
    except ConfigError as exc:
        raise SimulationSpecError(str(exc)) from None


def parse_spec(simulation: Mapping[str, Any]) -> SimulationSpec:
    """The validated spec of a Simulation object; SimulationSpecError says which field is wrong."""
    spec = simulation.get("spec")
    if not isinstance(spec, Mapping):
        raise SimulationSpecError("spec: missing; a Simulation needs at least spec.source")
    speed = spec.get("speed", 1.0)
    if not isinstance(speed, int | float) or isinstance(speed, bool):
        raise SimulationSpecError(f"spec.speed: {speed!r} must be a number above 0, e.g. 10")
    repetitions = spec.get("repetitions", 1)
    if not isinstance(repetitions, int) or not 1 <= repetitions <= MAX_REPETITIONS:
        raise SimulationSpecError(
            f"spec.repetitions: {repetitions!r} must be a whole number from 1 to {MAX_REPETITIONS}"
        )
    duration = spec.get("duration")
    max_lag = spec.get("maxLag")
    prefix = spec.get("namespacePrefix")
    if prefix is not None and not isinstance(prefix, str):
        raise SimulationSpecError(f"spec.namespacePrefix: {prefix!r} must be a string")
    max_speed = spec.get("maxSpeed", False)
    if not isinstance(max_speed, bool):
        raise SimulationSpecError(f"spec.maxSpeed: {max_speed!r} must be true or false")
    profile = spec.get("clusterProfile")
    if profile is not None and (not isinstance(profile, str) or not profile):
        raise SimulationSpecError(f"spec.clusterProfile: {profile!r} must be a profile name, e.g. large")
    autoscaler = _parse_autoscaler(spec.get("autoscaler"))
    pod_autoscaler = _parse_pod_autoscaler(spec.get("podAutoscaler"))
    try:
        hooks = parse_hooks_config(spec.get("hooks"), "spec.hooks")
        lifecycle_delays = parse_lifecycle_params(spec.get("lifecycleParams"))
    except ConfigError as exc:
        raise SimulationSpecError(str(exc)) from None
    max_lag_s = None if max_lag is None else _duration(str(max_lag), "spec.maxLag")
    check_speed(
        float(speed),
        max_speed=max_speed,
        max_lag_s=max_lag_s,
        autoscaled=autoscaler is not None or pod_autoscaler is not None,
        words=SIMULATION_WORDS,
    )
    return SimulationSpec(
        source=_parse_source(spec.get("source")),
        speed=float(speed),
        duration_s=None if duration is None else _duration(str(duration), "spec.duration"),
        repetitions=repetitions,
        namespace_prefix=prefix,
        node_pools=_parse_node_pools(spec.get("nodePools") or []),
        paused=bool(spec.get("paused", False)),
        max_lag_s=max_lag_s,
        max_speed=max_speed,
        cluster_profile=profile,
        autoscaler=autoscaler,
        pod_autoscaler=pod_autoscaler,
        hooks=hooks,
        lifecycle_delays=lifecycle_delays,
        replay=_parse_replay(spec.get("replay")),
    )


def _parse_replay(given: Any) -> Mapping[str, Any]:
    """``spec.replay``: document fields passed to every repetition, each read as the replayer will."""
    if given is None:
        return {}
    where = "spec.replay"
    if not isinstance(given, Mapping):
        raise SimulationSpecError(f"{where}: must be an object of {', '.join(REPLAY_SETTINGS)}")
    for key in given:
        if key in SET_BY_SIMULATION:
            raise SimulationSpecError(f"{where}.{key}: a Simulation sets it from {SET_BY_SIMULATION[key]}")
        if key in NOT_IN_A_SIMULATION:
            raise SimulationSpecError(f"{where}.{key}: not for a Simulation: {NOT_IN_A_SIMULATION[key]}")
    try:
        read_fields(given, where)
    except ConfigError as exc:
        raise SimulationSpecError(str(exc)) from None
    return {str(key): value for key, value in given.items() if value is not None}


def _parse_source(source: Any) -> TraceSourceSpec:
    if not isinstance(source, Mapping):
        raise SimulationSpecError("spec.source: missing; give exactly one of segments, topic or traceURL")
    given = [name for name in ("segments", "topic", "traceURL") if source.get(name) is not None]
    if len(given) != 1:
        raise SimulationSpecError(
            f"spec.source: has {', '.join(given) or 'none'}; give exactly one of segments, topic or traceURL"
        )
    if "traceURL" in given:
        url = str(source["traceURL"])
        if not (url.startswith(("http://", "https://", "/"))):
            raise SimulationSpecError(
                f"spec.source.traceURL: {url!r} must be an http(s) URL or an absolute path in the image"
            )
        return TraceSource(url)
    if "segments" in given:
        seg = source["segments"]
        where = "spec.source.segments"
        if not isinstance(seg, Mapping) or not (seg.get("claimName") or seg.get("path") or seg.get("url")):
            raise SimulationSpecError(
                f"{where}: needs claimName (a PVC holding segments), path, or both; or url (s3://bucket/prefix)"
            )
        return SegmentsSource(
            claim_name=seg.get("claimName") or None,
            path=seg.get("path") or None,
            time_from=_time(str(seg.get("from", "")), f"{where}.from"),
            time_to=_time(str(seg.get("to", "")), f"{where}.to"),
            url=_object_store_url(seg, where),
            credentials_secret=seg.get("credentialsSecret") or None,
            cluster=_cluster(seg, where),
        )
    topic = source["topic"]
    where = "spec.source.topic"
    if not isinstance(topic, Mapping) or not _BOOTSTRAP.match(str(topic.get("bootstrap", ""))):
        raise SimulationSpecError(f"{where}.bootstrap: must be host:port[,host:port…], e.g. kafka:9092")
    return TopicSource(
        bootstrap=str(topic["bootstrap"]),
        topic=str(topic.get("topic") or EVENTS_TOPIC),
        time_from=_time(str(topic.get("from", "")), f"{where}.from"),
        time_to=_time(str(topic.get("to", "")), f"{where}.to"),
        cluster=_cluster(topic, where),
        kafka_config_secret=topic.get("kafkaConfigSecret") or None,
    )


def _cluster(source: Mapping[str, Any], where: str) -> str | None:
    """``cluster``: one recorded cluster of a fleet's store or topic, checked by the rule the sink
    writes it with, so a typo is refused here rather than by every repetition's Job."""
    cluster = source.get("cluster")
    if cluster is None:
        return None
    problem = cluster_id_problem(cluster)
    if problem is not None:
        raise SimulationSpecError(f"{where}.cluster: {problem}")
    return str(cluster)


def _object_store_url(seg: Mapping[str, Any], where: str) -> str | None:
    url = seg.get("url")
    if not url:
        if seg.get("credentialsSecret"):
            raise SimulationSpecError(f"{where}.credentialsSecret: only used with url (s3://bucket/prefix)")
        return None
    if seg.get("claimName") or seg.get("path"):
        raise SimulationSpecError(f"{where}: give url or claimName/path, not both")
    try:
        location = parse_store_url(str(url), what=f"{where}.url")
    except ConfigError as exc:
        raise SimulationSpecError(str(exc)) from None
    if not isinstance(location, S3Location):
        raise SimulationSpecError(
            f"{where}.url: {url!r} is not an object store URL; use path for a directory"
        )
    return str(location)


def _parse_node_pools(pools: Any) -> tuple[NodePool, ...]:
    if not isinstance(pools, list):
        raise SimulationSpecError("spec.nodePools: must be a list of {skeleton, count}")
    parsed = []
    for i, pool in enumerate(pools):
        where = f"spec.nodePools[{i}]"
        skeleton = pool.get("skeleton") if isinstance(pool, Mapping) else None
        if not isinstance(skeleton, Mapping) or skeleton.get("kind") != "Node":
            raise SimulationSpecError(f"{where}.skeleton: must be an object of kind: Node")
        count = pool.get("count")
        if not isinstance(count, int) or count < 1:
            raise SimulationSpecError(f"{where}.count: {count!r} must be a whole number ≥ 1")
        parsed.append(NodePool(skeleton, count))
    return tuple(parsed)


def _parse_pod_autoscaler(given: Any) -> PodAutoscalerSpec | None:
    if given is None:
        return None
    where = "spec.podAutoscaler"
    if not isinstance(given, Mapping):
        raise SimulationSpecError(f"{where}: must be an object, e.g. {{provider: hpa, loadModel: conserve}}")
    provider = given.get("provider", "hpa")
    if provider not in POD_AUTOSCALERS:
        raise SimulationSpecError(
            f"{where}.provider: {provider!r} is not supported; use {', '.join(POD_AUTOSCALERS)}"
        )
    model = given.get("loadModel", "conserve")
    if model not in LOAD_MODELS:
        raise SimulationSpecError(
            f"{where}.loadModel: {model!r} is not a load model; use {' or '.join(LOAD_MODELS)}"
        )
    return PodAutoscalerSpec(str(provider), str(model))


def _parse_autoscaler(autoscaler: Any) -> AutoscalerSpec | None:
    if autoscaler is None:
        return None
    where = "spec.autoscaler"
    if not isinstance(autoscaler, Mapping):
        raise SimulationSpecError(f"{where}: must be an object with provider and nodePools")
    provider = autoscaler.get("provider", "karpenter")
    if provider not in AUTOSCALER_PROVIDERS:
        raise SimulationSpecError(
            f"{where}.provider: {provider!r} is not supported; use {', '.join(AUTOSCALER_PROVIDERS)}"
        )
    pools = autoscaler.get("nodePools")
    if not isinstance(pools, list) or not pools:
        raise SimulationSpecError(f"{where}.nodePools: give at least one Karpenter NodePool object")
    for i, pool in enumerate(pools):
        if (
            not isinstance(pool, Mapping)
            or pool.get("apiVersion") != NODEPOOL_API_VERSION
            or pool.get("kind") != "NodePool"
            or not (pool.get("metadata") or {}).get("name")
        ):
            raise SimulationSpecError(
                f"{where}.nodePools[{i}]: must be a NodePool (apiVersion: {NODEPOOL_API_VERSION}, kind: "
                f"NodePool) with metadata.name"
            )
    prices = autoscaler.get("prices")
    if prices is not None and (
        not isinstance(prices, Mapping)
        or not all(isinstance(v, int | float) and not isinstance(v, bool) and v >= 0 for v in prices.values())
    ):
        raise SimulationSpecError(
            f"{where}.prices: must map instance types to non-negative $/hour, e.g. kwok-standard-4: 0.192"
        )
    return AutoscalerSpec(
        provider=str(provider),
        node_pools=tuple(pools),
        prices=None if prices is None else {str(k): float(v) for k, v in prices.items()},
    )
