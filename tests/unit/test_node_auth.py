"""SuperNode authentication for Federations (issue 12, part 2): keys declared in Git, the SuperLink
started with --enable-supernode-auth, the registered set kept equal to Git through the Control
API. Pure parts here; tests/integration/test_node_auth.py runs a real SuperLink."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from syncer.cluster.flower_control import (
    ControlApiError,
    ControlErrorCode,
    RegisteredNode,
    RunInfo,
    _bytes_field,
    decode_list_nodes,
    decode_list_runs,
)
from syncer.engine import nodekeys
from syncer.engine.changeset import UnitResult
from syncer.engine.disruption import Disruption, Effect
from syncer.engine.inventory import OwnedKeys
from syncer.engine.keyresult import KeyOutcome
from syncer.engine.nodekeys import key_digest, reconcile
from syncer.identity import ObjectRef
from syncer.models.nodeauth import parse_key, parse_keys
from syncer.render.repo import plan_repo, render_repo
from syncer.repo.loader import load_repo
from tests.builders import NS
from tests.nodeauth import FED, FakeSuperLink, keypair


def load(tmp_path: Path, keys: list[str], *, mode: str = "enabled", insecure: str = "false", replicas: int = 1,
         image: str = "flwr/superlink:1.26.0", args: str = "--auth-supernode-private-key=/keys/a",
         supernode_image: str = "flwr/supernode:1.26.0") -> Any:
    repo = tmp_path / "repo"
    (repo / "federations").mkdir(parents=True, exist_ok=True)
    (repo / "flower-syncer.yaml").write_text(f"name: auth\ndefaultNamespace: {NS}\n"
                                             "guardrails: {allowedSecrets: [superlink-tls]}\n")
    (repo / "federations" / "fed.yaml").write_text(FED.format(
        mode=mode, keys="\n".join(f"      {k}" for k in keys) or "      # none", insecure=insecure,
        replicas=replicas, image=image, args=args).replace("flwr/supernode:1.26.0", supernode_image))
    return load_repo(repo)


def test_a_federation_with_node_auth_plans_its_keys_and_the_superlink_flag(tmp_path: Path) -> None:
    _, k1 = keypair(tmp_path, "k1")
    _, k2 = keypair(tmp_path, "k2")
    state = load(tmp_path, [k1, "# edge site 2", k2])
    assert [d for d in state.diagnostics if d.severity == "error"] == []
    plan = plan_repo(state, render_repo(state), revision="r1")
    (planned,) = plan.units.values()
    assert planned.node_auth is not None
    assert planned.node_auth.address == f"fed-superlink.{NS}.svc:9093"  # Flower 1.26: gRPC Control
    assert planned.node_auth.transport == "grpc"
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


@pytest.mark.parametrize(("tag", "transport"), [
    ("1.36.0", "grpc"), ("1.37.0", "http"), ("1.42.0-py3.11-ubuntu24.04", "http")])
def test_keys_go_to_the_control_api_of_the_superlinks_release(tmp_path: Path, tag: str, transport: str) -> None:
    """gRPC Control before 1.37, HTTP from 1.37 (syncer.models.flower), always at the Service's
    Control port (9093, which targets the SuperLink's --port 8000 from 1.37); no warning any more."""
    state = load(tmp_path, [], image=f"flwr/superlink:{tag}", supernode_image=f"flwr/supernode:{tag}")
    assert not [d for d in state.diagnostics if d.path == "spec.superlink.image"], state.diagnostics
    assert not [d for d in state.diagnostics if d.severity == "error"], state.diagnostics
    (planned,) = plan_repo(state, render_repo(state)).units.values()
    assert planned.node_auth is not None
    assert (planned.node_auth.transport, planned.node_auth.address) == (transport, f"fed-superlink.{NS}.svc:9093")
    service = next(m for m in planned.manifests if m["kind"] == "Service" and m["metadata"]["name"] == "fed-superlink")
    assert {"name": "control", "port": 9093} in [{k: p[k] for k in ("name", "port")} for p in service["spec"]["ports"]]


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


def test_reconcile_registers_what_git_lists_and_unregisters_only_its_own() -> None:
    api = FakeSuperLink([RegisteredNode(1, "online", b"PEM-A\n"), RegisteredNode(2, "registered", b"PEM-HAND"),
                         RegisteredNode(3, "unregistered", b"PEM-OLD")])
    report = reconcile(api, [("a", b"PEM-A"), ("b", b"PEM-B\n"), ("old", b"PEM-OLD")])
    assert report.registered == ("b",) and report.unregistered == () and report.admitted == 2
    assert report.outcome is KeyOutcome.FAILED and report.error_codes == (ControlErrorCode.KEY_IN_USE,)
    assert report.foreign == 1  # registered by hand: not ours to unregister
    assert RegisteredNode(103, "registered", b"PEM-B\n") in api.nodes  # registered byte for byte
    assert report.errors == ("key old was unregistered from this SuperLink before, and Flower never admits it again: "
                             "make a new key pair for that SuperNode and list its public key",)
    # only what it registered is recorded as its own: the key of node 1 was there before
    assert report.owned == OwnedKeys("fake:8000", ((103, key_digest(b"PEM-B")),))
    api.calls.clear()
    again = reconcile(api, [("a", b"PEM-A"), ("b", b"PEM-B\n")], report.owned)
    assert api.calls == [] and not again.changed and again.admitted == 2  # in step: no calls but the list
    assert again.outcome is KeyOutcome.IN_STEP and again.owned == report.owned
    # b leaves Git: unregistered, being ours; a and the hand-registered key stay
    gone = reconcile(api, [("a", b"PEM-A")], again.owned)
    assert gone.unregistered == (103,) and api.calls == ["unregister 103"] and gone.outcome is KeyOutcome.CHANGED
    assert gone.owned == OwnedKeys("fake:8000", ()) and gone.foreign == 1


def test_a_second_federation_on_one_superlink_cannot_unregister_the_firsts_keys() -> None:
    """Issue 25, finding 4: B registers its key on A's SuperLink and lists nothing of A's; A's key
    stays registered, whatever B's Git says, and what A recorded for another address counts for nothing."""
    api = FakeSuperLink([])
    a = reconcile(api, [("a", b"PEM-A")])
    b = reconcile(api, [("b", b"PEM-B")])
    assert b.registered == ("b",) and b.unregistered == () and b.foreign == 1
    b_empty = reconcile(api, [], b.owned)
    assert b_empty.unregistered == (b.owned.nodes[0][0],) if b.owned else False
    assert [n.status for n in api.nodes] == ["registered", "unregistered"]  # A's key untouched
    elsewhere = OwnedKeys("other:8000", a.owned.nodes if a.owned else ())
    assert reconcile(api, [], elsewhere).unregistered == ()  # a record of another SuperLink is not a claim


def test_a_registration_cut_before_its_answer_is_owned_once_the_superlink_lists_the_key() -> None:
    """The deadline ended the RegisterNode call after the SuperLink had registered the key: the
    key is recorded as pending, claimed when it shows up, and unregistered when Git drops it
    (never left admitted as someone else's)."""
    class Cut(FakeSuperLink):
        cut = True

        def register(self, public_key: bytes) -> int:
            node_id = super().register(public_key)
            if self.cut:
                raise ControlApiError("RegisterNode", "fake", ControlErrorCode.DEADLINE, "no answer within 5 s")
            return node_id

    api = Cut([])
    first = reconcile(api, [("a", b"PEM-A"), ("b", b"PEM-B")])
    assert first.outcome is KeyOutcome.FAILED and first.owned is not None
    assert first.owned.pending == (key_digest(b"PEM-A"), key_digest(b"PEM-B")) and first.owned.nodes == ()
    assert OwnedKeys.from_dict(first.owned.to_dict()) == first.owned  # recorded on the inventory
    api.cut = False
    second = reconcile(api, [("a", b"PEM-A"), ("b", b"PEM-B")], first.owned)
    assert second.outcome is KeyOutcome.IN_STEP and second.foreign == 0 and api.calls == ["register", "register"]
    assert second.owned == OwnedKeys("fake:8000", ((100, key_digest(b"PEM-A")), (101, key_digest(b"PEM-B"))))
    dropped = reconcile(api, [("a", b"PEM-A")], second.owned)
    assert dropped.unregistered == (101,) and dropped.foreign == 0
    # a pending key that neither Git nor the SuperLink lists was never registered: forgotten
    never = OwnedKeys("fake:8000", dropped.owned.nodes if dropped.owned else (), (key_digest(b"PEM-C"),))
    assert reconcile(api, [("a", b"PEM-A")], never).owned == OwnedKeys("fake:8000", ((100, key_digest(b"PEM-A")),))
    # the record of a federation without pending keys is what it was (no write for it)
    assert "pending" not in OwnedKeys("fake:8000", ((1, "sha256:x"),)).to_dict()


def test_while_the_supernodes_are_held_a_key_git_dropped_stays_registered() -> None:
    api = FakeSuperLink([])
    first = reconcile(api, [("a", b"PEM-A"), ("b", b"PEM-B")])
    held = reconcile(api, [("a", b"PEM-A")], first.owned, unregister=False)
    assert held.unregistered == () and held.owned == first.owned and held.foreign == 0
    assert reconcile(api, [("a", b"PEM-A")], held.owned).unregistered == (101,)  # the hold ended


def test_the_engine_keeps_a_dropped_key_registered_while_the_unit_is_held(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    _, k1 = keypair(tmp_path, "k1")
    state = load(tmp_path, [k1])
    (planned,) = plan_repo(state, render_repo(state), revision="r1").units.values()
    api = FakeSuperLink([])
    monkeypatch.setattr(nodekeys, "connect", lambda *a, **kw: api)
    ca = [{"kind": "Secret", "metadata": {"name": "fed-superlink-ca"}, "data": {"ca.crt": "Q0E="}}]
    owned = nodekeys.sync_planned_keys(planned, ca, UnitResult(planned.unit), None, dry_run=False)
    assert owned is not None and len(owned.nodes) == 1
    gone = dataclasses.replace(planned, node_auth=dataclasses.replace(planned.node_auth, keys=()))
    held = UnitResult(planned.unit)
    held.note_disruption(Disruption(ObjectRef("StatefulSet", NS, "fed-supernode-a"), Effect.RESTARTS, "a", "pool"),
                         held=True)
    assert nodekeys.sync_planned_keys(gone, ca, held, owned, dry_run=False) == owned
    assert [n.status for n in api.nodes] == ["registered"]
    after = nodekeys.sync_planned_keys(gone, ca, UnitResult(planned.unit), owned, dry_run=False)
    assert after is not None and after.nodes == () and [n.status for n in api.nodes] == ["unregistered"]


def test_an_unreachable_control_api_is_a_typed_failure() -> None:
    class Down(FakeSuperLink):
        def list_nodes(self) -> list[RegisteredNode]:
            raise ControlApiError("ListNodes", "fake", ControlErrorCode.UNAVAILABLE, "connection refused")

    report = reconcile(Down([]), [("a", b"PEM-A")])
    assert report.outcome is KeyOutcome.FAILED and report.error_codes == (ControlErrorCode.UNAVAILABLE,)
    assert report.owned is None and report.failing == 1  # the record on the inventory is kept as it is
    assert report.to_dict()["outcome"] == "failed"


def test_the_codec_speaks_flowers_messages(tmp_path: Path) -> None:
    from flwr.proto import control_pb2, node_pb2, run_pb2  # the reference: flwr is a test dependency

    pem, _ = parse_key(keypair(tmp_path, "k1")[1])
    assert pem is not None
    request = control_pb2.RegisterNodeRequest.FromString(_bytes_field(1, pem.pem))
    assert request.public_key == pem.pem
    response = control_pb2.ListNodesResponse(now="2026-11-24", nodes_info=[
        node_pb2.NodeInfo(node_id=2**63 + 5, owner_aid="x", owner_name="alice", status="online", online_until=1.5,
                          heartbeat_interval=2.0, public_key=pem.pem, registered_at="r", last_activated_at="a",
                          last_deactivated_at="d"),
        node_pb2.NodeInfo(node_id=7, status="unregistered")])
    assert decode_list_nodes(response.SerializeToString()) == [
        RegisteredNode(2**63 + 5, "online", pem.pem, "alice", "a", "d", 1.5, 2.0),
        RegisteredNode(7, "unregistered", b"")]
    runs = control_pb2.ListRunsResponse(now="x", run_dict={
        9: run_pb2.Run(run_id=9, fab_id="app", fab_version="1.0", pending_at="p", running_at="r", finished_at="f",
                       status=run_pb2.RunStatus(status="finished", sub_status="completed", details="done"),
                       override_config={}, bytes_sent=3, clientapp_runtime=0.5),
        2: run_pb2.Run(run_id=2, status=run_pb2.RunStatus(status="running"))})
    assert decode_list_runs(runs.SerializeToString()) == [
        RunInfo(2, "", "", "running", ""), RunInfo(9, "app", "1.0", "finished", "completed", "p", "r", "f", "done")]


def test_the_codec_reads_the_names_and_locations_newer_flower_sends() -> None:
    """Flower 1.43 (nightly) adds NodeInfo.location (12) and name (13): written here as its wire
    format has them (the dev extras' flwr 1.26 has no such fields), and read back."""
    from syncer.cluster.flower_control import _bytes_field, _varint_field

    info = _varint_field(1, 3) + _bytes_field(4, b"offline") + _bytes_field(12, b"site-a") + _bytes_field(13, b"n1")
    assert decode_list_nodes(_bytes_field(1, info) + _bytes_field(2, b"now")) == [
        RegisteredNode(3, "offline", b"", name="n1", location="site-a")]


BAD_LINES = [
    "- ecdsa-sha2-nistp384 AAAAE2VjZHNhLXNoYTItbmlzdHAzODQAAAAIbmlzdHAzODQAAABhBA== site",  # a pasted list dash
    "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp384 AAAA", "ecdsa-sha2-nistp384 ====", "ecdsa-sha2-nistp384 AAAA\x00",
    "ssh-dss AAAAB3NzaC1kc3MAAACBAP", "sk-ecdsa-sha2-nistp256@openssh.com AAAAInNrLWVjZHNh", "x509v3-sign-rsa AAAA",
    "ecdsa-sha2-nistp521 " + "A" * 5000, "\u202eecdsa-sha2-nistp256 AAAA", "ecdsa-sha2-nistp256 \udcff",
    "ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBAAA",
]


@pytest.mark.parametrize("line", BAD_LINES)
def test_a_bad_key_line_is_a_problem_never_an_exception(line: str) -> None:
    """Issue 25, finding 5: an unknown key type raised UnsupportedAlgorithm out of the parser."""
    key, problem = parse_key(line)
    assert key is None and problem and problem.isprintable() and len(problem) < 300


_KINDS = ["ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521", "ssh-ed25519", "ssh-rsa", "ssh-dss",
          "sk-ecdsa-sha2-nistp256@openssh.com", "ecdsa-sha2-nistp999"]


def _wire_line(kind: str, rest: bytes) -> str:
    """A line whose base64 blob starts like a real key of `kind` (so the parser gets past the
    name) and goes on with arbitrary bytes."""
    import base64
    import struct

    name = kind.encode()
    curve = kind.rsplit("-", 1)[-1].encode()
    blob = struct.pack(">I", len(name)) + name + (struct.pack(">I", len(curve)) + curve if "ecdsa" in kind else b"")
    return f"{kind} {base64.b64encode(blob + rest).decode()} c"


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(BAD_LINES), st.text(max_size=80),
                          st.builds(lambda kind, blob: f"{kind} {blob}", st.sampled_from(
                              ["ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ssh-ed25519", "ssh-rsa", "-", "foo"]),
                              st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=",
                                      max_size=120)),
                          st.builds(_wire_line, st.sampled_from(_KINDS), st.binary(max_size=120))), max_size=5))
def test_the_key_parser_only_ever_reports_problems(lines: list[str]) -> None:
    _, problems = parse_keys("\n".join(lines))
    assert all(problem.isprintable() for _, problem in problems)


def test_an_unknown_key_type_is_a_diagnostic_with_the_fix(tmp_path: Path) -> None:
    _, k1 = keypair(tmp_path, "k1")
    state = load(tmp_path, [k1, f"- {k1}", "ecdsa-sha2-nistp999 AAAA"])
    errors = [d for d in state.diagnostics if d.severity == "error"]
    assert [(d.file, d.path, d.message.split(":")[0]) for d in errors] == [
        ("federations/fed.yaml", "metadata.annotations['flower-syncer.io/supernode-public-keys']",
         "line 2 of the list"),
        ("federations/fed.yaml", "metadata.annotations['flower-syncer.io/supernode-public-keys']",
         "line 3 of the list")]
    assert "without a list marker" in errors[0].message and errors[0].line > 0 and errors[0].hint
    assert "not an OpenSSH key type" in errors[1].message


def test_a_closed_control_api_is_a_warning(tmp_path: Path) -> None:
    state = load(tmp_path, [])
    (warning,) = [d for d in state.diagnostics if d.severity == "warning"]
    assert "closes to everyone not named" in warning.message and "control-api-from" in warning.hint
    text = (tmp_path / "repo" / "federations" / "fed.yaml").read_text()
    (tmp_path / "repo" / "federations" / "fed.yaml").write_text(text.replace(
        "    flower-syncer.io/supernode-auth:", "    flower-syncer.io/control-api-from: flower-syncer\n"
                                               "    flower-syncer.io/supernode-auth:"))
    assert not [d for d in load_repo(tmp_path / "repo").diagnostics if d.severity == "warning"]
