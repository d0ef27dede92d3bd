"""The shipped Prometheus alert rules and Grafana dashboard (deploy/): promtool checks the
rules and runs their unit tests, every alert says how bad it is and where its runbook is (a
section of docs/running/runbooks.md), and the dashboard survives a round trip through the
models of Grafana's dashboard schema.

promtool comes from ``make promtool`` (``make test`` runs it). Without it these tests fail;
only a developer who sets ``CLARION_ALLOW_NO_PROMTOOL=1`` outside CI gets a skip instead."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import markdown
import pytest
import yaml
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.cog.plugins import register_default_plugins
from grafana_foundation_sdk.models.dashboard import Dashboard

from tests.conftest import REPO

RULES = REPO / "deploy" / "prometheus" / "clarion-alerts.yml"
RULE_TESTS = REPO / "deploy" / "prometheus" / "clarion-alerts.test.yml"
DASHBOARD = REPO / "deploy" / "grafana" / "clarion-dashboard.json"
RUNBOOKS = REPO / "docs" / "running" / "runbooks.md"
SEVERITIES = {"critical", "warning"}
DATASOURCE = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}


def promtool() -> str:
    found = shutil.which("promtool")
    if found:
        return found
    if os.environ.get("CLARION_ALLOW_NO_PROMTOOL") == "1" and not os.environ.get("CI"):
        pytest.skip("promtool is missing and CLARION_ALLOW_NO_PROMTOOL=1")
    pytest.fail("promtool is missing: install it with `make promtool` (make test does)")


def run_promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool(), *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


def alerts() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


def test_promtool_accepts_the_rules() -> None:
    result = run_promtool("check", "rules", RULES.name, cwd=RULES.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(alerts()) + 1} rules found" in result.stdout  # one recording rule


def test_promtool_unit_tests_pass() -> None:
    result = run_promtool("test", "rules", RULE_TESTS.name, cwd=RULE_TESTS.parent)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_has_a_unit_test() -> None:
    tested = {
        case["alertname"]
        for test in yaml.safe_load(RULE_TESTS.read_text())["tests"]
        for case in test.get("alert_rule_test", [])
        if case.get("exp_alerts")
    }
    assert {rule["alert"] for rule in alerts()} == tested


def test_the_unit_tests_catch_a_looser_limit(tmp_path: Path) -> None:
    """HIGH priority's 5 s limit raised to 50 s: the unit tests must notice."""
    rules = RULES.read_text()
    high = 'stream="work:high", group="delivery"}) > 5\n'
    assert rules.count(high) == 1
    (tmp_path / RULES.name).write_text(rules.replace(high, high.replace("> 5", "> 50")))
    (tmp_path / RULE_TESTS.name).write_text(RULE_TESTS.read_text())
    result = run_promtool("test", "rules", RULE_TESTS.name, cwd=tmp_path)
    assert result.returncode != 0
    assert "ClarionHighPriorityLagHigh" in result.stdout + result.stderr


def runbook_anchors() -> set[str]:
    """The anchors of the runbooks page's headings, as MkDocs makes them: the page is rendered
    by Python-Markdown with the toc extension (MkDocs' slugs: lower case, punctuation dropped,
    spaces to '-'), fenced code read as code and ``{#id}`` attributes honoured."""
    page = markdown.Markdown(extensions=["toc", "attr_list", "pymdownx.superfences"])
    page.convert(RUNBOOKS.read_text())

    def ids(tokens: list[dict[str, Any]]) -> set[str]:
        return {t["id"] for t in tokens} | {i for t in tokens for i in ids(t["children"])}

    return ids(page.toc_tokens)  # type: ignore[attr-defined]


@pytest.mark.parametrize("rule", alerts(), ids=lambda rule: rule["alert"])
def test_every_alert_says_how_bad_and_where_its_runbook_is(rule: dict[str, Any]) -> None:
    assert rule["labels"]["severity"] in SEVERITIES
    annotations = rule["annotations"]
    assert annotations["summary"].strip()
    assert annotations["description"].strip()
    page, _, anchor = annotations["runbook_url"].partition("#")
    assert page == RUNBOOKS.relative_to(REPO).as_posix()
    assert anchor in runbook_anchors(), f"{page} has no heading for #{anchor}"


def test_high_priority_is_held_to_a_much_stricter_limit_than_low() -> None:
    def limit(name: str) -> float:
        [rule] = [rule for rule in alerts() if rule["alert"] == name]
        return float(rule["expr"].rsplit(">", 1)[1])

    assert limit("ClarionHighPriorityLagHigh") * 100 <= limit("ClarionLowPriorityLagHigh")


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def lost_in_round_trip(original: Any, again: Any, path: str = "$") -> list[str]:
    """Paths of ``original`` that the schema models dropped or changed."""
    if isinstance(original, dict):
        if not isinstance(again, dict):
            return [path]
        return [
            lost
            for key, value in original.items()
            for lost in (
                lost_in_round_trip(value, again[key], f"{path}.{key}")
                if key in again
                else [f"{path}.{key}"]
            )
        ]
    if isinstance(original, list):
        if not isinstance(again, list) or len(again) != len(original):
            return [path]
        return [
            lost
            for n, (item, other) in enumerate(zip(original, again, strict=True))
            for lost in lost_in_round_trip(item, other, f"{path}[{n}]")
        ]
    return [] if original == again else [path]


def test_the_dashboard_fits_grafanas_dashboard_schema() -> None:
    """The models of Grafana's schema keep only fields the schema has: a misspelt or
    misplaced field of the dashboard, a panel, its options, field config or a Prometheus
    query is dropped in a round trip, and the test names it."""
    register_default_plugins()  # panel options and Prometheus queries by their types
    original = dashboard()
    again = json.loads(json.dumps(Dashboard.from_json(original), cls=JSONEncoder))
    assert lost_in_round_trip(original, again) == []


def test_the_dashboard_has_what_grafana_needs_to_load_it() -> None:
    board = dashboard()
    assert board["title"]
    assert board["uid"]
    assert isinstance(board["schemaVersion"], int)
    [variable] = board["templating"]["list"]
    assert (variable["name"], variable["type"], variable["query"]) == (
        "DS_PROMETHEUS", "datasource", "prometheus",
    )  # fmt: skip
    panels = board["panels"]
    assert len({panel["id"] for panel in panels}) == len(panels)
    cells: set[tuple[int, int]] = set()
    for panel in panels:
        grid = panel["gridPos"]
        assert 0 <= grid["x"] < grid["x"] + grid["w"] <= 24, panel["title"]
        taken = {(x, y) for x in range(grid["x"], grid["x"] + grid["w"])
                 for y in range(grid["y"], grid["y"] + grid["h"])}  # fmt: skip
        assert not cells & taken, f"{panel['title']} overlaps another panel"
        cells |= taken
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == DATASOURCE, panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE, panel["title"]
            assert target["expr"].strip(), panel["title"]
        assert len({t["refId"] for t in panel["targets"]}) == len(panel["targets"])


def test_the_dashboard_shows_what_an_operator_watches() -> None:
    queries = " ".join(
        target["expr"] for panel in dashboard()["panels"] for target in panel.get("targets", [])
    )
    for metric in (
        'route=~"/v1/notifications',  # ingest
        "clarion_delivery_attempts_count",  # deliveries per channel and outcome
        "clarion_delivery_attempt_failures_total",  # failures and retries
        "clarion_stream_oldest_unread_age_seconds",  # queue lag per priority
        "clarion_stream_lag",  # backlog
        "clarion_dlq_size",
        "clarion_delayed_size",
        "clarion_provider_circuit_state",
        "clarion_projection_lag_seconds",
    ):
        assert metric in queries
