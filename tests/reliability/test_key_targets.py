"""Key targets (issue 25, findings 4 and 5): what a repository can make the agent do with SuperNode
keys and the Control API. A Federation cannot aim the agent at a socket, a scheme, an arbitrary
port or another team's SuperLink; two federations of one repository cannot share one Control API;
a malformed key line is a diagnostic (`validate` exits 1, never 3); and a federation never
unregisters keys it did not register. `validate` runs as a subprocess, as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from syncer.cluster.flower_control import RegisteredNode
from syncer.engine.nodekeys import reconcile
from syncer.render.repo import plan_repo, render_repo
from syncer.repo.loader import load_repo
from tests.builders import NS
from tests.nodeauth import FakeSuperLink
from tests.nodeauth import auth_federation as fed

EXIT_INVALID = 1
KEYS_AT = "metadata.annotations['flower-syncer.io/supernode-public-keys']"
ADDRESS_AT = "metadata.annotations['flower-syncer.io/control-api-address']"
A_KEY = ("ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBMa/kJhR4mkoVxiAhjgnK9plBuRAWFVH"
         "ZSX00o3h6j1rIASjkqyKxxTYY1L8UixjaFvELOOJdnZ09Cv/BR326H0= site")  # a real public key (ssh-keygen)


def repo(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "repo"
    (root / "federations").mkdir(parents=True)
    (root / "flower-syncer.yaml").write_text(f"name: keys\ndefaultNamespace: {NS}\n"
                                             "guardrails: {allowedSecrets: [superlink-tls]}\n")
    for name, text in files.items():
        (root / "federations" / f"{name}.yaml").write_text(text)
    return root


def validate(root: Path) -> tuple[int, list[dict[str, object]]]:
    out = subprocess.run([sys.executable, "-m", "syncer", "validate", str(root), "-o", "json"], capture_output=True,
                         timeout=60, check=False)
    report = json.loads(out.stdout or b"{}")
    return out.returncode, [d for d in report.get("diagnostics", []) if d.get("severity") == "error"]


@pytest.mark.parametrize("line", [
    f"- {A_KEY}",  # a pasted YAML list dash
    "- ecdsa-sha2-nistp384 AAAAE2VjZHNhLXNoYTItbmlzdHAzODQAAAAIbmlzdHAzODQ=",
    "ecdsa-sha2-nistp999 AAAA", "x509v3-sign-rsa AAAAB3NzaC1yc2E=", "sk-ecdsa-sha2-nistp256@openssh.com AAAA",
    "ssh-dss AAAAB3NzaC1kc3M=", "garbage", "ecdsa-sha2-nistp256 !!!not-base64!!!",
])
def test_a_malformed_key_line_is_a_diagnostic_not_an_internal_error(tmp_path: Path, line: str) -> None:
    code, errors = validate(repo(tmp_path, {"fed": fed("fed", keys=f"      {A_KEY}\n      {line}")}))
    assert code == EXIT_INVALID, errors
    (error,) = errors
    assert error["file"] == "federations/fed.yaml" and error["path"] == KEYS_AT and int(str(error["line"])) > 0
    assert str(error["message"]).startswith("line 2 of the list:") and error["hint"]


@pytest.mark.parametrize("address", [
    "unix:/var/run/docker.sock", "unix:///run/containerd/containerd.sock", "https://fed-superlink.ns.svc:8000",
    "dns:///kubernetes.default:443", '"superlink:8000\\nERROR forged line"', "superlink:99999", "root@10.0.0.1:22",
])
def test_a_control_api_address_that_is_not_host_and_port_is_refused(tmp_path: Path, address: str) -> None:
    code, errors = validate(repo(tmp_path, {"fed": fed("fed", address=address)}))
    assert code == EXIT_INVALID
    (error,) = errors
    assert error["path"] == ADDRESS_AT and "forged" not in json.dumps(error)


@pytest.mark.parametrize("address", [
    "team-a-superlink.team-a.svc:8000",  # another tenant's SuperLink
    "127.0.0.1:22", "10.96.0.1:443", "kubernetes.default.svc:443",  # a port scan through the agent's TLS client
])
def test_a_target_other_than_the_own_superlink_needs_the_admin(tmp_path: Path, address: str) -> None:
    code, errors = validate(repo(tmp_path, {"fed": fed("fed", address=address)}))
    assert code == EXIT_INVALID
    (error,) = errors
    assert error["path"] == ADDRESS_AT and "admin" in str(error["hint"])


def test_two_federations_on_one_control_api_are_refused(tmp_path: Path) -> None:
    root = repo(tmp_path, {"one": fed("one", address="flower.example.com:8000"),
                           "two": fed("two", address="flower.example.com:8000")})
    state = load_repo(root)
    rendered = render_repo(state, control_targets=["flower.example.com:8000"])
    assert sorted(d.file for d in rendered.diagnostics if d.severity == "error") == [
        "federations/one.yaml", "federations/two.yaml"]
    assert plan_repo(state, rendered).units == {}


def test_another_federation_cannot_wipe_a_key_it_did_not_register() -> None:
    """Finding 4: B shares A's SuperLink and lists none of A's keys; A's key stays registered
    through any number of B's syncs."""
    link = FakeSuperLink([])
    a = reconcile(link, [("a", b"PEM-A")])
    b_owned = None
    for listed in ([("b", b"PEM-B")], [], []):
        b = reconcile(link, listed, b_owned)
        b_owned = b.owned
    assert a.owned is not None
    (a_node,) = a.owned.nodes
    assert [n for n in link.nodes if n.node_id == a_node[0]] == [RegisteredNode(a_node[0], "registered", b"PEM-A")]
