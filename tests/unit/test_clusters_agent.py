"""The agent of one cluster of a repository that lays out several (syncer.repo.clusters): it
applies, prunes and reports only its own cluster's units, whatever the other clusters' folders
hold or lose; without its cluster's name it applies and prunes nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from syncer.agent.agent import Agent
from syncer.agent.state import AgentOptions
from syncer.agent.wiring import build_agent
from syncer.identity import Unit
from syncer.observe.metrics import Metrics
from syncer.source.git import GitSource
from tests.builders import NS, federation, pool
from tests.fakekube import FakeApiServer, FakeKube

HUB, SITE_FED, EDGE = Unit("federation", NS, "hub"), Unit("federation", NS, "site"), Unit("supernode", NS, "edge")


class _Source:
    def describe(self) -> str:
        return "git@example.org:fleet/config.git"


def _agent(server: FakeApiServer, cluster: str) -> Agent:
    agent = build_agent(FakeKube(server), cast(GitSource, _Source()), Metrics(), AgentOptions(cluster=cluster))
    agent.cache.synced.set()
    agent.leading.set()
    return agent


def _write(root: Path, files: dict[str, str | None]) -> Path:
    (root / "flower-syncer.yaml").parent.mkdir(parents=True, exist_ok=True)
    (root / "flower-syncer.yaml").write_text(f"name: fleet\ndefaultNamespace: {NS}\n")
    for rel, text in files.items():
        path = root / rel
        if text is None:
            path.unlink(missing_ok=True)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def _revision(agent: Agent, root: Path, revision: str) -> list[Unit]:
    """What the dispatcher and the workers do with a revision."""
    loaded = agent.installer.loader.load(root)
    changed = agent.installer.install(loaded.state, loaded.rendered, revision)
    agent.loaded.set()
    for unit in changed:
        agent.syncs.sync(unit)
    agent.dispatch_pending()  # the UnitSynced events, as the dispatcher handles them
    return changed


def _units(agent: Agent) -> set[str]:
    status: dict[str, Any] = agent.status()
    return {u["unit"] for u in status["units"]}


def _statefulsets(server: FakeApiServer) -> set[str]:
    return {name for (kind, _, name) in server.objects if kind == "StatefulSet"}


FILES: dict[str, str | None] = {
    "clusters/hub/federations/hub.yaml": federation("hub", pool("a")),
    "clusters/site-a/federations/site.yaml": federation("site", pool("b")),
    "clusters/site-a/supernodes/edge/values.yaml": "tls:\n  enabled: false\nsupernode:\n  superlink:\n"
                                                    "    address: site-superlink\n    port: 9092\n",
}


def test_an_agent_applies_prunes_and_reports_only_its_own_cluster(tmp_path: Path) -> None:
    server = FakeApiServer()
    server.add_namespace(NS)
    hub, site = _agent(server, "hub"), _agent(server, "site-a")  # one API server: what each writes shows
    root = _write(tmp_path / "r", FILES)
    assert _revision(hub, root, "r1") == [HUB]
    assert set(hub.desired) == {HUB} and _units(hub) == {HUB.id}
    assert _statefulsets(server) == {"hub-superlink", "hub-supernode-a"}
    assert sorted(_revision(site, root, "r1")) == sorted([SITE_FED, EDGE])
    assert _units(site) == {SITE_FED.id, EDGE.id}
    # the site's units leave Git: the site's agent prunes them, the hub's sees nothing to do
    _write(root, {"clusters/site-a/federations/site.yaml": None})
    assert _revision(hub, root, "r2") == []
    assert _revision(site, root, "r2") == [SITE_FED]
    assert _statefulsets(server) == {"hub-superlink", "hub-supernode-a"}
    assert _units(hub) == {HUB.id}


def test_an_agent_without_its_clusters_name_applies_nothing(tmp_path: Path) -> None:
    server = FakeApiServer()
    server.add_namespace(NS)
    agent = _agent(server, "")
    root = _write(tmp_path / "r", FILES)
    loaded = agent.installer.loader.load(root)
    assert loaded.state.units == [] and loaded.errors == 1
    assert "--cluster" in loaded.error_lines()[0]
    assert _revision(agent, root, "r1") == [] and _statefulsets(server) == set()


def _sync_cluster(kube: FakeKube, root: Path, cluster: str, source: str = "git@example.org:fleet/config.git",
                  revision: str = "r1") -> Any:
    from syncer.engine.sync import Engine, SyncOptions
    from syncer.render.repo import plan_repo, render_repo
    from syncer.render.tenancy import Tenancy
    from syncer.repo.loader import load_repo

    state = load_repo(root, cluster=cluster)
    plan = plan_repo(state, render_repo(state), revision=revision, tenancy=Tenancy(source=source))
    return Engine(kube).sync(plan, SyncOptions())


def test_two_clusters_agents_sharing_one_kubernetes_cluster_never_prune_each_other(tmp_path: Path) -> None:
    """A misconfiguration (the site's agent given the hub's kubeconfig): each cluster's part is
    another source, so neither takes nor prunes the other's units; each still prunes its own."""
    server = FakeApiServer()
    server.add_namespace(NS)
    server.add_namespace("edge")
    kube = FakeKube(server)
    site_fed = federation("site", pool("b")).replace("  name: site\n", "  name: site\n  namespace: edge\n")
    root = _write(tmp_path / "r", {**FILES, "clusters/site-a/federations/site.yaml": site_fed,
                                   "clusters/site-a/supernodes/edge/values.yaml": None})
    assert _sync_cluster(kube, root, "hub").ok and _sync_cluster(kube, root, "site-a").ok
    both = {"hub-superlink", "hub-supernode-a", "site-superlink", "site-supernode-b"}
    assert _statefulsets(server) == both
    report = _sync_cluster(kube, root, "hub", revision="r2")  # the site's units are not in the hub's part
    assert report.ok and _statefulsets(server) == both
    _write(root, {"clusters/hub/federations/hub.yaml": None, "clusters/hub/federations/hub2.yaml":
                  federation("hub2", pool("a"))})
    assert _sync_cluster(kube, root, "hub", revision="r3").ok  # the hub prunes its own vanished unit
    assert _statefulsets(server) == {"hub2-superlink", "hub2-supernode-a", "site-superlink", "site-supernode-b"}
    # the site's federation moves to the hub's namespace: there the repository's name is recorded
    # from the hub's part, so the site's is refused (no unit is taken, nothing of the hub's deleted)
    moved = _write(tmp_path / "r2", {"clusters/hub/federations/hub2.yaml": federation("hub2", pool("a")),
                                     "clusters/site-a/federations/site.yaml": FILES[
                                         "clusters/site-a/federations/site.yaml"]})
    refused = _sync_cluster(kube, moved, "site-a", revision="r4")
    assert not refused.ok and "another source" in refused.units[0].errors[0]
    assert _statefulsets(server) == {"hub2-superlink", "hub2-supernode-a"}  # the site pruned only its own


def test_units_applied_before_the_layout_are_still_the_clusters_own(tmp_path: Path) -> None:
    server = FakeApiServer()
    server.add_namespace(NS)
    kube = FakeKube(server)
    flat = _write(tmp_path / "flat", {"federations/hub.yaml": federation("hub", pool("a")),
                                      "federations/old.yaml": federation("old", pool("a"))})
    assert _sync_cluster(kube, flat, "").ok  # no layout: the source without a cluster
    laid = _write(tmp_path / "laid", {"clusters/hub/federations/hub.yaml": federation("hub", pool("a"))})
    report = _sync_cluster(kube, laid, "hub", revision="r2")
    assert report.ok, [(u.unit, u.error) for u in report.units]
    assert _statefulsets(server) == {"hub-superlink", "hub-supernode-a"}  # hub taken over, old pruned
