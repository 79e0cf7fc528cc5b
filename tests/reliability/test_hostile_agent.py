"""Hostile SuperLinks against the agent process (issue 39: "no tenant can stop, starve or exhaust
the agent"): one tenant's namespace holds 8 federations with SuperNode authentication whose
Control API (an address the repository's guardrails allow) trickles one byte every 0.1 s over TLS
(tests/hostile_servers.py). Key registration runs on the agent's sync workers, and the agent checks
those keys every status round: without a share per namespace, the trickling SuperLinks held every
sync worker for 5 s each, all the time (4 calls of key registration at once: each lasts its 5 s
deadline, the health probe's 3 s), and another tenant's commit waited 5-15 s behind them. With it,
one key registration of that namespace runs at a time, the other namespace's unit syncs promptly,
/healthz says 200 all along (the agent makes progress), `stuck` stays empty, and SIGTERM stops the
agent within its grace period.

bench/hostile_agent.py measures the same with every hostile kind and 20 other federations."""

from __future__ import annotations

import base64
import contextlib
import json
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from syncer.cluster.client import ApiError, Kube
from tests.conftest import KubeCluster, wait_until
from tests.hostile_servers import Hostile, Pki, trickle
from tests.integration.agents import FED, AgentProc, Repos, sts
from tests.nodeauth import auth_federation

pytestmark = pytest.mark.cluster

HOSTILE = 8  # trickling SuperLinks in one namespace: 8 x 5 s of key registration per 10 s round on 4 workers
PROMPT = 8.0  # seconds a commit of another namespace's unit may take under the attack (on a machine loaded
# by the rest of the suite; it waited 5-15 s without the share, the most key registrations at once says it surely)
KEY_CALL = 4.0  # a call that lasted this long is key registration's (5 s deadline), not the health probe's (3 s)


class Timed:
    """The trickling server's calls: when each connection opened and closed."""

    def __init__(self) -> None:
        self.spans: list[tuple[float, float]] = []

    def serve(self, conn: socket.socket) -> None:
        started = time.monotonic()
        try:
            trickle(conn)
        finally:
            self.spans.append((started, time.monotonic()))

    def most_at_once(self, longer_than: float) -> int:
        """The most calls of at least `longer_than` seconds in progress at one moment."""
        long = [(a, b) for a, b in self.spans if b - a >= longer_than]
        return max((sum(1 for a, b in long if a <= t < b) for t, _ in long), default=0)


@pytest.fixture
def hostile_namespace(kube: Kube, namespace: str) -> Iterator[str]:
    name = namespace[:50] + "-x"
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name,
                                                                      "labels": {"flower-syncer.dev/test": "true"}}})
    yield name
    with contextlib.suppress(ApiError):
        kube.delete("Namespace", None, name)


def test_trickling_superlinks_of_one_tenant_never_hold_up_another_tenants_commit(
        repos: Repos, start_agent: Callable[..., AgentProc], kube_cluster: KubeCluster, kube: Kube, namespace: str,
        hostile_namespace: str, tmp_path: Path) -> None:
    pki = Pki.make(tmp_path)
    calls = Timed()
    servers = [Hostile(calls.serve, pki.server_tls("http/1.1")) for _ in range(HOSTILE)]
    kube.create({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                 "metadata": {"name": "superlink-tls", "namespace": hostile_namespace},
                 "data": {k: base64.b64encode(v).decode() for k, v in {
                     "tls.crt": pki.cert.read_bytes(), "tls.key": pki.key.read_bytes(), "ca.crt": pki.ca}.items()}})
    files = {"flower-syncer.yaml": f"name: {namespace}\ndefaultNamespace: {namespace}\nguardrails:\n"
                                   "  allowedControlApiTargets: ['127.0.0.1:*']\n  allowedSecrets: [superlink-tls]\n"}
    for i, server in enumerate(servers):
        files[f"federations/slow-{i}.yaml"] = auth_federation(f"slow-{i}", server.address).replace(
            f"  name: slow-{i}\n", f"  name: slow-{i}\n  namespace: {hostile_namespace}\n", 1)
    repos.commit(files, "a tenant with trickling SuperLinks")
    agent = start_agent(str(repos.bare), "--namespaces", f"{namespace},{hostile_namespace}")
    try:
        def status() -> dict[str, dict[str, object]]:
            code, body = agent.get("/api/v1/status")
            return {u["unit"]: u for u in json.loads(body)["units"]} if code == 200 else {}

        # the attack is on: the slow federations' keys are being asked (each call cut at its deadline)
        def tried() -> int:
            units = status()
            return sum(1 for i in range(HOSTILE) if (units.get(f"federation/{hostile_namespace}/slow-{i}") or {})
                       .get("nodeKeys"))

        wait_until("every slow federation's keys tried", lambda: tried() == HOSTILE, timeout=90, interval=0.5,
                   log=agent.log)
        wait_until("the first sync of the other tenant's unit", lambda: sts(kube, namespace).get("spec"),
                   log=agent.log)
        polls: list[int] = []
        polling = threading.Event()

        def poll() -> None:
            while not polling.wait(0.25):
                polls.append(agent.get("/healthz")[0])

        poller = threading.Thread(target=poll, daemon=True)
        poller.start()
        for replicas in (3, 4, 5):
            repos.commit({"federations/fed.yaml": FED.format(image="flwr/supernode:1.25.0", replicas=replicas)})
            wait_until(f"the other tenant's commit (replicas {replicas}) applied within {PROMPT:g}s",
                       lambda r=replicas: sts(kube, namespace).get("spec", {}).get("replicas") == r,  # type: ignore[misc]
                       timeout=PROMPT, log=agent.log)
        polling.set()
        poller.join()
        assert polls and set(polls) == {200}, polls  # the agent made progress all along, and says so
        code, body = agent.get("/api/v1/status")
        assert code == 200 and json.loads(body)["stuck"] == ""
        assert calls.most_at_once(KEY_CALL) == 1, calls.spans  # the namespace's share of the 4 workers

        started = time.monotonic()
        agent.proc.send_signal(signal.SIGTERM)
        assert agent.proc.wait(20) == 0
        assert time.monotonic() - started < 10
    finally:
        for server in servers:
            server.close()
