"""Codec benchmark: events per CPU-second and bytes per event of every kubetape encoding, against
plain JSON and against SimKube's v2 msgpack trace holding the same content.

Run: ``.venv/bin/python -m bench.bench_codec [--deployments N] [--repeats R] [--zstd-grid]``. Prints one
JSON object.

The workload is a synthetic but realistic cluster history: Deployments (sanitized, with full pod
templates) created, scaled and rolled out, their pods' lifecycles (running, then finished), a few
deletions and a gap marker. Rates use process CPU time, best of ``--repeats`` runs, so that a shared
machine does not skew them; the load average is reported beside them.

``segment_compression`` compares the zstd parameters segments are written with (the level plus
:data:`~pipeline.formats.segment.encode.ZSTD_MIN_MATCH` and
:data:`~pipeline.formats.segment.encode.ZSTD_WINDOW_LOG`) with the plain level as before, at level 3
(the sink's) and the codec default, on the same body and interleaved: file bytes per event, ratio to
SimKube v2, zstd CPU per event to compress and decompress.
``--zstd-grid`` adds other parameter sets tried (long-distance matching, higher levels) at the same rates.
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import os
import platform
import random
import struct
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

import msgpack
import orjson
import zstandard

from pipeline.formats.assemble import assemble_window, trace_to_simkube
from pipeline.formats.segment.content import Segment
from pipeline.formats.segment.decode import decode_segment
from pipeline.formats.segment.encode import ZSTD_LEVEL, ZSTD_MIN_MATCH, ZSTD_WINDOW_LOG, encode_segment
from pipeline.formats.simkube import read_simkube_trace, write_simkube_trace
from pipeline.formats.wire.codec import decode_event, encode_event, event_from_wire, event_to_wire
from pipeline.model.events import Event, EventType
from pipeline.model.hashing import object_spec_hash, pod_spec_hash
from pipeline.model.keys import key_of, kind_key, object_key
from pipeline.model.sanitize import sanitize
from pipeline.model.tracer_config import TracerConfig

START_MS = 1_750_000_000_000
POD_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # Kubernetes' alphabet for generated name suffixes


def deployment(ns: str, name: str, replicas: int, image_tag: int, rng: random.Random) -> dict[str, Any]:
    """A Deployment as the API server returns it (before sanitizing)."""
    labels = {"app": name, "team": ns, "tier": rng.choice(["web", "api", "worker"])}
    container = {
        "name": name,
        "image": f"registry.example.com/{ns}/{name}:1.{image_tag}.0",
        "ports": [{"containerPort": 8080, "protocol": "TCP"}],
        "env": [{"name": f"SETTING_{i}", "value": f"value-{i}"} for i in range(rng.randint(2, 8))],
        "resources": {
            "requests": {"cpu": "250m", "memory": "256Mi"},
            "limits": {"cpu": "1", "memory": "512Mi"},
        },
        "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 10},
        "imagePullPolicy": "IfNotPresent",
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": name,
            "namespace": ns,
            "uid": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
            "resourceVersion": str(rng.randint(1, 10**7)),
            "generation": image_tag,
            "creationTimestamp": "2025-06-15T10:00:00Z",
            "labels": labels,
            "annotations": {"deployment.kubernetes.io/revision": str(image_tag)},
            "managedFields": [{"manager": "kubectl", "operation": "Update", "fieldsV1": {"f:spec": {}}}],
        },
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"},
            },
            "revisionHistoryLimit": 10,
            "progressDeadlineSeconds": 600,
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [container],
                    "restartPolicy": "Always",
                    "terminationGracePeriodSeconds": 30,
                    "dnsPolicy": "ClusterFirst",
                    "securityContext": {},
                    "schedulerName": "default-scheduler",
                },
            },
        },
        "status": {"observedGeneration": image_tag, "replicas": replicas, "readyReplicas": replicas},
    }


def workload(deployments: int, seed: int = 7) -> list[Event]:
    """Events of a cluster history (see the module docstring), sorted by time."""
    rng = random.Random(seed)
    config = TracerConfig.default()
    events: list[Event] = []
    for d in range(deployments):
        ns, name = f"team-{d % 7}", f"svc-{d}"
        ts = START_MS + rng.randint(0, 60_000)
        replicas, tag = rng.randint(1, 5), 1
        for _update in range(rng.randint(5, 15)):
            obj = sanitize(deployment(ns, name, replicas, tag, rng), config)
            events.append(
                Event.applied(ts, key_of(obj), obj, object_spec_hash(obj), resource_version=str(ts))
            )
            template_hash = pod_spec_hash(obj["spec"]["template"]["spec"])
            replica_set = "".join(rng.choices(POD_NAME_CHARS, k=10))
            for _pod in range(replicas):
                # pods are named and identified as Kubernetes does: <rs>-<hash>-<5 chars>, a random UUID
                pod = object_key(
                    "v1", "Pod", ns, f"{name}-{replica_set}-{''.join(rng.choices(POD_NAME_CHARS, k=5))}"
                )
                uid = str(uuid.UUID(int=rng.getrandbits(128), version=4))
                start = ts + rng.randint(500, 5_000)
                end = start + rng.randint(30_000, 600_000)
                for when, until in ((start, None), (end, end)):  # seen running, then seen finished
                    events.append(
                        Event.pod_lifecycle(
                            when,
                            pod,
                            owner_key=key_of(obj),
                            pod_spec_hash=template_hash,
                            start_ms=start,
                            end_ms=until,
                            uid=uid,
                        )
                    )
            ts += rng.randint(10_000, 120_000)
            if rng.random() < 0.5:
                replicas = max(1, replicas + rng.choice([-2, -1, 1, 2]))
            else:
                tag += 1
        if rng.random() < 0.2:
            events.append(Event.deleted(ts, key_of(obj), obj, object_spec_hash(obj)))
    events.append(
        Event.gap(START_MS + 30_000, kind_key("apps/v1", "Deployment"), reason="410 Gone", from_rv="1")
    )
    events.sort(key=lambda e: e.ts_ms)
    return events


def best_time(fn: Callable[[], object], repeats: int) -> float:
    """CPU seconds of this process for the fastest of ``repeats`` runs of ``fn``.

    CPU time, not wall time: on a shared machine, waiting for a core is not the codec's cost, and the
    targets are per core.
    """
    best = float("inf")
    for _ in range(repeats):
        gc.collect()  # start every run from the same heap
        start = time.process_time()
        result = fn()
        best = min(best, time.process_time() - start)
        del result  # freeing the decoded values is not part of decoding
    return best


def plain_json_dict(e: Event) -> dict[str, Any]:
    return {
        "type": e.type.value,
        "ts_ms": e.ts_ms,
        "key": e.key,
        "uid": e.uid,
        "resource_version": e.resource_version,
        "obj": e.obj,
        "spec_hash": e.spec_hash,
        "owner_key": e.owner_key,
        "pod_spec_hash": e.pod_spec_hash,
        "pod_start_ms": e.pod_start_ms,
        "pod_end_ms": e.pod_end_ms,
        "gap_from_rv": e.gap_from_rv,
        "gap_to_rv": e.gap_to_rv,
        "gap_reason": e.gap_reason,
    }


def event_from_plain_json(d: dict[str, Any]) -> Event:
    """The decoding side of the plain-JSON baseline: back to an Event, as a consumer needs it."""
    return Event(
        EventType(d["type"]),
        d["ts_ms"],
        d["key"],
        d["uid"],
        d["resource_version"],
        d["obj"],
        d["spec_hash"],
        d["owner_key"],
        d["pod_spec_hash"],
        d["pod_start_ms"],
        d["pod_end_ms"],
        d["gap_from_rv"],
        d["gap_to_rv"],
        d["gap_reason"],
    )


def per_message(
    name: str,
    events: list[Event],
    encode: Callable[[Event], bytes],
    decode: Callable[[bytes], object],
    repeats: int,
) -> dict[str, Any]:
    """One message per event, as on the Kafka topic."""
    blobs = [encode(e) for e in events]
    enc = best_time(lambda: [encode(e) for e in events], repeats)
    dec = best_time(lambda: [decode(b) for b in blobs], repeats)
    n = len(events)
    return {
        "codec": name,
        "encode_events_per_s": round(n / enc),
        "decode_events_per_s": round(n / dec),
        "bytes_per_event": round(sum(map(len, blobs)) / n, 1),
    }


SINK_ZSTD_LEVEL = 3  # SinkSettings.zstd_level
_PREAMBLE = struct.Struct(">4sHII")  # magic, version, header length, header CRC (segment/header.py)
_BODY_PREAMBLE = struct.Struct(">II")  # body length, body CRC


def split_body(data: bytes) -> tuple[bytes, bytes]:
    """A segment file's bytes up to its compressed body, and the body (one zstd frame)."""
    header_len = _PREAMBLE.unpack_from(data)[2]
    start = _PREAMBLE.size + header_len + _BODY_PREAMBLE.size
    return data[:start], data[start:]


def segment_params(level: int) -> zstandard.ZstdCompressionParameters:
    """The parameters ``pipeline.formats.segment.encode._file_bytes`` compresses with (checked against
    its output below)."""
    return zstandard.ZstdCompressionParameters(
        compression_level=level,
        window_log=max(ZSTD_WINDOW_LOG, zstandard.ZstdCompressionParameters.from_level(level).window_log),
        min_match=ZSTD_MIN_MATCH,
        write_checksum=1,
        write_content_size=1,
    )


def zstd_grid(level: int) -> dict[str, zstandard.ZstdCompressor]:
    """Other parameter sets, for ``--zstd-grid`` (see the module docstring)."""

    def params(lvl: int, **kw: int) -> zstandard.ZstdCompressor:
        p = zstandard.ZstdCompressionParameters(
            compression_level=lvl, write_checksum=1, write_content_size=1, **kw
        )
        return zstandard.ZstdCompressor(compression_params=p)

    w, mm = ZSTD_WINDOW_LOG, ZSTD_MIN_MATCH
    grid = {
        f"level {level}, window_log {w}": params(level, window_log=w),
        f"level {level}, min_match {mm}": params(level, min_match=mm),
        f"level {level}, hash_log 18, chain_log 17": params(level, hash_log=18, chain_log=17),
        f"level {level}, chosen + hash_log 18": params(level, window_log=w, min_match=mm, hash_log=18),
        f"level {level}, chosen + ldm": params(level, window_log=w, min_match=mm, enable_ldm=1),
        f"level {level}, chosen + ldm hash_rate_log 8 bucket_size_log 1": params(
            level, window_log=w, min_match=mm, enable_ldm=1, ldm_hash_rate_log=8, ldm_bucket_size_log=1
        ),
    }
    if level == SINK_ZSTD_LEVEL:
        grid |= {
            "level 2, chosen": params(2, window_log=w, min_match=mm),
            "level 2, chosen + ldm hash_rate_log 8": params(
                2, window_log=w, min_match=mm, enable_ldm=1, ldm_hash_rate_log=8
            ),
            "level 5, chosen": params(5, window_log=w, min_match=mm),
            "level 6, chosen": params(6, window_log=w, min_match=mm),
        }
    else:
        grid |= {"level 15, plain": params(15), "level 15, chosen": params(15, window_log=w, min_match=mm)}
    return grid


def segment_compression(
    trace: Segment, simkube_bytes: int, repeats: int, *, grid: bool
) -> dict[str, dict[str, Any]]:
    """Chosen parameters beside the plain level (and ``grid``'s), per level; see the module docstring."""
    n = len(trace.events)
    report: dict[str, dict[str, Any]] = {}
    for level in dict.fromkeys((SINK_ZSTD_LEVEL, ZSTD_LEVEL)):
        prefix, body = split_body(encode_segment(trace, level))
        raw_body = zstandard.ZstdDecompressor().decompress(body)
        compressors = {
            f"plain level {level} (previous)": zstandard.ZstdCompressor(
                level=level, write_checksum=True, write_content_size=True
            ),
            f"chosen: level {level}, min_match {ZSTD_MIN_MATCH}, window_log >= {ZSTD_WINDOW_LOG}": (
                zstandard.ZstdCompressor(compression_params=segment_params(level))
            ),
        }
        if list(compressors.values())[1].compress(raw_body) != body:
            raise AssertionError(f"segment_params({level}) is not what encode_segment compresses with")
        if grid:
            compressors |= zstd_grid(level)
        frames = {name: c.compress(raw_body) for name, c in compressors.items()}
        for frame in frames.values():  # every variant is a plain zstd frame: the same reader reads it
            if zstandard.ZstdDecompressor().decompress(frame) != raw_body:
                raise AssertionError("zstd round trip failed")
        # interleaved (every set once per round, best of the rounds): load on the machine hits all alike
        enc = dict.fromkeys(compressors, float("inf"))
        dec = dict.fromkeys(compressors, float("inf"))
        for _ in range(repeats):
            for name, c in compressors.items():
                enc[name] = min(enc[name], best_time(functools.partial(c.compress, raw_body), 1))
                decompress = functools.partial(zstandard.ZstdDecompressor().decompress, frames[name])
                dec[name] = min(dec[name], best_time(decompress, 1))
        baseline = next(iter(compressors))
        rows = {}
        for name, frame in frames.items():
            size = len(prefix) + len(frame)
            rows[name] = {
                "bytes_per_event": round(size / n, 1),
                "bytes_vs_simkube_v2": round(size / simkube_bytes, 4),
                "zstd_encode_us_per_event": round(enc[name] / n * 1e6, 3),
                "zstd_decode_us_per_event": round(dec[name] / n * 1e6, 3),
                "size_vs_previous": round(len(frame) / len(frames[baseline]), 4),
                "encode_time_vs_previous": round(enc[name] / enc[baseline], 3),
                "decoder_window_bytes": zstandard.get_frame_parameters(frame).window_size,
            }
        report[f"level_{level}"] = {"raw_body_bytes": len(raw_body), "params": rows}
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--deployments", type=int, default=300, help="Deployments in the workload (default 300)"
    )
    parser.add_argument(
        "--repeats", type=int, default=7, help="runs per measurement; the best counts (default 7)"
    )
    parser.add_argument(
        "--zstd-grid", action="store_true", help="also measure other zstd parameter sets (slower)"
    )
    args = parser.parse_args()

    events = workload(args.deployments)
    n = len(events)
    counts = {t.value: sum(1 for e in events if e.type is t) for t in EventType}
    orjson_wire = per_message(
        "kubetape wire as orjson (rejected alternative)",
        events,
        lambda e: orjson.dumps(event_to_wire(e)),
        lambda b: event_from_wire(orjson.loads(b)),
        args.repeats,
    )
    results = [
        per_message(
            "kubetape wire (msgpack, Kafka values)", events, encode_event, decode_event, args.repeats
        ),
        orjson_wire,
        per_message(
            "plain JSON (stdlib json, one object per event)",
            events,
            lambda e: json.dumps(plain_json_dict(e)).encode(),
            lambda b: event_from_plain_json(json.loads(b)),
            args.repeats,
        ),
    ]

    end_ms = events[-1].ts_ms + 1
    trace = assemble_window(None, events, START_MS, end_ms, config=TracerConfig.default())
    segment_bytes = encode_segment(trace)
    enc = best_time(lambda: encode_segment(trace), args.repeats)
    dec = best_time(lambda: decode_segment(segment_bytes), args.repeats)
    results.append(
        {
            "codec": "kubetape segment (zstd)",
            "encode_events_per_s": round(len(trace.events) / enc),
            "decode_events_per_s": round(len(trace.events) / dec),
            "bytes_per_event": round(len(segment_bytes) / len(trace.events), 1),
        }
    )

    simkube = trace_to_simkube(trace)
    simkube_bytes = write_simkube_trace(simkube)
    enc = best_time(lambda: write_simkube_trace(simkube), args.repeats)
    dec = best_time(lambda: read_simkube_trace(simkube_bytes), args.repeats)
    raw_dec = best_time(
        lambda: msgpack.unpackb(simkube_bytes, strict_map_key=False, use_list=False), args.repeats
    )
    results.append(
        {
            "codec": "SimKube v2 msgpack (same content)",
            "encode_events_per_s": round(len(trace.events) / enc),
            "decode_events_per_s": round(len(trace.events) / dec),
            "decode_events_per_s_unvalidated": round(len(trace.events) / raw_dec),
            "bytes_per_event": round(len(simkube_bytes) / len(trace.events), 1),
        }
    )

    compression = segment_compression(trace, len(simkube_bytes), args.repeats, grid=args.zstd_grid)
    sink_rows = list(compression[f"level_{SINK_ZSTD_LEVEL}"]["params"].values())

    hash_objs = [e.obj for e in events if e.obj is not None][:2000]
    hashing = len(hash_objs) / best_time(lambda: [object_spec_hash(o) for o in hash_objs], args.repeats)

    by_name = {r["codec"]: r for r in results}
    segment = by_name["kubetape segment (zstd)"]
    wire = by_name["kubetape wire (msgpack, Kafka values)"]
    plain = by_name["plain JSON (stdlib json, one object per event)"]
    report = {
        "benchmark": "bench_codec",
        "machine": {
            "cpu_count": os.cpu_count(),
            "python": sys.version.split()[0],
            "implementation": platform.python_implementation(),
            "platform": platform.platform(),
            "load_average_1m": round(os.getloadavg()[0], 2),
            "gc_enabled": gc.isenabled(),
        },
        "workload": {
            "deployments": args.deployments,
            "events": n,
            "events_per_type": counts,
            "trace_events": len(trace.events),
            "repeats": args.repeats,
        },
        "results": results,
        "segment_compression": compression,
        "object_spec_hash_per_s": round(hashing),
        "ratios": {
            "segment_bytes_vs_simkube_v2": round(len(segment_bytes) / len(simkube_bytes), 4),
            "segment_level3_bytes_vs_simkube_v2": sink_rows[1]["bytes_vs_simkube_v2"],
            "segment_level3_plain_bytes_vs_simkube_v2": sink_rows[0]["bytes_vs_simkube_v2"],
            "segment_level3_zstd_encode_time_vs_plain": sink_rows[1]["encode_time_vs_previous"],
            "segment_bytes_vs_plain_json": round(segment["bytes_per_event"] / plain["bytes_per_event"], 4),
            "wire_bytes_vs_plain_json": round(wire["bytes_per_event"] / plain["bytes_per_event"], 4),
            "wire_decode_speedup_vs_plain_json": round(
                wire["decode_events_per_s"] / plain["decode_events_per_s"], 2
            ),
            "msgpack_vs_orjson_wire_decode": round(
                wire["decode_events_per_s"] / orjson_wire["decode_events_per_s"], 2
            ),
            "msgpack_vs_orjson_wire_bytes": round(
                wire["bytes_per_event"] / orjson_wire["bytes_per_event"], 4
            ),
        },
        "targets": {
            "segment_bytes_at_most_one_fifth_of_simkube_v2": len(segment_bytes) * 5 <= len(simkube_bytes),
            "segment_decode_at_least_100k_events_per_s": segment["decode_events_per_s"] >= 100_000,
            "wire_decode_at_least_100k_events_per_s": wire["decode_events_per_s"] >= 100_000,
        },
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
