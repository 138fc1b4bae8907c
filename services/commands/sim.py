"""``kubetape sim run|list|pause|resume|delete``: create and drive Simulation resources.

A Simulation (CRD ``simulations.kubetape.dev``, k8s/sim/simulation-crd.yaml) describes a replay; the
controller (``kubetape controller``, services/commands/controller.py) runs each repetition as a replayer
Job in its namespace, one Simulation at a time per cluster.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from pipeline.model.errors import ConfigError
from pipeline.model.hooks import parse_hooks_config
from pipeline.model.lifecycle_delays import SPEC_FIELDS as DELAY_SPEC_FIELDS
from pipeline.model.timespec import format_duration
from pipeline.model.tracer_config import TracerConfig, load_tracer_config
from pipeline.replay.inputs import parse_nodes
from pipeline.replay.rbac import replayer_cluster_role
from services.flags import add_kubeconfig_flags, add_lifecycle_delay_flags
from services.settings import from_flags
from services.simulation_api import API_VERSION, KIND, call_simulation_api, simulation_cluster
from services.skctl_flags import hook_files, refuse, refuse_skctl_metrics

TERMINAL = ("Succeeded", "Failed")


@dataclass(frozen=True, slots=True)
class SimClusterSettings:
    """The simulation cluster every ``kubetape sim`` verb talks to."""

    kubeconfig: Path | None = None
    context: str | None = None


@dataclass(frozen=True, slots=True)
class SimRunSettings(SimClusterSettings):
    name: str = ""
    trace: str | None = None
    segments_claim: str | None = None
    segments_path: str | None = None
    topic: str | None = None
    path: str | None = None
    bootstrap: str | None = None
    kafka_config_secret: str | None = None
    time_from: str | None = None
    time_to: str | None = None
    speed: float = 1.0
    duration: str | None = None
    repetitions: int = 1
    namespace_prefix: str | None = None
    nodes: str | None = None
    paused: bool = False
    wait: bool = False
    dry_run: bool = False
    hooks: list[Path] = field(default_factory=list)
    """SimKube hooks files, merged into ``spec.hooks``."""
    image_pull_s: float = 0.0
    """SimKube's lifecycle delays (``--image-pull-delay`` …), trace seconds; see LifecycleDelays."""
    image_pull_jitter_s: float = 0.0
    startup_s: float = 0.0
    startup_jitter_s: float = 0.0


@dataclass(frozen=True, slots=True)
class SimListSettings(SimClusterSettings):
    json: bool = False


@dataclass(frozen=True, slots=True)
class SimNamedSettings(SimClusterSettings):
    """``pause``, ``resume`` (``paused``) and ``delete`` (``wait``) of one Simulation."""

    name: str = ""
    paused: bool = False
    wait: bool = False


@dataclass(frozen=True, slots=True)
class SimRbacSettings:
    """``kubetape sim rbac``: the tracer config whose kinds the replayer writes (None: the default)."""

    config: Path | None = None


# ---- argument parsing ------------------------------------------------------------------------------
def add_arguments(parser: argparse.ArgumentParser) -> None:
    verbs = parser.add_subparsers(dest="sim_command", required=True, metavar="VERB")

    run = verbs.add_parser("run", help="create a Simulation (skctl run's flags work too, docs/simkube.md)")
    run.add_argument("name", help="Simulation name (a DNS name)")
    source = run.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--trace",
        "-f",
        "--trace-path",
        "--trace-file",
        metavar="URL_OR_PATH",
        help="trace file: http(s) URL or path in the image (-f/--trace-path as skctl takes it)",
    )
    source.add_argument("--segments-claim", metavar="PVC", help="PersistentVolumeClaim holding sink segments")
    source.add_argument("--segments-path", metavar="DIR", help="segment directory in the image (no claim)")
    source.add_argument("--topic", help="Kafka topic to read the range from (needs --bootstrap)")
    run.add_argument("--path", default=None, help="with --segments-claim: the segment directory inside it")
    run.add_argument("--bootstrap", default=None, help="with --topic: Kafka bootstrap host:port")
    run.add_argument(
        "--kafka-config-secret",
        metavar="SECRET",
        default=None,
        help="with --topic: a Secret holding client.properties and the TLS files it names, mounted in the "
        "replayer Job at /etc/kubetape/kafka (docs/production-kafka.md)",
    )
    run.add_argument(
        "--from",
        dest="time_from",
        default=None,
        help="range start: now, epoch ms, ISO-8601 or relative (write --from=-30m)",
    )
    run.add_argument("--to", dest="time_to", default=None, help="range end (same forms as --from)")
    run.add_argument(
        "--speed", "-s", type=float, default=1.0, help="trace seconds per wall second (default 1)"
    )
    run.add_argument(
        "--duration", "-D", default=None, help="trace time to replay, e.g. 90s or 10m (default: all)"
    )
    run.add_argument("--repetitions", "-N", type=int, default=1, help="runs, one after the other (default 1)")
    run.add_argument(
        "--namespace-prefix",
        "--virtual-ns-prefix",
        default=None,
        help="replayed namespaces are PREFIX-NS (skctl's --virtual-ns-prefix)",
    )
    run.add_argument(
        "--hooks",
        type=hook_files,
        action="extend",
        default=[],
        metavar="HOOKS.yaml[:HOOKS.yaml]",
        help="SimKube hooks files (preStartHooks, preRunHooks, postRunHooks, postStopHooks), merged in "
        "order into the Simulation's spec.hooks; a colon-separated list as skctl takes it, or repeated",
    )
    run.add_argument(
        "--nodes", default=None, metavar="SKELETON.yaml:N", help="N virtual nodes from a Node YAML"
    )
    add_lifecycle_delay_flags(run)
    run.add_argument(
        "--paused",
        "--start-paused",
        action="store_true",
        help="create it paused (resume to start; --start-paused as skctl takes it)",
    )
    run.add_argument(
        "--wait", action="store_true", help="wait until it Succeeded or Failed (exit 1 on Failed)"
    )
    run.add_argument("--dry-run", action="store_true", help="print the Simulation as YAML, create nothing")
    _refuse_skctl_driver_flags(run)
    _simulation_cluster_flags(run)
    run.set_defaults(settings=from_flags(SimRunSettings), func=_sim_run)

    listing = verbs.add_parser("list", help="Simulations with phase and progress")
    listing.add_argument("--json", action="store_true", help="the full objects as JSON")
    _simulation_cluster_flags(listing)
    listing.set_defaults(settings=from_flags(SimListSettings), func=_sim_list)

    for verb, paused in (("pause", True), ("resume", False)):
        sub = verbs.add_parser(
            verb,
            help="start no further repetition (the running one finishes)"
            if paused
            else "continue a paused one",
        )
        sub.add_argument("name")
        _simulation_cluster_flags(sub)
        sub.set_defaults(settings=from_flags(SimNamedSettings), func=_sim_pause, paused=paused)

    rbac = verbs.add_parser(
        "rbac",
        help="print the replayer's ClusterRole for the kinds a tracer config tracks (kubectl apply -f -)",
    )
    rbac.add_argument(
        "--config",
        metavar="TRACER.yaml",
        type=Path,
        default=None,
        help="the tracer config the traces were recorded with (default: kubetape's default one)",
    )
    rbac.set_defaults(settings=from_flags(SimRbacSettings), func=_sim_rbac)

    delete = verbs.add_parser("delete", help="stop a Simulation and remove everything it created")
    delete.add_argument("name")
    delete.add_argument("--wait", action="store_true", help="wait until the cleanup is done")
    _simulation_cluster_flags(delete)
    delete.set_defaults(settings=from_flags(SimNamedSettings), func=_sim_delete)


# ---- kubetape sim ------------------------------------------------------------------------------------
def simulation_from_args(args: SimRunSettings) -> dict[str, Any]:
    """The Simulation object ``kubetape sim run`` creates; ConfigError names a wrong flag."""
    ranged = bool(args.segments_claim or args.segments_path or args.topic)
    if ranged and not (args.time_from and args.time_to):
        raise ConfigError(
            "--segments-claim/--segments-path/--topic need --from and --to (e.g. --from=-30m --to now)"
        )
    source: dict[str, Any]
    if args.trace:
        source = {"traceURL": args.trace}
    elif args.topic:
        if not args.bootstrap:
            raise ConfigError("--topic needs --bootstrap HOST:PORT (the Kafka brokers the Job can reach)")
        source = {
            "topic": {
                "topic": args.topic,
                "bootstrap": args.bootstrap,
                "from": args.time_from,
                "to": args.time_to,
            }
        }
        if args.kafka_config_secret:
            source["topic"]["kafkaConfigSecret"] = args.kafka_config_secret
    else:
        segments: dict[str, Any] = {"from": args.time_from, "to": args.time_to}
        if args.segments_claim:
            segments["claimName"] = args.segments_claim
        path = args.path if args.segments_claim else args.segments_path
        if path:
            segments["path"] = path
        source = {"segments": segments}
    spec: dict[str, Any] = {"source": source, "speed": args.speed, "repetitions": args.repetitions}
    if args.duration:
        spec["duration"] = args.duration
    if args.namespace_prefix is not None:
        spec["namespacePrefix"] = args.namespace_prefix
    if args.nodes:
        skeleton, count = parse_nodes(args.nodes)
        spec["nodePools"] = [{"skeleton": skeleton, "count": count}]
    delays = {
        key: format_duration(getattr(args, name))
        for key, name in DELAY_SPEC_FIELDS.items()
        if getattr(args, name) > 0
    }
    if delays:
        spec["lifecycleParams"] = delays
    if args.paused:
        spec["paused"] = True
    if args.hooks:
        spec["hooks"] = merged_hooks(args.hooks)
    simulation = {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": args.name}, "spec": spec}
    from pipeline.controller.spec import SimulationSpecError, parse_spec

    try:
        parse_spec(simulation)  # the controller's own checks, before anything reaches the cluster
    except SimulationSpecError as exc:
        raise ConfigError(str(exc)) from None
    return simulation


def merged_hooks(paths: list[Path]) -> dict[str, list[Any]]:
    """SimKube's hooks files merged as ``skctl run --hooks a:b`` merges them: each point's hooks of the
    first file, then the next file's; ConfigError naming the file that does not read."""
    merged: dict[str, list[Any]] = {}
    for path in paths:
        try:
            config = yaml.safe_load(path.read_text())
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"--hooks {path}: {exc}") from None
        parse_hooks_config(config, f"--hooks {path}")  # its errors name the file
        for point, hooks in (config or {}).items():
            merged.setdefault(point, []).extend(hooks or [])
    return merged


def _refuse_skctl_driver_flags(run: argparse.ArgumentParser) -> None:
    """``skctl run``'s driver and metrics flags: kubetape's replayer Job is the controller's to set."""
    refuse(
        run,
        "-I",
        "--driver-image",
        instead="the replayer Jobs run the controller's image: `kubetape controller --image IMAGE` "
        "(or $KUBETAPE_IMAGE)",
    )
    refuse(
        run,
        "--driver-namespace",
        instead="the replayer Jobs run in the controller's namespace: `kubetape controller --namespace NS`",
    )
    refuse(run, "--driver-port", instead="kubetape's replayer has no admission webhook, so no port to set")
    refuse(
        run,
        "--driver-secrets",
        instead="the replayer Job mounts only the Kafka client's Secret: --kafka-config-secret SECRET",
    )
    refuse(
        run,
        "--driver-verbosity",
        instead="the replayer Job logs at info; read it with kubectl logs (kubetape describe --simulation "
        "NAME names its Jobs)",
    )
    refuse(
        run,
        "--skip-local-volume-mount",
        instead="no volume is mounted for the trace: --trace is a URL or a path in the image, "
        "--segments-claim mounts a PersistentVolumeClaim",
    )
    refuse_skctl_metrics(run)


def _sim_run(args: SimRunSettings) -> int:
    simulation = simulation_from_args(args)
    if args.dry_run:
        print(yaml.safe_dump(simulation, sort_keys=False), end="")
        return 0

    async def run() -> int:
        async with simulation_cluster(args.kubeconfig, args.context) as kube:
            await call_simulation_api(kube.create(simulation), f"create Simulation {args.name}")
            print(f"simulation {args.name} created")
            if not args.wait:
                return 0
            phase = await _wait_for_phase(kube, args.name)
            return 0 if phase == "Succeeded" else 1

    return asyncio.run(run())


async def _wait_for_phase(kube: Any, name: str) -> str:
    last = ""
    while True:
        sim = await kube.get(API_VERSION, KIND, None, name)
        if sim is None:
            raise ConfigError(f"Simulation {name} was deleted while waiting for it")
        status = sim.get("status") or {}
        line = f"{status.get('phase', 'Pending')}: {status.get('message', '')}"
        if line != last:
            print(f"[sim {name}] {line}", file=sys.stderr)
            last = line
        if status.get("phase") in TERMINAL:
            return str(status["phase"])
        await asyncio.sleep(2.0)


def _sim_list(args: SimListSettings) -> int:
    async def run() -> list[dict[str, Any]]:
        async with simulation_cluster(args.kubeconfig, args.context) as kube:
            found: list[dict[str, Any]] = await call_simulation_api(
                kube.list_objects(API_VERSION, KIND), "list Simulations"
            )
            return found

    simulations = asyncio.run(run())
    if args.json:
        print(json.dumps(simulations, indent=2))
        return 0
    print(format_table(simulations))
    return 0


def format_table(simulations: list[dict[str, Any]]) -> str:
    rows = [("NAME", "PHASE", "DONE", "SPEED", "STARTED", "MESSAGE")]
    for sim in sorted(simulations, key=lambda s: s["metadata"]["name"]):
        spec, status = sim.get("spec") or {}, sim.get("status") or {}
        rows.append(
            (
                sim["metadata"]["name"],
                str(status.get("phase", "Pending")),
                f"{status.get('completedRepetitions', 0)}/{spec.get('repetitions', 1)}",
                f"{spec.get('speed', 1):g}",
                str(status.get("startTime", "-")),
                str(status.get("message", ""))[:80],
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row[:-1], widths, strict=True)) + "  " + row[-1]
        for row in rows
    )


def _sim_pause(args: SimNamedSettings) -> int:
    async def run() -> None:
        async with simulation_cluster(args.kubeconfig, args.context) as kube:
            patch = {"spec": {"paused": args.paused}}
            await call_simulation_api(
                kube.merge_patch(API_VERSION, KIND, None, args.name, patch), f"patch Simulation {args.name}"
            )

    asyncio.run(run())
    print(f"simulation {args.name} {'paused' if args.paused else 'resumed'}")
    return 0


def _sim_delete(args: SimNamedSettings) -> int:
    async def run() -> bool:
        async with simulation_cluster(args.kubeconfig, args.context) as kube:
            found: bool = await call_simulation_api(
                kube.delete(API_VERSION, KIND, None, args.name), f"delete Simulation {args.name}"
            )
            while args.wait and found:
                if await kube.get(API_VERSION, KIND, None, args.name) is None:
                    break
                await asyncio.sleep(1.0)
            return found

    if not asyncio.run(run()):
        raise ConfigError(f"there is no Simulation named {args.name!r}; `kubetape sim list` shows them")
    print(f"simulation {args.name} deleted" + (" and cleaned up" if args.wait else " (cleanup in progress)"))
    return 0


def _sim_rbac(args: SimRbacSettings) -> int:
    config = TracerConfig.default() if args.config is None else load_tracer_config(args.config)
    where = args.config or "kubetape's default tracer config"
    print(
        f"# The replayer's ClusterRole for traces recorded with {where}:\n"
        "# apply it over k8s/sim's (kubectl apply -f -). A kind whose resource name is not its English\n"
        "# plural needs its rule edited (docs/simulation-rbac.md).\n---"
    )
    print(yaml.safe_dump(replayer_cluster_role(config), sort_keys=False), end="")
    return 0


def _simulation_cluster_flags(parser: argparse.ArgumentParser) -> None:
    add_kubeconfig_flags(
        parser, what="the simulation cluster", default="$KUBECONFIG, else in-cluster credentials"
    )
