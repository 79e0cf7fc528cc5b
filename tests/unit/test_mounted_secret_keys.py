"""A workload whose pods would mount a key their Secret lacks is not applied; the sync says which
Secret and key instead of leaving pods in ContainerCreating (issue 12: chart fidelity)."""

from __future__ import annotations

import base64
from pathlib import Path

from syncer.engine.changeset import Cause
from syncer.engine.mounts import missing_keys, mounted_secret_keys
from syncer.engine.sync import Engine, SyncOptions
from syncer.render.repo import plan_repo, render_repo
from syncer.repo.loader import load_repo
from tests.fakekube import FakeApiServer, FakeKube

NS = "flower"
TLS_VALUES = """\
tls:
  enabled: true
supernode:
  superlink:
    address: superlink.example.com
    certificate:
      existingSecret: superlink-ca
"""


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def test_a_kubernetes_tls_secret_without_ca_crt_is_a_sync_error_not_a_stuck_pod(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "supernodes" / "edge").mkdir(parents=True)
    (repo / "flower-syncer.yaml").write_text(f"name: team\ndefaultNamespace: {NS}\n")
    (repo / "supernodes" / "edge" / "values.yaml").write_text(TLS_VALUES)
    server = FakeApiServer()
    server.add_namespace(NS)
    kube = FakeKube(server)
    # what `kubectl create secret tls superlink-ca --cert ... --key ...` makes
    kube.create({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                 "metadata": {"name": "superlink-ca", "namespace": NS},
                 "data": {"tls.crt": b64("cert"), "tls.key": b64("key")}})
    state = load_repo(repo)

    def sync() -> dict[str, tuple[str, str, Cause | None]]:
        report = Engine(kube).sync(plan_repo(state, render_repo(state), revision="r1"), SyncOptions())
        return {str(c.ref): (c.action.value, c.message, c.cause) for u in report.units for c in u.changes}

    changes = sync()
    deployment = f"Deployment/{NS}/edge-flower-client-supernode"
    action, message, cause = changes[deployment]
    assert action == "failed" and cause is Cause.MISSING_SECRET_KEY
    assert "Secret superlink-ca has no key ca.crt" in message and "kubectl create secret tls" in message
    assert kube.get("Deployment", NS, "edge-flower-client-supernode") is None
    # the Service and the rest are applied; the workload follows once the Secret has the key
    assert changes[f"Service/{NS}/edge-flower-client-supernode"][0] == "created"
    kube.apply({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "superlink-ca", "namespace": NS},
                "data": {"ca.crt": b64("ca")}}, force=True, manager="kubectl")
    assert sync()[deployment][0] == "created"


def test_which_keys_a_pod_template_mounts() -> None:
    sts = {"kind": "StatefulSet", "spec": {"template": {"spec": {"volumes": [
        {"name": "a", "secret": {"secretName": "s1", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"name": "b", "secret": {"secretName": "s2"}},  # whole Secret: any keys
        {"name": "c", "secret": {"secretName": "s3", "optional": True, "items": [{"key": "x", "path": "x"}]}},
        {"name": "d", "projected": {"sources": [
            {"secret": {"name": "s1", "items": [{"key": "tls.crt", "path": "tls.crt"}]}},
            {"configMap": {"name": "cm", "items": [{"key": "k", "path": "k"}]}}]}}]}}}}
    assert mounted_secret_keys(sts) == {"s1": {"ca.crt", "tls.crt"}}
    assert mounted_secret_keys({"kind": "Service", "spec": {}}) == {}
    wanted = {"s1": {"ca.crt", "tls.crt"}, "gone": {"k"}}
    assert missing_keys(wanted, {"s1": {"data": {"tls.crt": "x", "ca.crt": "y"}}, "gone": None}) == []
    assert missing_keys(wanted, {"s1": {"data": {"tls.crt": "x"}}, "gone": None}) == ["Secret s1 has no key ca.crt"]
