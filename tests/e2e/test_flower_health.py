"""Flower-level health on a real node (issue 27, item 1): what the SuperLink says, not what the
pods say. A TLS federation (Flower 1.42) with a pool of its own, and a SuperNode chart release
that dials its SuperLink without TLS: the release's pod is Ready (its /health answers) while its
SuperNode retries forever ("Connection attempt failed"). The agent asks the SuperLink's Control
API (through a port-forward named in the Federation, as tests/e2e/test_secure.py does for key
registration) and reports the federation not ready, Degraded with the reason, in `status`, the
metrics and an Event; then a Flower app that fails on purpose raises a RunFailed Event and a
notification with Flower's message."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.builders import tls_material
from tests.conftest import wait_until
from tests.e2e.conftest import Agent, ConfigRepo, RealCluster, syncer_status, wait_ready
from tests.integration.gitservers import free_port
from tests.integration.superlinks import flower_bin

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
FAILING_APP = ROOT / "tests" / "fixtures" / "failing-app"
FLWR = "1.42.0"


FEDERATION = f"""\
apiVersion: flwr.exalsius.ai/v1
kind: Federation
metadata:
  name: health
  annotations:
    flower-syncer.io/superlink-tls-secret: superlink-tls
    flower-syncer.io/control-api-address: 127.0.0.1:{{control}}
spec:
  mode: StatefulSet
  isolationMode: subprocess
  insecure: false
  superlink:
    image: flwr/superlink:{FLWR}
  supernodes:
    image: flwr/supernode:{FLWR}
    pools:
      - name: p
        replicas: 1
        images: {{{{}}}}
"""
# dials the federation's SuperLink, but without TLS: the pod is Ready, the SuperNode never connects
LOST_RELEASE = f"""\
tls:
  enabled: false
supernode:
  superlink:
    address: health-superlink
    port: 9092
  image:
    registry: docker.io
    repository: flwr/supernode
    tag: {FLWR}
"""


class Receiver(ThreadingHTTPServer):
    """A generic-webhook notification receiver on 127.0.0.1: keeps what it is sent."""

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                outer.received.append(json.loads(body))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)


@pytest.fixture
def receiver(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Receiver]:
    server = Receiver()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    (tmp_path / "url").write_text(f"http://127.0.0.1:{server.server_address[1]}/hook\n")
    (tmp_path / "notifications.yaml").write_text(
        f"receivers:\n  - name: test\n    type: generic\n    urlFile: {tmp_path / 'url'}\n")
    monkeypatch.setenv("FLOWER_SYNCER_NOTIFICATIONS_FILE", str(tmp_path / "notifications.yaml"))  # run_agent's env
    yield server
    server.shutdown()


def _secret(cluster: RealCluster, namespace: str, name: str, data: dict[str, bytes]) -> None:
    manifest = {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                "metadata": {"name": name, "namespace": namespace},
                "data": {k: base64.b64encode(v).decode() for k, v in data.items()}}
    cluster.kubectl("apply", "-f", "-", input=json.dumps(manifest))


def _events(cluster: RealCluster, namespace: str, reason: str) -> list[str]:
    items = cluster.json("-n", namespace, "get", "events", "--field-selector", f"reason={reason}")["items"]
    return [str(e.get("message") or e.get("note") or "") for e in items]


def _unit(report: Any, unit: str) -> dict[str, Any]:
    return next((dict(u) for u in report.get("units", []) if u["unit"] == unit), {})


def test_pods_ready_but_supernodes_not_connected_and_a_failing_run(
        real_cluster: RealCluster, e2e_namespace: str, config_repo: ConfigRepo,
        run_agent: Callable[[ConfigRepo, str], Agent], receiver: Receiver, tmp_path: Path) -> None:
    ns = e2e_namespace
    fed, lost = f"federation/{ns}/health", f"supernode/{ns}/lost"
    # `status` reads what the agent records on the FlowerUnits (cluster-scoped CRD; idempotent)
    real_cluster.kubectl("apply", "-f", str(ROOT / "charts" / "flower-syncer" / "crds"))
    tls = tls_material("health-superlink", ["health-superlink", f"health-superlink.{ns}", f"health-superlink.{ns}.svc",
                      f"health-superlink.{ns}.svc.cluster.local", "127.0.0.1"])
    _secret(real_cluster, ns, "superlink-tls", tls)
    control = free_port()
    config_repo.commit({
        "flower-syncer.yaml": f"name: e2e\ndefaultNamespace: {ns}\n"
                              "guardrails:\n  allowedControlApiTargets: ['127.0.0.1:*']\n"
                              "  allowedSecrets: [superlink-tls]\n",
        "federations/health.yaml": FEDERATION.format(control=control),
        "supernodes/lost/values.yaml": LOST_RELEASE,
    }, "a TLS federation, and a release that dials it without TLS")
    agent = run_agent(config_repo, ns)
    wait_ready(real_cluster, ns, "statefulset", "health-superlink", 1, agent)
    wait_ready(real_cluster, ns, "statefulset", "health-supernode-p", 1, agent)
    wait_ready(real_cluster, ns, "deployment", "lost-flower-client-supernode", 1, agent)

    with real_cluster.port_forward(ns, "svc/health-superlink", 9093, local=control):
        # every pod Ready, and yet: Degraded, with the reason, in `status`, the metrics and an Event
        def degraded() -> dict[str, Any]:
            unit = _unit(syncer_status(real_cluster, ns), fed)
            return unit if unit.get("health") == "Degraded" else {}

        unit = wait_until("status: the federation Degraded", degraded, timeout=180, interval=3, log=agent.log)
        assert unit["ready"] is False and all(p["ready"] == p["desired"] for p in unit["pools"])
        healthy = next(c for c in unit["conditions"] if c["type"] == "Healthy")
        assert f"{lost} pool supernode: 0/1 SuperNodes connected" in healthy["message"], healthy
        pools = {p["unit"]: p for p in unit["flower"]["supernodes"]["pools"]}
        assert (pools[fed]["online"], pools[lost]["online"], pools[lost]["expected"]) == (1, 0, 1), pools
        table = subprocess.run([sys.executable, "-m", "syncer", "status", "--kubeconfig", real_cluster.kubeconfig,
                                "-n", ns], capture_output=True, text=True, timeout=60, cwd=ROOT, check=False)
        assert table.returncode == 1  # not ready
        row = next(line for line in table.stdout.splitlines() if line.startswith(fed))
        assert row.split()[6] == "1/2", table.stdout  # CONNECTED
        assert agent.metric("flower_syncer_federation_supernodes", unit=fed, pool=lost, state="online") == 0
        assert agent.metric("flower_syncer_federation_supernodes", unit=fed, pool=lost, state="expected") == 1
        assert agent.metric("flower_syncer_federation_supernodes", unit=fed, pool="p", state="online") == 1
        assert agent.metric("flower_syncer_unit_state", unit=fed, health="Degraded") == 1
        wait_until("a SuperNodesNotConnected Event", lambda: _events(real_cluster, ns, "SuperNodesNotConnected"),
                   timeout=120, interval=2, log=agent.log)

        # a run that fails on purpose: a RunFailed Event and a notification, with Flower's message
        home = tmp_path / "flwr"
        home.mkdir()
        (home / "ca.crt").write_bytes(tls["ca.crt"])
        (home / "config.toml").write_text(f'[superlink]\ndefault = "e2e"\n\n[superlink.e2e]\naddress = '
                                          f'"127.0.0.1:{control}"\nroot-certificates = "{home / "ca.crt"}"\n')
        work = tmp_path / "app"
        subprocess.run(["cp", "-r", str(FAILING_APP), str(work)], check=True)
        submitted = subprocess.run([str(flower_bin(FLWR) / "flwr"), "run", str(work), "e2e"], capture_output=True,
                                   text=True, timeout=300, env={**os.environ, "FLWR_HOME": str(home)},
                                   check=False)
        assert submitted.returncode == 0, submitted.stdout + submitted.stderr
        events = wait_until("a RunFailed Event", lambda: _events(real_cluster, ns, "RunFailed"), timeout=240,
                            interval=3, log=agent.log)
        assert any("FAILING-APP fails on purpose" in e for e in events), events
        note = wait_until("a RunFailed notification", lambda: next(
            (n for n in receiver.received if n.get("reason") == "RunFailed"), None), timeout=60, log=agent.log)
        assert note["unit"] == fed and "FAILING-APP fails on purpose" in note["message"], note
        def failed_runs() -> dict[str, Any]:  # as the agent records it on the FlowerUnit (every 5 s)
            runs = dict(_unit(syncer_status(real_cluster, ns), fed)["flower"]["runs"])
            return runs if runs["failed"] else {}

        runs = wait_until("status: the failed run", failed_runs, timeout=60, interval=2, log=agent.log)
        assert runs["failed"] == 1 and "FAILING-APP" in runs["lastFailure"]["message"], runs
        assert agent.metric("flower_syncer_federation_runs", unit=fed, status="failed") == 1
