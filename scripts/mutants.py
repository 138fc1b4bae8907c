"""Known defects of the replay, each applied to a scratch copy of the repository, must fail its tests.

A test suite that passes against a broken replayer judges nothing. For each mutant below the script
copies the working tree's files (those git tracks or would track) into a scratch directory, applies
the mutant's source patch there (by exact text: a patch whose text is no longer in the file stops the
script, naming the file, so a mutant cannot rot into a no-op), and runs the tests that should catch it
with the scratch copy's ``pipeline`` imported (checked before any test runs). The unit tests go
first; a mutant they miss goes on to its integration or end-to-end tests (``CI=true``: the real stack,
no skips). The same tests also run on an unmutated scratch copy first, so a test that fails anyway is
not taken for a catch.

It prints one JSON document: per mutant, the tests run in each stage, whether they failed (caught) and
which; the count caught. Exit status 0 when every mutant run was caught, 1 otherwise, 2 when a patch
no longer applies or the copy's code is not what the tests import.

Usage: ``.venv/bin/python scripts/mutants.py [--only NAME ...] [--unit-only | --every-stage] [--keep]``
(``--list`` names the mutants; ``--every-stage`` runs the stack stage after a unit stage that caught
the mutant too, to see whether the end-to-end tests catch it by themselves). The unit stage takes a
few minutes on two cores; each end-to-end stage starts a local stack, records the scripted workload
and replays it (about ten minutes there).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
PYTHON = REPO / ".venv" / "bin" / "python"
UNIT_TIMEOUT_S = 60
"""pytest-timeout per test in the unit stage: a mutant that hangs the replay (a clock never released)
fails there instead of waiting for the project's five minutes. The thread method ends the whole run
with the hung test's stack: the signal method's exception left the hung replay's tasks on the
session's event loop, and the run never ended."""
STAGE_TIMEOUT_S = {"unit": 1800, "stack": 5400}
"""A stage still running after this is stopped and counts as caught: its tests never finished."""


@dataclass(frozen=True)
class Patch:
    """Replace ``old`` (exactly once in ``path``, relative to the repository) with ``new``."""

    path: str
    old: str
    new: str


@dataclass(frozen=True)
class Mutant:
    name: str
    defect: str
    patches: tuple[Patch, ...]
    unit: tuple[str, ...]
    """pytest selections (files or node ids) under tests/unit that must fail."""
    stack: tuple[str, ...] = ()
    """Integration or end-to-end selections, run when the unit tests miss the mutant."""


E2E_REPLAY = (
    "tests/e2e/test_record_replay.py::" + "test_recorded_workload_replays_on_sim_with_the_recorded_pod_counts"
)
NODE_BRANCH = (
    '        elif kind == ("v1", "Node"):\n            body = recorded_node(obj, self._rewrite, self.root)\n'
)
PLAN_SORT = "    steps.sort(key=lambda s: (s.ts_ms, _owned(s.payload)))\n"

MUTANTS = (
    Mutant(
        "skip-scale-downs",
        "a recorded change that lowers an object's spec.replicas is not written",
        (
            Patch(
                "pipeline/replay/apply.py",
                "        obj = event.obj\n        if self._hpa_writes is None and is_hpa(obj):",
                "        obj = event.obj\n"
                "        replicas = (obj.get('spec') or {}).get('replicas')\n"
                "        if isinstance(replicas, int):\n"
                "            before = _MUTANT_REPLICAS.get(event.key)\n"
                "            _MUTANT_REPLICAS[event.key] = replicas\n"
                "            if before is not None and replicas < before:\n"
                "                return\n"
                "        if self._hpa_writes is None and is_hpa(obj):",
            ),
            Patch(
                "pipeline/replay/apply.py",
                'RETRY_BASE_S = 0.1\n"""',
                'RETRY_BASE_S = 0.1\n_MUTANT_REPLICAS: dict[Any, int] = {}\n"""',
            ),
        ),
        unit=("tests/unit/test_replay_steps.py",),
        stack=(E2E_REPLAY,),
    ),
    Mutant(
        "all-steps-at-time-0",
        "every step is applied at the replay's start instead of at its scaled time",
        (
            Patch(
                "pipeline/replay/clock/schedule.py",
                "                offset = step.ts_ms - first_ts\n",
                "                offset = 0 * (step.ts_ms - first_ts)\n",
            ),
        ),
        unit=("tests/unit/test_replay_schedule.py", "tests/unit/test_replay_steps.py"),
        stack=(E2E_REPLAY,),
    ),
    Mutant(
        "ignore-speed",
        "kubetape replay --speed N replays at the recorded pace",
        (
            Patch(
                "services/commands/replay.py",
                "        speed=10.0 if max_speed else args.speed,\n",
                "        speed=10.0 if max_speed else 1.0,\n",
            ),
        ),
        unit=("tests/unit/test_replay_steps.py", "tests/unit/test_replay_cli.py"),
        stack=(E2E_REPLAY,),
    ),
    Mutant(
        "hpa-replays-recorded-replicas",
        "under --autoscaler hpa the recorded replicas of the HPA's target are replayed (while the report "
        "still counts them as left to the simulated HPA)",
        (
            Patch(
                "pipeline/replay/hpa/targets.py",
                "                    dropped[event.key] = dropped.get(event.key, 0) + 1\n"
                "                    continue\n",
                "                    dropped[event.key] = dropped.get(event.key, 0) + 1\n",
            ),
            Patch(
                "pipeline/replay/hpa/replay.py",
                "        if event.key not in self._targets:\n            return body\n",
                "        if True:\n            return body\n",
            ),
        ),
        unit=("tests/unit/test_hpa_replay.py",),
        stack=(
            "tests/integration/test_metrics_stack.py::"
            "test_a_replay_with_the_hpa_deciding_scales_from_the_recorded_load",
        ),
    ),
    Mutant(
        "drop-bare-pods",
        "a recorded pod with no owner is not written",
        (
            Patch(
                "pipeline/replay/apply.py",
                NODE_BRANCH,
                NODE_BRANCH
                + '        elif kind == ("v1", "Pod") and not obj["metadata"].get("ownerReferences"):\n'
                "            return\n",
            ),
        ),
        unit=("tests/unit/test_replay_replayer.py", "tests/unit/test_replay_steps.py"),
        stack=(E2E_REPLAY,),
    ),
    Mutant(
        "drop-trace-tail",
        "the last 10 % of a trace's steps are not replayed",
        (
            Patch(
                "pipeline/replay/plan.py",
                PLAN_SORT,
                PLAN_SORT + "    steps = steps[: len(steps) * 9 // 10]\n",
            ),
        ),
        unit=("tests/unit/test_replay_replayer.py", "tests/unit/test_replay_steps.py"),
        stack=(E2E_REPLAY,),
    ),
    Mutant(
        "never-release-held-clock",
        "the trace clock the convergence governor held stays held once the cluster caught up",
        (
            Patch(
                "pipeline/replay/clock/sampler.py",
                "        elif not hold and self._scheduler.paused_for(CONVERGENCE):\n"
                "            self._scheduler.resume(CONVERGENCE)\n",
                "        elif not hold and self._scheduler.paused_for(CONVERGENCE):\n            pass\n",
            ),
        ),
        unit=(  # node ids: pytest runs them in this order (a file named beside would be run whole first)
            "tests/unit/test_replay_governor.py::"
            "test_a_held_clock_goes_on_when_the_cluster_caught_up_not_at_the_next_sample",
            "tests/unit/test_replay_governor.py::test_the_trace_clock_waits_for_a_slow_cluster_and_the_report_says_so",
        ),
        stack=(E2E_REPLAY,),
    ),
)


class MutantError(Exception):
    """A mutant's patch text is no longer in its file: the mutant must be brought up to date."""


@dataclass
class Stage:
    kind: str
    tests: tuple[str, ...]
    exit_code: int
    failed: list[str] = field(default_factory=list)
    seconds: float = 0.0
    log: str = ""
    """pytest's output, kept after the run."""
    judged: bool = True
    """False when the tests fail on the unmutated copy too: they judge nothing then."""

    @property
    def caught(self) -> bool:
        # 5: nothing collected, a broken selection, never a catch
        return self.judged and self.exit_code not in (0, 5)

    def to_json(self) -> dict[str, Any]:
        return {
            "stage": self.kind,
            "tests": list(self.tests),
            "exit_code": self.exit_code,
            "caught": self.caught,
            "failed": self.failed,
            "seconds": round(self.seconds, 1),
            "log": self.log,
            **({} if self.judged else {"note": "the tests fail unmutated too: not judged"}),
        }


def copy_working_tree(dest: Path) -> None:
    """The working tree's files into ``dest`` as they are now (edits included): those git tracks and
    those it would (new, not ignored), not the venv or caches."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        check=True,
        capture_output=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = REPO / name
        if not source.is_file():
            continue  # deleted in the working tree
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)


def apply_patches(root: Path, patches: tuple[Patch, ...]) -> None:
    for patch in patches:
        path = root / patch.path
        text = path.read_text()
        found = text.count(patch.old)
        if found != 1:
            raise MutantError(
                f"{patch.path}: the mutant's text is there {found} times, not once; update the mutant in "
                f"scripts/mutants.py to the code as it is now:\n{patch.old}"
            )
        path.write_text(text.replace(patch.old, patch.new))


def environment(root: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(root)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["CI"] = "true"  # a stage that needs the stack fails without it, never skips
    return env


def check_imports(root: Path) -> None:
    """The scratch copy's packages are the ones imported there, not the checkout's (the venv holds an
    editable install of the checkout)."""
    probe = "import pipeline, services, tests; print(pipeline.__file__, services.__file__, tests.__file__)"
    out = subprocess.run(
        [str(PYTHON), "-c", probe],
        cwd=root,
        env=environment(root),
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    outside = [p for p in out if not Path(p).resolve().is_relative_to(root.resolve())]
    if outside:
        raise MutantError(f"the scratch copy at {root} imports {outside}: the tests would not see the mutant")


FAILED_LINE = re.compile(r"^(?:FAILED|ERROR) (\S+)", re.MULTILINE)


def run_tests(root: Path, kind: str, tests: tuple[str, ...], log: Path) -> Stage:
    command = [str(PYTHON), "-m", "pytest", *tests, "-q", "-x", "-rfE", "-p", "no:cacheprovider"]
    command += ["-p", "no:randomly", "-o", f"timeout={UNIT_TIMEOUT_S if kind == 'unit' else 900}"]
    command += ["-o", "timeout_method=thread"]
    started = time.monotonic()
    try:
        result = subprocess.run(
            command,
            cwd=root,
            env=environment(root),
            capture_output=True,
            text=True,
            check=False,
            timeout=STAGE_TIMEOUT_S[kind],
        )
    except subprocess.TimeoutExpired:
        seconds = time.monotonic() - started
        return Stage(kind, tests, -9, [f"still running after {STAGE_TIMEOUT_S[kind]} s"], seconds)
    log.write_text(f"$ {' '.join(command)}\n{result.stdout}\n--- stderr ---\n{result.stderr}")
    stage = Stage(kind, tests, result.returncode, seconds=time.monotonic() - started, log=str(log))
    stage.failed = FAILED_LINE.findall(result.stdout)
    if "+ Timeout +" in result.stdout + result.stderr:  # the banner of pytest-timeout's thread method
        stage.failed.append("a test timed out (the run was ended)")
    if result.returncode not in (0, 1):  # an error of the run itself, not a failing test: show why
        tail = "\n".join((result.stdout + result.stderr).splitlines()[-30:])
        print(f"[mutants] {kind} run exited {result.returncode}:\n{tail}", file=sys.stderr)
    return stage


def scratch_copy(base: Path, name: str, patches: tuple[Patch, ...]) -> Path:
    root = base / name
    root.mkdir()
    copy_working_tree(root)
    apply_patches(root, patches)
    check_imports(root)
    return root


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", action="append", default=[], metavar="NAME", help="run this mutant only")
    parser.add_argument("--unit-only", action="store_true", help="no integration or end-to-end stage")
    parser.add_argument(
        "--every-stage",
        action="store_true",
        help="the integration or end-to-end stage also for a mutant the unit tests caught",
    )
    parser.add_argument(
        "--no-baseline",
        action="store_true",
        help="skip the unmutated run (to see how a mutant fails while the tests also fail unmutated; "
        "a failure then is no catch by itself: compare the logs)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the scratch copies (their path is printed)")
    parser.add_argument("--list", action="store_true", help="name the mutants and their defects")
    args = parser.parse_args(argv)
    if args.list:
        for mutant in MUTANTS:
            print(f"{mutant.name}: {mutant.defect}")
        return 0
    unknown = set(args.only) - {m.name for m in MUTANTS}
    if unknown:
        parser.error(f"no mutant named {', '.join(sorted(unknown))} (--list names them)")
    chosen = [m for m in MUTANTS if not args.only or m.name in args.only]
    base = Path(tempfile.mkdtemp(prefix="kubetape-mutants."))
    logs = Path(tempfile.mkdtemp(prefix="kubetape-mutants-logs."))  # kept: the JSON names each log
    try:
        # every patch is checked before anything runs: a rotted mutant stops the script at once
        for mutant in chosen:
            scratch_copy(base, f"check-{mutant.name}", mutant.patches)
        clean = scratch_copy(base, "unmutated", ())
        baselines: dict[tuple[str, ...], Stage] = {}
        results = []
        for mutant in chosen:
            root = scratch_copy(base, mutant.name, mutant.patches)
            stages: list[Stage] = []
            for kind, tests in (("unit", mutant.unit), ("stack", mutant.stack)):
                if not tests or (kind == "stack" and args.unit_only):
                    continue
                if stages and stages[-1].caught and not args.every_stage:
                    break
                if tests not in baselines and not args.no_baseline:
                    baselines[tests] = run_tests(
                        clean, kind, tests, logs / f"unmutated-{kind}-{len(baselines)}.log"
                    )
                baseline = baselines.get(tests)
                if baseline is not None and baseline.exit_code != 0:
                    print(f"[mutants] unmutated, {' '.join(tests)} fail: {baseline.failed}", file=sys.stderr)
                    stages.append(
                        Stage(
                            kind,
                            tests,
                            baseline.exit_code,
                            baseline.failed,
                            baseline.seconds,
                            log=baseline.log,
                            judged=False,
                        )
                    )
                    break
                stages.append(run_tests(root, kind, tests, logs / f"{mutant.name}-{kind}.log"))
                print(f"[mutants] {mutant.name}: {kind} caught={stages[-1].caught}", file=sys.stderr)
            results.append(
                {
                    "mutant": mutant.name,
                    "defect": mutant.defect,
                    "patched": sorted({p.path for p in mutant.patches}),
                    "caught": any(s.caught for s in stages),
                    "stages": [s.to_json() for s in stages],
                }
            )
    except MutantError as exc:
        print(f"scripts/mutants.py: {exc}", file=sys.stderr)
        return 2
    finally:
        if args.keep:
            print(f"[mutants] scratch copies kept in {base}", file=sys.stderr)
        else:
            shutil.rmtree(base, ignore_errors=True)
    caught = sum(1 for r in results if r["caught"])
    summary = {"caught": caught, "mutants": len(results), "baseline": not args.no_baseline}
    print(json.dumps({**summary, "results": results}, indent=2))
    return 0 if caught == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
