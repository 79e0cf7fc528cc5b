""""The unit's own" is never widened by an annotation (issue 39, item 3; reliability suite).

`flower-syncer.io/superlink-tls-secret` used to make any Secret of the namespace the federation's
own: a pool mounted another application's Secret whole, and the SuperLink mounted another
application's `tls.key`. Now the named Secret must be one the unit renders (kept in Git next to the
federation, or written by cert-manager for a Certificate it renders) or one the admin lists
(`guardrails.allowedSecrets`, bounded by the admin's policy): otherwise a diagnostic naming the
file, line and field and what to do, and nothing of that federation is applied (the others are).

And "ours" has one definition (syncer.ours): the engine and the agent take the sets of names from
it, never rebuild them. Against the in-memory API server (tests/fakekube.py)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from syncer.actions.load import load
from syncer.actions.sync import sync
from syncer.engine.sync import SyncOptions
from syncer.models.policy import RepositoryPolicy
from syncer.models.settings import Guardrails
from syncer.ours import Ours
from syncer.plan import Plan
from tests.builders import NS, federation, pool, tls_secret_yaml
from tests.fakekube import FakeApiServer, FakeKube

ROOT = Path(__file__).resolve().parents[2]
ANN = '"flower-syncer.io/superlink-tls-secret": other-app-tls'
WHOLE = pool("a", extra="        volumes: [{name: stolen, secret: {secretName: other-app-tls}}]\n"
                        "        volumeMounts: [{name: stolen, mountPath: /stolen}]\n")


@pytest.fixture
def kube() -> FakeKube:
    server = FakeApiServer()
    server.add_namespace(NS)
    kube = FakeKube(server)
    kube.create({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",  # another application's
                 "metadata": {"name": "other-app-tls", "namespace": NS},
                 "data": {"tls.crt": "Y2VydA==", "tls.key": "a2V5", "ca.crt": "Y2E="}})
    return kube


def repo(root: Path, fed: str, settings: str = "", extra: str = "") -> Path:
    (root / "federations").mkdir(parents=True)
    (root / "flower-syncer.yaml").write_text(f"name: own\ndefaultNamespace: {NS}\n{settings}")
    (root / "federations" / "fed.yaml").write_text(fed + extra)
    (root / "federations" / "bystander.yaml").write_text(federation("bystander"))
    return root


def tls_fed(pools: str = "") -> str:
    return federation("fed", pools, ANN, insecure=False)


@pytest.mark.parametrize("pools", [pool("a"), WHOLE], ids=["superlink-mounts-tls-key", "pool-mounts-it-whole"])
def test_an_annotation_does_not_make_another_applications_secret_the_units_own(tmp_path: Path, kube: FakeKube,
                                                                               pools: str) -> None:
    loaded = load(repo(tmp_path, tls_fed(pools)))
    errors = [d for d in loaded.errors if d.unit == f"federation/{NS}/fed"]
    assert errors, "the annotation was taken as making the Secret the unit's own"
    first = errors[0]
    assert first.file == "federations/fed.yaml" and first.line >= 1
    assert first.path == "metadata.annotations.flower-syncer.io/superlink-tls-secret"
    assert "other-app-tls" in first.message and "guardrails.allowedSecrets" in first.hint
    report = sync(kube, loaded, SyncOptions())
    assert kube.get("StatefulSet", NS, "fed-superlink") is None and kube.get("Deployment", NS, "fed-superlink") is None
    assert kube.get("StatefulSet", NS, "fed-supernode-a") is None  # nothing of that federation applied
    assert kube.get("Service", NS, "bystander-superlink") is not None  # the rest of the repository is
    assert not report.ok


def test_an_issuer_beside_the_annotation_does_not_make_the_named_secret_the_units_own(tmp_path: Path,
                                                                                    kube: FakeKube) -> None:
    """With an issuer, the Certificate flower-syncer renders takes its secretName from the same
    annotation: that Certificate proves nothing (cert-manager would even overwrite the other
    application's Secret), so the named Secret is still refused."""
    fed = federation("fed", pool("a"), ANN + ', "flower-syncer.io/superlink-issuer": ClusterIssuer/any',
                     insecure=False)
    loaded = load(repo(tmp_path, fed))
    errors = [d for d in loaded.errors if d.unit == f"federation/{NS}/fed"]
    assert any(d.path == "metadata.annotations.flower-syncer.io/superlink-tls-secret" for d in errors), errors
    sync(kube, loaded, SyncOptions())
    assert kube.get("StatefulSet", NS, "fed-superlink") is None
    assert kube.get("Certificate", NS, "fed-superlink") is None  # nothing asks cert-manager to write it either


def test_a_secret_the_admin_lists_may_be_named(tmp_path: Path, kube: FakeKube) -> None:
    policy = RepositoryPolicy(guardrails=Guardrails(allowedSecrets=["other-app-*"]))
    loaded = load(repo(tmp_path, tls_fed(), settings="guardrails: {allowedSecrets: [other-app-tls]}\n"), policy=policy)
    assert [d.render() for d in loaded.errors] == []
    # the repository cannot list it when the admin does not
    narrow = load(repo(tmp_path / "b", tls_fed(), settings="guardrails: {allowedSecrets: [other-app-tls]}\n"),
                  policy=RepositoryPolicy())
    assert any(d.path == "metadata.annotations.flower-syncer.io/superlink-tls-secret" for d in narrow.errors)


def test_a_secret_kept_in_git_with_the_federation_is_its_own(tmp_path: Path) -> None:
    own = "---\n" + tls_secret_yaml("other-app-tls", ["fed-superlink"])
    loaded = load(repo(tmp_path, tls_fed(), extra=own))
    assert [d.render() for d in loaded.errors] == []


def test_ours_has_one_definition() -> None:
    ours = Ours("team", frozenset({"old"}), frozenset({"legacy"}), "src", "", frozenset())
    assert ours.names == {"team", "old"} and ours.names_in_git == {"team", "old", "legacy"}
    assert ours.owns_record("legacy", "src", in_git=True) and not ours.owns_record("legacy", "src")
    assert ours.foreign_source("team", "elsewhere") and not ours.owns_record("team", "elsewhere")
    plan = Plan(units={}, repository="team", former_names=frozenset({"old"}), legacy_names=frozenset({"legacy"}),
                source="src")
    assert plan.ours == ours
    # no module of the engine, the agent or the CLI rebuilds the sets from the plan's raw names
    raw = {"former_names", "legacy_names", "layout_source", "movable"}
    offenders = []
    for path in [*(ROOT / "syncer" / "engine").glob("*.py"), *(ROOT / "syncer" / "agent").glob("*.py"),
                 *(ROOT / "syncer" / "actions").glob("*.py"), *(ROOT / "syncer").glob("cli*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in raw:
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}: .{node.attr}")
    assert offenders == [], "use Plan.ours (syncer.ours), not the raw names: " + ", ".join(offenders)
