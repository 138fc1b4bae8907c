"""Test data shipped with the project, so that a clone of kubetape alone can run the whole suite."""

from __future__ import annotations

import copy
import json
from pathlib import Path

SIMKUBE_TRACES = Path(__file__).resolve().parent / "simkube"
"""SimKube's public example traces (MIT licence, see ``simkube/README.md``)."""


def scaled_simkube_trace(dest: Path) -> Path:
    """SimKube's example trace (a Deployment of 2 replicas, no pods, as every SimKube trace) with the
    Deployment scaled to 5 at 30 s, to 3 at 60 s and deleted at 90 s, written to ``dest``."""
    doc = json.loads((SIMKUBE_TRACES / "simkube-trace.json").read_text())
    first = doc["events"][0]
    deployment = first["applied_objs"][0]
    for offset_s, replicas in ((30, 5), (60, 3)):
        scaled = copy.deepcopy(deployment)
        scaled["spec"]["replicas"] = replicas
        doc["events"].append({"ts": first["ts"] + offset_s, "applied_objs": [scaled], "deleted_objs": []})
    doc["events"].append({"ts": first["ts"] + 90, "applied_objs": [], "deleted_objs": [deployment]})
    dest.write_text(json.dumps(doc))
    return dest
