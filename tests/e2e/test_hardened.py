"""SuperNode chart releases with the chart's hardened defaults (non-root, read-only root
filesystem, every capability dropped, seccomp RuntimeDefault) start for real, in subprocess and
in process isolation (SuperExec Deployment), join a Federation's SuperLink and train beside its
own pool."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.builders import federation, pool
from tests.e2e.apps import APP, CLIENT_LINE, FLWR
from tests.e2e.conftest import Agent, ConfigRepo, RealCluster, flwr_run, wait_ready

pytestmark = pytest.mark.e2e

HUB = federation("hub", version=FLWR, pools=pool("p", extra=(
    '        nodeConfig:\n          partition-id: "0"\n          num-partitions: "3"\n')))


def release(partition: int, process: bool) -> str:
    """Chart values: only what differs from the chart's defaults (TLS off: the hub is insecure)."""
    superexec = f"""superexec:
  enabled: true
  image:
    registry: docker.io
    repository: flwr/superexec
    tag: {FLWR}
""" if process else ""
    return f"""tls:
  enabled: false
supernode:
{"  isolationMode: process" + chr(10) if process else ""}  superlink:
    address: hub-superlink
    port: 9092
  node:
    config:
      partition-id: {partition}
      num-partitions: 3
  image:
    registry: docker.io
    repository: flwr/supernode
    tag: {FLWR}
{superexec}"""


def test_hardened_chart_releases_run_and_train(real_cluster: RealCluster, e2e_namespace: str,
                                               config_repo: ConfigRepo,
                                               run_agent: Callable[[ConfigRepo, str], Agent],
                                               tmp_path: Path) -> None:
    ns = e2e_namespace
    config_repo.commit({
        "flower-syncer.yaml": f"name: e2e\ndefaultNamespace: {ns}\n",
        "federations/hub.yaml": HUB,
        "supernodes/edge-sub/values.yaml": release(1, process=False),
        "supernodes/edge-proc/values.yaml": release(2, process=True),
    }, "a hub and two hardened releases")
    agent = run_agent(config_repo, ns)
    wait_ready(real_cluster, ns, "statefulset", "hub-superlink", 1, agent)
    wait_ready(real_cluster, ns, "statefulset", "hub-supernode-p", 1, agent)
    for deployment in ("edge-sub-flower-client-supernode", "edge-proc-flower-client-supernode",
                       "edge-proc-flower-client-superexec-clientapp"):
        wait_ready(real_cluster, ns, "deployment", deployment, 1, agent)

    # The chart's pods run with the hardened settings, and they hold at run time.
    pods = real_cluster.json("-n", ns, "get", "pods")["items"]
    chart_pods = {p["metadata"]["name"]: p for p in pods if p["metadata"]["name"].startswith("edge-")}
    assert len(chart_pods) == 3, sorted(chart_pods)
    for name, pod in chart_pods.items():
        assert all(c["ready"] for c in pod["status"]["containerStatuses"]), name
        for container in pod["spec"]["containers"]:
            ctx = container["securityContext"]
            assert ctx["readOnlyRootFilesystem"] and ctx["runAsNonRoot"] and ctx["capabilities"]["drop"] == ["ALL"]
            assert not ctx["allowPrivilegeEscalation"], (name, ctx)
            probe = ["-n", ns, "exec", name, "-c", container["name"], "--"]
            assert real_cluster.kubectl(*probe, "id", "-u").stdout.strip() == "49999"
            denied = real_cluster.kubectl(*probe, "sh", "-c", "touch /probe", check=False)
            assert denied.returncode != 0 and "Read-only file system" in denied.stderr, denied
            caps = real_cluster.kubectl(*probe, "sh", "-c", "grep CapEff /proc/self/status").stdout
            assert caps.split()[1] == "0000000000000000", caps
            seccomp = real_cluster.kubectl(*probe, "sh", "-c", "grep Seccomp: /proc/self/status").stdout
            assert seccomp.split()[1] == "2", seccomp  # filter mode: the runtime's default profile

    with real_cluster.port_forward(ns, "svc/hub-superlink", 9093) as port:
        output = flwr_run(APP, f"127.0.0.1:{port}", tmp_path / "flwr", version=FLWR)
    assert "E2E-SERVER rounds=2 final=[2.0, 2.0, 2.0, 2.0]" in output, output[-4000:]

    def reports(pod: str, container: str) -> set[tuple[str, ...]]:
        return set(CLIENT_LINE.findall(real_cluster.logs(ns, pod, container)))

    by_release = {name.split("-flower-client")[0] + ("/superexec" if "superexec" in name else ""): name
                  for name in chart_pods}
    assert reports("hub-supernode-p-0", "supernode") == {("0", "int", "3", "int")}
    assert reports(by_release["edge-sub"], "supernode") == {("1", "int", "3", "int")}
    assert reports(by_release["edge-proc/superexec"], "superexec") == {("2", "int", "3", "int")}, json.dumps(
        sorted(chart_pods))
