"""The admin's policy entries meet a repository in one spelling (issue 39, item 7): another
spelling of the same URL, ref or path never falls through to a later, wider entry, and a spelling
that names another repository (`..`) never gets this one's entry. The remote's default branch is
checked against the entries once the remote names it."""

from __future__ import annotations

from pathlib import Path

import pytest

from syncer.agent.config import AgentConfig
from syncer.agent.runner import repository_tenancy
from syncer.models.policy import AdminPolicy, RepositoryPolicy
from syncer.source.git import GitSource, SourceSpec
from syncer.source.refs import SourceError
from tests.integration.gitservers import Repo

NARROW = "team-a/tenant"
WIDE = "platform/agent"


def admin(*entries: RepositoryPolicy) -> AdminPolicy:
    """The entries, then a wide catch-all: what a fall-through would get."""
    return AdminPolicy(repositories=[*entries, RepositoryPolicy(source="*", serviceAccount=WIDE)])


TEAM_A = admin(RepositoryPolicy(source="https://git.example.com/team-a/*", serviceAccount=NARROW))


@pytest.mark.parametrize("url", [
    "https://GIT.Example.COM/team-a/cfg",
    "HTTPS://git.example.com/team-a/cfg",
    "https://git.example.com//team-a/cfg",
    "https://git.example.com/team-a//cfg",
    "https://git.example.com/team-a/cfg.git/",
    "https://git.example.com/te%61m-a/cfg",
    "https://git.example.com/team-a/cfg%2Egit",
    "https://git.example.com/%74eam-a/cf%67",
    "https://git.example.com:443/team-a/cfg",
    "https://git.example.com./team-a/cfg",
    "https://git.example.com/team-a/./cfg",
    "https://git.example.com/x/../team-a/cfg",
    "https://someone@git.example.com/team-a/cfg",
])
def test_another_spelling_of_the_url_gets_the_same_entry(url: str) -> None:
    assert TEAM_A.for_source(url).serviceAccount == NARROW


@pytest.mark.parametrize("url", [
    "https://git.example.com/team-a/../team-b/cfg",
    "https://git.example.com/team-a/%2e%2e/team-b/cfg",
    "https://git.example.com/team-a/cfg/../../team-b/cfg",
    "https://git.example.com:8443/team-a/cfg",
    "https://git.example.com.evil.org/team-a/cfg",
])
def test_a_spelling_that_names_another_repository_does_not_get_the_entry(url: str) -> None:
    assert TEAM_A.for_source(url).serviceAccount == WIDE


def test_ssh_spellings_meet_one_entry() -> None:
    policy = admin(RepositoryPolicy(source="ssh://git@github.com/team-a/*", serviceAccount=NARROW))
    for url in ("git@GitHub.com:team-a/cfg.git", "ssh://git@github.com:22/team-a/cfg", "github.com:team-a/cfg",
                "git+ssh://git@github.com/team-a//cfg/"):
        assert policy.for_source(url).serviceAccount == NARROW, url
    scp = admin(RepositoryPolicy(source="git@github.com:team-a/*", serviceAccount=NARROW))
    assert scp.for_source("ssh://git@github.com/team-a/cfg").serviceAccount == NARROW


def test_the_entrys_own_pattern_is_read_in_the_same_spelling() -> None:
    policy = admin(RepositoryPolicy(source="https://Git.Example.com:443//team-a/*", ref="refs/heads/main",
                                    path="clusters/prod/", serviceAccount=NARROW))
    assert policy.for_source("https://git.example.com/team-a/cfg", "main", "clusters/prod").serviceAccount == NARROW


@pytest.mark.parametrize("ref", ["main", "refs/heads/main", "heads/main"])
def test_a_branch_in_any_spelling_gets_the_entry_of_its_short_name(ref: str) -> None:
    policy = admin(RepositoryPolicy(source="https://git.example.com/team-a/*", ref="main", serviceAccount=NARROW))
    assert policy.for_source("https://git.example.com/team-a/cfg", ref).serviceAccount == NARROW


@pytest.mark.parametrize("ref", ["v1.2", "refs/tags/v1.2", "tags/v1.2"])
def test_a_tag_in_any_spelling_gets_the_entry_of_its_short_name(ref: str) -> None:
    policy = admin(RepositoryPolicy(source="https://git.example.com/team-a/*", ref="v1.*", serviceAccount=NARROW))
    assert policy.for_source("https://git.example.com/team-a/cfg", ref).serviceAccount == NARROW


def test_a_full_commit_sha_in_upper_case_is_the_same_commit() -> None:
    sha = "0123456789abcdef0123456789abcdef01234567"
    policy = admin(RepositoryPolicy(source="https://git.example.com/team-a/*", ref=sha, serviceAccount=NARROW))
    assert policy.for_source("https://git.example.com/team-a/cfg", sha.upper()).serviceAccount == NARROW


@pytest.mark.parametrize("path", ["clusters/prod", "clusters//prod/", "./clusters/prod", "/clusters/prod",
                                  "clusters/./prod"])
def test_a_path_in_any_spelling_gets_the_entry(path: str) -> None:
    policy = admin(RepositoryPolicy(source="https://git.example.com/team-a/*", path="clusters/prod",
                                    serviceAccount=NARROW))
    assert policy.for_source("https://git.example.com/team-a/cfg", "", path).serviceAccount == NARROW


def test_local_paths_meet_one_entry(tmp_path: Path) -> None:
    policy = admin(RepositoryPolicy(source="/srv/git/team-a/*", serviceAccount=NARROW))
    for path in ("/srv/git//team-a/cfg", "/srv/git/team-a/cfg/", "file:///srv/git/team-a/cfg.git",
                 "/srv/git/x/../team-a/cfg"):
        assert policy.for_source(path).serviceAccount == NARROW, path
    assert policy.for_source("/srv/git/team-a/../team-b/cfg").serviceAccount == WIDE


# -- the remote's default branch ------------------------------------------------------------------


def _policy_file(tmp_path: Path, origin: Path, entries: str) -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text(f"apiVersion: flower-syncer.io/v1\nkind: Policy\nrepositories:\n{entries}"
                    f"  - source: '*'\n    serviceAccount: {WIDE}\n")
    return path


def _origin(tmp_path: Path) -> Repo:
    repo = Repo.init(tmp_path / "origin")
    repo.commit("first", {"README.md": "hi\n"})
    return repo


def test_the_default_branch_is_refused_when_an_earlier_entry_names_it(tmp_path: Path) -> None:
    """No --ref: the agent syncs the remote's default branch, `main`. An entry for `ref: main`
    comes first, so the agent must not run under the later, wider entry it matched without a ref."""
    origin = _origin(tmp_path)
    policy = _policy_file(tmp_path, origin.path, f"  - source: '{origin.path}'\n    ref: main\n"
                                                 f"    serviceAccount: {NARROW}\n")
    tenancy = repository_tenancy(AgentConfig(repo=str(origin.path), policy=policy))
    assert tenancy.impersonate == f"system:serviceaccount:{WIDE.replace('/', ':')}"
    src = GitSource(SourceSpec(url=str(origin.path), cache_dir=tmp_path / "cache", admit=tenancy.admit))
    with pytest.raises(SourceError) as err:
        src.fetch()
    assert "repositories[0]" in err.value.message and "--ref main" in err.value.message
    assert src.last() is None

    pinned = repository_tenancy(AgentConfig(repo=str(origin.path), ref="main", policy=policy))
    assert pinned.impersonate == f"system:serviceaccount:{NARROW.replace('/', ':')}"
    fetched = GitSource(SourceSpec(url=str(origin.path), ref="main", cache_dir=tmp_path / "cache2",
                                   admit=pinned.admit)).fetch()
    assert fetched.revision == origin.head()


def test_the_default_branch_is_taken_when_no_earlier_entry_names_it(tmp_path: Path) -> None:
    origin = _origin(tmp_path)
    policy = _policy_file(tmp_path, origin.path, f"  - source: '{origin.path}'\n    ref: prod\n"
                                                 f"    serviceAccount: {NARROW}\n")
    tenancy = repository_tenancy(AgentConfig(repo=str(origin.path), policy=policy))
    src = GitSource(SourceSpec(url=str(origin.path), cache_dir=tmp_path / "cache", admit=tenancy.admit))
    assert src.fetch().revision == origin.head()


def test_a_pattern_that_names_the_kind_of_ref_matches_only_that_kind() -> None:
    policy = admin(RepositoryPolicy(source="https://git.example.com/team-a/*", ref="refs/heads/*",
                                    serviceAccount="team-a/branches"),
                   RepositoryPolicy(source="https://git.example.com/team-a/*", ref="refs/tags/*",
                                    serviceAccount=NARROW))
    url = "https://git.example.com/team-a/cfg"
    assert policy.for_source(url, "refs/tags/v1").serviceAccount == NARROW
    assert policy.for_source(url, "tags/v1").serviceAccount == NARROW
    assert policy.for_source(url, "refs/heads/dev").serviceAccount == "team-a/branches"


@pytest.mark.parametrize("ref", ["refs/pull/7/head", "refs/pull/7/merge", "refs/merge-requests/7/head",
                                 "refs/changes/01/1/1"])
def test_a_pull_request_ref_never_gets_an_entry_for_branches_or_tags(ref: str) -> None:
    """Anyone who can open a pull request can push `refs/pull/N/head`: an entry for the team's
    branches must not cover it (it falls to the catch-all, `*`)."""
    policy = admin(RepositoryPolicy(source="https://git.example.com/team-a/*", ref="refs/heads/*",
                                    serviceAccount=NARROW),
                   RepositoryPolicy(source="https://git.example.com/team-a/*", ref="refs/tags/*",
                                    serviceAccount=NARROW),
                   RepositoryPolicy(source="https://git.example.com/team-a/*", ref="main", serviceAccount=NARROW))
    assert policy.for_source("https://git.example.com/team-a/cfg", ref).serviceAccount == WIDE
    prs = admin(RepositoryPolicy(source="https://git.example.com/team-a/*", ref="refs/pull/*",
                                 serviceAccount="team-a/previews"))
    assert prs.for_source("https://git.example.com/team-a/cfg", "refs/pull/7/head").serviceAccount == "team-a/previews"
    assert prs.for_source("https://git.example.com/team-a/cfg", "main").serviceAccount == WIDE


@pytest.mark.parametrize("url", ["https://github.com/Team-A/Cfg", "git@GitHub.com:TEAM-A/cfg.git",
                                 "https://GitLab.com/team-A/cfg", "ssh://git@ssh.dev.azure.com/v3/Team-A/cfg"])
def test_on_a_hosting_service_that_ignores_case_the_owner_in_any_case_gets_the_entry(url: str) -> None:
    policy = admin(*(RepositoryPolicy(source=source, serviceAccount=NARROW)
                     for source in ("https://github.com/team-a/*", "ssh://github.com/team-a/*",
                                    "https://gitlab.com/team-a/*", "ssh://ssh.dev.azure.com/v3/team-a/*")))
    assert policy.for_source(url).serviceAccount == NARROW


def test_on_a_server_that_tells_case_apart_another_case_is_another_repository() -> None:
    assert TEAM_A.for_source("https://git.example.com/Team-A/cfg").serviceAccount == WIDE


def test_a_short_ref_that_turns_out_to_be_a_tag_is_refused_by_a_branch_entry(tmp_path: Path) -> None:
    """`--ref v1` matched `ref: refs/heads/*` while its kind was unknown; the remote says v1 is a
    tag, which that entry does not match: nothing is fetched."""
    origin = _origin(tmp_path)
    origin.git("tag", "v1")
    policy = _policy_file(tmp_path, origin.path, f"  - source: '{origin.path}'\n    ref: refs/heads/*\n"
                                                 f"    serviceAccount: {NARROW}\n")
    tenancy = repository_tenancy(AgentConfig(repo=str(origin.path), ref="v1", policy=policy))
    src = GitSource(SourceSpec(url=str(origin.path), ref="v1", cache_dir=tmp_path / "cache", admit=tenancy.admit))
    with pytest.raises(SourceError) as err:
        src.fetch()
    assert "refs/tags/v1" in err.value.message and "does not match" in err.value.message
    branch = repository_tenancy(AgentConfig(repo=str(origin.path), ref="main", policy=policy))
    assert GitSource(SourceSpec(url=str(origin.path), ref="main", cache_dir=tmp_path / "cache2",
                                admit=branch.admit)).fetch().revision == origin.head()


def test_without_a_ref_an_entry_for_tags_does_not_cover_the_default_branch(tmp_path: Path) -> None:
    """No --ref: `ref: refs/tags/*` matched while the ref was unknown (""), but the remote's default
    branch is a branch, which that entry does not match: refused, never synced under the tags' entry."""
    origin = _origin(tmp_path)
    policy = _policy_file(tmp_path, origin.path, f"  - source: '{origin.path}'\n    ref: refs/tags/*\n"
                                                 f"    serviceAccount: {NARROW}\n")
    tenancy = repository_tenancy(AgentConfig(repo=str(origin.path), policy=policy))
    src = GitSource(SourceSpec(url=str(origin.path), cache_dir=tmp_path / "cache", admit=tenancy.admit))
    assert tenancy.impersonate == f"system:serviceaccount:{NARROW.replace('/', ':')}"  # the tags' entry, at start
    with pytest.raises(SourceError) as err:
        src.fetch()
    assert "does not match" in err.value.message and src.last() is None
