"""Repository identity (issue 13, item 1): repositories without a `name` get one derived from their
source, so two of them never prune or take each other's units; renaming is an explicit step
(`renamedFrom`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from syncer.actions.load import load
from syncer.actions.sync import sync
from syncer.engine.changeset import Cause
from syncer.engine.sync import SyncOptions
from syncer.identity import DEFAULT_REPOSITORY, LABEL_REPOSITORY, derived_repository_name
from syncer.source.location import source_location
from tests.builders import NS, committed_repo, git
from tests.fakekube import FakeApiServer, FakeKube


def repo(path: Path, *feds: str, settings: str = "") -> Path:
    """A committed config repository with these federations (and flower-syncer.yaml lines)."""
    return committed_repo(path, NS, *feds, settings=settings)


@pytest.fixture
def kube() -> FakeKube:
    server = FakeApiServer()
    server.add_namespace(NS)
    return FakeKube(server)


def test_derived_names_are_label_safe_and_tell_sources_apart() -> None:
    a = derived_repository_name("https://git.example.com/team/flower-config")
    assert a.startswith("flower-config-") and len(a) <= 63 and a == a.lower()
    assert a != derived_repository_name("https://git.example.com/other/flower-config")
    assert a != derived_repository_name("https://git.example.com/team/flower-config", "prod")
    assert derived_repository_name("/") != ""  # no readable part: the hash alone


def test_source_location_ignores_credentials_and_spelling(tmp_path: Path) -> None:
    base = ("https://git.example.com/team/cfg", "")
    assert source_location("https://user:s3cret@git.example.com/team/cfg.git/") == base
    assert source_location("https://git.example.com/team/cfg") == base
    assert source_location("git@git.example.com:team/cfg.git", "./prod/") == ("git@git.example.com:team/cfg", "prod")


def test_a_clone_has_the_identity_of_what_it_was_cloned_from(tmp_path: Path) -> None:
    """`flower-syncer sync` in a clone and an agent syncing the original agree on the name."""
    origin = repo(tmp_path / "origin", "fed")
    git(tmp_path, "clone", "-q", str(origin), str(tmp_path / "clone"))
    assert source_location(str(tmp_path / "clone")) == source_location(str(origin))
    (tmp_path / "clone" / "sub").mkdir()
    assert source_location(str(tmp_path / "clone" / "sub")) == (str(origin.resolve()), "sub")
    assert source_location(str(origin), "sub") == (str(origin.resolve()), "sub")
    git(tmp_path / "clone", "remote", "set-url", "origin", "https://tok@git.example.com/t/cfg.git")
    assert source_location(str(tmp_path / "clone")) == ("https://git.example.com/t/cfg", "")


def test_two_unnamed_repositories_never_prune_each_other(tmp_path: Path, kube: FakeKube) -> None:
    one = load(repo(tmp_path / "one", "alpha"))
    two = load(repo(tmp_path / "two", "beta"))
    assert one.repository != two.repository and DEFAULT_REPOSITORY not in (one.repository, two.repository)
    assert sync(kube, one, SyncOptions()).ok
    report = sync(kube, two, SyncOptions())  # used to prune `alpha`: both were "default"
    assert report.ok, report.to_dict()
    assert not [c for u in report.units for c in u.changes if c.action.value == "deleted"]
    for name, owner in (("alpha-superlink", one.repository), ("beta-superlink", two.repository)):
        svc = kube.get("Service", NS, name)
        assert svc is not None and svc["metadata"]["labels"][LABEL_REPOSITORY] == owner
    # the same unit name in the second repository is refused, not taken
    clash = sync(kube, load(repo(tmp_path / "two", "beta", "alpha")), SyncOptions())
    refused = {u.unit.id: u for u in clash.units}[f"federation/{NS}/alpha"]
    assert refused.cause is Cause.OTHER_REPOSITORY and any("was applied by the repository" in e for e in refused.errors)
    assert kube.get("Service", NS, "alpha-superlink")["metadata"]["labels"][LABEL_REPOSITORY] == one.repository


def test_renaming_is_an_explicit_step(tmp_path: Path, kube: FakeKube) -> None:
    path = repo(tmp_path / "cfg", "alpha", "gone", settings="name: old-name\n")
    assert sync(kube, load(path), SyncOptions()).ok
    # a new name alone: the units recorded under the old one are refused, nothing is deleted
    renamed = sync(kube, load(repo(path, "alpha", settings="name: new-name\n")), SyncOptions())
    assert not renamed.ok
    error = next(e for u in renamed.units for e in u.errors)
    assert "renamedFrom: [old-name]" in error
    assert kube.get("Service", NS, "gone-superlink") is not None
    # renamedFrom takes them over: relabelled, and the unit that left Git is pruned as ours
    taken = sync(kube, load(repo(path, "alpha", settings="name: new-name\nrenamedFrom: [old-name]\n")),
                 SyncOptions())
    assert taken.ok, taken.to_dict()
    assert kube.get("Service", NS, "alpha-superlink")["metadata"]["labels"][LABEL_REPOSITORY] == "new-name"
    assert kube.get("Service", NS, "gone-superlink") is None
