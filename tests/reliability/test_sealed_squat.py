"""A workload never reads a Secret it did not get (issue 39, item 5; reliability suite): someone
made a workload's `<workload>-sealed` Secret (render.sealed) before flower-syncer did. Applying ours
over it is a Conflict; the workload that reads it is then not applied either (a failed change,
cause SecretNotApplied, naming the Secret), and the rest of the unit is applied as usual. Before
this, the workload was applied anyway and its pods read the squatter's value.

Against the in-memory API server (tests/fakekube.py), files encrypted natively (tests/sops_writer.py)."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from syncer.engine.changeset import Action, Cause
from syncer.engine.sync import Engine, SyncOptions, SyncReport
from syncer.render.repo import plan_repo, render_repo
from syncer.repo.loader import load_repo
from syncer.secrets.keys import Decryption, load_identities
from tests.builders import NS, SECRET_VALUES
from tests.fakekube import FakeApiServer, FakeKube
from tests.sops_writer import encrypt

SQUATTED = "sealed-edge-supernode-sealed"  # what a squatter guessed: `<release's Deployment>-sealed`


@pytest.fixture
def key(tmp_path: Path) -> tuple[Path, str]:
    import pyrage

    identity = pyrage.x25519.Identity.generate()
    path = tmp_path / "age.key"
    path.write_text(f"{identity}\n")
    return path, str(identity.to_public())


@pytest.fixture
def kube() -> FakeKube:
    server = FakeApiServer()
    server.add_namespace(NS)
    return FakeKube(server)


def encrypted_release(root: Path, public: str) -> Path:
    (root / "supernodes" / "edge").mkdir(parents=True)
    (root / "flower-syncer.yaml").write_text(f"name: sealed\ndefaultNamespace: {NS}\n")
    (root / "supernodes" / "edge" / "values.yaml").write_text(
        encrypt("fullnameOverride: sealed-edge\n" + SECRET_VALUES, public, encrypted_regex="^(config|value)$"))
    return root


def sync(kube: FakeKube, root: Path, key_file: Path) -> SyncReport:
    state = load_repo(root, Decryption(load_identities([key_file])))
    rendered = render_repo(state)
    assert rendered.clean, [d.render() for d in rendered.diagnostics]
    return Engine(kube).sync(plan_repo(state, rendered, revision="r1"), SyncOptions())


def changes(report: SyncReport) -> dict[str, tuple[Action, Cause | None, str]]:
    return {f"{c.ref.kind}/{c.ref.name}": (c.action, c.cause, c.message) for u in report.units for c in u.changes}


def test_a_squatted_sealed_secret_stops_its_workload_and_nothing_else(tmp_path: Path, kube: FakeKube,
                                                                      key: tuple[Path, str]) -> None:
    key_file, public = key
    root = encrypted_release(tmp_path, public)
    kube.request("POST", f"/api/v1/namespaces/{NS}/secrets", query={"fieldManager": "squatter"}, body={
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": SQUATTED, "namespace": NS},
        "data": {"supernode.env.API_KEY": base64.b64encode(b"the-squatters-value").decode()}})

    report = sync(kube, root, key_file)

    found = changes(report)
    assert found[f"Secret/{SQUATTED}"][0] is Action.FAILED  # a Conflict, as before
    action, cause, message = found["Deployment/sealed-edge-supernode"]
    assert (action, cause) == (Action.FAILED, Cause.SECRET_NOT_APPLIED), found
    assert f"the Secret {SQUATTED}" in message and "not applied" in message
    assert kube.get("Deployment", NS, "sealed-edge-supernode") is None  # no pod reads the squatter's value
    assert "the-squatters-value" not in message
    # the rest of the unit is applied
    applied = {name for name, (a, _, _) in found.items() if a is Action.CREATED}
    assert applied and all(not n.startswith(("Deployment/", f"Secret/{SQUATTED}")) for n in applied)
    assert kube.get("Service", NS, "sealed-edge-supernode") is not None or any(
        n.startswith("Service/") for n in applied)
    squatted = kube.get("Secret", NS, SQUATTED)
    assert squatted is not None and base64.b64decode(squatted["data"]["supernode.env.API_KEY"]) == \
        b"the-squatters-value"  # and the squatter's Secret is left as it was


def test_without_a_squatter_the_workload_reads_its_own_sealed_secret(tmp_path: Path, kube: FakeKube,
                                                                     key: tuple[Path, str]) -> None:
    key_file, public = key
    report = sync(kube, encrypted_release(tmp_path, public), key_file)
    assert report.ok, report.to_dict()
    deployment = kube.get("Deployment", NS, "sealed-edge-supernode")
    assert deployment is not None
    env = {e["name"]: e for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["API_KEY"]["valueFrom"]["secretKeyRef"]["name"] == SQUATTED
