"""The Grafana dashboards and alert rules in dashboards/: well-formed, only metrics the agent
exports, and the Helm chart reads them from dashboards/ itself (a symlink). The queries and
rules run against a live agent in tests/integration/test_prometheus.py."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from syncer.observe.metrics import Metrics

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = ROOT / "dashboards"
ALERTS = DASHBOARDS / "alerts.yaml"
BOARDS = {"flower-federations.json": "flower-federations", "flower-syncer-agent.json": "flower-syncer-agent"}
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
PANEL_TYPES = {"timeseries", "stat", "table", "bargauge"}
METRIC = re.compile(r"\bflower_syncer_[a-z_]+")
# The sample names each metric type exposes (prometheus_client; _created unless disabled).
SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum", "_count", "_created"),
            "summary": ("", "_sum", "_count", "_created"), "gauge": ("",), "info": ("_info",)}


def exposed_names() -> set[str]:
    """Every sample name a `Metrics` registry can expose: `flower_syncer_sync_total`, not the family
    name `flower_syncer_sync`; `_bucket`/`_sum`/`_count` of histograms, never their bare name."""
    names: set[str] = set()
    for family in Metrics().registry.collect():
        names.update(family.name + s for s in SUFFIXES[family.type])
    return names


def unknown_metrics(expr: str, known: set[str]) -> list[str]:
    return sorted({m for m in METRIC.findall(expr) if m not in known})


def load_board(name: str) -> dict[str, Any]:
    board: dict[str, Any] = json.loads((DASHBOARDS / name).read_text())
    return board


def panels(board: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for p in board["panels"]:
        yield p
        yield from p.get("panels", [])  # collapsed rows


def variables(board: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in board["templating"]["list"]}


def rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(ALERTS.read_text())
    return [r for g in doc["groups"] for r in g["rules"]]


# -- metric names -----------------------------------------------------------------------------------


def test_metric_name_check_knows_suffixes() -> None:
    known = exposed_names()
    ok = ("flower_syncer_sync_total", "flower_syncer_sync_duration_seconds_bucket",
          "flower_syncer_commit_to_applied_seconds_count", "flower_syncer_source_revision_info",
          "flower_syncer_build_info", "flower_syncer_pool_gpus_requested", "flower_syncer_node_gpus_used",
          "flower_syncer_source_fetch_errors_total", "flower_syncer_drift_corrections_created")
    assert not unknown_metrics(" ".join(ok), known)
    # a family name without its sample suffix, a doubled suffix, a suffix the type does not have, a typo
    bad = ("flower_syncer_sync", "flower_syncer_sync_duration_seconds", "flower_syncer_sync_total_total",
           "flower_syncer_up_total", "flower_syncer_leader_info", "flower_syncer_sync_errors_total")
    assert unknown_metrics("rate(" + ") + rate(".join(bad) + ")", known) == sorted(bad)


# -- dashboards -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(BOARDS))
def test_dashboard_is_current_grafana_json(name: str) -> None:
    board = load_board(name)
    assert board["uid"] == BOARDS[name]
    assert board["schemaVersion"] >= 39
    assert board["title"] and board["description"]
    assert board.get("id") is None  # provisioned boards get their id from Grafana
    ids = [p["id"] for p in panels(board)]
    assert len(ids) == len(set(ids)) and all(isinstance(i, int) for i in ids), ids
    titles = [p["title"] for p in panels(board)]
    assert len(titles) == len(set(titles)), titles
    for p in panels(board):
        where = f"{name} panel {p['id']} {p.get('title')!r}"
        assert p["type"] in PANEL_TYPES, where
        assert p["datasource"] == DATASOURCE, where
        assert p.get("title") and p.get("description"), where
        assert {"x", "y", "w", "h"} <= set(p["gridPos"]), where
        assert p["fieldConfig"]["defaults"].get("unit"), f"{where}: no unit"
        assert p["targets"], where
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs)), where
        for t in p["targets"]:
            assert t["datasource"] == DATASOURCE, where
            assert t["expr"].strip(), where


@pytest.mark.parametrize("name", sorted(BOARDS))
def test_dashboard_variables(name: str) -> None:
    board = load_board(name)
    v = variables(board)
    assert v["datasource"]["type"] == "datasource" and v["datasource"]["query"] == "prometheus"
    unit = v["unit"]
    assert unit["type"] == "query" and unit["datasource"] == DATASOURCE
    units_of_job = 'label_values(flower_syncer_unit_ready{job=~"$job"}, unit)'
    assert unit["definition"] == unit["query"]["query"] == units_of_job
    assert unit["multi"] and unit["includeAll"]
    job = v["job"]  # several agents in one Prometheus stay apart
    assert job["query"]["query"] == "label_values(flower_syncer_up, job)" and job["multi"] and job["includeAll"]
    used: set[str] = set()
    for p in panels(board):
        for t in p["targets"]:
            used.update(re.findall(r"\$\{?(\w+)", t["expr"]))
    assert "unit" in used
    assert used <= set(v) | {"__rate_interval", "__interval", "__range"}, used - set(v)
    if name == "flower-federations.json":
        fed = v["federation"]
        assert fed["type"] == "query" and fed["datasource"] == DATASOURCE and fed["multi"] and fed["includeAll"]
        assert fed["query"]["query"] == units_of_job
        regex = fed["regex"].strip("/")
        assert re.fullmatch(regex, "federation/flower/fed") and not re.fullmatch(regex, "supernode/edge/x")
        # "All" is the allValue, not the filtered list: it must keep SuperNode releases out too
        assert re.fullmatch(fed["allValue"], "federation/ns/a") and not re.fullmatch(fed["allValue"], "supernode/a/b")
        assert "federation" in used


@pytest.mark.parametrize("name", sorted(BOARDS))
def test_every_query_is_scoped_to_the_chosen_agents(name: str) -> None:
    board = load_board(name)
    exprs = [t["expr"] for p in panels(board) for t in p["targets"]]
    exprs += [a["expr"] for a in board["annotations"]["list"] if "expr" in a]
    for expr in exprs:
        for selector in re.findall(r"\bflower_syncer_[a-z_]+(\{[^}]*\})?", expr):
            assert 'job=~"$job"' in selector, expr


@pytest.mark.parametrize("name", sorted(BOARDS))
def test_revision_changes_are_annotated(name: str) -> None:
    (ann,) = [a for a in load_board(name)["annotations"]["list"] if a.get("name") == "Revision changes"]
    assert ann["datasource"] == DATASOURCE and "flower_syncer_source_revision_info" in ann["expr"]
    assert "offset" in ann["expr"] and ann["titleFormat"] == "revision {{revision}}"


def test_units_ready_is_coloured_by_the_share_of_ready_units() -> None:
    (p,) = [p for p in panels(load_board("flower-federations.json")) if p["title"] == "Units ready"]
    thresholds = p["fieldConfig"]["defaults"]["thresholds"]
    assert thresholds["mode"] == "percentage"  # relative to the max, taken from the count of units
    assert [s["color"] for s in thresholds["steps"]] == ["red", "orange", "green"]
    (config,) = p["transformations"]
    assert config["id"] == "configFromData" and config["options"]["configRefId"] == "B"
    targets = {t["refId"]: t["expr"] for t in p["targets"]}
    assert targets["B"] == targets["C"] and targets["A"].startswith("sum(") and targets["B"].startswith("count(")


def test_every_alert_links_its_runbook() -> None:
    for rule in rules():
        url = rule["annotations"]["runbook_url"]
        assert url == f"dashboards/runbooks/{rule['alert']}.md", rule["alert"]
        page = (ROOT / url).read_text()
        assert page.startswith(f"# {rule['alert']}\n") and "**Meaning.**" in page, url


def test_commit_to_applied_per_unit() -> None:
    (p,) = [p for p in panels(load_board("flower-syncer-agent.json")) if p["title"] == "Commit to applied by unit"]
    assert "flower_syncer_unit_commit_to_applied_seconds" in p["targets"][0]["expr"]


@pytest.mark.parametrize("name", sorted(BOARDS))
def test_dashboard_uses_only_exported_metrics(name: str) -> None:
    known = exposed_names()
    board = load_board(name)
    exprs = [t["expr"] for p in panels(board) for t in p["targets"]]
    exprs += [v["query"]["query"] for v in board["templating"]["list"] if v["type"] == "query"]
    problems = {e: unknown_metrics(e, known) for e in exprs if unknown_metrics(e, known)}
    assert not problems, problems


# -- alerts ---------------------------------------------------------------------------------------------


def test_alert_rules() -> None:
    known = exposed_names()
    found = rules()
    names = {r["alert"] for r in found}
    assert names == {"FlowerSyncerSyncFailing", "FlowerSyncerDriftPersisting", "FlowerSyncerPoolNotReady",
                     "FlowerSyncerGPURequestsUnschedulable", "FlowerSyncerSourceStale", "FlowerSyncerConfigErrors",
                     "FlowerSyncerAgentDown", "FlowerSyncerNoLeader", "FlowerSyncerSuperNodesNotConnected",
                     "FlowerSyncerControlApiDown", "FlowerSyncerRunFailed"}
    for r in found:
        assert r["labels"]["severity"] in ("critical", "warning", "info"), r["alert"]
        assert r["annotations"]["summary"] and r["annotations"]["description"], r["alert"]
        assert re.fullmatch(r"\d+[smh]", r.get("for", "")), f"{r['alert']}: for: {r.get('for')}"
        assert not unknown_metrics(r["expr"], known), (r["alert"], unknown_metrics(r["expr"], known))
        assert METRIC.search(r["expr"]), r["alert"]
    # every alert tells what to run
    for name in names:
        text = " ".join(r["annotations"]["description"] for r in found if r["alert"] == name)
        assert "flower-syncer " in text or "/api/v1/status" in text, name


def test_alert_metric_check_catches_unknown_metric() -> None:
    expr = next(r["expr"] for r in rules() if r["alert"] == "FlowerSyncerSyncFailing")
    assert unknown_metrics(expr.replace("sync_total", "sync_errors_total"), exposed_names()) == [
        "flower_syncer_sync_errors_total"]


# -- the chart reads them from here ------------------------------------------------------------


def test_the_chart_reads_the_dashboards_from_one_place() -> None:
    """charts/flower-syncer/files is a symlink to dashboards/ (Helm follows it, and `helm package`
    stores the content): there are no copies to keep in step."""
    files = ROOT / "charts" / "flower-syncer" / "files"
    assert files.is_symlink() and files.resolve() == DASHBOARDS.resolve()
    templates = ROOT / "charts" / "flower-syncer" / "templates"
    assert '.Files.Glob "files/*.json"' in (templates / "dashboards.yaml").read_text()
    assert '.Files.Get "files/alerts.yaml"' in (templates / "prometheusrule.yaml").read_text()
    # the chart's template puts the `groups` document as it is into the PrometheusRule
    assert yaml.safe_load((files / "alerts.yaml").read_text())["groups"]
