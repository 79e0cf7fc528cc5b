"""SuperNode authentication for Federations (issue 12, part 2): keys declared in Git, the SuperLink
started with --enable-supernode-auth, the registered set kept equal to Git through the Control
API. Pure parts here; tests/integration/test_node_auth.py runs a real SuperLink."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from syncer.cluster.flower_control import ControlApiError, RegisteredNode, _bytes_field, decode_list_nodes
from syncer.engine.nodekeys import reconcile
from syncer.models.nodeauth import parse_key
from syncer.render.repo import plan_repo, render_repo
from syncer.repo.loader import load_repo
from tests.unit.test_engine_fake import NS


def keypair(tmp_path: Path, name: str, kind: str = "ecdsa") -> tuple[Path, str]:
    path = tmp_path / name
    subprocess.run(["ssh-keygen", "-q", "-t", kind, "-N", "", "-C", f"{name}@site", "-f", str(path)], check=True)
    return path, (tmp_path / f"{name}.pub").read_text().strip()


FED = """\
apiVersion: flwr.exalsius.ai/v1
kind: Federation
metadata:
  name: fed
  annotations:
    flower-syncer.io/superlink-tls-secret: superlink-tls
    flower-syncer.io/supernode-auth: {mode}
    flower-syncer.io/supernode-public-keys: |
{keys}
spec:
  mode: StatefulSet
  isolationMode: subprocess
  insecure: {insecure}
  superlink:
    image: {image}
  supernodes:
    image: flwr/supernode:1.26.0
    pools:
      - name: a
        replicas: {replicas}
        extraArgs: [{args}]
"""


def load(tmp_path: Path, keys: list[str], *, mode: str = "enabled", insecure: str = "false", replicas: int = 1,
         image: str = "flwr/superlink:1.26.0", args: str = "--auth-supernode-private-key=/keys/a") -> Any:
    repo = tmp_path / "repo"
    (repo / "federations").mkdir(parents=True, exist_ok=True)
    (repo / "flower-syncer.yaml").write_text(f"name: auth\ndefaultNamespace: {NS}\n")
    (repo / "federations" / "fed.yaml").write_text(FED.format(
        mode=mode, keys="\n".join(f"      {k}" for k in keys) or "      # none", insecure=insecure,
        replicas=replicas, image=image, args=args))
    return load_repo(repo)


def test_a_federation_with_node_auth_plans_its_keys_and_the_superlink_flag(tmp_path: Path) -> None:
    _, k1 = keypair(tmp_path, "k1")
    _, k2 = keypair(tmp_path, "k2")
    state = load(tmp_path, [k1, "# edge site 2", k2])
    assert [d for d in state.diagnostics if d.severity == "error"] == []
    plan = plan_repo(state, render_repo(state), revision="r1")
    (planned,) = plan.units.values()
    assert planned.node_auth is not None
    assert planned.node_auth.address == f"fed-superlink.{NS}.svc:9093"
    assert planned.node_auth.ca_secret == "fed-superlink-ca"
    assert [label.split(" ")[1] for label, _ in planned.node_auth.keys] == ["(k1@site)", "(k2@site)"]
    assert all(pem.startswith(b"-----BEGIN PUBLIC KEY-----") for _, pem in planned.node_auth.keys)
    superlink = next(m for m in planned.manifests if m["kind"] == "StatefulSet" and m["metadata"]["name"] ==
                     "fed-superlink")
    assert "--enable-supernode-auth" in superlink["spec"]["template"]["spec"]["containers"][0]["args"]


@pytest.mark.parametrize(("kwargs", "path", "message"), [
    ({"insecure": "true"}, "metadata.annotations['flower-syncer.io/supernode-auth']", "needs a TLS SuperLink"),
    ({"image": "flwr/superlink:1.22.0"}, "spec.superlink.image", "needs Flower 1.23 or newer"),
    ({"args": ""}, "spec.supernodes.pools[0].extraArgs", "has no key, so the SuperLink refuses"),
    ({"replicas": 2}, "spec.supernodes.pools[0].replicas", "would share one key"),
    ({"mode": "maybe"}, "metadata.annotations['flower-syncer.io/supernode-auth']", "'maybe' is not a setting"),
])
def test_node_auth_mistakes_are_validation_errors(tmp_path: Path, kwargs: dict[str, Any], path: str,
                                                  message: str) -> None:
    state = load(tmp_path, [], **kwargs)
    errors = [d for d in state.diagnostics if d.severity == "error"]
    assert any(d.path == path and message in d.message and d.file == "federations/fed.yaml" and d.line > 0
               for d in errors), errors


def test_a_superlink_past_the_grpc_control_api_is_a_warning(tmp_path: Path) -> None:
    state = load(tmp_path, [], image="flwr/superlink:1.42.0")
    warnings = [d for d in state.diagnostics if d.severity == "warning" and d.path == "spec.superlink.image"]
    assert len(warnings) == 1 and "deprecated for HTTP" in warnings[0].message
    # the only error: the fixture's 1.26 SuperNodes cannot talk to a 1.42 SuperLink (models/flower.py fleet_skew)
    assert [d.path for d in state.diagnostics if d.severity == "error"] == ["spec.supernodes.image"]


def test_bad_keys_name_their_line(tmp_path: Path) -> None:
    _, k1 = keypair(tmp_path, "k1")
    _, ed = keypair(tmp_path, "ked", "ed25519")
    state = load(tmp_path, [k1, "ssh-rsa not-base64!", ed, k1])
    messages = sorted(d.message for d in state.diagnostics if d.severity == "error")
    assert [m.split(":")[0] for m in messages] == ["line 2 of the list", "line 3 of the list", "line 4 of the list"]
    assert "not an OpenSSH public key" in messages[0]
    assert "ECDSA keys on NIST curves only" in messages[1] and "listed twice" in messages[2]


def test_keys_without_auth_are_a_warning(tmp_path: Path) -> None:
    _, k1 = keypair(tmp_path, "k1")
    state = load(tmp_path, [k1], mode="disabled")
    (warning,) = state.diagnostics
    assert warning.severity == "warning" and "any SuperNode is admitted" in warning.message
    (planned,) = plan_repo(state, render_repo(state)).units.values()
    assert planned.node_auth is None


class FakeSuperLink:
    def __init__(self, nodes: list[RegisteredNode]) -> None:
        self.nodes = nodes
        self.calls: list[str] = []

    def list_nodes(self) -> list[RegisteredNode]:
        return list(self.nodes)

    def register(self, public_key: bytes) -> int:
        self.calls.append("register")
        if any(n.public_key == public_key for n in self.nodes):
            raise ControlApiError("RegisterNode", "fake", "Public key already in use", "FAILED_PRECONDITION")
        node = RegisteredNode(100 + len(self.nodes), "registered", public_key)
        self.nodes.append(node)
        return node.node_id

    def unregister(self, node_id: int) -> None:
        self.calls.append(f"unregister {node_id}")
        self.nodes = [RegisteredNode(n.node_id, "unregistered", n.public_key) if n.node_id == node_id else n
                      for n in self.nodes]


def test_reconcile_registers_what_git_lists_and_unregisters_the_rest() -> None:
    api = FakeSuperLink([RegisteredNode(1, "online", b"PEM-A\n"), RegisteredNode(2, "registered", b"PEM-HAND"),
                         RegisteredNode(3, "unregistered", b"PEM-OLD")])
    report = reconcile(api, [("a", b"PEM-A"), ("b", b"PEM-B\n"), ("old", b"PEM-OLD")])
    assert report.registered == ["b"] and report.unregistered == [2] and report.admitted == 2
    assert RegisteredNode(103, "registered", b"PEM-B\n") in api.nodes  # registered byte for byte
    assert report.errors == ["key old was unregistered from this SuperLink before, and Flower never admits it again: "
                             "make a new key pair for that SuperNode and list its public key"]
    api.calls.clear()
    again = reconcile(api, [("a", b"PEM-A"), ("b", b"PEM-B\n")])
    assert api.calls == [] and not again.changed and again.admitted == 2  # in step: no calls but the list


def test_the_codec_speaks_flowers_messages(tmp_path: Path) -> None:
    from flwr.proto import control_pb2, node_pb2  # the reference: flwr is a test dependency

    pem, _ = parse_key(keypair(tmp_path, "k1")[1])
    assert pem is not None
    request = control_pb2.RegisterNodeRequest.FromString(_bytes_field(1, pem.pem))
    assert request.public_key == pem.pem
    response = control_pb2.ListNodesResponse(now="2026-11-24", nodes_info=[
        node_pb2.NodeInfo(node_id=2**63 + 5, owner_aid="x", status="online", online_until=1.5, heartbeat_interval=2.0,
                          public_key=pem.pem),
        node_pb2.NodeInfo(node_id=7, status="unregistered")])
    assert decode_list_nodes(response.SerializeToString()) == [
        RegisteredNode(2**63 + 5, "online", pem.pem), RegisteredNode(7, "unregistered", b"")]



def test_a_closed_control_api_is_a_warning(tmp_path: Path) -> None:
    state = load(tmp_path, [])
    (warning,) = [d for d in state.diagnostics if d.severity == "warning"]
    assert "closes to everyone not named" in warning.message and "control-api-from" in warning.hint
    text = (tmp_path / "repo" / "federations" / "fed.yaml").read_text()
    (tmp_path / "repo" / "federations" / "fed.yaml").write_text(text.replace(
        "    flower-syncer.io/supernode-auth:", "    flower-syncer.io/control-api-from: flower-syncer\n"
                                               "    flower-syncer.io/supernode-auth:"))
    assert not [d for d in load_repo(tmp_path / "repo").diagnostics if d.severity == "warning"]
