"""The dashboards and alerts against a real Prometheus scraping real agents.

`promtool check rules` and `promtool test rules` (tests/fixtures/alerts_test.yaml: every alert,
firing and not, on synthetic series) need no cluster. The live test runs `flower-syncer run` on a
copy of config/examples plus a federation asking for more GPUs than the cluster has, a standby
agent whose Git server is down, and Prometheus scraping both every second with the alert rules
(every `for:` cut to 2 s). After a drift of a suspended unit and an outside edit the agent puts
back, every query of every panel of both dashboards must return a finite value, and the alerts
must fire for what is really wrong (GPUs, the pool waiting for them, the drift, the stale source)
and for nothing else.

Without `prometheus`/`promtool` on PATH (Debian's `prometheus` package; tools/env.sh installs it)
these tests skip, or fail when CI=true.
"""

from __future__ import annotations

import base64
import functools
import json
import math
import os
import re
import shutil
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from syncer.cluster.client import Kube
from tests.builders import federation, pool
from tests.conftest import KubeCluster, wait_until
from tests.integration.agents import AgentProc, free_port, git

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "config" / "examples"
ALERTS = ROOT / "dashboards" / "alerts.yaml"
ALERT_TESTS = ROOT / "tests" / "fixtures" / "alerts_test.yaml"
BOARDS = sorted((ROOT / "dashboards").glob("*.json"))
# What Grafana puts in for its own variables; windows long enough to see the whole test.
BUILTINS = {"__rate_interval": "5m", "__interval": "15s", "__range": "5m"}
# 3 SuperNodes x 2 nvidia.com/gpu; the example DaemonSet federation holds 1 of the 4 GPUs of each
# of the 2 NVIDIA nodes, so 2 pods fit (one per node) and the third waits: requested 6, allocated 4.
GPU_HUNGRY = federation("gpu-hungry", pool("big", 3, extra=(
    "        gpu: {enabled: true, vendor: nvidia, resourceName: nvidia.com/gpu, count: 2}\n"
    "        podTemplate:\n          spec:\n            nodeSelector: {nvidia.com/gpu.present: \"true\"}\n"
    "            tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]\n")))


def tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        reason = f"`{name}` is not on PATH (Debian package `prometheus`; tools/env.sh installs it)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    return path


def test_promtool_check_rules() -> None:
    chart_copy = ROOT / "charts" / "flower-syncer" / "files" / "alerts.yaml"
    out = subprocess.run([tool("promtool"), "check", "rules", str(ALERTS), str(chart_copy)], capture_output=True,
                         text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS: 12 rules found" in out.stdout


def test_promtool_alert_unit_tests() -> None:
    out = subprocess.run([tool("promtool"), "test", "rules", str(ALERT_TESTS)], capture_output=True, text=True,
                         timeout=60, check=False)
    assert out.returncode == 0, out.stdout + out.stderr


# -- live ---------------------------------------------------------------------------------------------


class Prometheus:
    def __init__(self, exe: str, workdir: Path, targets: list[str], rule_file: Path) -> None:
        config = {"global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
                  "rule_files": [str(rule_file)],
                  "scrape_configs": [{"job_name": "flower-syncer", "static_configs": [{"targets": targets}]}]}
        (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.log = workdir / "prometheus.log"
        self.proc = subprocess.Popen(
            [exe, f"--config.file={workdir / 'prometheus.yml'}", f"--storage.tsdb.path={workdir / 'data'}",
             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
            stdout=subprocess.DEVNULL, stderr=self.log.open("w"))

    def api(self, path: str, **params: str) -> Any:
        url = f"{self.url}/api/v1/{path}" + ("?" + urllib.parse.urlencode(params) if params else "")
        try:
            with urllib.request.urlopen(url, timeout=10) as resp:
                body = json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            raise AssertionError(f"{path} {params}: HTTP {exc.code}: {exc.read().decode()[:500]}") from exc
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        data = self.api("query", query=expr)
        result: list[dict[str, Any]] = data["result"] if data["resultType"] == "vector" else [
            {"metric": {}, "value": data["result"]}]
        return result

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/-/ready", timeout=2) as resp:
                status: int = resp.status
        except OSError:
            return False
        return status == 200

    def alerts(self, name: str, state: str = "firing") -> list[dict[str, str]]:
        return [a["labels"] for a in self.api("alerts")["alerts"] if a["labels"]["alertname"] == name
                and a["state"] == state]

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def substitute(expr: str, values: dict[str, str]) -> str:
    """Grafana's `$name`, `${name}` and `${name:format}`."""
    return re.sub(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)", lambda m: values[m.group(1) or m.group(2)], expr)


def panel_queries() -> Iterator[tuple[str, str, str, str]]:
    """(board, panel title, refId, expr) of every query, template variables replaced by their "All"
    value."""
    for path in BOARDS:
        board = json.loads(path.read_text())
        values = dict(BUILTINS)
        values.update({v["name"]: v["allValue"] for v in board["templating"]["list"] if v["type"] == "query"})
        for panel in board["panels"]:
            for target in panel["targets"]:
                yield path.stem, panel["title"], target["refId"], substitute(target["expr"], values)


def annotation_queries() -> Iterator[str]:
    for path in BOARDS:
        board = json.loads(path.read_text())
        values = {v["name"]: v["allValue"] for v in board["templating"]["list"] if v["type"] == "query"}
        yield from (substitute(a["expr"], values) for a in board["annotations"]["list"] if "expr" in a)


def finite(sample: dict[str, Any]) -> bool:
    return math.isfinite(float(sample["value"][1]))


@pytest.fixture
def config_repo(tmp_path: Path, namespace: str) -> tuple[Path, Path]:
    """config/examples in a bare repository (what the agent syncs) and a clone to commit to."""
    bare, work = tmp_path / "config.git", tmp_path / "work"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(bare))
    shutil.copytree(EXAMPLES, work)
    (work / "flower-syncer.yaml").write_text(f"name: {namespace}\ndefaultNamespace: {namespace}\n")
    for release in work.glob("supernodes/*/release.yaml"):
        release.write_text(release.read_text().replace("namespace: flower-edge", f"namespace: {namespace}"))
    git(work, "init", "-q", "-b", "main")
    git(work, "add", "-A")
    git(work, "commit", "-qm", "examples")
    git(work, "push", "-q", str(bare), "HEAD:main")
    return bare, work


@pytest.fixture
def processes() -> Iterator[list[Callable[[], Any]]]:
    stops: list[Callable[[], Any]] = []
    yield stops
    for stop in reversed(stops):
        stop()


def start_agent(tmp_path: Path, kubeconfig: str, namespace: str, repo: str, name: str, port: int) -> AgentProc:
    (tmp_path / f"{name}.token").write_text("token-" + name)
    log = tmp_path / f"{name}.log"
    args = [sys.executable, "-m", "syncer", "run", "--repo", repo, "--kubeconfig", kubeconfig,
            "--listen", f"127.0.0.1:{port}", "--namespaces", namespace, "--lease-namespace", namespace,
            "--api-token-file", str(tmp_path / f"{name}.token"), "--cache-dir", str(tmp_path / f"{name}-cache"),
            "--identity", name, "--log-format", "json", "--interval", "3600"]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=log.open("w"), text=True)
    return AgentProc(proc, f"http://127.0.0.1:{port}", "token-" + name, log)


@pytest.mark.cluster
def test_dashboards_and_alerts_on_a_live_agent(kube_cluster: KubeCluster, namespace: str, tmp_path: Path,
                                               config_repo: tuple[Path, Path],
                                               processes: list[Callable[[], Any]]) -> None:
    exe = tool("prometheus")
    bare, work = config_repo
    kube = Kube.from_kubeconfig(kube_cluster.kubeconfig)
    kube.apply({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                "metadata": {"name": "superlink-tls", "namespace": namespace},
                "data": {"tls.crt": base64.b64encode(b"cert").decode(), "tls.key": base64.b64encode(b"key").decode(),
                         "ca.crt": base64.b64encode(b"ca").decode()}}, manager="cert-manager")

    # Prometheus first, scraping (its first scrapes come seconds after it is ready): it sees the
    # counters and histograms from early on, so later syncs count in rate() and histogram_quantile()
    ports = free_port(), free_port()
    rules = yaml.safe_load(ALERTS.read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            rule["for"] = "2s"
    (tmp_path / "alerts.yaml").write_text(yaml.safe_dump(rules))
    prom = Prometheus(exe, tmp_path, [f"127.0.0.1:{p}" for p in ports], tmp_path / "alerts.yaml")
    processes.append(prom.stop)
    wait_until("Prometheus scraping", lambda: prom.ready() and len(prom.query('up{job="flower-syncer"}')) == 2,
             timeout=30, log=prom.log)

    agent = start_agent(tmp_path, kube_cluster.kubeconfig, namespace, str(bare), "leader", ports[0])
    processes.append(agent.stop)
    wait_until("leader", lambda: agent.metric("flower_syncer_leader") == 1, timeout=30, log=agent.log)
    # a standby whose Git server is down: fetch errors, a stale source, a second instance
    dead = f"http://127.0.0.1:{free_port()}/config.git"
    standby = start_agent(tmp_path, kube_cluster.kubeconfig, namespace, dead, "standby", ports[1])
    processes.append(standby.stop)

    units = {f"federation/{namespace}/{n}" for n in ("federation-gpu", "federation-statefulset")}
    units |= {f"supernode/{namespace}/{n}" for n in ("pytorch", "tensorflow", "secure-edge")}

    def synced() -> bool:
        return all((agent.metric("flower_syncer_sync_total", unit=u, result="success") or 0) >= 1 for u in units)

    wait_until("the examples synced", synced, timeout=60, log=agent.log)
    wait_until("the standby serves metrics", lambda: standby.metric("flower_syncer_leader") == 0, timeout=30,
             log=standby.log)
    assert agent.metric("flower_syncer_leader") == 1
    wait_until("the status loop", lambda: all(agent.metric("flower_syncer_unit_ready", unit=u) == 1 for u in units),
             timeout=30, log=agent.log)

    # drift that stays: suspend a unit, then scale its SuperNode pool by hand
    stateful = f"federation/{namespace}/federation-statefulset"
    out = subprocess.run([sys.executable, "-m", "syncer", "suspend", stateful, "--kubeconfig",
                          kube_cluster.kubeconfig], capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    kube_cluster.kubectl("-n", namespace, "scale", "statefulset", "federation-statefulset-supernode-small",
                         "--replicas=4")
    # a pool asking for more GPUs than the cluster has left
    hungry = f"federation/{namespace}/gpu-hungry"
    (work / "federations" / "gpu-hungry.yaml").write_text(GPU_HUNGRY)
    git(work, "add", "-A")
    git(work, "commit", "-qm", "gpu-hungry")
    git(work, "push", "-q", str(bare), "HEAD:main")
    revision = git(work, "rev-parse", "HEAD")

    leader, other = (a.url.removeprefix("http://") for a in (agent, standby))
    big = {"unit": hungry, "pool": "big", "resource": "nvidia.com/gpu"}
    wait_until("FlowerSyncerGPURequestsUnschedulable firing",
             lambda: [a for a in prom.alerts("FlowerSyncerGPURequestsUnschedulable") if a.items() >= big.items()],
             timeout=40, log=agent.log)
    wait_until("two of the three pods bound", lambda: agent.metric("flower_syncer_pool_gpus_allocated", **big) == 4,
             timeout=30, log=agent.log)
    assert agent.metric("flower_syncer_pool_gpus_requested", **big) == 6
    wait_until("drift measured", lambda: (agent.metric("flower_syncer_drift_objects", unit=stateful,
                                                     kind="StatefulSet") or 0) >= 1, timeout=30, log=agent.log)
    # drift the agent puts back at once, twice: a series' first count is invisible to increase()
    corrected = {"unit": f"federation/{namespace}/federation-gpu", "kind": "StatefulSet"}
    for n in (1, 2):
        kube_cluster.kubectl("-n", namespace, "scale", "statefulset", "federation-gpu-superlink", "--replicas=2")
        query = f"flower_syncer_drift_corrections_total >= {n}"
        wait_until(f"correction {n} counted and scraped", functools.partial(prom.query, query), timeout=30,
                 log=agent.log)
    wait_until("Prometheus scraped the drift and the fetch errors",
             lambda: prom.query("flower_syncer_drift_objects > 0") and prom.query(
                 "sum(flower_syncer_source_fetch_errors_total) > 1"), timeout=20, log=prom.log)
    wait_until("Prometheus scraped the pods bound", lambda: prom.query(
        f'flower_syncer_pool_gpus_allocated{{unit="{hungry}"}} == 4'), timeout=10, log=prom.log)
    # the pools the test scaled are ready again after a status round (10 s): only gpu-hungry's is not
    wait_until("one pool not ready", lambda: [s["metric"] for s in prom.query("flower_syncer_pool_ready == 0")] == [
        {"__name__": "flower_syncer_pool_ready", "instance": leader, "job": "flower-syncer", "unit": hungry,
         "pool": "big"}], timeout=25, log=prom.log)

    # every query of every panel returns data, and a number
    results: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for board, title, ref, expr in panel_queries():
        results[board, title, ref] = prom.query(expr)
    # (but what only a SuperLink that answers the agent's Control API calls gives: no SuperLink of
    # this scenario is reachable from the agent on this machine; tests/e2e/test_flower_health.py
    # checks those series on a real node, tests/fixtures/alerts_test.yaml the rules over them)
    needs_superlink = {("flower-federations", "SuperNodes connected / expected by federation and pool", "A"),
                       ("flower-federations", "SuperNodes connected / expected by federation and pool", "B"),
                       ("flower-federations", "Runs by status", "A")}
    empty = [f"{board} / {title} [{ref}]: {result}" for (board, title, ref), result in results.items()
             if not any(finite(s) for s in result) and (board, title, ref) not in needs_superlink]
    assert not empty, "\n".join(empty)

    # and what the scenario makes them show
    def shown(board: str, title: str, ref: str = "A", by: tuple[str, ...] = ()) -> dict[tuple[str, ...], float]:
        """{values of the labels `by`: value} of one panel query."""
        return {tuple(s["metric"][k] for k in by): float(s["value"][1]) for s in results[board, title, ref]}

    fed, agt = "flower-federations", "flower-syncer-agent"
    assert shown(fed, "Units ready", "B") == {(): len(units) + 1}
    assert shown(fed, "Units ready") == {(): len(units)}  # all but gpu-hungry
    assert shown(fed, "Pools not ready") == {(): 1}
    assert shown(fed, "GPUs waiting for a node") == {(): 2}
    details = "Pools not ready: why, pods and GPUs"
    assert shown(fed, details, "A", ("unit", "pool")) == {(hungry, "big"): 2}  # ready pods
    assert shown(fed, details, "B", ("unit", "pool")) == {(hungry, "big"): 3}  # desired pods
    assert shown(fed, details, "C", ("unit", "pool")) == {(hungry, "big"): 2}  # GPUs waiting
    assert shown(fed, details, "D", ("unit", "pool", "reason")) == {(hungry, "big", "Unschedulable"): 1}  # why
    assert shown(fed, "Drifted objects by unit and kind", by=("unit", "kind")) == {(stateful, "StatefulSet"): 1}
    assert shown(fed, "GPUs by resource: cluster vs Flower pools", by=("resource",))[("nvidia.com/gpu",)] == 8
    assert shown(agt, "Leader", by=("instance",)) == {(leader,): 1}
    assert shown(agt, "Source revision", by=("revision",)) == {(revision,): 1}
    assert shown(agt, "Agents that never fetched") == {(): 1}
    assert set(shown(agt, "Last successful fetch age", by=("instance",))) == {(leader,)}
    assert shown(agt, "Drift corrections by unit and kind", by=("unit", "kind"))[
        corrected["unit"], corrected["kind"]] >= 1
    assert sum(shown(agt, "Source fetch errors by reason", by=("reason",)).values()) >= 1
    assert shown(agt, "Leader by instance", by=("instance",)) == {(leader,): 1, (other,): 0}
    assert sum(shown(agt, "Syncs by result", by=("result",)).values()) > 0
    assert {u for (u,) in shown(agt, "Commit to applied by unit", by=("unit",))} >= set(units)
    for expr in annotation_queries():  # valid PromQL (data only in the minute after a new revision)
        assert isinstance(prom.query(expr), list)

    # the alerts: what is wrong fires, nothing else does; every rule evaluates cleanly
    wait_until("FlowerSyncerPoolNotReady for the pool waiting for GPUs only", lambda: [
        (a["unit"], a["pool"]) for a in prom.alerts("FlowerSyncerPoolNotReady")] == [(hungry, "big")],
             timeout=25, log=prom.log)
    wait_until("FlowerSyncerDriftPersisting for the suspended unit", lambda: [
        (a["unit"], a["kind"]) for a in prom.alerts("FlowerSyncerDriftPersisting")] == [(stateful, "StatefulSet")],
             timeout=20, log=prom.log)
    wait_until("FlowerSyncerSourceStale for the standby", lambda: prom.alerts("FlowerSyncerSourceStale"), timeout=20,
             log=prom.log)
    stale = {(a["instance"], a["check"]) for a in prom.alerts("FlowerSyncerSourceStale")}
    assert (other, "last-fetch") in stale
    assert {instance for instance, _ in stale} == {other}
    for quiet in ("FlowerSyncerSyncFailing", "FlowerSyncerConfigErrors", "FlowerSyncerAgentDown",
                  "FlowerSyncerNoLeader"):
        assert not prom.alerts(quiet) and not prom.alerts(quiet, "pending"), quiet
    evaluated = [r for g in prom.api("rules")["groups"] for r in g["rules"]]
    assert len(evaluated) == 12
    assert all(r["health"] == "ok" for r in evaluated), [(r["name"], r.get("lastError")) for r in evaluated]
    assert agent.proc.poll() is None and standby.proc.poll() is None
