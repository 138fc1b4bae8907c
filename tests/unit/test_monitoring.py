"""The Grafana dashboard and the alert rules (k8s/monitoring) only query what exists: every kubetape_*
metric they name is one the code declares, every expression parses as far as a bracket check goes, and
the rules cover what issue 31 asks to watch (events, lag, dead letters, relists and gaps, segment
writes, memory), Prometheus's own checker parses them, and the dashboard passes tools/dashboard-check
(Grafana's Foundation SDK types, strictly). No Prometheus or Grafana server runs here, so the names are
checked against the code."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from pipeline.stack.build import dashboard_checker_path

REPO = Path(__file__).resolve().parents[2]
MONITORING = REPO / "k8s" / "monitoring"
_DECLARED = re.compile(r"\.(?:counter|gauge)\(\s*\"([a-z_]+)\"")
_USED = re.compile(r"\bkubetape_([a-z_]+)\b")


def _declared_metrics() -> set[str]:
    names: set[str] = set()
    for path in (REPO / "pipeline").rglob("*.py"):
        names |= {f"kubetape_{n}" for n in _DECLARED.findall(path.read_text())}
    return names


def _expressions() -> list[str]:
    rules = yaml.safe_load((MONITORING / "alerts.yaml").read_text())
    exprs = [r["expr"] for g in rules["spec"]["groups"] for r in g["rules"]]
    dashboard = json.loads((MONITORING / "dashboard.json").read_text())
    return exprs + [t["expr"] for p in dashboard["panels"] for t in p["targets"]]


def test_every_kubetape_metric_queried_is_declared_in_the_code() -> None:
    declared = _declared_metrics()
    used = {f"kubetape_{n}" for e in _expressions() for n in _USED.findall(e)}
    assert used, "no kubetape metric queried"
    assert used <= declared, f"queried but never declared: {sorted(used - declared)}"


def test_expressions_balance_their_brackets_and_quotes() -> None:
    for expr in _expressions():
        for left, right in ("()", "[]", "{}"):
            assert expr.count(left) == expr.count(right), expr
        assert expr.count('"') % 2 == 0, expr


def test_the_rules_watch_what_the_recording_side_can_lose() -> None:
    text = " ".join(_expressions())
    for metric in (
        "kubetape_events_published_total",
        "kafka_consumergroup_lag",
        "kubetape_sink_deadletter_total",
        "kubetape_publish_deadletter_total",
        "kubetape_relists_total",
        "kubetape_sink_gap_markers_total",
        "kubetape_sink_segments_written_total",
        "container_memory_working_set_bytes",
    ):
        assert metric in text, metric


def test_prometheus_s_own_checker_parses_every_rule_and_every_dashboard_query(tmp_path: Path) -> None:
    """``promtool check rules`` (Prometheus's own tooling, Debian's ``prometheus`` package that
    ``scripts/bootstrap.sh --for-tests`` installs) on the alert rules as Prometheus loads them, and on
    each dashboard query as a recording rule: the real PromQL parser, not a bracket count. Grafana itself
    is not installable here (not in Debian, its module is under the AGPL), so the dashboard's JSON is held
    to the queries it runs."""
    promtool = shutil.which("promtool")
    if promtool is None:
        message = "promtool is not installed (`apt-get install prometheus`; bootstrap.sh --for-tests does)"
        if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
            pytest.fail(message)
        pytest.skip(message)
    rules = yaml.safe_load((MONITORING / "alerts.yaml").read_text())
    alerts = tmp_path / "alerts.yaml"
    alerts.write_text(yaml.safe_dump({"groups": rules["spec"]["groups"]}))  # the PrometheusRule's content
    dashboard = json.loads((MONITORING / "dashboard.json").read_text())
    queries = [
        {"record": f"dashboard:panel{p}:target{t}", "expr": target["expr"]}
        for p, panel in enumerate(dashboard["panels"])
        for t, target in enumerate(panel["targets"])
    ]
    panels = tmp_path / "dashboard-queries.yaml"
    panels.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": queries}]}))
    result = subprocess.run(
        [promtool, "check", "rules", str(alerts), str(panels)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    expected = sum(len(g["rules"]) for g in rules["spec"]["groups"])
    assert f"SUCCESS: {expected} rules found" in result.stdout
    assert f"SUCCESS: {len(queries)} rules found" in result.stdout


def _dashboards() -> list[Path]:
    """Every Grafana dashboard under k8s/ (a JSON object with panels and a schemaVersion)."""
    found = []
    for path in sorted((REPO / "k8s").rglob("*.json")):
        content = json.loads(path.read_text())
        if isinstance(content, dict) and "panels" in content and "schemaVersion" in content:
            found.append(path)
    return found


@pytest.fixture(scope="module")
def dashboard_checker() -> Path:
    """tools/dashboard-check built from this checkout (``scripts/bootstrap.sh --for-tests`` builds it)."""
    binary = dashboard_checker_path()
    if not binary.exists():
        message = (
            f"the dashboard checker is not built ({binary}): run scripts/bootstrap.sh --for-tests, "
            "or python -m pipeline.stack.build dashboard-check"
        )
        if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
            pytest.fail(message)
        pytest.skip(message)
    return binary


def _check(checker: Path, *dashboards: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(checker), *map(str, dashboards)], capture_output=True, text=True, check=False, timeout=60
    )


def test_grafana_s_foundation_sdk_accepts_every_dashboard_under_k8s(dashboard_checker: Path) -> None:
    """Strictly decoded into the SDK's dashboard, panel and query types (no unknown field, no wrong type),
    its Validate() clean, panel kinds known, ids unique, the grid respected, data sources and variables
    resolved: what Grafana would refuse or silently drop on import is caught here."""
    dashboards = _dashboards()
    assert MONITORING / "dashboard.json" in dashboards
    result = _check(dashboard_checker, *dashboards)
    assert result.returncode == 0, result.stdout + result.stderr
    for path in dashboards:
        assert f"{path}: ok: " in result.stdout, result.stdout


def test_the_checker_refuses_a_broken_dashboard_naming_what_and_where(
    dashboard_checker: Path, tmp_path: Path
) -> None:
    dashboard = json.loads((MONITORING / "dashboard.json").read_text())
    dashboard["refreshRate"] = "30s"  # not a dashboard field
    first, second, third, fourth = dashboard["panels"][:4]
    first["options"] = {  # a timeseries legend's showLegend is a boolean
        "legend": {"showLegend": "yes", "displayMode": "list", "placement": "bottom", "calcs": []},
        "tooltip": {"mode": "single", "sort": "none"},
    }
    second["fieldConfig"]["defaults"]["custom"] = {"lineWidth": 1, "fillOpacityy": 10}
    third["type"] = "timeseriess"
    fourth["id"] = first["id"]
    fourth["gridPos"]["x"] = 16
    fourth["targets"][0]["expr"] += " * $scale"
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(dashboard))

    result = _check(dashboard_checker, broken)

    assert result.returncode == 1, result.stdout + result.stderr
    lines = set(result.stdout.splitlines())
    where = [f'panels[{i}] ("{p["title"]}")' for i, p in enumerate(dashboard["panels"][:4])]
    expected = {
        f"{broken}: dashboard: unexpected field 'refreshRate'",
        f"{broken}: {where[0]}.options.legend.showLegend: json: cannot unmarshal string into Go value"
        " of type bool",
        f"{broken}: {where[1]}.fieldConfig.defaults.custom: unexpected field 'fillOpacityy'",
        f'{broken}: {where[2]}.type: panel type "timeseriess" is not a panel kind the SDK registers',
        f"{broken}: {where[3]}.id: id {first['id']} is already the id of {where[0]}",
        f"{broken}: {where[3]}.gridPos: x 16 + w 12 passes the grid's 24 columns",
        f"{broken}: {where[3]}: uses $scale, which is neither a template variable nor a Grafana global",
    }
    assert expected <= lines, "\n".join(sorted(expected - lines)) + "\n--- got:\n" + result.stdout
