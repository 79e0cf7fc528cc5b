"""No site can prune the hub (issue 39, item 2; reliability suite). With the `clusters/` layout
(syncer.repo.clusters), a Federation committed under `clusters/site-b/` with the hub's name and
namespace made the hub's agent drop its own unit with no diagnostic and delete its objects, and
`validate --cluster hub` exited 0. Now the same unit id in two clusters' folders is an error for
every cluster that reads the repository (naming both files), neither definition is applied, and
nothing is pruned while it stands: the last applied state stays.

The hub's agent is run in-process against the in-memory API server (tests/fakekube.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from syncer.actions.load import load
from syncer.actions.sync import sync
from syncer.agent.state import AgentOptions
from syncer.agent.wiring import build_agent
from syncer.cli import main
from syncer.engine.live import LiveState
from syncer.engine.sync import SyncOptions
from syncer.identity import Unit
from syncer.observe.metrics import Metrics
from tests.builders import NS, federation, install, pool
from tests.doubles import NoSource
from tests.fakekube import FakeApiServer, FakeKube

HUB = Unit("federation", NS, "hub")
HUB_FILE = "clusters/hub/federations/hub.yaml"
SITE_FILE = "clusters/site-b/federations/hub.yaml"


@pytest.fixture
def kube() -> FakeKube:
    server = FakeApiServer()
    server.add_namespace(NS)
    return FakeKube(server)


def fleet(root: Path, *, squat: bool) -> Path:
    """The hub's Federations in clusters/hub; a site's in clusters/site-b; with `squat`, a
    Federation of the hub's name and namespace in clusters/site-b too."""
    (root / "clusters" / "hub" / "federations").mkdir(parents=True, exist_ok=True)
    (root / "clusters" / "site-b" / "federations").mkdir(parents=True, exist_ok=True)
    (root / "flower-syncer.yaml").write_text(f"name: fleet\ndefaultNamespace: {NS}\n")
    (root / HUB_FILE).write_text(federation("hub", pool("local")))
    # another unit of the hub: the hub still renders something, so the "renders nothing at all"
    # safeguard does not stand in the way of the prune this case is about
    (root / "clusters" / "hub" / "federations" / "keeper.yaml").write_text(federation("keeper", pool("k")))
    (root / "clusters" / "site-b" / "federations" / "site.yaml").write_text(federation("site", pool("b")))
    squatter = root / SITE_FILE
    if squat:
        squatter.write_text(federation("hub", pool("other", replicas=3)))
    elif squatter.exists():
        squatter.unlink()
    return root


def hub_objects(kube: FakeKube) -> dict[tuple[str, str], str]:
    return {(kind, name): obj["metadata"]["uid"] for (kind, ns, name), obj in kube.server.objects.items()
            if ns == NS and name.startswith("hub")}


@pytest.mark.parametrize("cluster", ["hub", "site-b"])
def test_the_same_unit_in_two_clusters_folders_is_an_error_for_every_cluster(tmp_path: Path, cluster: str) -> None:
    loaded = load(fleet(tmp_path, squat=True), cluster=cluster)
    crossed = [d for d in loaded.errors if "two clusters' folders" in d.message]
    assert crossed, [d.render() for d in loaded.errors]
    text = crossed[0].render()
    assert HUB_FILE in text and SITE_FILE in text and crossed[0].path == "metadata.name"
    assert HUB in loaded.state.failed and HUB not in {u.unit for u in loaded.state.units}
    assert not loaded.plan("r2").prune_allowed


@pytest.mark.parametrize("cluster", ["hub", "site-b"])
def test_validate_for_either_cluster_exits_non_zero_naming_both_files(tmp_path: Path, cluster: str,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    root = fleet(tmp_path, squat=True)
    code = main(["validate", str(root), "--cluster", cluster])
    out = capsys.readouterr()
    assert code != 0, out.out + out.err
    assert HUB_FILE in out.out + out.err and SITE_FILE in out.out + out.err


def test_a_sync_for_the_hub_prunes_nothing_because_of_a_sites_folder(tmp_path: Path, kube: FakeKube) -> None:
    root = fleet(tmp_path, squat=False)
    assert sync(kube, load(root, cluster="hub"), SyncOptions()).ok
    before = hub_objects(kube)
    assert len(before) >= 5
    report = sync(kube, load(fleet(root, squat=True), cluster="hub"), SyncOptions())
    assert not report.ok
    assert hub_objects(kube) == before  # nothing deleted, nothing recreated, nothing of the squatter applied
    assert kube.get("StatefulSet", NS, "hub-supernode-other") is None


def test_the_hubs_agent_keeps_its_unit_and_its_objects(tmp_path: Path, kube: FakeKube) -> None:
    """The agent of the hub (--cluster hub) reads the whole repository: the site's folder fails the
    hub's unit for it too, and its workers prune nothing."""
    agent = build_agent(kube, NoSource(), Metrics(), AgentOptions(workers=1, repository="fleet", cluster="hub"))
    agent.leading.set()
    root = fleet(tmp_path / "repo", squat=False)

    def revision(name: str) -> list[Unit]:
        agent.cache.state = LiveState.load(kube, None)  # what the watches would show
        agent.cache.synced.set()
        changed = install(agent, root, name)
        for unit in changed:
            agent.syncs.sync(unit)
        return changed

    assert HUB in revision("r1")
    before = hub_objects(kube)
    assert len(before) >= 5
    fleet(root, squat=True)
    revision("r2")
    assert hub_objects(kube) == before
    plan = agent.installed.plan
    assert HUB in plan.failed and not plan.prune_allowed  # the hub's failure, not a unit that left Git
    agent.engine.close()
