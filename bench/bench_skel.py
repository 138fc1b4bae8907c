"""SKEL benchmark: CPU per trace object of a SKEL program against the same edit as a YAML transform.

Run: ``.venv/bin/python -m bench.bench_skel [--deployments N] [--repeats R]``. Prints one JSON object.

The trace is bench_codec's synthetic cluster history as a SimKube trace (every Deployment version, status
kept). The edit is ``examples/transforms/redact.yaml``, once as kubetape's YAML transform and once as the
SKEL statements ``validate --generate-skel`` writes for it (the two give the same objects: see
``tests/unit/test_skel_transform.py``); SimKube's example sanitiser (``sanitize.skel``) is measured beside
them. Two figures each: the edit alone, object by object (``edit``), and the whole ``kubetape
transform`` work on the trace (``apply``: edit, then index, spec hashes and lifecycle keys recomputed).
CPU time of this process, best of ``--repeats``, side by side in one run; the ratio SKEL/YAML is the result.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

import yaml

from bench.bench_codec import START_MS, best_time, workload
from bench.environment import machine
from pipeline.formats.assemble import assemble_window, trace_to_simkube
from pipeline.formats.simkube import SimkubeTrace
from pipeline.model.tracer_config import TracerConfig
from pipeline.validate.apply import apply_transform
from pipeline.validate.skel.generate import operation_statements
from pipeline.validate.skel.program import parse_program
from pipeline.validate.transform import TraceEdit, parse_transform

REPO = Path(__file__).resolve().parents[1]


def edit_all(trace: SimkubeTrace, edit: TraceEdit) -> int:
    start = trace.events[0].ts if trace.events else 0
    changed = 0
    for event in trace.events:
        for obj in event.applied_objs + event.deleted_objs:
            changed += edit.edit(obj, event.ts, start)[1]
    return changed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--deployments", type=int, default=300, help="Deployments in the workload (default 300)"
    )
    parser.add_argument(
        "--repeats", type=int, default=5, help="runs per measurement; the best counts (default 5)"
    )
    args = parser.parse_args()

    events = workload(args.deployments)
    end_ms = max(e.ts_ms for e in events) + 1
    segment = assemble_window(
        None, events, START_MS, end_ms, config=TracerConfig.default(), suppress_owned=False
    )
    trace = trace_to_simkube(segment, keep_status=True)
    objects = sum(len(e.applied_objs) + len(e.deleted_objs) for e in trace.events)

    operations = yaml.safe_load((REPO / "examples" / "transforms" / "redact.yaml").read_text())["operations"]
    yaml_edit = parse_transform({"version": 1, "operations": operations}, "redact.yaml")
    skel_text = "\n".join(s for op in operations for s in operation_statements(op))
    skel_edit = parse_program(skel_text, "redact.skel")
    sanitize = parse_program((REPO / "tests" / "data" / "simkube" / "skel" / "sanitize.skel").read_text())

    results: dict[str, Any] = {}
    for name, edit in (("redact_yaml", yaml_edit), ("redact_skel", skel_edit), ("sanitize_skel", sanitize)):
        edit_s = best_time(lambda e=edit: edit_all(trace, e), args.repeats)  # type: ignore[misc]
        apply_s = best_time(lambda e=edit: apply_transform(trace, e), args.repeats)  # type: ignore[misc]
        results[name] = {
            "objects_changed": edit_all(trace, edit),
            "edit_cpu_s": round(edit_s, 4),
            "edit_us_per_object": round(edit_s / objects * 1e6, 2),
            "apply_cpu_s": round(apply_s, 4),
            "apply_us_per_object": round(apply_s / objects * 1e6, 2),
        }
    yaml_r, skel_r = results["redact_yaml"], results["redact_skel"]
    print(
        json.dumps(
            {
                "benchmark": "skel",
                "machine": machine(),
                "load_average": os.getloadavg(),
                "deployments": args.deployments,
                "trace_objects": objects,
                "skel_statements_for_redact_yaml": skel_text.count(";"),
                "results": results,
                "ratio_skel_to_yaml": {
                    "edit": round(skel_r["edit_cpu_s"] / yaml_r["edit_cpu_s"], 2),
                    "apply": round(skel_r["apply_cpu_s"] / yaml_r["apply_cpu_s"], 2),
                },
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
