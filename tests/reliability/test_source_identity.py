"""Source identity (issue 39, item 4 and its smaller findings): who a repository is comes from what
the admin configured, never from a place a tenant writes (docs/source-identity.md).

- a local repository's `.git/config` (`origin`) never chooses its identity, its policy entry or the
  ServiceAccount its writes are made as;
- a ref resolves as what it says: a tag never shadows the branch of its name (nor `refs/<name>`);
  a short name that is both is refused;
- the CLI derives identity as the agent does (`--ref`): two clones of one origin on two branches
  are two repositories, and a clone off the default branch must say which it is;
- two sources claiming one name are refused before either applies (the unit is claimed first);
- an inventory rebuilt from labels counts only what flower-syncer wrote;
- the agent acts on and reports only its own repository's units and FlowerUnits, never logs a
  `requestedAt` whole, and is not Ready while its Lease's namespace is missing.

Each case of a finding failed on the code before this change (see the commit messages); two guard
what must not change (a tag alone still found by its short name; today's identity kept on the
default branch). Real `git` repositories (tmp_path) and the in-memory API server
(tests/fakekube.py); no cluster.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from syncer.actions.load import load
from syncer.actions.sync import sync
from syncer.agent.agent import Agent
from syncer.agent.config import AgentConfig
from syncer.agent.flowerunits import FlowerUnits, object_name
from syncer.agent.messages import ResyncRequested, RevisionFetched, Waiter
from syncer.agent.reconcile_request import ANN_REQUESTED_AT
from syncer.agent.runner import repository_tenancy
from syncer.agent.state import AgentOptions
from syncer.agent.wiring import build_agent
from syncer.cli import main
from syncer.cli_repo import EXIT_USAGE, synced_ref
from syncer.cluster.client import path_for
from syncer.cluster.lease import LeaderElector
from syncer.engine.changeset import Cause
from syncer.engine.inventory import Inventory, decode, inventory_ref
from syncer.engine.live import LiveState
from syncer.engine.sync import Engine, SyncOptions, SyncReport
from syncer.identity import LABEL_REPOSITORY, ObjectRef, Unit, derived_repository_name
from syncer.observe.metrics import Metrics
from syncer.render.tenancy import Tenancy
from syncer.source.git import Checkout, GitSource, SourceSpec
from syncer.source.refs import SourceError
from tests.builders import committed_repo, git, install, pool
from tests.doubles import NoSource
from tests.fakekube import FakeApiServer, FakeKube

NS_A, NS_B = "team-a", "team-b"
THEIRS = "https://git.example.com/team-b/config"


@pytest.fixture
def kube() -> FakeKube:
    api = FakeApiServer()
    for ns in (NS_A, NS_B):
        api.add_namespace(ns)
    return FakeKube(api)


def deleted(report: SyncReport) -> list[str]:
    return [str(c.ref) for u in report.units for c in u.changes if c.action.value == "deleted"]


# -- 1. a working tree's .git/config is not who it is --------------------------------------------------


def policy_file(tmp_path: Path, mine: Path) -> Path:
    """The admin's policy: team B's remote may write in team-b as team-b/writer; the local work
    tree `mine` (team A's) only in team-a, as team-a/writer."""
    path = tmp_path / "policy.yaml"
    path.write_text(f"""apiVersion: flower-syncer.io/v1
kind: Policy
default: {{guardrails: {{allowedNamespaces: []}}}}
repositories:
- source: {THEIRS}
  serviceAccount: team-b/writer
  guardrails: {{allowedNamespaces: [{NS_B}]}}
- source: {mine}
  serviceAccount: team-a/writer
  guardrails: {{allowedNamespaces: [{NS_A}]}}
""")
    return path


def test_a_work_trees_origin_never_chooses_its_policy_or_service_account(tmp_path: Path) -> None:
    """Whoever may write the work tree sets `origin` to team B's URL: the agent used to take team
    B's identity, policy entry and ServiceAccount from it."""
    mine = committed_repo(tmp_path / "work", NS_A, "alpha")
    git(mine, "remote", "add", "origin", THEIRS)
    policy = policy_file(tmp_path, mine.resolve())
    t = repository_tenancy(AgentConfig(repo=str(mine), policy=policy))
    assert t.impersonate == "system:serviceaccount:team-a:writer"
    assert t.tenancy.policy is not None and t.tenancy.policy.guardrails.allowedNamespaces == [NS_A]
    assert t.name == derived_repository_name(str(mine.resolve()))
    assert THEIRS not in t.tenancy.source and t.tenancy.source == str(mine.resolve())


def test_the_admin_may_name_the_source_a_work_tree_is_known_by(tmp_path: Path) -> None:
    """An agent that ran on a clone under its origin's identity keeps it when the admin says so
    (`source_url`): the identity comes from the agent's settings, as every other."""
    mine = committed_repo(tmp_path / "work", NS_A, "alpha")
    git(mine, "remote", "add", "origin", "https://git.example.com/evil/elsewhere")
    policy = policy_file(tmp_path, mine.resolve())
    t = repository_tenancy(AgentConfig(repo=str(mine), policy=policy, source_url=THEIRS))
    assert t.impersonate == "system:serviceaccount:team-b:writer"
    assert t.name == derived_repository_name(THEIRS)


# -- 2. refs resolve as what they say ---------------------------------------------------------------


def origin_with_a_tag_named_main(tmp_path: Path) -> tuple[Path, str, str]:
    """A bare origin whose branch `main` is the reviewed commit, and a tag `main` someone pushed on
    an unreviewed one. Returns (origin, reviewed sha, unreviewed sha)."""
    work = committed_repo(tmp_path / "work", NS_A, "alpha")
    reviewed = git(work, "rev-parse", "HEAD")
    committed_repo(work, NS_A, "alpha", "unreviewed")
    unreviewed = git(work, "rev-parse", "HEAD")
    git(work, "reset", "-q", "--hard", reviewed)
    git(work, "tag", "main", unreviewed)
    origin = tmp_path / "origin.git"
    git(tmp_path, "clone", "-q", "--bare", str(work), str(origin))
    return origin, reviewed, unreviewed


def test_a_tag_named_like_the_branch_never_deploys(tmp_path: Path) -> None:
    """`ref: main` used to check out the tag `main` (git's precedence: tags before branches)."""
    origin, reviewed, unreviewed = origin_with_a_tag_named_main(tmp_path)
    source = GitSource(SourceSpec(str(origin), "main", cache_dir=tmp_path / "cache"))
    with pytest.raises(SourceError, match="names both the branch refs/heads/main and the tag refs/tags/main") as err:
        source.fetch()
    assert err.value.kind == "invalid" and source.last() is None
    branch = GitSource(SourceSpec(str(origin), "refs/heads/main", cache_dir=tmp_path / "b")).fetch()
    assert branch.revision == reviewed
    tag = GitSource(SourceSpec(str(origin), "tags/main", cache_dir=tmp_path / "t")).fetch()
    assert tag.revision == unreviewed


def test_a_ref_pushed_beside_the_branches_never_shadows_a_branch(tmp_path: Path) -> None:
    """`refs/main` (outside refs/heads) used to win over the branch `main` (git's `refs/<name>` rule)."""
    origin, reviewed, unreviewed = origin_with_a_tag_named_main(tmp_path)
    git(origin, "tag", "-d", "main")
    git(origin, "update-ref", "refs/main", unreviewed)
    checkout = GitSource(SourceSpec(str(origin), "main", cache_dir=tmp_path / "cache")).fetch()
    assert checkout.revision == reviewed


def test_a_tag_alone_is_still_found_by_its_short_name(tmp_path: Path) -> None:
    origin, _, unreviewed = origin_with_a_tag_named_main(tmp_path)
    git(origin, "tag", "v1", unreviewed)
    assert GitSource(SourceSpec(str(origin), "v1", cache_dir=tmp_path / "cache")).fetch().revision == unreviewed


# -- 3. the CLI derives identity as the agent does ----------------------------------------------------


def two_clones(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A bare origin (default branch main) with branches staging and prod, each rendering a
    federation of its own in team-a, and a clone of each. Returns (origin, staging, prod)."""
    work = committed_repo(tmp_path / "work", NS_A, "alpha")
    git(work, "checkout", "-q", "-b", "staging")
    committed_repo(work, NS_A, "stage")
    git(work, "checkout", "-q", "-b", "prod", "main")
    committed_repo(work, NS_A, "live")
    git(work, "checkout", "-q", "main")
    origin = tmp_path / "origin.git"
    git(tmp_path, "clone", "-q", "--bare", str(work), str(origin))
    clones = []
    for branch in ("staging", "prod"):
        git(tmp_path, "clone", "-q", "-b", branch, str(origin), str(tmp_path / branch))
        clones.append(tmp_path / branch)
    return origin, clones[0], clones[1]


def test_two_clones_of_one_origin_on_two_branches_are_two_repositories(tmp_path: Path, kube: FakeKube) -> None:
    """`flower-syncer sync` of the prod clone used to delete the staging clone's federation: both
    derived the origin's one identity."""
    _, staging, prod = two_clones(tmp_path)
    assert sync(kube, load(staging, ref="staging"), SyncOptions()).ok
    report = sync(kube, load(prod, ref="prod"), SyncOptions())
    assert report.ok and deleted(report) == [], report.to_dict()
    assert kube.get("Service", NS_A, "stage-superlink") is not None
    assert load(staging, ref="staging").repository != load(prod, ref="prod").repository


def test_the_cli_names_a_repository_as_an_agent_with_the_same_ref(tmp_path: Path) -> None:
    origin, staging, _ = two_clones(tmp_path)
    agent = repository_tenancy(AgentConfig(repo=str(origin), ref="staging"))
    cli = load(staging, ref="staging")
    assert cli.repository == agent.name and cli.tenancy.source == agent.tenancy.source
    default_agent = repository_tenancy(AgentConfig(repo=str(origin)))
    assert load(staging, ref="").repository == default_agent.name  # --ref HEAD


def test_a_clone_off_the_default_branch_must_say_which_ref_it_is(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    _, staging, _ = two_clones(tmp_path)
    assert main(["sync", str(staging), "--kubeconfig", str(tmp_path / "none")]) == EXIT_USAGE  # before any cluster
    assert "on the branch 'staging', not on its origin's default branch 'main'" in capsys.readouterr().err
    assert synced_ref(argparse.Namespace(dir=staging, ref=None)) == EXIT_USAGE
    assert "--ref staging" in capsys.readouterr().err
    assert synced_ref(argparse.Namespace(dir=staging, ref="staging")) == "staging"
    assert synced_ref(argparse.Namespace(dir=staging, ref="HEAD")) == ""


def test_a_clone_of_the_default_branch_keeps_todays_identity(tmp_path: Path) -> None:
    """Upgrades: what an unnamed clone of the default branch applied before stays its own."""
    origin, _, _ = two_clones(tmp_path)
    git(tmp_path, "clone", "-q", str(origin), str(tmp_path / "main"))
    assert synced_ref(argparse.Namespace(dir=tmp_path / "main", ref=None)) == ""
    assert load(tmp_path / "main").repository == derived_repository_name(str(origin.resolve()))


# -- 5. an inventory rebuilt from labels counts only what flower-syncer wrote --------------------------


def hand_made_copy(kube: FakeKube, of: dict[str, Any], name: str) -> None:
    """`kubectl get -o yaml | sed | kubectl create -f -`: a new object with the labels and the
    annotations (applied-hash too) of flower-syncer's `of`."""
    meta = of["metadata"]
    body = {"apiVersion": of["apiVersion"], "kind": of["kind"],
            "metadata": {"name": name, "namespace": meta["namespace"], "labels": dict(meta["labels"]),
                         "annotations": dict(meta.get("annotations") or {})},
            "spec": {"ports": [{"port": 8080}]}}
    kube.request("POST", path_for(of["kind"], meta["namespace"]), body=body, query={"fieldManager": "kubectl-create"})


@pytest.mark.parametrize("still_in_git", [True, False], ids=["unit-in-git", "unit-left-git"])
def test_an_inventory_rebuilt_from_labels_never_prunes_a_hand_made_copy(tmp_path: Path, kube: FakeKube,
                                                                       still_in_git: bool) -> None:
    """The inventory is lost; a hand-made Service copied a unit's labels: the rebuilt inventory
    used to count it, and the next sync deleted it."""
    root = committed_repo(tmp_path / "repo", NS_A, "alpha", "beta")
    assert sync(kube, load(root), SyncOptions()).ok
    ours = kube.get("Service", NS_A, "alpha-superlink")
    assert ours is not None
    hand_made_copy(kube, ours, "my-own-service")
    unit = Unit("federation", NS_A, "alpha")
    inv = inventory_ref(unit)
    assert kube.delete(inv.kind, inv.namespace, inv.name)
    committed_repo(root, NS_A, *(["alpha", "beta"] if still_in_git else ["beta"]))
    report = sync(kube, load(root), SyncOptions())
    assert "Service/team-a/my-own-service" not in deleted(report), report.to_dict()
    assert kube.get("Service", NS_A, "my-own-service") is not None
    notes = [c.message for u in report.units for c in u.changes if str(c.ref) == "Service/team-a/my-own-service"]
    assert any("flower-syncer did not write it" in n for n in notes), report.to_dict()
    if not still_in_git:  # what flower-syncer wrote is still pruned
        assert kube.get("Service", NS_A, "alpha-superlink") is None


# -- 4. two sources claiming one name: refused before either applies ----------------------------------


def test_two_sources_claiming_one_name_at_once_never_both_apply(tmp_path: Path, kube: FakeKube) -> None:
    """A and B both set `name: team-a` and render federation/team-a/alpha, and sync at the same
    moment (each from a view of the cluster taken before the other wrote): both used to apply,
    B over A's objects. Now the unit is claimed (its inventory created) before anything is applied:
    B finds it claimed from another source, and applies nothing."""
    a = load(committed_repo(tmp_path / "a", NS_A, "alpha", settings="name: team-a\n")).plan("ra")
    b = load(committed_repo(tmp_path / "b", NS_A, "alpha", settings="name: team-a\n",
                            pools=pool("a", replicas=3))).plan("rb")
    assert a.source != b.source and a.repository == b.repository == "team-a"
    unit = Unit("federation", NS_A, "alpha")
    engine = Engine(kube)
    seen_by_a, seen_by_b = LiveState.load(kube, None), LiveState.load(kube, None)  # neither saw the other
    first = engine.sync_unit(a.units[unit], seen_by_a, SyncOptions(), a)
    assert first.ok, first.to_dict()
    writes = kube.writes
    second = engine.sync_unit(b.units[unit], seen_by_b, SyncOptions(), b)
    assert not second.ok and second.cause is Cause.OTHER_REPOSITORY
    assert "claimed by the repository 'team-a' from another source" in second.first_error()
    assert [c for c in second.changes if c.action.is_change] == []
    assert kube.writes - writes <= 1  # the refused claim (a create answered 409), nothing applied
    sts = kube.get("StatefulSet", NS_A, "alpha-supernode-a")
    assert sts is not None and sts["spec"]["replicas"] == 1
    inv = kube.get("ConfigMap", NS_A, inventory_ref(unit).name)
    assert inv is not None and a.source in inv["data"]["inventory.json"]


def test_a_claim_that_no_sync_completed_is_rebuilt_from_labels(tmp_path: Path, kube: FakeKube) -> None:
    """A first sync that stopped after its claim (the agent killed mid-way) leaves an empty
    inventory: the next sync takes what was applied as the unit's own, as for a lost inventory, so
    a pool that left Git meanwhile is pruned, not orphaned."""
    root = committed_repo(tmp_path / "a", NS_A, "alpha", "beta")
    loaded = load(root)
    assert sync(kube, loaded, SyncOptions()).ok
    unit = Unit("federation", NS_A, "alpha")
    ref = inventory_ref(unit)
    claimed = Inventory(unit, repository=loaded.repository, source=loaded.tenancy.source)
    kube.apply(claimed.manifest(), force=True)  # as if the claim were all that was recorded
    committed_repo(root, NS_A, "alpha", "beta", pools=pool("b"))  # pool a left Git
    report = sync(kube, load(root), SyncOptions())
    assert report.ok, report.to_dict()
    assert sorted(deleted(report)) == ["Service/team-a/alpha-supernode-a", "Service/team-a/beta-supernode-a",
                                       "StatefulSet/team-a/alpha-supernode-a", "StatefulSet/team-a/beta-supernode-a"]
    recorded = decode(kube.get(ref.kind, ref.namespace, ref.name) or {})
    assert recorded is not None and ObjectRef("StatefulSet", NS_A, "alpha-supernode-b") in recorded.entries


# -- smaller findings: what an agent reports and acts on is its own repository's ----------------------


def agent_of(kube: FakeKube, root: Path, source: str = "") -> Agent:
    """An agent of the repository at `root` (installed at revision r1), leading, the cluster listed."""
    agent = build_agent(kube, NoSource(), Metrics(), AgentOptions(tenancy=Tenancy(source=source)))
    agent.cache.state = LiveState.load(kube, None)
    install(agent, root, "r1")
    agent.cache.synced.set()
    agent.leading.set()
    return agent


def test_resync_and_status_report_only_this_repositorys_units(tmp_path: Path, kube: FakeKube) -> None:
    """`resync --wait -o json` and `/api/v1/status` used to list team B's federation too, `ok` at
    this agent's revision: every inventory in the cluster was taken for the agent's."""
    assert sync(kube, load(committed_repo(tmp_path / "b", NS_B, "beta", settings="name: team-b\n")),
                SyncOptions()).ok
    root = committed_repo(tmp_path / "a", NS_A, "alpha", settings="name: team-a\n")
    agent = agent_of(kube, root)
    waiter = Waiter()
    agent.handle(ResyncRequested(None, waiter))
    agent.handle(RevisionFetched(Checkout("r1", root, "refs/heads/main", "c", "t", 0.0), 0.0))
    agent.drain()
    agent.dispatch_pending()
    assert waiter.done.is_set() and sorted(waiter.answer()) == ["federation/team-a/alpha"]
    assert [u["unit"] for u in agent.status()["units"]] == ["federation/team-a/alpha"]


def flowerunit(unit: Unit, repository: str, requested: str) -> dict[str, Any]:
    return {"apiVersion": "flower-syncer.io/v1alpha1", "kind": "FlowerUnit",
            "metadata": {"name": object_name(unit), "namespace": unit.namespace, "resourceVersion": "1",
                         "labels": {**unit.labels(), LABEL_REPOSITORY: repository},
                         "annotations": {ANN_REQUESTED_AT: requested}}}


def resyncs(agent: Agent) -> list[str | None]:
    events = [agent.events.get() for _ in range(agent.events.qsize())]
    return [e.unit for e in events if isinstance(e, ResyncRequested)]


def test_the_agent_ignores_reconcile_requests_on_another_repositorys_flowerunits(tmp_path: Path,
                                                                                 kube: FakeKube) -> None:
    """A `requestedAt` on team B's FlowerUnit used to make team A's agent fetch and resync; so did
    one on a FlowerUnit of A's name whose unit another source recorded."""
    agent = agent_of(kube, committed_repo(tmp_path / "a", NS_A, "alpha", "gamma", settings="name: team-a\n"),
                     source="/srv/team-a")
    view = FlowerUnits(agent, kube)
    alpha, beta, gamma = (Unit("federation", NS_A, "alpha"), Unit("federation", NS_B, "beta"),
                          Unit("federation", NS_A, "gamma"))
    agent.cache.state.inventories[gamma] = Inventory(gamma, repository="team-a", source="/srv/squatter")
    view.event("MODIFIED", flowerunit(beta, "team-b", "1"))
    view.event("MODIFIED", flowerunit(gamma, "team-a", "1"))
    assert resyncs(agent) == [] and view.requests.requested == 0
    view.event("MODIFIED", flowerunit(alpha, "team-a", "1"))  # its own: acted on
    assert resyncs(agent) == [alpha.id]


def test_a_huge_requested_at_is_never_logged_whole(tmp_path: Path, kube: FakeKube) -> None:
    """A 204 KB `requestedAt` used to be logged whole, on every line about the request."""
    agent = agent_of(kube, committed_repo(tmp_path / "a", NS_A, "alpha", settings="name: team-a\n"))
    view = FlowerUnits(agent, kube)
    alpha = Unit("federation", NS_A, "alpha")
    with capture_logs() as logs:
        view.event("MODIFIED", flowerunit(alpha, "team-a", "x" * 204_800))
        view.event("MODIFIED", flowerunit(alpha, "team-a", "x" * 204_800))  # the same: said once
    assert logs and all(len(repr(entry)) < 2_000 for entry in logs), [len(repr(e)) for e in logs]
    assert [e["event"] for e in logs] == ["reconcile request ignored: its value is too long"]
    assert resyncs(agent) == []


def test_a_missing_lease_namespace_is_not_ready_and_says_why(tmp_path: Path, kube: FakeKube) -> None:
    """The Lease's namespace does not exist: the agent used to stay a silent standby, Ready, that
    never synced anything."""
    agent = agent_of(kube, committed_repo(tmp_path / "a", NS_A, "alpha", settings="name: team-a\n"))
    agent.leading.clear()
    elector = LeaderElector(kube, "flower-system", "flower-syncer", "me", on_started_leading=agent.leading.set,
                            on_stopped_leading=agent.leading.clear)
    agent.readiness.append(lambda: elector.problem)
    assert agent.ready() == (True, "ok")
    with capture_logs() as logs:
        elector._follow_step()
        elector._follow_step()
    ready, why = agent.ready()
    assert not ready and "namespace 'flower-system' of the leader-election Lease does not exist" in why
    assert [e["event"] for e in logs if e["log_level"] == "error"] == ["leader election cannot succeed"]
    kube.server.add_namespace("flower-system")  # made: the next try leads, and the agent is ready
    elector._follow_step()
    assert agent.leading.is_set() and agent.ready() == (True, "ok")


def test_a_squatter_of_the_name_never_writes_the_other_sources_flowerunit(tmp_path: Path, kube: FakeKube) -> None:
    """B claims A's name and renders A's unit: B's agent used to write that unit's FlowerUnit
    status (its own refusal over A's Ready) at every round, a fight that never ended."""
    a = load(committed_repo(tmp_path / "a", NS_A, "alpha", settings="name: team-a\n"))
    assert sync(kube, a, SyncOptions()).ok
    alpha = Unit("federation", NS_A, "alpha")
    theirs = kube.create({**flowerunit(alpha, "team-a", ""), "status": {"lastAppliedRevision": "from-a"}})
    b_root = committed_repo(tmp_path / "b", NS_A, "alpha", "bonly", settings="name: team-a\n")
    agent = agent_of(kube, b_root, source=str(b_root))
    view = FlowerUnits(agent, kube)
    view.replace(None, [theirs])
    view._listed()
    assert view.write_round() == 2  # bonly's FlowerUnit made and its status written; alpha's: not B's
    after = kube.get("FlowerUnit", NS_A, object_name(alpha))
    assert after is not None and after.get("status") == {"lastAppliedRevision": "from-a"}
    assert kube.get("FlowerUnit", NS_A, object_name(Unit("federation", NS_A, "bonly"))) is not None


def test_a_huge_annotation_on_a_flowerunit_is_not_held_whole(tmp_path: Path, kube: FakeKube) -> None:
    """The FlowerUnit held per unit for the agent's life kept every annotation whole (204 KB each)."""
    agent = agent_of(kube, committed_repo(tmp_path / "a", NS_A, "alpha", settings="name: team-a\n"))
    view = FlowerUnits(agent, kube)
    alpha = Unit("federation", NS_A, "alpha")
    obj = flowerunit(alpha, "team-a", "y" * 204_800)
    obj["metadata"]["annotations"]["note"] = "z" * 200_000
    view.event("MODIFIED", obj)
    assert len(repr(view.objects[alpha])) < 2_000
    assert resyncs(agent) == []  # still too long, still ignored


def test_an_upgraded_agent_never_falls_silently_to_the_default_entry(tmp_path: Path) -> None:
    """The admin's entry names the clone's origin URL (as it was chosen before identity came from
    the agent's settings); the clone's path matches no entry. Starting under the default entry
    (another ServiceAccount, no signatures required) would be silent: the agent refuses to start
    and says to set source_url; with it, the origin's entry applies."""
    mine = committed_repo(tmp_path / "work", NS_A, "alpha")
    git(mine, "remote", "add", "origin", THEIRS)
    policy = policy_file(tmp_path, tmp_path / "nowhere")  # no entry for the clone's path
    with pytest.raises(SourceError) as err:
        repository_tenancy(AgentConfig(repo=str(mine), policy=policy))
    assert f"source_url: {THEIRS}" in err.value.message
    kept = repository_tenancy(AgentConfig(repo=str(mine), policy=policy, source_url=THEIRS))
    assert kept.impersonate == "system:serviceaccount:team-b:writer"
