"""Object keys and GVK strings: the stable names every stage uses for a Kubernetes object.

* An :data:`ObjectKey` is ``group/Kind/namespace/name``: the Kafka message key of every event about the
  object (behind its cluster's id in a fleet, :func:`message_key`), so one object's changes stay
  ordered in one partition. The core API group is spelled ``core``
  and a cluster-scoped object's namespace is spelled ``_`` (neither is a valid group or namespace name,
  so keys never collide). The version is deliberately not part of the key: an object keeps its identity
  when it is read through another API version.
* A :class:`GroupVersionKind` is SimKube's ``group/version.Kind`` string form (``apps/v1.Deployment``;
  the core group is written ``v1.Pod`` and ``/v1.Pod`` is accepted on input), used by tracer configs and
  SimKube trace indexes.

Malformed input raises :class:`~pipeline.model.errors.FormatError` naming the offending string.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NewType

from pipeline.model.errors import FormatError

ObjectKey = NewType("ObjectKey", str)
"""``group/Kind/namespace/name``; see the module docstring."""

CORE_GROUP = "core"
"""How the core ("") API group is spelled inside an :data:`ObjectKey`."""

CLUSTER_SCOPE = "_"
"""How the namespace of a cluster-scoped object is spelled inside an :data:`ObjectKey`."""

ANY_NAME = "*"
"""Namespace and name of a kind-wide key (:func:`kind_key`), e.g. for gap markers of one watch."""


def is_object_key(key: object) -> bool:
    """Whether ``key`` is a well-formed :data:`ObjectKey`: a string of exactly four non-empty parts
    separated by ``/`` (a kind-wide key's ``*`` parts included).

    The one rule for keys, applied wherever a key enters or is read: on construction and decoding of
    every event (so the sink's ingest check refuses other keys to the dead-letter topic), by
    :func:`parse_object_key` (exports, analytics), and byte for byte by the sink's C scanner
    (``pipeline/formats/wire/_wirescan.c``, compared with this one in ``tests/unit/test_wire_native.py``).
    Kubernetes itself never produces a name, namespace or kind that is empty or holds a ``/``."""
    return (
        isinstance(key, str) and key.count("/") == 3 and key[0] != "/" and key[-1] != "/" and "//" not in key
    )


def key_problem(key: object) -> str | None:
    """Why ``key`` is not an :data:`ObjectKey` (:func:`is_object_key`), or None."""
    if is_object_key(key):
        return None
    return f"must be group/Kind/namespace/name (four non-empty parts), got {key!r}"


def group_of(api_version: str) -> str:
    """The API group of an ``apiVersion`` (``""`` for the core group: ``v1``)."""
    group, sep, _version = api_version.rpartition("/")
    return group if sep else ""


def version_of(api_version: str) -> str:
    """The version part of an ``apiVersion`` (``apps/v1`` → ``v1``)."""
    return api_version.rpartition("/")[2]


def object_key(api_version: str, kind: str, namespace: str | None, name: str) -> ObjectKey:
    """The stable key of an object: ``group/Kind/namespace/name``.

    ``namespace`` ``None`` or ``""`` means cluster-scoped. Raises FormatError if a part is empty or
    contains ``/`` (Kubernetes never produces such names, so this is a caller bug or corrupt input).
    """
    group = group_of(api_version) or CORE_GROUP
    ns = namespace or CLUSTER_SCOPE
    for label, part in (("apiVersion", api_version), ("kind", kind), ("name", name)):
        if not part:
            raise FormatError(f"cannot build an object key: empty {label} (kind={kind!r}, name={name!r})")
    for label, part in (("kind", kind), ("namespace", ns), ("name", name)):
        if "/" in part:
            raise FormatError(f"cannot build an object key: {label} {part!r} contains '/'")
    return ObjectKey(f"{group}/{kind}/{ns}/{name}")


def kind_key(api_version: str, kind: str) -> ObjectKey:
    """A key standing for a whole kind (``group/Kind/*/*``), e.g. for a watch's gap marker."""
    group = group_of(api_version) or CORE_GROUP
    if not kind or "/" in kind:
        raise FormatError(f"cannot build a kind key from kind {kind!r}")
    return ObjectKey(f"{group}/{kind}/{ANY_NAME}/{ANY_NAME}")


@dataclass(frozen=True, slots=True)
class ParsedObjectKey:
    """The parts of an :data:`ObjectKey`.

    ``group`` is ``""`` for the core group and ``namespace`` is ``None`` for cluster-scoped objects.
    """

    group: str
    kind: str
    namespace: str | None
    name: str

    @property
    def namespaced_name(self) -> str:
        """SimKube's ``namespace/name`` (just ``name`` for cluster-scoped objects)."""
        return f"{self.namespace}/{self.name}" if self.namespace is not None else self.name


def parse_object_key(key: str) -> ParsedObjectKey:
    """Split an :data:`ObjectKey` into its parts. Raises FormatError naming the key if malformed."""
    if not is_object_key(key):
        raise FormatError(f"malformed object key {key!r}: expected group/Kind/namespace/name")
    group, kind, ns, name = key.split("/")
    return ParsedObjectKey(
        group="" if group == CORE_GROUP else group,
        kind=kind,
        namespace=None if ns == CLUSTER_SCOPE else ns,
        name=name,
    )


def key_of(obj: Mapping[str, Any]) -> ObjectKey:
    """The :data:`ObjectKey` of an object body (needs ``apiVersion``, ``kind``, ``metadata.name``)."""
    meta = obj.get("metadata")
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    if not isinstance(meta, dict) or not isinstance(api_version, str) or not isinstance(kind, str):
        raise FormatError(f"object lacks apiVersion/kind/metadata: {_describe(obj)}")
    name, ns = meta.get("name"), meta.get("namespace")
    if not isinstance(name, str) or not (ns is None or isinstance(ns, str)):
        raise FormatError(f"object lacks a string metadata.name: {_describe(obj)}")
    return object_key(api_version, kind, ns, name)


def _describe(obj: Mapping[str, Any]) -> str:
    return f"apiVersion={obj.get('apiVersion')!r} kind={obj.get('kind')!r}"


@dataclass(frozen=True, slots=True, order=True)
class GroupVersionKind:
    """A Kubernetes group/version/kind; ``group`` is ``""`` for the core group."""

    group: str
    version: str
    kind: str

    @classmethod
    def parse(cls, text: str) -> GroupVersionKind:
        """Parse SimKube's ``group/version.Kind`` (also ``v1.Pod`` and ``/v1.Pod`` for core kinds)."""
        group_version, dot, kind = text.rpartition(".")
        group, _slash, version = group_version.rpartition("/")
        if not dot or not kind or not version or "/" in kind or "/" in group:
            raise FormatError(f"malformed GVK {text!r}: expected group/version.Kind, e.g. apps/v1.Deployment")
        return cls(group=group, version=version, kind=kind)

    @classmethod
    def from_api_version(cls, api_version: str, kind: str) -> GroupVersionKind:
        """The GVK of an object with this ``apiVersion`` and ``kind``."""
        return cls(group=group_of(api_version), version=version_of(api_version), kind=kind)

    @property
    def api_version(self) -> str:
        """``apps/v1``, or ``v1`` for the core group."""
        return f"{self.group}/{self.version}" if self.group else self.version

    def format(self) -> str:
        """SimKube's string form: ``apps/v1.Deployment``, ``v1.Pod``."""
        return f"{self.api_version}.{self.kind}"

    def __str__(self) -> str:
        return self.format()


# ---- fleets: which cluster an event belongs to --------------------------------------------------------
ClusterId = NewType("ClusterId", str)
"""Names one recorded cluster in a fleet: by default the UID of its ``kube-system`` namespace (stable for
the cluster's life, unique across clusters), or a name the operator configures (``--cluster-id``)."""

DEFAULT_CLUSTER = ClusterId("default")
"""The cluster of every message without a cluster header and every segment at the root of a store: all
recordings made before fleets existed. A watcher given ``--cluster-id default`` writes exactly as those
did (unprefixed keys, no header), so it continues such a recording."""

CLUSTER_ID_MAX = 63
_CLUSTER_ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-._")


def cluster_id_problem(text: object) -> str | None:
    """Why ``text`` is not a usable :data:`ClusterId`, or None. It names a Kafka key prefix and a
    directory or object-store prefix, so: 1-63 lowercase letters, digits, ``-``, ``.`` or ``_``, starting
    and ending with a letter or digit (a Kubernetes UID qualifies)."""
    if not isinstance(text, str) or not 1 <= len(text) <= CLUSTER_ID_MAX:
        return f"must be 1-{CLUSTER_ID_MAX} characters, got {text!r}"
    if not set(text) <= _CLUSTER_ID_CHARS or not (text[0].isalnum() and text[-1].isalnum()):
        return (
            f"must be lowercase letters, digits, '-', '.' or '_', starting and ending with a letter or digit "
            f"(e.g. prod-eu-1 or the kube-system namespace UID), got {text!r}"
        )
    return None


def parse_cluster_id(text: str, where: str = "cluster id") -> ClusterId:
    """``text`` as a :data:`ClusterId`; raises FormatError naming ``where`` and the rule otherwise."""
    problem = cluster_id_problem(text)
    if problem is not None:
        raise FormatError(f"{where}: {problem}")
    return ClusterId(text)


def message_key(cluster: ClusterId, key: str) -> str:
    """The Kafka message key of ``key`` (an object key or a resume key) recorded from ``cluster``:
    ``<cluster>/<key>``, so two clusters' objects never share a key, in the events topic or in the
    compaction of the state and resume topics. The default cluster's keys stay unprefixed (old
    recordings). Parsed back by :func:`split_message_key`."""
    return key if cluster == DEFAULT_CLUSTER else f"{cluster}/{key}"


def split_message_key(message: str, cluster: ClusterId) -> str | None:
    """The key inside ``message``, a key :func:`message_key` wrote for ``cluster`` (the record's cluster
    header says which cluster wrote it: the default cluster's keys carry no prefix to tell), or None if
    it lacks ``cluster``'s prefix."""
    if cluster == DEFAULT_CLUSTER:
        return message
    prefix = f"{cluster}/"
    return message[len(prefix) :] if message.startswith(prefix) else None
