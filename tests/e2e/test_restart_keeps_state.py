"""A SuperLink pod deleted on a real node keeps its state (issue 40, item 1; docs/superlink-state.md):
a TLS Federation of Flower 1.42 with SuperNode authentication, its state on a PersistentVolumeClaim
as flower-syncer renders it by default (the devcluster's local provisioner binds it), two pools of
one SuperNode each with a key of its own, listed in Git and registered by the agent. One short run
trains; then the agent is stopped (so nothing can register a key again or apply anything: no
resync, no commit) and the SuperLink's pod is deleted. Its StatefulSet makes a new one on the same
claim: the Control API still lists the earlier run, and both SuperNodes are online again under the
node ids they had, by heartbeats sent after the deletion. Prints the time from the deletion to all
SuperNodes online. With `flower-syncer.io/superlink-state: memory` the run list is empty and the
SuperNodes are refused (their keys forgotten): the test fails.

The second test is that memory case with the agent running: the keys the new SuperLink forgot are
registered again by the agent at once, without a commit or a resync, and both SuperNodes are
online again."""

from __future__ import annotations

import base64
import json
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.builders import keypair, tls_material
from tests.conftest import pod_ready, wait_until
from tests.e2e.apps import APP, FLWR
from tests.e2e.conftest import Agent, ConfigRepo, RealCluster, control_api, flwr_run, pod, wait_ready
from tests.integration.agents import free_port

pytestmark = pytest.mark.e2e

POOLS = ("a", "b")


def federation(control: str, public_keys: list[str], state: str = "") -> str:
    keys = "\n".join(f"      {k}" for k in public_keys)
    state = f"\n    flower-syncer.io/superlink-state: {state}" if state else ""
    pools = "".join(f"""\
      - name: {name}
        replicas: 1
        images: {{}}
        volumes:
          - name: key
            secret:
              secretName: {name}-supernode-key
        volumeMounts:
          - name: key
            mountPath: /keys
            readOnly: true
        extraArgs: ["--auth-supernode-private-key=/keys/key"]
""" for name in POOLS)
    return f"""\
apiVersion: flwr.exalsius.ai/v1
kind: Federation
metadata:
  name: kept
  annotations:
    flower-syncer.io/superlink-tls-secret: superlink-tls
    flower-syncer.io/supernode-auth: enabled{state}
    flower-syncer.io/control-api-address: {control}
    flower-syncer.io/supernode-public-keys: |
{keys}
spec:
  mode: StatefulSet
  isolationMode: subprocess
  insecure: false
  superlink:
    image: flwr/superlink:{FLWR}
  supernodes:
    image: flwr/supernode:{FLWR}
    pools:
{pools}"""


def _tls_secret(cluster: RealCluster, namespace: str, data: dict[str, bytes]) -> None:
    manifest = {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                "metadata": {"name": "superlink-tls", "namespace": namespace},
                "data": {k: base64.b64encode(v).decode() for k, v in data.items()}}
    cluster.kubectl("apply", "-f", "-", input=json.dumps(manifest))


class Kept:
    """The federation `kept` applied by a running agent: TLS, two pools with keys of their own
    listed in Git, the SuperLink's state `state` (its default, a claim, when "")."""

    def __init__(self, cluster: RealCluster, namespace: str, repo: ConfigRepo,
                 run_agent: Callable[[ConfigRepo, str], Agent], tmp_path: Path, state: str = "") -> None:
        ns = namespace
        sans = ["kept-superlink", f"kept-superlink.{ns}", f"kept-superlink.{ns}.svc",
                f"kept-superlink.{ns}.svc.cluster.local", "127.0.0.1"]
        self.tls = tls_material(sans[0], sans)
        _tls_secret(cluster, ns, self.tls)
        keys = {name: keypair(tmp_path, name) for name in POOLS}
        for name in POOLS:
            cluster.kubectl("-n", ns, "create", "secret", "generic", f"{name}-supernode-key",
                            f"--from-file=key={tmp_path / name}")
        self.control = free_port()
        self.address = f"127.0.0.1:{self.control}"
        repo.commit({
            "flower-syncer.yaml": f"name: e2e\ndefaultNamespace: {ns}\n"
                                  "guardrails:\n  allowedSecrets: [a-supernode-key, b-supernode-key, superlink-tls]\n"
                                  "  allowedControlApiTargets: ['127.0.0.1:*']\n",
            "federations/kept.yaml": federation(self.address, [keys[n][1] for n in POOLS], state),
        }, f"a TLS federation with node authentication, its SuperLink state {state or 'on a volume (the default)'}")
        self.agent = run_agent(repo, ns)
        wait_ready(cluster, ns, "statefulset", "kept-superlink", 1, self.agent)

    def both_online(self) -> set[int] | None:
        """The node ids of the SuperNodes online, once both are."""
        got = control_api(self.address, self.tls["ca.crt"])
        online = {n.node_id for n in got[1] if n.status == "online"} if got else set()
        return online if len(online) == len(POOLS) else None


def test_a_deleted_superlink_pod_keeps_its_runs_and_its_supernodes(
        real_cluster: RealCluster, e2e_namespace: str, config_repo: ConfigRepo,
        run_agent: Callable[[ConfigRepo, str], Agent], tmp_path: Path) -> None:
    ns = e2e_namespace
    kept = Kept(real_cluster, ns, config_repo, run_agent, tmp_path)
    agent, tls, address, control = kept.agent, kept.tls, kept.address, kept.control
    claim = real_cluster.json("-n", ns, "get", "pvc", "superlink-state-kept-superlink-0")
    assert claim["status"]["phase"] == "Bound", claim["status"]

    home = tmp_path / "flwr"
    home.mkdir()
    (home / "ca.crt").write_bytes(tls["ca.crt"])
    with real_cluster.port_forward(ns, "svc/kept-superlink", 9093, local=control):
        config_repo.commit({"README.md": "register the keys now\n"}, "sync again")  # the agent reaches it now
        for name in POOLS:
            wait_ready(real_cluster, ns, "statefulset", f"kept-supernode-{name}", 1, agent)
        output = flwr_run(APP, address, home, timeout=600, run_config="num-nodes=2", root_certificates=home / "ca.crt",
                          version=FLWR, where=(real_cluster, ns))
        assert "E2E-SERVER rounds=2 final=[2.0, 2.0, 2.0, 2.0]" in output, output[-4000:]
        listed = wait_until("the run and both SuperNodes listed", lambda: control_api(address, tls["ca.crt"]),
                            timeout=60, interval=1)
    runs_before = {r.run_id: r.status for r in listed[0]}
    nodes_before = {n.node_id for n in listed[1] if n.status == "online"}
    assert list(runs_before.values()) == ["finished"] and len(nodes_before) == 2, listed

    # Nothing may register a key again from here on: the agent stops.
    agent.proc.send_signal(signal.SIGTERM)
    agent.proc.wait(60)
    old = pod(real_cluster, ns, "kept-superlink-0")["metadata"]["uid"]
    deleted = time.time()
    real_cluster.kubectl("-n", ns, "delete", "pod", "kept-superlink-0", "--wait=false")

    def restarted() -> bool:
        new = pod(real_cluster, ns, "kept-superlink-0")
        return bool(new) and new["metadata"]["uid"] != old and pod_ready(new)

    wait_until("a new SuperLink pod Ready", restarted, timeout=180, interval=0.5)
    ready = time.time() - deleted

    def back_online() -> tuple[dict[int, str], set[int]] | None:
        """The runs and the SuperNodes online, once every SuperNode heartbeat reached the new
        SuperLink: an online_until beyond what a heartbeat sent before the deletion gives (a
        database keeps `online` for up to two heartbeat intervals after the last one)."""
        got = control_api(address, tls["ca.crt"])
        if got is None:
            return None
        online = {n.node_id for n in got[1]
                  if n.status == "online" and n.online_until > deleted + 2 * n.heartbeat_interval}
        return ({r.run_id: r.status for r in got[0]}, online) if online >= nodes_before else None

    with real_cluster.port_forward(ns, "svc/kept-superlink", 9093, local=control):
        runs_after, online_after = wait_until(
            "both SuperNodes online in the restarted SuperLink, by heartbeats after the deletion", back_online,
            timeout=180, interval=0.5)
        online = time.time() - deleted
    sys.stderr.write(f"Flower {FLWR}: SuperLink pod deleted -> new pod Ready in {ready:.1f}s, "
                     f"both authenticated SuperNodes online in {online:.1f}s (no key registered again)\n")
    assert runs_after == runs_before, (runs_before, runs_after)  # the earlier run, still listed
    assert online_after == nodes_before  # under the node ids they had: the keys were kept


def test_keys_a_superlink_forgot_are_registered_again_at_once(
        real_cluster: RealCluster, e2e_namespace: str, config_repo: ConfigRepo,
        run_agent: Callable[[ConfigRepo, str], Agent], tmp_path: Path) -> None:
    """The other way round: state in memory (`superlink-state: memory`), the agent running. The
    deleted SuperLink's successor knows no key and refuses both SuperNodes; the agent registers
    them again at once, not at a resync or a commit: its next status round sees the keys Git lists
    missing (`SuperNodeKeysForgotten`), or the retry of a sync that failed while the SuperLink was
    away registers them first (either is printed). Both SuperNodes online again, under new node
    ids. Without the agent they stay refused (the first test, in memory, fails so)."""
    ns = e2e_namespace
    kept = Kept(real_cluster, ns, config_repo, run_agent, tmp_path, state="memory")
    agent = kept.agent
    with real_cluster.port_forward(ns, "svc/kept-superlink", 9093, local=kept.control):
        config_repo.commit({"README.md": "register the keys now\n"}, "sync again")  # the agent reaches it now
        for name in POOLS:
            wait_ready(real_cluster, ns, "statefulset", f"kept-supernode-{name}", 1, agent)
        before = wait_until("both SuperNodes online", kept.both_online, timeout=120, interval=1, log=agent.log)
    old = pod(real_cluster, ns, "kept-superlink-0")["metadata"]["uid"]
    deleted = time.time()
    real_cluster.kubectl("-n", ns, "delete", "pod", "kept-superlink-0", "--wait=false")

    def restarted() -> bool:
        new = pod(real_cluster, ns, "kept-superlink-0")
        return bool(new) and new["metadata"]["uid"] != old and pod_ready(new)

    wait_until("a new SuperLink pod Ready", restarted, timeout=180, interval=0.5, log=agent.log)
    ready = time.time() - deleted
    # the agent asks the SuperLink through this port-forward (the old one went with the old pod)
    with real_cluster.port_forward(ns, "svc/kept-superlink", 9093, local=kept.control):
        after = wait_until("both SuperNodes online again, their keys registered again by the agent",
                           kept.both_online, timeout=300, interval=1, log=agent.log)
        online = time.time() - deleted
    forgotten = real_cluster.json("-n", ns, "get", "events", "--field-selector",
                                  "reason=SuperNodeKeysForgotten")["items"]
    sys.stderr.write(f"Flower {FLWR}, state in memory: SuperLink pod deleted -> new pod Ready in {ready:.1f}s, "
                     f"keys registered again by the agent and both SuperNodes online in {online:.1f}s "
                     f"({'after SuperNodeKeysForgotten' if forgotten else 'by the retry of a sync that failed'})\n")
    assert not after & before, (before, after)  # a SuperLink in memory gave them new node ids
