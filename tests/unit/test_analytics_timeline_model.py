"""The fast timeline fold against its reference (``timeline_reference``, the fold before it was made
faster): for any interleaving of recorded objects, lifecycles, deletions, usage samples and advances,
with the fold saved and restored at any point, both give the same rows, pod times and skipped count.

The objects are drawn from a small world (two namespaces, Deployments, ReplicaSets, Jobs, pods, nodes,
ConfigMaps) so that owner chains, templates, renames of a pod's owner and deletions meet often, and
include odd shapes and odd quantities (``"0.1"``, ``"333m"``, floats, malformed text) whose sums must
come out bit for bit the same.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from pipeline.analytics.timeline import TimelineFolder
from pipeline.analytics.timeline_rows import TimelineRow
from pipeline.model.events import Event
from pipeline.model.keys import ObjectKey
from pipeline.model.usage import ContainerUsage, UsageSample
from tests.unit.timeline_reference import ReferenceFolder

T0 = 1_800_000_000_000
NAMESPACES = ("a", "b")
NAMES = ("x", "y")
QUANTITIES: list[Any] = ["100m", "0.1", "333m", "1", "1.5", "64Mi", "1Gi", "1e3", "lots", 2, 0.25, None, True]
MAX_IDLE_S = 4
ODD_REFERENCES: list[Any] = [
    ["x"],
    [{"controller": True, "kind": "RS"}],
    5,
    [{"controller": True, "kind": 7, "name": ["l"]}],  # not strings: made strings
    [{"controller": True, "kind": "RS", "name": "a/b"}],  # no key can be built: the event is skipped
]

times = st.integers(min_value=0, max_value=40_000).map(lambda ms: T0 + ms)
quantities = st.sampled_from(QUANTITIES)


@st.composite
def pod_spec(draw: st.DrawFn) -> Any:
    shape = draw(st.integers(0, 9))
    if shape == 0:
        return draw(st.sampled_from([[], "odd", None, {"containers": "odd"}]))
    containers: list[Any] = []
    for _ in range(draw(st.integers(0, 2))):
        which = draw(st.sampled_from(["requests", "limits", "none", "odd"]))
        if which == "odd":
            containers.append(draw(st.sampled_from(["c", {"resources": []}, {"resources": {"requests": 3}}])))
        elif which == "none":
            containers.append({"name": "c"})
        else:
            containers.append({"name": "c", "resources": {which: {"cpu": draw(quantities),
                                                                  "memory": draw(quantities)}}})  # fmt: skip
    spec: dict[str, Any] = {"containers": containers}
    if draw(st.booleans()):
        spec["nodeName"] = draw(st.sampled_from(["n1", "n2", "n3", 5]))
    return spec


def controller(kind: str, name: str, *, controller: Any = True) -> dict[str, Any]:
    group = "batch/v1" if kind == "Job" else "apps/v1"
    return {"apiVersion": group, "kind": kind, "name": name, "controller": controller}


@st.composite
def workload(draw: st.DrawFn) -> tuple[ObjectKey, dict[str, Any]]:
    kind = draw(st.sampled_from(["Deployment", "ReplicaSet", "StatefulSet", "Job", "CronJob"]))
    ns, name = draw(st.sampled_from(NAMESPACES)), draw(st.sampled_from(NAMES))
    meta: dict[str, Any] = {"name": name, "namespace": ns}
    if kind == "ReplicaSet" and draw(st.booleans()):
        meta["ownerReferences"] = [controller("Deployment", draw(st.sampled_from(NAMES)))]
    if kind == "Deployment" and draw(st.integers(0, 3)) == 0:  # long chains, and cycles
        meta["ownerReferences"] = [controller("ReplicaSet", draw(st.sampled_from(NAMES)))]
    spec: dict[str, Any] = {}
    if draw(st.booleans()):
        spec["replicas"] = draw(st.sampled_from([0, 1, 3, -1, "2", None]))
    if draw(st.integers(0, 3)):
        template = {"spec": draw(pod_spec())}
        if kind == "CronJob":
            spec["jobTemplate"] = {"spec": {"template": template}}
        else:
            spec["template"] = template
    group = "batch" if kind in {"Job", "CronJob"} else "apps"
    api = "batch/v1" if group == "batch" else "apps/v1"
    obj = {"apiVersion": api, "kind": kind, "metadata": meta, "spec": spec}
    if draw(st.integers(0, 19)) == 0:
        obj = {"apiVersion": api, "kind": kind, "metadata": ["odd"], "spec": []}
    return ObjectKey(f"{group}/{kind}/{ns}/{name}"), obj


@st.composite
def pod(draw: st.DrawFn) -> tuple[ObjectKey, dict[str, Any]]:
    ns, name = draw(st.sampled_from(NAMESPACES)), draw(st.sampled_from(["p0", "p1", "p2"]))
    meta: dict[str, Any] = {"name": name, "namespace": ns}
    owner = draw(st.sampled_from(["none", "ReplicaSet", "Deployment", "Job", "odd", "not-controller"]))
    if owner == "odd":
        meta["ownerReferences"] = draw(st.sampled_from(ODD_REFERENCES))
    elif owner == "not-controller":
        meta["ownerReferences"] = [controller("ReplicaSet", draw(st.sampled_from(NAMES)), controller=False)]
    elif owner != "none":
        meta["ownerReferences"] = [controller(owner, draw(st.sampled_from(NAMES)))]
    if draw(st.integers(0, 9)) == 0:
        meta["deletionTimestamp"] = "2027-01-01T00:00:00Z"
    obj: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": draw(pod_spec())}
    status = draw(st.sampled_from([None, "Pending", "Running", "Succeeded", "Failed", "Unknown", "odd"]))
    if status == "odd":
        obj["status"] = ["odd"]
    elif status is not None:
        obj["status"] = {"phase": status}
    if draw(st.integers(0, 29)) == 0:
        obj["metadata"] = ["odd"]
    return ObjectKey(f"core/Pod/{ns}/{name}"), obj


@st.composite
def other(draw: st.DrawFn) -> tuple[ObjectKey, dict[str, Any]]:
    if draw(st.booleans()):
        name = draw(st.sampled_from(["n1", "n2", "n3"]))
        return ObjectKey(f"core/Node/_/{name}"), {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name},
        }
    ns = draw(st.sampled_from(NAMESPACES))
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": ns}}
    return ObjectKey(f"core/ConfigMap/{ns}/cm"), cm


objects = st.one_of(workload(), pod(), other())


@st.composite
def events(draw: st.DrawFn) -> Event:
    at = draw(times)
    what = draw(st.sampled_from(["applied", "applied", "deleted", "lifecycle"]))
    if what == "lifecycle":
        key, _ = draw(pod())
        owner, _ = draw(st.one_of(workload(), workload(), pod()))
        start = at + draw(st.integers(-3_000, 3_000))
        end = draw(st.one_of(st.none(), st.integers(0, 20_000).map(lambda d: start + d)))
        return Event.pod_lifecycle(
            at, key, owner_key=owner, pod_spec_hash=1, start_ms=max(start, 0), end_ms=end
        )
    key, obj = draw(objects)
    return Event.applied(at, key, obj, 0) if what == "applied" else Event.deleted(at, key, obj)


@st.composite
def samples(draw: st.DrawFn) -> UsageSample:
    owner, _ = draw(workload())
    pods = draw(st.integers(0, 3))
    containers = tuple(ContainerUsage(f"c{i}", draw(st.integers(0, 900)), draw(st.integers(0, 10**9)))
                       for i in range(draw(st.integers(0, 2)) if pods else 0))  # fmt: skip
    gap = draw(st.integers(0, 5)) == 0
    return UsageSample(draw(times), owner, draw(st.sampled_from(["h1", "h2"])), 0 if gap else pods,
                       () if gap else containers, gap=gap)  # fmt: skip


class FoldAgainstReference(RuleBasedStateMachine):
    """Feed both folds the same inputs; the fast one is saved and restored from JSON at random."""

    def __init__(self) -> None:
        super().__init__()
        self.fast = TimelineFolder(max_idle_s=MAX_IDLE_S)
        self.reference = ReferenceFolder(MAX_IDLE_S)
        self.fast_rows: list[TimelineRow] = []
        self.skipped_before_restore = 0  # a restored fold counts its own skips
        self.reference_rows: list[TimelineRow] = []

    @rule(batch=st.lists(events(), min_size=1, max_size=12))
    def add(self, batch: list[Event]) -> None:
        self.fast.add_all(batch)
        for event in batch:
            self.reference.add(event)

    @rule(sample=samples())
    def add_usage(self, sample: UsageSample) -> None:
        self.fast.add_usage(sample)
        self.reference.add_usage(sample)

    @rule(until=st.one_of(st.none(), times))
    def advance(self, until: int | None) -> None:
        self.fast_rows += self.fast.advance(until)
        self.reference_rows += self.reference.advance(until)

    @rule()
    def save_and_restore(self) -> None:
        self.skipped_before_restore += self.fast.skipped
        self.fast = TimelineFolder.from_state(
            json.loads(json.dumps(self.fast.to_state())), max_idle_s=MAX_IDLE_S
        )

    @invariant()
    def same_rows(self) -> None:
        assert self.fast_rows == self.reference_rows
        assert self.skipped_before_restore + self.fast.skipped == self.reference.skipped

    def teardown(self) -> None:
        end = self.reference.finish()
        assert self.fast.finish() == end
        assert self.fast.pod_times() == self.reference.pod_times()


FoldAgainstReference.TestCase.settings = settings(max_examples=60, stateful_step_count=25)
test_the_fast_fold_gives_the_references_rows = FoldAgainstReference.TestCase
