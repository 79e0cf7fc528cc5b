"""What a user cares about most: a Federation pushed to Git becomes real Flower in real containers,
and it trains. A commit, the agent applies it, the SuperLink and SuperNodes become Ready through
their own probes (HTTP /health from Flower 1.35, gRPC health before), `flwr run` submits a tiny
numpy app through the Control API (HTTP from 1.37, gRPC before), and the rounds complete, with the
node config each SuperNode was given reaching its ClientApp. The newest release in both isolation
modes, and 1.26, the last release whose APIs are all gRPC."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.e2e.apps import APP, CLIENT_LINE, FLWR, OLD_FLWR, federation
from tests.e2e.conftest import Agent, ConfigRepo, RealCluster, flwr_run, wait_ready

pytestmark = pytest.mark.e2e

Report = tuple[str, ...]  # partition-id, its type, num-partitions, its type


def _client_reports(cluster: RealCluster, namespace: str, pods: list[str], container: str) -> dict[str, set[Report]]:
    found: dict[str, set[Report]] = {}
    for pod in pods:
        found[pod] = set(CLIENT_LINE.findall(cluster.logs(namespace, pod, container)))
    return found


@pytest.mark.parametrize(("flwr", "isolation"), [(FLWR, "subprocess"), (FLWR, "process"), (OLD_FLWR, "subprocess")])
def test_a_pushed_federation_trains(flwr: str, isolation: str, real_cluster: RealCluster, e2e_namespace: str,
                                    config_repo: ConfigRepo, run_agent: Callable[[ConfigRepo, str], Agent],
                                    tmp_path: Path) -> None:
    ns = e2e_namespace
    config_repo.commit({
        "flower-syncer.yaml": f"name: e2e\ndefaultNamespace: {ns}\n",
        "federations/train.yaml": federation(isolation, replicas=3, flwr=flwr),
    }, "a federation of three")
    agent = run_agent(config_repo, ns)

    # Ready means the real probes pass, in the SuperLink and in every SuperNode.
    wait_ready(real_cluster, ns, "statefulset", "train-superlink", 1, agent)
    wait_ready(real_cluster, ns, "statefulset", "train-supernode-p", 3, agent)

    # The Service's control port (9093) is the Control API whatever the release: gRPC up to 1.36,
    # the SuperLink's HTTP port from 1.37.
    with real_cluster.port_forward(ns, "svc/train-superlink", 9093) as port:
        output = flwr_run(APP, f"127.0.0.1:{port}", tmp_path / "flwr", version=flwr)
    assert "E2E-SERVER rounds=2 final=[2.0, 2.0, 2.0, 2.0]" in output, output[-4000:]

    # Every ClientApp got its own partition, as an integer, and the pool size, in both rounds.
    container = "supernode" if isolation == "subprocess" else "superexec-clientapp"
    pods = [f"train-supernode-p-{i}" for i in range(3)]
    reports = _client_reports(real_cluster, ns, pods, container)
    assert reports == {pod: {(str(i), "int", "3", "int")} for i, pod in enumerate(pods)}, reports
