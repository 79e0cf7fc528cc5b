"""A TLS SuperLink with SuperNode authentication, and SuperNode chart releases that reach it the
way the chart documents: the SuperLink's certificate made by the test and put in a Secret, the
releases copying its CA with `copyFromExistingSecret`, each with its own OpenSSH key pair, the
public keys listed in Git and registered by flower-syncer through the Control API (over HTTPS:
the newest release serves it on its HTTP port). Training completes over TLS; a SuperNode that
trusts another CA, and one whose key is not listed, are refused, and their pools are reported not
ready with the reason."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tests.builders import keypair, tls_material
from tests.conftest import wait_until
from tests.e2e.apps import APP, CLIENT_LINE, FLWR
from tests.e2e.conftest import Agent, ConfigRepo, RealCluster, flwr_run, syncer_status, wait_ready
from tests.integration.agents import free_port

pytestmark = pytest.mark.e2e


def _pem(obj: x509.Certificate | ec.EllipticCurvePrivateKey) -> bytes:
    if isinstance(obj, x509.Certificate):
        return obj.public_bytes(serialization.Encoding.PEM)
    return obj.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def federation(control: str, public_keys: list[str]) -> str:
    keys = "\n".join(f"      {k}" for k in public_keys)
    return f"""\
apiVersion: flwr.exalsius.ai/v1
kind: Federation
metadata:
  name: secure
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
    pools:  # one SuperNode of its own, beside the chart releases
      - name: hub
        replicas: 1
        images: {{}}
        nodeConfig:
          partition-id: "2"
          num-partitions: "3"
        volumes:
          - name: key
            secret:
              secretName: hub-supernode-key
        volumeMounts:
          - name: key
            mountPath: /keys
            readOnly: true
        extraArgs: ["--auth-supernode-private-key=/keys/key"]
"""


def release(name: str, partition: int, key: tuple[str, str], ca_secret: str) -> str:
    private = "\n".join(f"      {line}" for line in key[0].strip().splitlines())
    return f"""\
global:
  nodeAuth:
    enabled: true
    authSupernodePrivateKey: |
{private}
    authSupernodePublicKey: {key[1]}
tls:
  enabled: true
supernode:
  superlink:
    address: secure-superlink
    port: 9092
    certificate:
      existingSecret: {ca_secret}
      copyFromExistingSecret:
        enabled: true
        secretName: {name}-superlink-ca
  node:
    config:
      partition-id: {partition}
      num-partitions: 3
  image:
    registry: docker.io
    repository: flwr/supernode
    tag: {FLWR}
"""


def _secret(cluster: RealCluster, namespace: str, name: str, data: dict[str, bytes]) -> None:
    manifest = {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                "metadata": {"name": name, "namespace": namespace},
                "data": {k: base64.b64encode(v).decode() for k, v in data.items()}}
    cluster.kubectl("apply", "-f", "-", input=json.dumps(manifest))


def _pool(report: Any, unit: str) -> dict[str, Any]:
    for u in report.get("units", []):
        if u["unit"] == unit and u["pools"]:
            return dict(u["pools"][0])
    return {}


def test_tls_and_node_auth_admit_only_the_listed_keys(real_cluster: RealCluster, e2e_namespace: str,
                                                      config_repo: ConfigRepo,
                                                      run_agent: Callable[[ConfigRepo, str], Agent],
                                                      tmp_path: Path) -> None:
    ns = e2e_namespace
    sans = ["secure-superlink", f"secure-superlink.{ns}", f"secure-superlink.{ns}.svc",
            f"secure-superlink.{ns}.svc.cluster.local", "127.0.0.1"]
    superlink_tls = tls_material(sans[0], sans)
    _secret(real_cluster, ns, "superlink-tls", superlink_tls)
    _secret(real_cluster, ns, "other-tls", tls_material(sans[0], sans))  # the same names, another CA
    keys = {name: keypair(tmp_path, name) for name in ("hub", "edge-a", "edge-b", "wrong-ca", "rogue")}
    real_cluster.kubectl("-n", ns, "create", "secret", "generic", "hub-supernode-key",
                         f"--from-file=key={tmp_path / 'hub'}")
    control_port = free_port()
    listed = [keys[n][1] for n in ("hub", "edge-a", "edge-b", "wrong-ca")]  # rogue's key is not listed
    config_repo.commit({
        # keys are registered at the port-forward below: a target the guardrails must allow
        "flower-syncer.yaml": f"name: e2e\ndefaultNamespace: {ns}\n"
                              "guardrails:\n  allowedSecrets: [hub-supernode-key, superlink-tls]\n"  # the hand-made key
                              "  allowedControlApiTargets: ['127.0.0.1:*']\n",
        "federations/secure.yaml": federation(f"127.0.0.1:{control_port}", listed),
        "supernodes/edge-a/values.yaml": release("edge-a", 0, keys["edge-a"], "superlink-tls"),
        "supernodes/edge-b/values.yaml": release("edge-b", 1, keys["edge-b"], "superlink-tls"),
        "supernodes/wrong-ca/values.yaml": release("wrong-ca", 0, keys["wrong-ca"], "other-tls"),
        "supernodes/rogue/values.yaml": release("rogue", 1, keys["rogue"], "superlink-tls"),
    }, "a TLS federation with node authentication, and four releases")
    agent = run_agent(config_repo, ns)
    wait_ready(real_cluster, ns, "statefulset", "secure-superlink", 1, agent)

    # The agent registers the listed keys through the Control API; from this machine it reaches
    # it through a port-forward, named in the Federation (flower-syncer.io/control-api-address).
    with real_cluster.port_forward(ns, "svc/secure-superlink", 9093, local=control_port):
        config_repo.commit({"README.md": "register the keys now\n"}, "sync again")
        for name in ("edge-a", "edge-b"):
            wait_ready(real_cluster, ns, "deployment", f"{name}-flower-client-supernode", 1, agent)
        wait_ready(real_cluster, ns, "statefulset", "secure-supernode-hub", 1, agent)
        home = tmp_path / "flwr"
        home.mkdir()
        (home / "ca.crt").write_bytes(superlink_tls["ca.crt"])
        output = flwr_run(APP, f"127.0.0.1:{control_port}", home, run_config="num-nodes=3",
                          root_certificates=home / "ca.crt", version=FLWR)
    assert "E2E-SERVER rounds=2 final=[2.0, 2.0, 2.0, 2.0]" in output, output[-4000:]
    pods = [p["metadata"]["name"] for p in real_cluster.json("-n", ns, "get", "pods")["items"]]
    for prefix, partition in (("edge-a-flower-client-supernode-", "0"), ("edge-b-flower-client-supernode-", "1"),
                              ("secure-supernode-hub-", "2")):
        pod = next(name for name in pods if name.startswith(prefix))
        assert set(CLIENT_LINE.findall(real_cluster.logs(ns, pod, "supernode"))) == {
            (partition, "int", "3", "int")}, pod

    # The two others are refused: the SuperNode exits, and `flower-syncer status` reports its pool
    # not ready, crash-looping; its log says why.
    # (Flower 1.42's HTTP Fleet client; 1.26's gRPC one said "Tls handshake failed" and "No SuperNode
    # found with the given public key", which a 1.42 SuperLink now logs on its side.)
    why = {"wrong-ca": "CERTIFICATE_VERIFY_FAILED", "rogue": "Failed to activate SuperNode"}
    for name in ("wrong-ca", "rogue"):
        unit = f"supernode/{ns}/{name}"

        def problem(unit: str = unit) -> dict[str, Any]:
            pool = _pool(syncer_status(real_cluster, ns), unit)
            return pool if pool.get("ready") == 0 and pool.get("problem") else {}

        pool = wait_until(f"{name} reported not ready with a reason", problem, timeout=180, interval=2,
                          log=agent.log)
        assert pool["problem"]["reason"] == "CrashLoopBackOff", pool
        pod = pool["problem"]["example"]

        def says_why(pod: str = pod, reason: str = why[name]) -> str:
            """The last crashed container's log once it has the reason: a container may also end
            before it logged it (a CI run saw one end with only "SuperNode terminated gracefully"),
            the next restart's then says it."""
            logs = real_cluster.kubectl("-n", ns, "logs", pod, "-c", "supernode", "--previous", check=False).stdout
            return logs if reason in logs else ""

        wait_until(f"{name}'s crashed SuperNode logging why", says_why, timeout=180, interval=3, log=agent.log)
