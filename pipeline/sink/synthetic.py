"""A deterministic synthetic workload for sink tests and benchmarks (no watcher or cluster needed).

Deployments are created, scaled (spec changes) and deleted; each has pods with lifecycles. Objects look
like sanitized Kubernetes objects, spec hashes are computed as SimKube computes them.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Iterator
from typing import Any

from pipeline.model.events import Event
from pipeline.model.hashing import object_spec_hash
from pipeline.model.keys import ObjectKey, object_key


def deployment(
    namespace: str, name: str, replicas: int, labels: dict[str, str] | None = None
) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {"app": name}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "containers": [
                        {
                            "name": "main",
                            "image": "registry.example/app:1.0",
                            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
                        }
                    ]
                },
            },
        },
    }


_HASHES: dict[tuple[str, int], int] = {}


FAST_HASHES = False
"""Benchmarks set this to replace SimKube's pure-Python spec hash (~0.1 ms per object) by a CRC."""


def _spec_hash(key: str, obj: dict[str, Any]) -> int:
    # The pure-Python SimKube hash dominates generation time; a workload repeats (key, replicas) a lot.
    replicas = int(obj.get("spec", {}).get("replicas", -1))
    if FAST_HASHES:
        return zlib.crc32(f"{key}/{replicas}".encode())
    cache_key = (key, replicas)
    if cache_key not in _HASHES:
        _HASHES[cache_key] = object_spec_hash(obj)
    return _HASHES[cache_key]


def applied(ts_ms: int, obj: dict[str, Any], rv: int) -> Event:
    meta = obj["metadata"]
    key = object_key(obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"])
    return Event.applied(ts_ms, key, obj, _spec_hash(key, obj), uid=f"uid-{key}", resource_version=str(rv))


def deleted(ts_ms: int, obj: dict[str, Any], rv: int) -> Event:
    meta = obj["metadata"]
    key = object_key(obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"])
    return Event.deleted(ts_ms, key, obj, uid=f"uid-{key}", resource_version=str(rv))


def synthetic_events(
    count: int, start_ms: int, duration_ms: int, *, seed: int = 7, namespaces: int = 4
) -> list[Event]:
    """``count`` events spread over ``[start_ms, start_ms + duration_ms)``, sorted by time."""
    rng = random.Random(seed)
    events: list[Event] = []
    live: dict[ObjectKey, dict[str, Any]] = {}
    keys: list[ObjectKey] = []  # the live keys, for O(1) random picks (a set would not be deterministic)
    rv = 1000
    step = max(duration_ms // max(count, 1), 1)
    for i, ts in zip(range(count), _times(start_ms, step), strict=False):
        rv += 1
        ns = f"ns-{rng.randrange(namespaces)}"
        roll = rng.random()
        if live and roll < 0.15:
            at = rng.randrange(len(keys))
            key = keys[at]
            keys[at] = keys[-1]
            keys.pop()
            events.append(deleted(ts, live.pop(key), rv))
        elif live and roll < 0.30:
            key = rng.choice(keys)
            owner = live[key]
            pod_key = ObjectKey(f"core/Pod/{owner['metadata']['namespace']}/{owner['metadata']['name']}-{i}")
            events.append(
                Event.pod_lifecycle(
                    ts,
                    pod_key,
                    owner_key=key,
                    pod_spec_hash=_spec_hash(key, owner) ^ 0x5BD1E995,
                    start_ms=ts - 1000 if ts >= 1000 else ts,
                    end_ms=None if rng.random() < 0.5 else ts,
                    uid=f"uid-{pod_key}",
                )
            )
        elif live and roll < 0.60:
            key = rng.choice(keys)
            old = live[key]
            obj = deployment(old["metadata"]["namespace"], old["metadata"]["name"], rng.randrange(1, 20))
            live[key] = obj
            events.append(applied(ts, obj, rv))
        else:
            obj = deployment(ns, f"app-{i}", rng.randrange(1, 10))
            e = applied(ts, obj, rv)
            live[e.key] = obj
            keys.append(e.key)
            events.append(e)
    return events


def _times(start_ms: int, step: int) -> Iterator[int]:
    ts = start_ms
    while True:
        yield ts
        ts += step
