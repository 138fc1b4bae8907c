"""Where ``--speed`` goes: the modules that hold the speed given on the command line, in the order
the code reaches them, from the parsed flags to the replayer; prints one JSON document.

Runs ``kubetape replay --trace T --speed S`` in-process against a kubeconfig whose apiserver does not
answer (127.0.0.1, port 9), so everything up to the replayer's first request runs and nothing else
is needed. Every call into the project's code (``pipeline``, ``services``) whose locals hold the speed
(a local equal to S, or an object with ``speed`` equal to S, one level deep: the flags, the settings,
the spec) is a visit to its module. Reported: the distinct modules, the visits in order (consecutive
ones to the same module merged), how often the walk enters ``services/`` and how often it climbs
back from a lower layer to a higher one (layer order: services, then the stages, then io and model).
The figure is a property of the code: run it on two commits to compare them.

    python -m bench.follow_speed [--autoscaler]  # this checkout
    PYTHONPATH=/path/to/other/checkout python -m bench.follow_speed   # another commit's code
"""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import json
import sys
import tempfile
from pathlib import Path
from types import FrameType
from typing import Any

SPEED = 7.25
"""A speed no default has, so that a local equal to it is the one given."""

_LAYERS = (
    ("services.", 0),
    ("pipeline.controller", 1),
    ("pipeline.replay", 1),
    ("pipeline.analytics", 1),
    ("pipeline.store", 2),
    ("pipeline.formats", 2),
    ("pipeline.io", 2),
    ("pipeline.stack", 2),
    ("pipeline.model", 3),
)


def _layer(module: str) -> int:
    return next((rank for prefix, rank in _LAYERS if module.startswith(prefix)), 2)


def _holds_speed(value: Any, depth: int = 1) -> bool:
    if isinstance(value, float) and not isinstance(value, bool):
        return value == SPEED
    if depth == 0 or value is None or isinstance(value, str | int | bytes | Path):
        return False
    if isinstance(value, argparse.Namespace):
        return getattr(value, "speed", None) == SPEED
    for name in ("speed", "settings", "spec"):
        attribute = getattr(value, name, None) if not isinstance(value, type) else None
        if attribute is not None and attribute is not value and _holds_speed(attribute, depth - 1):
            return True
    return False


def follow(trace: Path, *, autoscaled: bool = False) -> dict[str, Any]:
    from services.cli import main

    visits: list[str] = []

    def profile(frame: FrameType, event: str, _arg: Any) -> None:
        if event != "call":
            return
        module = frame.f_globals.get("__name__", "")
        if not module.startswith(("pipeline.", "services.")):
            return
        try:
            held = any(_holds_speed(v) for v in frame.f_locals.values())
        except Exception:
            held = False
        if held and (not visits or visits[-1] != module):
            visits.append(module)

    with tempfile.TemporaryDirectory() as tmp:
        kubeconfig = Path(tmp) / "kubeconfig"
        kubeconfig.write_text(
            "apiVersion: v1\nkind: Config\ncurrent-context: x\n"
            "clusters: [{name: x, cluster: {server: 'http://127.0.0.1:9'}}]\n"
            "contexts: [{name: x, context: {cluster: x, user: x}}]\nusers: [{name: x, user: {}}]\n"
        )
        argv = ["replay", "--trace", str(trace), "--speed", str(SPEED), "--kubeconfig", str(kubeconfig)]
        if autoscaled:  # a stack directory without a stack: Karpenter's timers are reported unscaled
            nodepool = Path(__file__).resolve().parent.parent / "examples/nodepool.yaml"
            argv += ["--autoscaler", "karpenter", "--nodepool", str(nodepool), "--stack-dir", tmp]
        argv += ["--quiet"]
        sys.setprofile(profile)
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                code = main(argv)
        finally:
            sys.setprofile(None)
    layers = [_layer(m) for m in visits]
    return {
        "measure": "follow_speed",
        "argv": " ".join(["kubetape", *argv]).replace(tmp, "<tmp>"),
        "exit_code": code,
        "modules": sorted(set(visits)),
        "module_count": len(set(visits)),
        "visits": visits,
        "visit_count": len(visits),
        "services_entries": sum(
            1 for i, m in enumerate(visits) if m.startswith("services.") and (i == 0 or _layer(visits[i - 1]))
        ),
        "climbs_up": sum(1 for a, b in itertools.pairwise(layers) if b < a),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--trace",
        type=Path,
        default=Path(__file__).resolve().parent.parent / "tests/data/simkube/bare-pods.sktrace",
    )
    parser.add_argument("--autoscaler", action="store_true", help="replay with --autoscaler karpenter too")
    args = parser.parse_args()
    print(json.dumps(follow(args.trace, autoscaled=args.autoscaler), indent=2))


if __name__ == "__main__":
    main()
