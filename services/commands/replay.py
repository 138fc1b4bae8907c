"""``kubetape replay``: replay recorded events into a simulated (KWOK) cluster at a chosen speed.

Sources (exactly one): ``--trace FILE_OR_URL`` (a kubetape trace/segment or a SimKube trace, local or
over HTTP(S)); ``--segments DIR --from T --to T`` (a range of the sink's segment store, assembled as
``kubetape export`` does); ``--topic TOPIC --bootstrap HOST:PORT --from T --to T`` (a range of the
events topic, read without a consumer group); ``--topic … --follow --lag 30s`` (shadow the live topic
a fixed lag behind, at speed 1, until stopped or ``--to``).

Ctrl-C (or SIGTERM) stops starting new events, lets started ones finish and still cleans up; a second
Ctrl-C abandons the wait for started events (cleanup still runs). SIGUSR1 pauses the trace clock and
SIGUSR2 resumes it.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import signal
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

from pipeline.model.errors import ConfigError
from pipeline.replay.autoscale_provider import PROVIDERS
from services.flags import add_cluster_argument
from services.replay_inputs import (
    instance_types_for,
    load_node_pools,
    load_prices,
    parse_nodes,
    scale_local_karpenter,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--trace", metavar="FILE_OR_URL", help="trace or segment file (or http(s):// URL) to replay"
    )
    source.add_argument(
        "--segments",
        metavar="DIR_OR_URL",
        help="replay --from/--to of this sink segment store (a directory or s3://bucket/prefix)",
    )
    source.add_argument(
        "--topic", metavar="TOPIC", help="replay --from/--to (or --follow) of this events topic"
    )
    parser.add_argument("--from", dest="start", help="range start: -30m, -2h, now, epoch ms or ISO-8601")
    parser.add_argument("--to", dest="end", default=None, help="range end, exclusive (default: now)")
    parser.add_argument("--bootstrap", default=None, help="Kafka bootstrap servers (with --topic)")
    add_cluster_argument(parser)
    parser.add_argument(
        "--follow", action="store_true", help="with --topic: shadow the live topic --lag behind, at speed 1"
    )
    parser.add_argument(
        "--lag", type=float, default=30.0, help="seconds behind the live topic with --follow (default 30)"
    )
    parser.add_argument(
        "--config", type=Path, default=None, help="tracer config for --segments/--topic (default: built-in)"
    )
    parser.add_argument(
        "--kubeconfig",
        type=Path,
        default=None,
        help="kubeconfig of the simulated cluster (default: $KUBECONFIG, else in-cluster)",
    )
    parser.add_argument("--context", default=None, help="kubeconfig context (default: the current one)")
    parser.add_argument(
        "--speed",
        type=parse_speed,
        default=1.0,
        help="trace seconds per wall second (default 1), or 'max': as fast as the simulated cluster keeps "
        "up, found by the convergence governor (requires --max-lag); the report gives the speed achieved",
    )
    parser.add_argument(
        "--duration",
        type=float,
        default=None,
        help="seconds of trace time to replay: less cuts the trace, more keeps the simulation "
        "running after it (default: the whole trace)",
    )
    parser.add_argument(
        "--nodes",
        action="append",
        default=[],
        metavar="SKELETON.yaml:N",
        help="create N virtual KWOK nodes from a Node YAML skeleton before replaying (owned by the "
        "replay); repeat for several node pools",
    )
    parser.add_argument(
        "--namespace-prefix",
        default="kubetape",
        help="recorded namespace NS is replayed as PREFIX-NS; '' keeps names (default: kubetape)",
    )
    parser.add_argument("--name", default="", help="replay name, labels everything (default: random)")
    parser.add_argument(
        "--max-in-flight", type=int, default=32, help="concurrent writes at most (default 32)"
    )
    parser.add_argument(
        "--qps", type=float, default=None, help="client-side write rate limit, per second (default: none)"
    )
    parser.add_argument(
        "--sample-interval",
        type=float,
        default=0.5,  # ReplaySettings.sample_interval_s; the settings are imported only when a replay runs
        help="wall seconds between samples of the replay's pods for the report (default 0.5, half the "
        "fidelity resolution)",
    )
    parser.add_argument(
        "--desired-settle",
        type=float,
        default=2.0,
        help="wall seconds, on top of the one-second resolution, that owners judged by spec.replicas "
        "(traces without lifecycles) may take to have their pods Running (default 2)",
    )
    parser.add_argument(
        "--max-lag",
        type=float,
        default=None,
        metavar="SECONDS",
        help="convergence-aware time scaling: hold the trace clock while the simulated cluster is more "
        "than SECONDS of trace time behind the recording (default: off, the clock never waits)",
    )
    parser.add_argument(
        "--expect-profile",
        default=None,
        metavar="NAME",
        help="refuse to replay unless the simulated cluster states this profile (kubetape stack up "
        "--profile NAME, or k8s/sim/profiles/NAME), e.g. large",
    )
    parser.add_argument(
        "--require-fidelity",
        action="store_true",
        help="exit 3 unless the fidelity verdict is 'held' (degraded, failed or unmeasured replays fail)",
    )
    parser.add_argument(
        "--autoscaler",
        choices=sorted(PROVIDERS),
        default=None,
        help="let an autoscaler provision nodes for pending pods (Karpenter with its KWOK provider, "
        "started beside the cluster by `kubetape stack up --autoscaler karpenter`)",
    )
    parser.add_argument(
        "--nodepool",
        action="append",
        type=Path,
        default=[],
        metavar="POOL.yaml",
        help="with --autoscaler: a Karpenter NodePool (YAML, several documents allowed), created for the "
        "replay with its time settings divided by --speed; repeatable",
    )
    parser.add_argument(
        "--prices",
        type=Path,
        default=None,
        metavar="PRICES.yaml",
        help="with --autoscaler: $/hour by instance type (a YAML mapping) for the report's cost "
        "(default: the price label Karpenter's KWOK provider puts on each node)",
    )
    parser.add_argument(
        "--instance-types",
        type=Path,
        default=None,
        metavar="TYPES.json",
        help="with --autoscaler: the instance types the stack's Karpenter offers (its KWOK provider's JSON); "
        "default: those of the Nodes the trace recorded (instance-type, zone, capacity labels), if any",
    )
    parser.add_argument(
        "--stack-dir",
        type=Path,
        default=None,
        help="with --autoscaler: the local stack running Karpenter beside --kubeconfig, restarted with its "
        "batch windows divided by --speed (default: $KUBETAPE_STACK_DIR or the default stack)",
    )
    parser.add_argument("--keep", action="store_true", help="leave the simulated objects in the cluster")
    parser.add_argument("--report-json", type=Path, default=None, help="write the fidelity report here")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    parser.set_defaults(func=_run)


MAX_SPEED = "max"


def parse_speed(text: str) -> float | str:
    """``--speed``: a positive number, or ``max``."""
    if text.strip().lower() == MAX_SPEED:
        return MAX_SPEED
    try:
        speed = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is neither a number (e.g. 10) nor 'max'") from None
    return speed  # its range is checked with the other arguments, as a ConfigError


def _run(args: argparse.Namespace) -> int:
    from pipeline.replay.autoscale_nodes import judge_node_counts, without_autoscaler_nodes
    from pipeline.replay.plan import plan_replay
    from pipeline.replay.settings import ReplaySettings

    max_speed = args.speed == MAX_SPEED
    if max_speed and args.max_lag is None:
        raise ConfigError(
            "--speed max runs as fast as the simulated cluster keeps up, which the convergence governor "
            "measures: add --max-lag SECONDS (e.g. --max-lag 5)"
        )
    if not max_speed and not 0 < args.speed < float("inf"):
        raise ConfigError(f"--speed must be positive (or 'max'), got {args.speed}")
    _check_source_arguments(args)
    if args.sample_interval <= 0:
        raise ConfigError(f"--sample-interval must be positive, got {args.sample_interval}")
    if args.desired_settle < 0:
        raise ConfigError(f"--desired-settle must be 0 or more, got {args.desired_settle}")
    if args.max_lag is not None and args.max_lag <= 0:
        raise ConfigError(f"--max-lag must be positive, got {args.max_lag}")
    if args.follow and (max_speed or args.speed != 1.0):
        raise ConfigError("--follow shadows the live topic at speed 1; drop --speed")
    pools = [parse_nodes(text) for text in args.nodes]
    node_pools, scaled = _autoscaler_setup(args)
    prices = load_prices(args.prices) if args.prices is not None else None
    settings = ReplaySettings(
        # at max, the clock starts at 10 (lifetimes are planned at it) and finds its speed from there
        speed=10.0 if max_speed else args.speed,
        max_speed=max_speed,
        replay_name=args.name,
        namespace_prefix=args.namespace_prefix,
        duration_ms=None if args.duration is None else round(args.duration * 1000),
        max_in_flight=args.max_in_flight,
        qps=args.qps,
        node_pools=tuple(pools),
        keep=args.keep,
        sample_interval_s=args.sample_interval,
        desired_settle_s=args.desired_settle,
        max_lag_s=args.max_lag,
        expect_profile=args.expect_profile,
        autoscaler_node_pools=tuple(node_pools),
        autoscaler_settings=tuple(scaled),
        prices=prices,
    )
    if args.follow:
        if node_pools:
            timers = scale_local_karpenter(args.stack_dir, _kubeconfig(args), args.speed)
            settings = dataclasses.replace(settings, autoscaler_settings=(*scaled, *timers))
        report = asyncio.run(_replay(args, settings, None))
    else:
        plan = plan_replay(asyncio.run(_load_source(args)), settings.speed)
        recorded_nodes: list[tuple[int, int]] = []
        if node_pools:  # the simulated autoscaler makes the nodes; the recorded ones are the reference
            types = instance_types_for(args.instance_types, plan, prices)
            timers = scale_local_karpenter(args.stack_dir, _kubeconfig(args), args.speed, types)
            settings = dataclasses.replace(settings, autoscaler_settings=(*scaled, *timers))
            plan, recorded_nodes = without_autoscaler_nodes(plan)
        report = asyncio.run(_replay(args, settings, plan))
        span_ms = settings.duration_ms if settings.duration_ms is not None else plan.end_ms - plan.start_ms
        judge_node_counts(report, recorded_nodes, settings.speed, span_ms)
    print(report.summary())
    if args.report_json is not None:
        args.report_json.write_text(json.dumps(report.to_json(), indent=2) + "\n")
    verdict = report.verdict().verdict
    if args.require_fidelity and verdict != "held":
        print(
            f"kubetape replay: --require-fidelity: the fidelity verdict is {verdict!r}, not 'held'",
            file=sys.stderr,
        )
        return 3
    return 0


def _autoscaler_setup(args: argparse.Namespace) -> tuple[list[dict[str, Any]], list[Any]]:
    """NodePools to create and every scaled setting; restarts the local stack's Karpenter with its
    batch windows divided by the speed when it runs beside ``--kubeconfig``."""
    if args.autoscaler is None:
        if args.nodepool or args.prices is not None or args.instance_types is not None:
            raise ConfigError(
                "--nodepool, --prices and --instance-types describe an autoscaled replay: "
                "add --autoscaler karpenter"
            )
        return [], []
    if args.speed == MAX_SPEED:
        raise ConfigError(
            "--autoscaler divides Karpenter's timers by one fixed speed, which --speed max does not have: "
            "give --speed a number (e.g. 10)"
        )
    if not args.nodepool:
        raise ConfigError("--autoscaler karpenter needs at least one --nodepool POOL.yaml (see examples/)")
    pools: list[dict[str, Any]] = []
    scaled: list[Any] = []
    for path in args.nodepool:
        more_pools, more_settings = load_node_pools(path, args.speed)
        pools += more_pools
        scaled += more_settings
    return pools, scaled


def _kubeconfig(args: argparse.Namespace) -> Path | None:
    return args.kubeconfig or (Path(os.environ["KUBECONFIG"]) if os.environ.get("KUBECONFIG") else None)


def _check_source_arguments(args: argparse.Namespace) -> None:
    ranged = args.segments is not None or (args.topic is not None and not args.follow)
    if ranged and args.start is None:
        raise ConfigError("--segments and --topic replay a range: pass --from (and --to, default now)")
    if args.trace is not None and (args.start is not None or args.end is not None):
        raise ConfigError("--from/--to select a range of --segments or --topic, not of a --trace file")
    if args.topic is not None and not args.bootstrap:
        raise ConfigError("--topic needs --bootstrap HOST:PORT of the Kafka broker")
    if args.follow and args.topic is None:
        raise ConfigError("--follow shadows a live topic: pass --topic and --bootstrap")
    if args.lag < 0:
        raise ConfigError(f"--lag must not be negative, got {args.lag}")


def _source_name(args: argparse.Namespace) -> str:
    if args.trace is not None:
        return str(args.trace)
    if args.segments is not None:
        return f"segments {args.segments} [{args.start}, {args.end or 'now'})"
    if args.follow:
        return f"topic {args.topic} on {args.bootstrap}, following {args.lag:g} s behind"
    return f"topic {args.topic} on {args.bootstrap} [{args.start}, {args.end or 'now'})"


def _warn(message: str) -> None:
    print(f"kubetape: warning: {message}", file=sys.stderr)


async def _load_source(args: argparse.Namespace) -> Any:
    """The trace to replay, from whichever source the arguments name."""
    from pipeline.formats.trace import read_trace, trace_from_bytes
    from pipeline.model.tracer_config import load_tracer_config
    from pipeline.store.export import parse_time

    config = load_tracer_config(args.config) if args.config else None
    if args.trace is not None:
        if args.trace.startswith(("http://", "https://")):
            from pipeline.io.fetch import fetch_bytes

            return trace_from_bytes(await fetch_bytes(args.trace), args.trace)
        return read_trace(Path(args.trace))
    start_ms = parse_time(args.start, what="--from")
    end_ms = parse_time(args.end or "now", what="--to")
    if args.segments is not None:
        return _segments_trace(args.segments, start_ms, end_ms, config, cluster=args.cluster)
    from pipeline.io.kafka.settings import KafkaSettings
    from pipeline.replay.sources import read_topic_trace

    return await read_topic_trace(
        KafkaSettings(args.bootstrap),
        args.topic,
        start_ms,
        end_ms,
        config=config,
        warn=_warn,
        cluster=args.cluster,
    )


def _segments_trace(segments: str, start_ms: int, end_ms: int, config: Any, *, cluster: Any = None) -> Any:
    # the same assembly as `kubetape export`, so a range replays as its exported file would
    from pipeline.store.catalog import SegmentCatalog
    from pipeline.store.export import ExportRequest, window_trace
    from pipeline.store.store_url import cluster_location, open_segment_store, parse_store_url

    location = cluster_location(parse_store_url(segments, what="--segments"), cluster)
    catalog = SegmentCatalog(open_segment_store(location, must_exist=True))
    return window_trace(catalog, ExportRequest(start_ms, end_ms, config=config), _warn)


async def _replay(args: argparse.Namespace, settings: Any, plan: Any) -> Any:
    from pipeline.io.kube.client import KubeClient
    from pipeline.io.kube.connect import kube_api
    from pipeline.io.pod_watch import PodWatch
    from pipeline.replay.replayer import Replayer
    from pipeline.replay.report import ReplayProgress

    follow = None
    if plan is None:  # --follow: the state at now − lag first, then the live topic
        from pipeline.io.kafka.settings import KafkaSettings
        from pipeline.model.tracer_config import load_tracer_config
        from pipeline.replay.sources import FollowSource

        follow = FollowSource(
            KafkaSettings(args.bootstrap),
            args.topic,
            round(args.lag * 1000),
            config=load_tracer_config(args.config) if args.config else None,
            warn=_warn,
            cluster=args.cluster,
        )
        plan = await follow.initial_plan()

    def progress(p: ReplayProgress) -> None:
        if not args.quiet:
            print(
                f"[replay] {p.steps_done}/{p.steps_total} events, trace {p.trace_ms / 1000:.1f} s, "
                f"wall {p.wall_s:.1f} s, {p.failed} failed, {p.pods_running} pods running",
                file=sys.stderr,
            )

    kubeconfig = args.kubeconfig
    if kubeconfig is None and os.environ.get("KUBECONFIG"):
        kubeconfig = Path(os.environ["KUBECONFIG"])
    async with kube_api(kubeconfig, args.context) as api:
        replayer = Replayer(
            KubeClient(api),
            plan,
            settings,
            source=_source_name(args),
            on_progress=progress,
            pod_watch=partial(PodWatch, api),
        )
        task = asyncio.current_task()
        loop = asyncio.get_running_loop()

        signals = 0

        def interrupt() -> None:
            nonlocal signals
            signals += 1
            if signals == 1:
                print("[replay] stopping: no new events, then cleanup (again: hurry)", file=sys.stderr)
                replayer.stop()
            elif signals == 2 and task is not None:
                print("[replay] abandoning started events; cleaning up", file=sys.stderr)
                task.cancel()  # Replayer.run still deletes the root after this cancellation
            else:
                print("[replay] cleanup in progress; kill -9 leaves the objects behind", file=sys.stderr)

        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, interrupt)
        loop.add_signal_handler(signal.SIGUSR1, replayer.pause)
        loop.add_signal_handler(signal.SIGUSR2, replayer.resume)
        try:
            if follow is None:
                return await replayer.run()
            if args.end is not None:  # follow until the live topic passes --to (plus the lag)
                from pipeline.store.export import parse_time

                wall_left_s = (parse_time(args.end, what="--to") + follow.lag_ms) / 1000 - time.time()
                loop.call_later(max(wall_left_s, 0.0), replayer.finish)
            return await replayer.run(follow.steps(), first_due_at=follow.first_due_at(time.monotonic()))
        except asyncio.CancelledError:
            return replayer.report
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2):
                loop.remove_signal_handler(sig)
