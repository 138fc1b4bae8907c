"""``kubetape replay``: replay a trace file into a simulated (KWOK) cluster at a chosen speed.

Ctrl-C (or SIGTERM) stops starting new events, lets started ones finish and still cleans up; a second
Ctrl-C abandons the wait for started events (cleanup still runs). SIGUSR1 pauses the trace clock and
SIGUSR2 resumes it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from pathlib import Path
from typing import Any

import yaml

from pipeline.model.errors import ConfigError


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "replay",
        help="replay a trace (kubetape or SimKube .sktrace) into a simulated KWOK cluster",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--trace", type=Path, required=True, help="trace or segment file to replay")
    parser.add_argument("--kubeconfig", type=Path, required=True, help="kubeconfig of the simulated cluster")
    parser.add_argument("--context", default=None, help="kubeconfig context (default: the current one)")
    parser.add_argument("--speed", type=float, default=1.0, help="trace seconds per wall second (default 1)")
    parser.add_argument(
        "--duration",
        type=float,
        default=None,
        help="seconds of trace time to replay: less cuts the trace, more keeps the simulation "
        "running after it (default: the whole trace)",
    )
    parser.add_argument(
        "--nodes",
        default=None,
        metavar="SKELETON.yaml:N",
        help="create N virtual KWOK nodes from a Node YAML skeleton before replaying (owned by the replay)",
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
    parser.add_argument("--keep", action="store_true", help="leave the simulated objects in the cluster")
    parser.add_argument("--report-json", type=Path, default=None, help="write the fidelity report here")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    parser.set_defaults(func=_run)


def parse_nodes(text: str) -> tuple[dict[str, Any], int]:
    """``skeleton.yaml:10`` → (the Node skeleton, 10); ConfigError saying what is wrong otherwise."""
    path_text, sep, count_text = text.rpartition(":")
    if not sep or not path_text or not count_text.isdigit() or int(count_text) < 1:
        raise ConfigError(f"--nodes {text!r}: expected SKELETON.yaml:N with N ≥ 1, e.g. node.yaml:10")
    path = Path(path_text)
    try:
        skeleton = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ConfigError(f"--nodes: cannot read node skeleton {path} ({exc.strerror or exc})") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"--nodes: node skeleton {path} is not valid YAML ({exc})") from None
    if not isinstance(skeleton, dict) or skeleton.get("kind") != "Node":
        raise ConfigError(f"--nodes: {path} must hold one object of kind: Node")
    return skeleton, int(count_text)


def _run(args: argparse.Namespace) -> int:
    from pipeline.replay.replayer import ReplaySettings, load_trace, plan_replay

    if args.speed <= 0:
        raise ConfigError(f"--speed must be positive, got {args.speed}")
    skeleton, count = parse_nodes(args.nodes) if args.nodes else (None, 0)
    settings = ReplaySettings(
        speed=args.speed,
        replay_name=args.name,
        namespace_prefix=args.namespace_prefix,
        duration_ms=None if args.duration is None else round(args.duration * 1000),
        max_in_flight=args.max_in_flight,
        qps=args.qps,
        node_skeleton=skeleton,
        node_count=count,
        keep=args.keep,
    )
    trace = load_trace(args.trace)
    plan = plan_replay(trace, settings.speed)
    report = asyncio.run(_replay(args, settings, plan))
    print(report.summary())
    if args.report_json is not None:
        args.report_json.write_text(json.dumps(report.to_json(), indent=2) + "\n")
    return 0


async def _replay(args: argparse.Namespace, settings: Any, plan: Any) -> Any:
    from pipeline.io.kube import kube_api
    from pipeline.io.kube_apply import KubeApplier
    from pipeline.replay.replayer import Replayer, ReplayProgress

    def progress(p: ReplayProgress) -> None:
        if not args.quiet:
            print(
                f"[replay] {p.steps_done}/{p.steps_total} events, trace {p.trace_ms / 1000:.1f} s, "
                f"wall {p.wall_s:.1f} s, {p.failed} failed, {p.pods_running} pods running",
                file=sys.stderr,
            )

    async with kube_api(args.kubeconfig, args.context) as api:
        replayer = Replayer(KubeApplier(api), plan, settings, source=str(args.trace), on_progress=progress)
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
            return await replayer.run()
        except asyncio.CancelledError:
            return replayer.report
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2):
                loop.remove_signal_handler(sig)
