"""A SuperLink pod deleted on a real node keeps its state (issue 40, item 1; docs/superlink-state.md):
a TLS Federation of Flower 1.42 with SuperNode authentication, its state on a PersistentVolumeClaim
as flower-syncer renders it by default (the devcluster's local provisioner binds it), two pools of
one SuperNode each with a key of its own, listed in Git and registered by the agent. One short run
trains; then the agent is stopped (so nothing can register a key again or apply anything: no
resync, no commit) and the SuperLink's pod is deleted. Its StatefulSet makes a new one on the same
claim: the Control API still lists the earlier run, and both SuperNodes are online again under the
node ids they had, by heartbeats sent after the deletion. Prints the time from the deletion to all
SuperNodes online. With `flower-syncer.io/superlink-state: memory` the run list is empty and the
SuperNodes are refused (their keys forgotten): the test fails."""

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
from tests.conftest import wait_until
from tests.e2e.apps import APP, FLWR
from tests.e2e.conftest import Agent, ConfigRepo, RealCluster, control_api, flwr_run, pod, pod_ready, wait_ready
from tests.integration.agents import free_port

pytestmark = pytest.mark.e2e

POOLS = ("a", "b")


def federation(control: str, public_keys: list[str]) -> str:
    keys = "\n".join(f"      {k}" for k in public_keys)
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
    flower-syncer.io/supernode-auth: enabled
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


def test_a_deleted_superlink_pod_keeps_its_runs_and_its_supernodes(
        real_cluster: RealCluster, e2e_namespace: str, config_repo: ConfigRepo,
        run_agent: Callable[[ConfigRepo, str], Agent], tmp_path: Path) -> None:
    ns = e2e_namespace
    sans = ["kept-superlink", f"kept-superlink.{ns}", f"kept-superlink.{ns}.svc",
            f"kept-superlink.{ns}.svc.cluster.local", "127.0.0.1"]
    tls = tls_material(sans[0], sans)
    _tls_secret(real_cluster, ns, tls)
    keys = {name: keypair(tmp_path, name) for name in POOLS}
    for name in POOLS:
        real_cluster.kubectl("-n", ns, "create", "secret", "generic", f"{name}-supernode-key",
                             f"--from-file=key={tmp_path / name}")
    control = free_port()
    address = f"127.0.0.1:{control}"
    config_repo.commit({
        "flower-syncer.yaml": f"name: e2e\ndefaultNamespace: {ns}\n"
                              "guardrails:\n  allowedSecrets: [a-supernode-key, b-supernode-key, superlink-tls]\n"
                              "  allowedControlApiTargets: ['127.0.0.1:*']\n",
        "federations/kept.yaml": federation(address, [keys[n][1] for n in POOLS]),
    }, "a TLS federation with node authentication, its SuperLink state on a volume (the default)")
    agent = run_agent(config_repo, ns)
    wait_ready(real_cluster, ns, "statefulset", "kept-superlink", 1, agent)
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
                          version=FLWR)
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
