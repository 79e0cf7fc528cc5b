"""Tenancy (issue 25, items 1, 2 and 4): a boundary Git cannot rewrite. The admin's policy, not the
repository, says what a repository may do; a name another source uses cannot be squatted; the ref
is part of a derived identity; nothing is pruned outside the allowed namespaces; forceConflicts
never adopts Secrets, Helm's objects or the agent's own; the copy annotations are flower-syncer's
alone; writes carry the tenant's identity and a refused write is a per-object error.

Each case failed on the code before this change (see the commit message). They run against the
in-memory API server (tests/fakekube.py); tests/integration/test_tenancy_rbac.py shows the real
API server's RBAC refusing an impersonated write.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from syncer.actions.load import load
from syncer.actions.sync import sync
from syncer.agent.config import AgentConfig, load_policy
from syncer.agent.runner import repository_tenancy
from syncer.engine.prune import prune_blocker
from syncer.engine.sync import Engine, SyncOptions, SyncReport
from syncer.identity import LABEL_MANAGED_BY, LABEL_REPOSITORY, LABEL_UNIT, LABEL_UNIT_KIND, MANAGED_BY, Unit
from syncer.models.policy import AdminPolicy, RepositoryPolicy
from syncer.models.settings import Guardrails
from syncer.render.repo import plan_repo, render_repo
from syncer.render.tenancy import Tenancy, apply_policy
from syncer.repo.loader import load_repo
from tests.builders import committed_repo, git, pool
from tests.fakekube import FakeApiServer, FakeKube, _Response, _status

NS_A, NS_B = "team-a", "team-b"
HOSTPATH_POOL = pool("a") + ("        volumes: [{name: root, hostPath: {path: /}}]\n"
                             "        volumeMounts: [{name: root, mountPath: /host}]\n")


def repo(path: Path, namespace: str, *feds: str, settings: str = "", extra: Mapping[str, str] | None = None,
         pools: str = "") -> Path:
    """A committed config repository with these federations in `namespace`."""
    return committed_repo(path, namespace, *feds, settings=settings, extra=extra, pools=pools)


@pytest.fixture
def server() -> FakeApiServer:
    api = FakeApiServer()
    for ns in (NS_A, NS_B, "kube-system"):
        api.add_namespace(ns)
    return api


@pytest.fixture
def kube(server: FakeApiServer) -> FakeKube:
    return FakeKube(server)


def deleted(report: SyncReport) -> list[str]:
    return [str(c.ref) for u in report.units for c in u.changes if c.action.value == "deleted"]


def errors_of(report: SyncReport) -> list[str]:
    return [e for u in report.units for e in u.errors]


def failed_changes(report: SyncReport) -> dict[str, str]:
    return {str(c.ref): c.message for u in report.units for c in u.changes if c.action.value == "failed"}


# -- finding 1: takeover by name ---------------------------------------------------------------------


def test_a_second_repository_claiming_the_same_name_deletes_nothing(tmp_path: Path, kube: FakeKube) -> None:
    """B sets `name: team-a` (A's name): B's sync used to prune every unit of A."""
    a = repo(tmp_path / "a", NS_A, "alpha", settings="name: team-a\n")
    assert sync(kube, load(a), SyncOptions()).ok
    b = repo(tmp_path / "b", NS_B, "beta", settings="name: team-a\n")
    report = sync(kube, load(b), SyncOptions())
    assert deleted(report) == [], report.to_dict()
    assert kube.get("Service", NS_A, "alpha-superlink") is not None
    # and A's next sync does not prune B's unit either: each keeps its own
    again = sync(kube, load(a), SyncOptions())
    assert deleted(again) == [] and kube.get("Service", NS_B, "beta-superlink") is not None


def test_renamed_from_another_sources_name_takes_nothing(tmp_path: Path, kube: FakeKube) -> None:
    """B adds `renamedFrom: [team-a]`: its sync used to delete A's objects and relabel the rest."""
    a = repo(tmp_path / "a", NS_A, "alpha", settings="name: team-a\n")
    assert sync(kube, load(a), SyncOptions()).ok
    b = repo(tmp_path / "b", NS_B, "beta", settings="name: team-b\nrenamedFrom: [team-a]\n")
    report = sync(kube, load(b), SyncOptions())
    assert deleted(report) == [], report.to_dict()
    svc = kube.get("Service", NS_A, "alpha-superlink")
    assert svc is not None and svc["metadata"]["labels"][LABEL_REPOSITORY] == "team-a"


def test_a_squatter_rendering_the_same_unit_is_refused_with_the_reason(tmp_path: Path, kube: FakeKube) -> None:
    """B renders A's very unit (federation/team-a/alpha) under A's name: it used to apply over A's
    objects (and relabel them); now the unit is refused, naming the other source."""
    a = repo(tmp_path / "a", NS_A, "alpha", settings="name: team-a\n")
    assert sync(kube, load(a), SyncOptions()).ok
    before = kube.get("StatefulSet", NS_A, "alpha-supernode-a")
    b = repo(tmp_path / "b", NS_A, "alpha", settings="name: team-a\n",
             pools=pool("a", replicas=3))
    report = sync(kube, load(b), SyncOptions())
    assert any("from another source" in e for e in errors_of(report)), report.to_dict()
    after = kube.get("StatefulSet", NS_A, "alpha-supernode-a")
    assert after is not None and before is not None
    assert after["spec"]["replicas"] == before["spec"]["replicas"] == 1


def test_the_admin_policy_can_allow_a_move_between_sources(tmp_path: Path, kube: FakeKube) -> None:
    """A repository that really moved (new URL): the admin lists the name, and it is taken over."""
    a = repo(tmp_path / "a", NS_A, "alpha", "gone", settings="name: team-a\n")
    assert sync(kube, load(a), SyncOptions()).ok
    b = repo(tmp_path / "b", NS_A, "alpha", settings="name: team-a\n")
    refused = sync(kube, load(b, policy=RepositoryPolicy()), SyncOptions())
    assert not refused.ok and deleted(refused) == [], refused.to_dict()
    allowed = RepositoryPolicy(names=["team-a"])
    report = sync(kube, load(b, policy=allowed), SyncOptions())
    assert report.ok, report.to_dict()
    assert "ConfigMap/team-a/gone-superlink-config" in deleted(report) or kube.get(
        "Service", NS_A, "gone-superlink") is None


def test_a_name_outside_the_admins_names_fails_every_unit(tmp_path: Path, kube: FakeKube) -> None:
    b = repo(tmp_path / "b", NS_B, "beta", settings="name: team-a\n")
    loaded = load(b, policy=RepositoryPolicy(names=["team-b*"]))
    assert any(d.path == "name" and "does not let this repository use the name 'team-a'" in d.message
               for d in loaded.errors), loaded.errors
    report = sync(kube, loaded, SyncOptions())
    assert not report.ok and kube.get("Service", NS_B, "beta-superlink") is None


def test_two_branches_of_one_origin_have_two_identities(tmp_path: Path) -> None:
    """Unnamed checkouts of one origin on staging and prod used to share one identity (`--ref` was
    not part of it): syncing prod deleted staging's federation."""
    origin = repo(tmp_path / "origin", NS_A, "alpha")
    staging = repository_tenancy(AgentConfig(repo=str(origin), ref="staging"))
    prod = repository_tenancy(AgentConfig(repo=str(origin), ref="prod"))
    default = repository_tenancy(AgentConfig(repo=str(origin)))
    assert len({staging.name, prod.name, default.name}) == 3
    assert staging.tenancy.source != prod.tenancy.source
    # the name derived before refs were part of it is a legacy name of both, taken only for units
    # they render themselves
    assert staging.tenancy.legacy_names == prod.tenancy.legacy_names == {default.name}


def agent_sync(kube: FakeKube, root: Path, config: AgentConfig) -> SyncReport:
    """What the agent does with a revision of `config`'s repository, in one pass."""
    t = repository_tenancy(config)
    state = apply_policy(load_repo(root), t.tenancy)
    plan = plan_repo(state, render_repo(state), default_repository=t.name, tenancy=t.tenancy)
    return Engine(kube).sync(plan, SyncOptions())


def test_syncing_prod_never_prunes_staging(tmp_path: Path, kube: FakeKube) -> None:
    origin = repo(tmp_path / "origin", NS_A, "alpha")
    git(origin, "checkout", "-q", "-b", "staging")
    repo(origin, NS_A, "stage-only")
    assert agent_sync(kube, origin, AgentConfig(repo=str(origin), ref="staging")).ok
    git(origin, "checkout", "-q", "main")
    report = agent_sync(kube, origin, AgentConfig(repo=str(origin), ref="prod"))
    assert deleted(report) == [], report.to_dict()
    assert kube.get("Service", NS_A, "stage-only-superlink") is not None


def test_upgrading_to_ref_derived_names_keeps_every_unit(tmp_path: Path, kube: FakeKube) -> None:
    """An agent with `--ref` recorded its units under the old derived name: after the upgrade they
    are its own (taken over and relabelled), nothing is pruned or orphaned; a unit the old name
    recorded that this checkout does not render is left alone (it may be another branch's)."""
    origin = repo(tmp_path / "origin", NS_A, "alpha", "other-branch")
    old = repository_tenancy(AgentConfig(repo=str(origin)))  # what the old version derived, ref or not
    state = load_repo(origin)
    legacy_plan = plan_repo(state, render_repo(state), default_repository=old.name)
    assert Engine(kube).sync(legacy_plan, SyncOptions()).ok
    repo(origin, NS_A, "alpha")  # this branch renders alpha only
    config = AgentConfig(repo=str(origin), ref="prod")
    report = agent_sync(kube, origin, config)
    assert report.ok and deleted(report) == [], report.to_dict()
    new_name = repository_tenancy(config).name
    assert kube.get("Service", NS_A, "alpha-superlink")["metadata"]["labels"][LABEL_REPOSITORY] == new_name
    kept = kube.get("Service", NS_A, "other-branch-superlink")
    assert kept is not None and kept["metadata"]["labels"][LABEL_REPOSITORY] == old.name
    # and the next sync is quiet
    assert agent_sync(kube, origin, config).units[0].changed is False


def test_nothing_is_pruned_outside_the_allowed_namespaces(tmp_path: Path, kube: FakeKube) -> None:
    """Units recorded before sources were (an older version: no source on the inventory) under a
    name a repository claims: outside its allowed namespaces they are never pruned."""
    a = repo(tmp_path / "a", NS_A, "alpha", settings="name: team-a\n")
    legacy_state = load_repo(a)
    assert Engine(kube).sync(plan_repo(legacy_state, render_repo(legacy_state)), SyncOptions()).ok  # no source
    b = repo(tmp_path / "b", NS_B, "beta", settings="name: team-b\nrenamedFrom: [team-a]\n")
    policy = RepositoryPolicy(guardrails=Guardrails(allowedNamespaces=[NS_B]), names=["team-b", "team-a"])
    report = sync(kube, load(b, policy=policy), SyncOptions())
    assert deleted(report) == [], report.to_dict()
    assert kube.get("Service", NS_A, "alpha-superlink") is not None


# -- finding 2: a commit lifts its own guardrails --------------------------------------------------


def test_a_commit_cannot_widen_the_admins_guardrails(tmp_path: Path) -> None:
    rails = "guardrails:\n  allowedNamespaces: ['*']\n  allowPodFeatures: [privileged, hostPath, hostPID]\n"
    path = repo(tmp_path / "a", "kube-system", "fed", settings=f"name: team-a\n{rails}", pools=HOSTPATH_POOL)
    policy = RepositoryPolicy(guardrails=Guardrails(allowedNamespaces=["team-*"]))
    loaded = load(path, policy=policy)
    messages = [(d.path, d.message) for d in loaded.errors]
    assert any(p == "guardrails.allowedNamespaces" and "'*' is beyond the admin's limit (team-*)" in m
               for p, m in messages), messages
    assert any(p == "guardrails.allowPodFeatures" and "'hostPath' is beyond the admin's limit" in m
               for p, m in messages), messages
    assert any("namespace 'kube-system', which this repository may not use" in m for _, m in messages), messages
    assert not loaded.units  # nothing of it is applied


def test_the_repository_can_narrow_the_admins_guardrails(tmp_path: Path) -> None:
    policy = RepositoryPolicy(guardrails=Guardrails(allowedNamespaces=["team-*"], allowPodFeatures=["hostPath"]))
    narrowed = "guardrails:\n  allowedNamespaces: [team-b]\n  allowPodFeatures: []\n"
    loaded = load(repo(tmp_path / "a", NS_A, "fed", settings=narrowed, pools=HOSTPATH_POOL), policy=policy)
    found = [d.message for d in loaded.errors]
    assert any("'team-a', which this repository may not use" in m for m in found), found
    assert any("uses hostPath" in m for m in found), found
    assert not [d for d in loaded.errors if d.path.startswith("guardrails.")]  # narrowing is no problem


def test_without_a_policy_the_chart_default_is_the_safe_one(tmp_path: Path) -> None:
    """The chart always gives the agent a policy; its default keeps the cluster's namespaces and
    node features out of reach whatever flower-syncer.yaml says."""
    rails = "guardrails:\n  allowedNamespaces: [kube-system]\n  allowPodFeatures: [hostPath]\n"
    loaded = load(repo(tmp_path / "a", "kube-system", "fed", settings=rails, pools=HOSTPATH_POOL),
                  policy=AdminPolicy().for_source(str(tmp_path / "a")))
    assert {d.path for d in loaded.errors} >= {"guardrails.allowedNamespaces", "guardrails.allowPodFeatures"}
    assert not loaded.units


def test_the_policy_file_is_checked_with_file_line_and_field(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text("default:\n  serviceAccount: team-a/flower-syncer\nrepositories:\n  - sauce: x\n")
    with pytest.raises(ValueError, match=r"policy.yaml:4.*sauce"):
        load_policy(path)
    path.write_text("default:\n  guardrails: {allowedNamespaces: [team-a]}\n  serviceAccount: team-a/tenant\n")
    policy = load_policy(path)
    assert policy.for_source("https://git.example.com/x").impersonate == "system:serviceaccount:team-a:tenant"


# -- finding 3 / 4: adoption by force, prune of Helm's objects, copy annotations -----------------------


def secret_doc(name: str, annotations: str = "") -> str:
    return (f"---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: {name}\n  annotations: {{{annotations}}}\n"
            "stringData: {token: from-git}\n")


def forced_repo(tmp_path: Path, secret: str) -> Path:
    path = repo(tmp_path / "a", NS_A, "alpha", settings="name: team-a\npolicy: {forceConflicts: true}\n")
    fed_file = path / "federations" / "alpha.yaml"
    fed_file.write_text(fed_file.read_text() + secret_doc(secret))
    return repo(path, NS_A, settings="name: team-a\npolicy: {forceConflicts: true}\n",
                extra={"federations/alpha.yaml": fed_file.read_text()})


def existing(kube: FakeKube, kind: str, name: str, manager: str, labels: dict[str, str] | None = None,
             annotations: dict[str, str] | None = None, **body: Any) -> None:
    api = "v1"
    kube.apply({"apiVersion": api, "kind": kind, "metadata": {"name": name, "namespace": NS_A,
                                                              "labels": labels or {}, "annotations": annotations or {}},
                **body}, manager=manager)


def test_force_conflicts_never_takes_a_hand_made_secret(tmp_path: Path, kube: FakeKube) -> None:
    value = base64.b64encode(b"hand-made").decode()
    existing(kube, "Secret", "db-password", "kubectl-client-side-apply", data={"token": value})
    report = sync(kube, load(forced_repo(tmp_path, "db-password")), SyncOptions())
    message = failed_changes(report).get(f"Secret/{NS_A}/db-password", "")
    assert "not adopted: it is a Secret another manager made" in message, report.to_dict()
    assert kube.get("Secret", NS_A, "db-password")["data"]["token"] == value


def test_force_conflicts_never_takes_a_helm_object(tmp_path: Path, kube: FakeKube) -> None:
    helm = {"app.kubernetes.io/managed-by": "Helm"}
    existing(kube, "Secret", "chart-secret", "helm", labels=helm,
             annotations={"meta.helm.sh/release-name": "other"}, data={"token": "aGVsbQ=="})
    report = sync(kube, load(forced_repo(tmp_path, "chart-secret")), SyncOptions())
    assert "it is managed by Helm (release 'other')" in failed_changes(report).get(
        f"Secret/{NS_A}/chart-secret", ""), report.to_dict()
    assert kube.get("Secret", NS_A, "chart-secret")["metadata"]["labels"][LABEL_MANAGED_BY] == "Helm"


def test_force_conflicts_never_takes_the_agents_own_objects(tmp_path: Path, kube: FakeKube) -> None:
    existing(kube, "Secret", "flower-syncer-api", "flux", labels={"app.kubernetes.io/part-of": "flower-syncer"},
             data={"token": "YWdlbnQ="})
    report = sync(kube, load(forced_repo(tmp_path, "flower-syncer-api")), SyncOptions())
    assert "part of the flower-syncer agent itself" in failed_changes(report).get(
        f"Secret/{NS_A}/flower-syncer-api", ""), report.to_dict()
    assert kube.get("Secret", NS_A, "flower-syncer-api")["data"]["token"] == "YWdlbnQ="


def test_a_helm_object_that_was_adopted_before_is_never_pruned() -> None:
    unit = Unit("federation", NS_A, "alpha")
    live = {"kind": "Service", "metadata": {
        "name": "agent", "namespace": NS_A,
        "labels": {LABEL_MANAGED_BY: MANAGED_BY, LABEL_UNIT: "alpha", LABEL_UNIT_KIND: "federation"},
        "annotations": {"meta.helm.sh/release-name": "flower-syncer"}}}
    assert "managed by Helm" in prune_blocker(unit, live)


def test_copy_from_on_a_secret_from_git_is_refused(tmp_path: Path, kube: FakeKube) -> None:
    """`flower-syncer.io/copy-from` on a user Secret used to copy another Secret's key into it."""
    existing(kube, "Secret", "someone-elses", "kubectl", data={"ca.crt": base64.b64encode(b"secret").decode()})
    path = repo(tmp_path / "a", NS_A, "alpha", settings="name: team-a\n")
    fed_file = path / "federations" / "alpha.yaml"
    repo(path, NS_A, settings="name: team-a\n", extra={"federations/alpha.yaml": fed_file.read_text() + secret_doc(
        "stolen", '"flower-syncer.io/copy-from": someone-elses')})
    loaded = load(path)
    assert any("flower-syncer.io/copy-from is flower-syncer's own annotation" in d.message for d in loaded.errors)
    sync(kube, loaded, SyncOptions())
    stolen = kube.get("Secret", NS_A, "stolen")
    assert stolen is None or "ca.crt" not in (stolen.get("data") or {})


# -- finding 2: writes under the tenant's identity -------------------------------------------------


class RbacServer(FakeApiServer):
    """An API server that authorizes an impersonated user's writes only in its namespaces."""

    def __init__(self, user: str, namespaces: set[str]) -> None:
        super().__init__()
        self.user, self.namespaces = user, namespaces
        self.writers: list[str | None] = []

    def handle(self, method: str, url: str, headers: Mapping[str, str], body: Any) -> _Response:
        if method in ("POST", "PUT", "PATCH", "DELETE"):
            who = headers.get("Impersonate-User")
            self.writers.append(who)
            ns = url.split("/namespaces/", 1)[1].split("/", 1)[0] if "/namespaces/" in url else ""
            if who == self.user and ns not in self.namespaces:
                return _status(403, "Forbidden", f'User "{who}" cannot write in the namespace "{ns}"')
        return super().handle(method, url, headers, body)


def test_writes_carry_the_tenants_identity_and_a_refusal_is_a_per_object_error(tmp_path: Path) -> None:
    user = "system:serviceaccount:team-a:tenant"
    server = RbacServer(user, {NS_A})
    for ns in (NS_A, NS_B):
        server.add_namespace(ns)
    kube = FakeKube(server).impersonating(user)
    # our own namespace check is off (a policy allowing every namespace): the API server refuses
    path = repo(tmp_path / "a", NS_B, "beta", settings="name: team-a\n")
    report = sync(kube, load(path, policy=RepositoryPolicy(guardrails=Guardrails(allowedNamespaces=["*"]))),
                  SyncOptions())
    assert not report.ok
    failed = failed_changes(report)
    assert failed and all("Forbidden" in m and "RBAC refused it" in m for m in failed.values()), report.to_dict()
    assert server.get("Service", NS_B, "beta-superlink") is None
    assert set(server.writers) == {user}  # every write was made as the tenant, none as the agent
    ok = sync(kube, load(repo(tmp_path / "a", NS_A, "beta", settings="name: team-a\n")), SyncOptions())
    assert ok.ok, ok.to_dict()


def test_the_tenancy_of_a_repository_comes_from_the_admins_entry(tmp_path: Path) -> None:
    admin = AdminPolicy(default=RepositoryPolicy(), repositories=[
        RepositoryPolicy(source="https://git.example.com/team-a/*", serviceAccount="team-a/tenant", names=["team-a"])])
    a = admin.for_source("https://git.example.com/team-a/cfg", "main", "")
    assert a.impersonate == "system:serviceaccount:team-a:tenant" and a.may_take_over("team-a")
    other = admin.for_source("https://git.example.com/team-b/cfg")
    assert other.impersonate is None and not other.may_take_over("team-a")
    assert Tenancy().policy is None
