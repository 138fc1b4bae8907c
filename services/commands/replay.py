"""``kubetape replay``: replay recorded events into a simulated (KWOK) cluster at a chosen speed.

Sources (exactly one): ``--trace FILE_OR_URL`` (a kubetape trace/segment or a SimKube trace, local or
over HTTP(S)); ``--segments DIR --from T --to T`` (a range of the sink's segment store, assembled as
``kubetape export`` does); ``--topic TOPIC --bootstrap HOST:PORT --from T --to T`` (a range of the
events topic, read without a consumer group); ``--topic … --follow --lag 30s`` (shadow the live topic
a fixed lag behind, at speed 1, until stopped or ``--to``). Or ``--spec REPLAY.yaml``: the replay
document (docs/replay.md), which ``--print-spec`` writes for any flags.

Ctrl-C (or SIGTERM) stops starting new events, lets started ones finish and still cleans up; a second
Ctrl-C abandons the wait for started events (cleanup still runs). SIGUSR1 pauses the trace clock and
SIGUSR2 resumes it.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from pipeline.model.errors import ConfigError
from pipeline.model.hooks import Hook, parse_hook_flag
from pipeline.model.replay_document import FIELDS, document_from_values, values_from_document
from pipeline.replay.autoscale.provider import PROVIDERS
from pipeline.replay.hooks import DEFAULT_TIMEOUT_S as DEFAULT_HOOK_TIMEOUT_S
from pipeline.replay.hooks import Hooks, hooks_from
from pipeline.replay.hpa.load import LoadModel
from pipeline.replay.inputs import load_prices, parse_nodes, read_crds
from services.flags import (
    add_cluster_argument,
    add_kafka_config_flag,
    add_kubeconfig_flags,
    add_lifecycle_delay_flags,
    kafka_settings,
    lifecycle_delays_from,
    parse_duration,
)
from services.skctl_flags import hook_files, refuse, refuse_skctl_metrics

if TYPE_CHECKING:  # the CLI imports the replay's modules only when a replay runs
    from pipeline.replay.report.report import ReplayProgress
    from pipeline.replay.run import ReplaySource, ReplaySpec

HPA = "hpa"
"""``--autoscaler hpa``: the simulated HPA decides (pipeline.replay.hpa), beside or without Karpenter."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--trace",
        "-f",
        "--trace-path",
        "--trace-file",
        metavar="FILE_OR_URL",
        help="trace or segment file (or http(s):// URL) to replay (-f/--trace-path as skctl run takes it)",
    )
    source.add_argument(
        "--segments",
        metavar="DIR_OR_URL",
        help="replay --from/--to of this sink segment store (a directory or s3://bucket/prefix)",
    )
    source.add_argument(
        "--topic", metavar="TOPIC", help="replay --from/--to (or --follow) of this events topic"
    )
    source.add_argument(
        "--spec",
        type=Path,
        metavar="REPLAY.yaml",
        help="run the replay this document describes (apiVersion: kubetape.dev/v1, kind: ReplaySpec; YAML "
        "or JSON; docs/replay.md), instead of the replay flags; --print-spec writes one",
    )
    parser.add_argument("--from", dest="start", help="range start: -30m, -2h, now, epoch ms or ISO-8601")
    parser.add_argument("--to", dest="end", default=None, help="range end, exclusive (default: now)")
    parser.add_argument(
        "--bootstrap",
        default=None,
        help="Kafka bootstrap servers, with --topic (default: $KUBETAPE_BOOTSTRAP, else bootstrap.servers of "
        "--kafka-config)",
    )
    add_kafka_config_flag(parser)
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
    add_kubeconfig_flags(parser, what="the simulated cluster", default="$KUBECONFIG, else in-cluster")
    parser.add_argument(
        "--speed",
        "-s",
        type=parse_speed,
        default=1.0,
        help="trace seconds per wall second (default 1), or 'max': as fast as the simulated cluster keeps "
        "up, found by the convergence governor (requires --max-lag); the report gives the speed achieved",
    )
    parser.add_argument(
        "--duration",
        "-D",
        type=parse_trace_duration,
        default=None,
        help="trace time to replay, 90s or 10m (a bare number: seconds): less cuts the trace, more keeps "
        "the simulation running after it (default: the whole trace)",
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
        "--crd",
        action="append",
        default=[],
        type=Path,
        metavar="CRD.yaml",
        help="CustomResourceDefinitions to install for the trace's custom kinds the simulated cluster "
        "does not serve and the trace holds no CRD of (owned by the replay); repeat for several files",
    )
    parser.add_argument(
        "--namespace-prefix",
        "--virtual-ns-prefix",
        default="kubetape",
        help="recorded namespace NS is replayed as PREFIX-NS; '' keeps names (default: kubetape; "
        "skctl's --virtual-ns-prefix)",
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
        "--settle",
        type=float,
        default=None,
        metavar="SECONDS",
        help="trace seconds a replayed owner's pods may trail the recording and still count as right in "
        "the fidelity figures (default: --max-lag when given, else a tenth of the trace, within 1 and 3 "
        "wall seconds at --speed)",
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
        action="append",
        choices=[*sorted(PROVIDERS), HPA],
        default=[],
        help="karpenter: let an autoscaler provision nodes for pending pods (Karpenter with its KWOK "
        "provider, started beside the cluster by `kubetape stack up --autoscaler karpenter`); hpa: the "
        "simulated cluster's HPA decides the replicas of the recorded HPAs' targets, from the recorded "
        "load (needs a cluster serving the Metrics API: `kubetape stack up --metrics`); repeatable, "
        "e.g. --autoscaler hpa --autoscaler karpenter",
    )
    parser.add_argument(
        "--load-model",
        choices=[m.value for m in LoadModel],
        default=None,
        help="with --autoscaler hpa: conserve (default: each owner's recorded total load spread over the "
        "pods the simulation runs) or per-pod (every pod uses what a recorded pod used)",
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
    add_lifecycle_delay_flags(parser)
    parser.add_argument(
        "--hook",
        dest="hooks",
        action="append",
        default=[],
        type=_hook_flag,
        metavar="POINT=COMMAND",
        help="run COMMAND (split as a shell would, run without one) at POINT: preStart (before the run "
        "is prepared), preRun (before the first event), postRun (after the replay), postStop (after it "
        "stopped); repeatable, in order; a failing pre hook stops the run. Output: hook-NN-POINT-*.log "
        "in --run-dir",
    )
    parser.add_argument(
        "--hook-ignoring-failure",
        dest="hooks",
        action="append",
        type=_hook_flag_ignoring_failure,
        metavar="POINT=COMMAND",
        help="as --hook, but a failure of this pre hook is reported and the run goes on",
    )
    parser.add_argument(
        "--hooks",
        dest="hooks_files",
        action="extend",
        default=[],
        type=hook_files,
        metavar="HOOKS.yaml[:HOOKS.yaml]",
        help="SimKube hooks files (preStartHooks, preRunHooks, postRunHooks, postStopHooks: [{cmd, args, "
        "ignoreFailure}]), a colon-separated list as skctl takes it, or repeated; their hooks run "
        "before the --hook ones at each point",
    )
    parser.add_argument(
        "--hook-timeout",
        type=float,
        default=DEFAULT_HOOK_TIMEOUT_S,
        metavar="SECONDS",
        help="kill a hook still running after this long, and count it failed "
        f"(default {DEFAULT_HOOK_TIMEOUT_S:g})",
    )
    parser.add_argument(
        "--hook-pass-env",
        dest="hook_pass_env",
        action="append",
        default=[],
        metavar="NAME",
        help="give the hooks this variable of kubetape's environment too (repeatable); otherwise a hook "
        "gets PATH, HOME, LANG, TZ, what kubectl needs to find the cluster and the run's KUBETAPE_* "
        "variables, never the Kafka or S3 credentials",
    )
    parser.add_argument(
        "--run-dir",
        type=Path,
        default=None,
        help="where the hooks' logs go (default: the --report-json file's directory, else the current one)",
    )
    parser.add_argument("--keep", action="store_true", help="leave the simulated objects in the cluster")
    parser.add_argument("--report-json", type=Path, default=None, help="write the fidelity report here")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    parser.add_argument(
        "--print-spec",
        action="store_true",
        help="print the replay document these flags (or --spec) describe, checked, and replay nothing",
    )
    _refuse_skctl_run_flags(parser)
    # what a flag not given means: a document leaves these out and is read over them
    defaults = {f.dest: parser.get_default(f.dest) for f in FIELDS}
    parser.set_defaults(settings=settings_from_args, func=_run, replay_defaults=defaults)


def _refuse_skctl_run_flags(parser: argparse.ArgumentParser) -> None:
    """``skctl run``'s flags a replay here has no use for, each refused with what to do instead."""
    refuse(
        parser,
        "-N",
        "--repetitions",
        instead="a replay runs once; `kubetape sim run NAME --repetitions N` repeats a Simulation",
    )
    refuse(
        parser,
        "--start-paused",
        instead="a replay starts at once; SIGUSR1 pauses its trace clock and SIGUSR2 resumes it, "
        "`kubetape sim run NAME --paused` creates a paused Simulation",
    )
    driver = (
        "kubetape replay runs in this process against --kubeconfig, not in a driver pod "
        "(`kubetape sim run` makes a replayer Job)"
    )
    refuse(parser, "-I", "--driver-image", "--driver-namespace", "--driver-port", instead=driver)
    refuse(parser, "--driver-secrets", "--driver-verbosity", "--skip-local-volume-mount", instead=driver)
    refuse_skctl_metrics(parser)


def parse_trace_duration(text: str) -> float:
    """``--duration``: seconds of trace time, as a duration (``10m``, SimKube's form) or a bare number of
    seconds (kubetape's older form)."""
    try:
        seconds = float(text)
    except ValueError:
        return parse_duration(text)
    if seconds < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a duration is 0 or more")
    return seconds


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


def _hook_flag(text: str) -> Hook:
    try:
        return parse_hook_flag(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _hook_flag_ignoring_failure(text: str) -> Hook:
    try:
        return parse_hook_flag(text, ignore_failure=True)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


@dataclass(frozen=True, slots=True)
class ReplayCommandSettings:
    spec: ReplaySpec
    stack_dir: Path | None = None
    """The local stack whose Karpenter (with an autoscaler) and whose cluster's HPA processes are
    restarted at the replay's speed."""
    quiet: bool = False
    print_document: Mapping[str, Any] | None = None
    """``--print-spec``: this document is printed and nothing replayed."""


def settings_from_args(args: argparse.Namespace) -> ReplayCommandSettings:
    if args.spec is not None:
        args = args_from_document_file(args)
    spec = spec_from_args(args)  # checks the request, also for --print-spec
    document = document_from_values(vars(args), args.replay_defaults) if args.print_spec else None
    return ReplayCommandSettings(spec, args.stack_dir, args.quiet, document)


def args_from_document_file(args: argparse.Namespace) -> argparse.Namespace:
    """``args`` with the replay ``--spec`` describes in place of the flags' defaults; a replay flag given
    beside ``--spec`` is refused (one description of the replay, not two to reconcile)."""
    defaults: Mapping[str, Any] = args.replay_defaults
    given = [f.flags[0] for f in FIELDS if getattr(args, f.dest) != defaults[f.dest]]
    if given:
        raise ConfigError(
            f"--spec {args.spec} describes the whole replay; {', '.join(given)} given too: set it in the "
            "document (docs/replay.md lists the keys) or replay with flags alone"
        )
    path: Path = args.spec
    try:
        document = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ConfigError(f"--spec: cannot read {path} ({exc.strerror or exc})") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"--spec: {path} is neither YAML nor JSON ({exc})") from None
    values = values_from_document(document, str(path), base=path.parent)
    return argparse.Namespace(**{**vars(args), **values})


def _run(settings: ReplayCommandSettings) -> int:
    from pipeline.replay.run import ReplayRun
    from services.local_karpenter import LocalKarpenter
    from services.local_pod_autoscaler import LocalPodAutoscaler

    if settings.print_document is not None:
        print(yaml.safe_dump(dict(settings.print_document), sort_keys=False), end="")
        return 0
    spec = settings.spec
    process = LocalKarpenter(settings.stack_dir, spec.cluster.kubeconfig) if spec.autoscaling else None
    run = ReplayRun(
        spec,
        autoscaler=process,
        # a stack cluster's HPA processes: at the replay's speed with --autoscaler hpa, else at defaults
        pod_autoscaler=LocalPodAutoscaler(settings.stack_dir, spec.cluster.kubeconfig),
        on_progress=None if settings.quiet else _print_progress,
    )
    report = asyncio.run(run.run(handle_signals=True))
    print(report.summary())
    problem = run.fidelity_problem(report)
    if problem is not None:
        print(f"kubetape replay: {problem}", file=sys.stderr)
        return 3
    return 0


def spec_from_args(args: argparse.Namespace) -> ReplaySpec:
    """The replay the flags ask for; ConfigError naming the flag for what does not fit together."""
    from pipeline.replay.run import Autoscaling, PodAutoscaling, ReplaySpec, ReportOutput, TargetCluster
    from pipeline.replay.settings import ReplaySettings

    source = _source(args)
    if args.sample_interval <= 0:
        raise ConfigError(f"--sample-interval must be positive, got {args.sample_interval}")
    if args.settle is not None and args.settle < 0:
        raise ConfigError(f"--settle must be 0 or more, got {args.settle}")
    max_speed = args.speed == MAX_SPEED
    settings = ReplaySettings(  # checks the speed rules (pipeline.model.speed)
        # at max, the clock starts at 10 (lifetimes are planned at it) and finds its speed from there
        speed=10.0 if max_speed else args.speed,
        max_speed=max_speed,
        replay_name=args.name,
        namespace_prefix=args.namespace_prefix,
        duration_ms=None if args.duration is None else round(args.duration * 1000),
        max_in_flight=args.max_in_flight,
        qps=args.qps,
        node_pools=tuple(parse_nodes(text) for text in args.nodes),
        keep=args.keep,
        sample_interval_s=args.sample_interval,
        settle_s=args.settle,
        max_lag_s=args.max_lag,
        expect_profile=args.expect_profile,
        lifecycle_delays=lifecycle_delays_from(args),
        crds=tuple(crd for path in args.crd for crd in read_crds(path)),
    )
    autoscaling = None
    providers = [a for a in args.autoscaler if a != HPA]
    if len(set(providers)) > 1:
        raise ConfigError(f"--autoscaler: one node autoscaler at a time, got {', '.join(providers)}")
    pod_autoscaling = None
    if HPA in args.autoscaler:
        pod_autoscaling = PodAutoscaling(LoadModel.parse(args.load_model or LoadModel.CONSERVE.value))
    elif args.load_model is not None:
        raise ConfigError("--load-model says how the HPA's load is replayed: add --autoscaler hpa")
    if not providers:
        if args.nodepool or args.prices is not None or args.instance_types is not None:
            raise ConfigError(
                "--nodepool, --prices and --instance-types describe an autoscaled replay: "
                "add --autoscaler karpenter"
            )
    else:
        autoscaling = Autoscaling(
            providers[0],
            node_pool_files=tuple(args.nodepool),
            prices=load_prices(args.prices) if args.prices is not None else None,
            instance_types_file=args.instance_types,
        )
    return ReplaySpec(
        source,
        settings,
        TargetCluster(args.kubeconfig, args.context),
        autoscaling,
        ReportOutput(args.report_json, args.require_fidelity),
        _hooks(args),
        pod_autoscaling,
    )


def _hooks(args: argparse.Namespace) -> Hooks:
    run_dir = args.run_dir
    if run_dir is None and args.report_json is not None:
        run_dir = args.report_json.parent
    return Hooks(
        hooks_from(args.hooks, args.hooks_files), run_dir, args.hook_timeout, tuple(args.hook_pass_env)
    )


def _source(args: argparse.Namespace) -> ReplaySource:
    from pipeline.replay.run import SegmentRange, TopicFollow, TopicRange, TraceFile

    ranged = args.segments is not None or (args.topic is not None and not args.follow)
    if ranged and args.start is None:
        raise ConfigError("--segments and --topic replay a range: pass --from (and --to, default now)")
    if args.trace is not None and (args.start is not None or args.end is not None):
        raise ConfigError("--from/--to select a range of --segments or --topic, not of a --trace file")
    if args.follow and args.topic is None:
        raise ConfigError("--follow shadows a live topic: pass --topic and --bootstrap")
    if args.trace is not None:
        return TraceFile(args.trace)
    if args.segments is not None:
        return SegmentRange(args.segments, args.start, args.end, args.cluster, args.config)
    kafka = kafka_settings(
        args,
        client_id="kubetape-replay",
        missing="--topic needs --bootstrap HOST:PORT of the Kafka broker (or $KUBETAPE_BOOTSTRAP)",
    )
    if args.follow:
        return TopicFollow(kafka, args.topic, args.lag, args.end, args.cluster, args.config)
    return TopicRange(kafka, args.topic, args.start, args.end, args.cluster, args.config)


def _print_progress(p: ReplayProgress) -> None:
    print(
        f"[replay] {p.steps_done}/{p.steps_total} events, trace {p.trace_ms / 1000:.1f} s, "
        f"wall {p.wall_s:.1f} s, {p.failed} failed, {p.pods_running} pods running",
        file=sys.stderr,
    )
