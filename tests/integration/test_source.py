"""The Git source against real git: local work trees and bare repositories, a smart-HTTP server with token
auth and a real sshd on 127.0.0.1; the local-repository watcher and the poller."""

from __future__ import annotations

import logging
import shutil
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from structlog.testing import capture_logs

from syncer.source import git as git_source
from syncer.source import watch as watch_module
from syncer.source.git import Checkout, GitSource, SourceSpec
from syncer.source.refs import SourceError
from syncer.source.watch import LocalRepoWatcher
from tests.conftest import wait_until
from tests.integration.gitservers import GitHttpServer, Repo, SshServer, free_port, git, keygen, require_sshd

FED_A = "kind: Federation\nmetadata:\n  name: a\n"
FED_B = "kind: Federation\nmetadata:\n  name: b\n"


@pytest.fixture
def work(tmp_path: Path) -> Repo:
    """A working tree with one commit: config/federations/a.yaml and README.md."""
    repo = Repo.init(tmp_path / "work")
    repo.commit("initial", {"config/federations/a.yaml": FED_A, "README.md": "hello\n"})
    return repo


@pytest.fixture
def bare(tmp_path: Path, work: Repo) -> Path:
    """A bare repository holding ``work``'s history."""
    path = tmp_path / "remote.git"
    git(tmp_path, "clone", "-q", "--bare", str(work.path), str(path))
    return path


@pytest.fixture
def pusher(tmp_path: Path, bare: Path) -> Repo:
    """Another clone of ``bare`` to push from."""
    return Repo.clone(bare, tmp_path / "pusher")


def source(url: str | Path, tmp_path: Path, **kw: object) -> GitSource:
    return GitSource(SourceSpec(url=str(url), cache_dir=tmp_path / "cache", **kw))  # type: ignore[arg-type]


def record_git(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The arguments of every git command a GitSource runs from now on (it runs git in one place)."""
    commands: list[list[str]] = []
    run_git = GitSource._git

    def recording(self: GitSource, s: Any, args: list[str], gitdir: Path | None) -> Any:
        commands.append(list(args))
        return run_git(self, s, args, gitdir)

    monkeypatch.setattr(GitSource, "_git", recording)
    return commands


def files(co: Checkout) -> dict[str, str]:
    """The checkout's files (relative path -> text)."""
    return {p.relative_to(co.root).as_posix(): p.read_text() for p in sorted(co.root.rglob("*")) if p.is_file()}


# -- local working tree ------------------------------------------------------------------------------------


def test_working_tree_commits_are_fetched(tmp_path: Path, work: Repo) -> None:
    src = source(work.path, tmp_path)
    first = src.fetch()
    assert first.revision == work.head()
    assert first.ref == "refs/heads/main"
    assert files(first) == {"README.md": "hello\n", "config/federations/a.yaml": FED_A}
    assert src.last() is first

    sha = work.commit("add federation b", {"config/federations/b.yaml": FED_B}, date="1700000000 +0000")
    second = src.fetch()
    assert second.revision == sha != first.revision
    assert (second.subject, second.author, second.committed_at) == ("add federation b", "Ada Author", 1700000000.0)
    assert files(second)["config/federations/b.yaml"] == FED_B
    assert src.last() is second


def test_uncommitted_edits_are_ignored(tmp_path: Path, work: Repo) -> None:
    src = source(work.path, tmp_path)
    committed = src.fetch()
    work.write({"config/federations/a.yaml": "edited\n", "config/federations/new.yaml": FED_B})
    work.git("add", "config/federations/new.yaml")  # staged but not committed
    again = src.fetch()
    assert again.revision == committed.revision
    assert files(again) == {"README.md": "hello\n", "config/federations/a.yaml": FED_A}


def test_follows_the_current_branch_of_a_working_tree(tmp_path: Path, work: Repo) -> None:
    work.git("checkout", "-q", "-b", "feature")
    sha = work.commit("on feature", {"README.md": "feature\n"})
    co = source(work.path, tmp_path).fetch()
    assert (co.revision, co.ref) == (sha, "refs/heads/feature")
    assert files(co)["README.md"] == "feature\n"


def test_detached_head_of_a_working_tree(tmp_path: Path, work: Repo) -> None:
    first = work.head()
    work.commit("second", {"README.md": "second\n"})
    work.git("checkout", "-q", "--detach", first)
    co = source(work.path, tmp_path).fetch()
    assert (co.revision, co.ref) == (first, "HEAD")


def test_no_change_fetch_runs_only_ls_remote_and_leaves_the_checkout_alone(
        tmp_path: Path, work: Repo, monkeypatch: pytest.MonkeyPatch) -> None:
    """An unchanged remote costs one `git ls-remote` and nothing else: no fetch, no checkout, no
    clean (what made it cheap is counted, not timed: timings belong to bench/)."""
    monkeypatch.setattr(git_source, "RACY_SECONDS", 3600.0)  # the index refresh has its own test
    src = source(work.path, tmp_path, path="config")
    first = src.fetch()
    marker = first.root / "federations" / "a.yaml"
    mtime = marker.stat().st_mtime_ns
    commands = record_git(monkeypatch)
    for _ in range(3):
        assert src.fetch() is first
    assert [args[0] for args in commands] == ["ls-remote"] * 3
    assert marker.stat().st_mtime_ns == mtime


def test_an_idle_poll_refreshes_the_index_the_first_checkout_left_racily_clean(
        tmp_path: Path, work: Repo, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first checkout writes every file in the second git stamps its index with, so the next
    checkout would read and hash every file again (on the first commit after a start); a poll that
    finds nothing new, RACY_SECONDS later, refreshes the index once, with a later stamp."""
    work.commit("more", {f"config/federations/f{i}.yaml": FED_A.replace("name: a", f"name: f{i}")
                         for i in range(50)})
    monkeypatch.setattr(git_source, "RACY_SECONDS", 1.0)
    src = source(work.path, tmp_path)
    first = src.fetch()
    index = tmp_path / "cache" / "git" / "index"

    def racily_clean() -> list[str]:
        """Tracked files written in or after the index's second (git compares whole seconds)."""
        stamp = int(index.stat().st_mtime)
        return [p.name for p in first.root.rglob("*.yaml") if int(p.stat().st_mtime) >= stamp]

    commands = record_git(monkeypatch)

    def refreshes() -> list[list[str]]:
        return [args for args in commands if args[0] == "update-index"]

    wait_until("an idle poll to refresh the index",
               lambda: src.fetch() is first and bool(refreshes()) and not racily_clean(), timeout=10, interval=0.1)
    for _ in range(3):
        assert src.fetch() is first
    assert refreshes() == [["update-index", "-q", "--refresh"]]  # once
    work.commit("next", {"config/federations/a.yaml": FED_B})
    assert files(src.fetch())["config/federations/a.yaml"] == FED_B  # the refreshed index checks out as before


def test_local_edits_in_the_cache_are_undone_by_the_next_new_revision(tmp_path: Path, work: Repo) -> None:
    src = source(work.path, tmp_path)
    co = src.fetch()
    (co.root / "README.md").write_text("tampered\n")
    (co.root / "stray.yaml").write_text("x: 1\n")
    work.commit("next", {"config/federations/b.yaml": FED_B})
    assert files(src.fetch()) == {"README.md": "hello\n", "config/federations/a.yaml": FED_A,
                                  "config/federations/b.yaml": FED_B}


def test_a_new_source_on_an_existing_cache_cleans_the_work_tree(tmp_path: Path, work: Repo) -> None:
    co = source(work.path, tmp_path).fetch()
    (co.root / "README.md").write_text("tampered\n")
    (co.root / "stray.yaml").write_text("x: 1\n")
    again = source(work.path, tmp_path).fetch()  # a restarted agent
    assert again.revision == co.revision
    assert files(again) == {"README.md": "hello\n", "config/federations/a.yaml": FED_A}


# -- refs --------------------------------------------------------------------------------------------------


def test_branch_pinning(tmp_path: Path, work: Repo) -> None:
    stable = work.head()
    work.git("branch", "stable")
    work.commit("main moves on", {"config/federations/b.yaml": FED_B})
    src = source(work.path, tmp_path, ref="stable")
    co = src.fetch()
    assert (co.revision, co.ref) == (stable, "refs/heads/stable")
    assert "config/federations/b.yaml" not in files(co)

    work.git("checkout", "-q", "stable")
    moved = work.commit("stable moves", {"README.md": "stable\n"})
    work.git("checkout", "-q", "main")
    co = src.fetch()
    assert co.revision == moved
    assert files(co)["README.md"] == "stable\n"


def test_tag_pinning_annotated_and_lightweight(tmp_path: Path, work: Repo) -> None:
    tagged = work.head()
    work.git("tag", "-a", "v1", "-m", "release 1")
    work.git("tag", "light")
    work.commit("after the tags", {"README.md": "later\n"})
    for tag in ("v1", "light", "refs/tags/v1"):
        co = GitSource(SourceSpec(url=str(work.path), ref=tag, cache_dir=tmp_path / f"cache-{tag[-2:]}")).fetch()
        assert co.revision == tagged, tag
        assert co.ref == ("refs/tags/v1" if tag.endswith("v1") else "refs/tags/light")
        assert files(co)["README.md"] == "hello\n"


def test_commit_sha_pinning_full_and_short(tmp_path: Path, work: Repo) -> None:
    old = work.head()
    work.commit("newer", {"README.md": "newer\n"})
    for ref, cache in ((old, "full"), (old[:9], "short")):
        src = GitSource(SourceSpec(url=str(work.path), ref=ref, cache_dir=tmp_path / cache))
        co = src.fetch()
        assert (co.revision, co.ref) == (old, old)
        assert files(co)["README.md"] == "hello\n"
        work.commit(f"even newer {cache}", {"README.md": cache})
        assert src.fetch().revision == old


def test_a_pinned_sha_that_is_no_branch_tip_is_fetched_from_a_bare_remote(tmp_path: Path, pusher: Repo,
                                                                          bare: Path) -> None:
    old = pusher.head()
    pusher.commit("second", {"README.md": "2\n"})
    pusher.commit("third", {"README.md": "3\n"})
    pusher.git("push", "-q", "origin", "main")
    co = source(bare, tmp_path, ref=old).fetch()
    assert co.revision == old
    assert files(co)["README.md"] == "hello\n"


def test_a_pinned_sha_is_found_when_the_server_refuses_fetch_by_sha(tmp_path: Path, pusher: Repo, bare: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    old = pusher.head()
    pusher.commit("second", {"README.md": "2\n"})
    pusher.git("push", "-q", "origin", "main")
    gitconfig = tmp_path / "gitconfig"
    gitconfig.write_text("[protocol]\n\tversion = 0\n")  # protocol v0 refuses wants of unadvertised objects
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(gitconfig))
    with capture_logs() as logs:
        co = source(bare, tmp_path, ref=old).fetch()
    assert co.revision == old
    assert any("fetch by sha refused" in e["event"] for e in logs), logs


def test_unknown_ref_and_unknown_sha(tmp_path: Path, work: Repo) -> None:
    with pytest.raises(SourceError) as err:
        source(work.path, tmp_path, ref="nope").fetch()
    assert err.value.kind == "ref-not-found"
    assert "nope" in str(err.value)
    with pytest.raises(SourceError) as err:
        source(work.path, tmp_path, ref="deadbeef" * 5).fetch()
    assert err.value.kind == "ref-not-found"


def test_repository_without_commits(tmp_path: Path) -> None:
    empty = Repo.init(tmp_path / "empty")
    with pytest.raises(SourceError) as err:
        source(empty.path, tmp_path).fetch()
    assert err.value.kind == "ref-not-found"


# -- sub-path ----------------------------------------------------------------------------------------------


def test_sub_path(tmp_path: Path, work: Repo) -> None:
    co = source(work.path, tmp_path, path="./config/").fetch()
    assert co.root == tmp_path / "cache" / "tree" / "config"
    assert files(co) == {"federations/a.yaml": FED_A}


@pytest.mark.parametrize("path", ["", "config"])
def test_a_checkout_lists_the_paths_changed_since_the_previous_one(tmp_path: Path, work: Repo, path: str) -> None:
    """As Git says (paths under the sub-path, relative to it): what the loader may skip depends on it."""
    src = source(work.path, tmp_path, path=path)
    first = src.fetch()
    assert (first.since, first.changed) == ("", None)  # nothing to compare with
    work.git("mv", "config/federations/a.yaml", "config/federations/renamed.yaml")
    work.commit("rename a, add b, touch the README", {"config/federations/b.yaml": FED_B, "README.md": "hi\n",
                                                     "config/supernodes/r/values.yaml": "x: 1\n"})
    second = src.fetch()
    prefix = "" if path else "config/"
    expected = {f"{prefix}federations/a.yaml", f"{prefix}federations/renamed.yaml", f"{prefix}federations/b.yaml",
                f"{prefix}supernodes/r/values.yaml"} | ({"README.md"} if not path else set())
    assert second.since == first.revision and second.changed == frozenset(expected)
    assert src.fetch() is second  # unchanged: the same checkout
    work.commit("outside the sub-path only", {"README.md": "bye\n"})
    third = src.fetch()
    assert third.changed == frozenset({"README.md"} if not path else ())


@pytest.mark.parametrize("path", ["../outside", "config/../../outside", "/etc", "config/../..", ".git"])
def test_sub_path_that_escapes_is_refused(tmp_path: Path, work: Repo, path: str) -> None:
    with pytest.raises(SourceError) as err:
        source(work.path, tmp_path, path=path)
    assert err.value.kind == "invalid"


def test_sub_path_symlink_out_of_the_repo_is_not_followed(tmp_path: Path, work: Repo) -> None:
    (tmp_path / "secret").mkdir()
    (tmp_path / "secret" / "key.yaml").write_text("secret: 1\n")
    (work.path / "escape").symlink_to(tmp_path / "secret")
    work.commit("symlink out")
    src = source(work.path, tmp_path, path="escape")
    with pytest.raises(SourceError) as err:
        src.fetch()
    assert err.value.kind == "path-not-found"
    assert src.last() is None


def test_missing_sub_path_keeps_the_last_checkout(tmp_path: Path, work: Repo) -> None:
    with pytest.raises(SourceError) as err:
        source(work.path, tmp_path / "other", path="nowhere").fetch()
    assert err.value.kind == "path-not-found"
    assert "nowhere" in str(err.value)

    src = source(work.path, tmp_path, path="config")
    good = src.fetch()
    work.commit("remove the config dir", {"config/federations/a.yaml": None})
    with pytest.raises(SourceError) as err:
        src.fetch()
    assert err.value.kind == "path-not-found"
    assert src.last() is good
    assert files(good) == {"federations/a.yaml": FED_A}


# -- a bare repository as the remote -----------------------------------------------------------------------


def test_push_into_a_bare_remote_is_fetched(tmp_path: Path, bare: Path, pusher: Repo) -> None:
    src = source(bare, tmp_path)
    assert src.fetch().revision == pusher.head()
    sha = pusher.commit("pushed", {"config/federations/b.yaml": FED_B})
    pusher.git("push", "-q", "origin", "main")
    co = src.fetch()
    assert co.revision == sha
    assert "config/federations/b.yaml" in files(co)


def test_force_push_is_followed(tmp_path: Path, bare: Path, pusher: Repo) -> None:
    src = source(f"file://{bare}", tmp_path)
    pusher.commit("doomed", {"config/federations/doomed.yaml": FED_B})
    pusher.git("push", "-q", "origin", "main")
    assert "config/federations/doomed.yaml" in files(src.fetch())

    pusher.git("reset", "-q", "--hard", "HEAD~1")
    rewritten = pusher.commit("rewritten", {"README.md": "rewritten\n"})
    pusher.git("push", "-q", "--force", "origin", "main")
    co = src.fetch()
    assert co.revision == rewritten
    assert files(co) == {"README.md": "rewritten\n", "config/federations/a.yaml": FED_A}


def test_moved_tag_is_followed(tmp_path: Path, bare: Path, pusher: Repo) -> None:
    pusher.git("tag", "-a", "v1", "-m", "one")
    pusher.git("push", "-q", "origin", "v1")
    src = source(bare, tmp_path, ref="v1")
    first = src.fetch()
    moved = pusher.commit("fix", {"README.md": "fixed\n"})
    pusher.git("tag", "-f", "-a", "v1", "-m", "one, fixed")
    pusher.git("push", "-q", "--force", "origin", "v1")
    co = src.fetch()
    assert co.revision == moved != first.revision
    assert files(co)["README.md"] == "fixed\n"


# -- the cache clone ---------------------------------------------------------------------------------------


def corrupt_objects(cache: Path) -> None:
    shutil.rmtree(cache / "git" / "objects")


def corrupt_head(cache: Path) -> None:
    (cache / "git" / "HEAD").write_text("garbage\n")


def replace_with_file(cache: Path) -> None:
    shutil.rmtree(cache / "git")
    (cache / "git").write_text("not a repository\n")


@pytest.mark.parametrize("damage", [corrupt_objects, corrupt_head, replace_with_file])
def test_corrupt_cache_is_recloned(tmp_path: Path, bare: Path, pusher: Repo, damage: Callable[[Path], None]) -> None:
    src = source(bare, tmp_path)
    first = src.fetch()
    damage(tmp_path / "cache")
    with capture_logs() as logs:
        again = src.fetch()  # nothing new upstream
    assert again.revision == first.revision
    assert files(again) == {"README.md": "hello\n", "config/federations/a.yaml": FED_A}
    assert any("cloning again" in e["event"] for e in logs), logs

    damage(tmp_path / "cache")
    sha = pusher.commit("after the damage", {"README.md": "new\n"})
    pusher.git("push", "-q", "origin", "main")
    assert src.fetch().revision == sha
    assert files(src.fetch())["README.md"] == "new\n"
    assert sorted(p.name for p in (tmp_path / "cache").iterdir() if p.name.startswith("git")) == ["git"]


def test_foreign_cache_clone_is_replaced(tmp_path: Path, work: Repo, bare: Path) -> None:
    other = Repo.init(tmp_path / "other")
    other.commit("other repo", {"other.txt": "other\n"})
    source(other.path, tmp_path).fetch()
    co = source(bare, tmp_path).fetch()  # same cache_dir, another URL
    assert co.revision == work.head()
    assert files(co) == {"README.md": "hello\n", "config/federations/a.yaml": FED_A}


def test_the_clone_is_asked_for_its_url_again_only_when_its_config_changed(tmp_path: Path, work: Repo,
                                                                          bare: Path) -> None:
    """One git process less per new revision: while the cache clone's config file is the one that
    named our URL, it is not asked again; a config pointing elsewhere is still noticed."""
    src = source(work.path, tmp_path)
    asked: list[list[str]] = []
    real = src._git

    def recording(s: object, args: list[str], gitdir: Path | None) -> object:
        asked.append(args)
        return real(s, args, gitdir)  # type: ignore[arg-type]

    src._git = recording  # type: ignore[assignment,method-assign]
    src.fetch()
    for i in range(2):
        work.commit(f"change {i}", {"README.md": f"{i}\n"})
        assert src.fetch().revision == work.head()
    config_gets = [a for a in asked if a[:2] == ["config", "--get"]]
    assert len(config_gets) == 1, asked  # the first fetch of a new revision only
    git(tmp_path, "--git-dir", str(tmp_path / "cache" / "git"), "config", "remote.origin.url", str(bare))
    work.commit("after the config changed", {"README.md": "later\n"})
    with capture_logs() as logs:
        co = src.fetch()
    assert co.revision == work.head() and files(co)["README.md"] == "later\n"
    assert any("another repository" in e["event"] for e in logs), logs


def test_default_cache_dir_differs_per_url_and_ref(tmp_path: Path) -> None:
    a = SourceSpec(url=str(tmp_path / "a"))
    assert a.cache_dir.parent == Path.home() / ".cache" / "flower-syncer" / "source"
    assert a.cache_dir.name.startswith("a-")
    assert SourceSpec(url=str(tmp_path / "a")).cache_dir == a.cache_dir
    assert SourceSpec(url=str(tmp_path / "b")).cache_dir != a.cache_dir
    assert SourceSpec(url=str(tmp_path / "a"), ref="v1").cache_dir != a.cache_dir
    assert SourceSpec(url=str(tmp_path / "a"), cache_dir=tmp_path / "c").cache_dir == tmp_path / "c"


# -- unreachable remotes -----------------------------------------------------------------------------------


def test_unreachable_remote_keeps_the_last_checkout(tmp_path: Path, bare: Path) -> None:
    src = source(bare, tmp_path)
    good = src.fetch()
    bare.rename(tmp_path / "moved.git")
    with pytest.raises(SourceError) as err:
        src.fetch()
    assert err.value.kind == "unreachable"
    assert str(bare) in str(err.value)
    assert src.last() is good
    assert files(good) == {"README.md": "hello\n", "config/federations/a.yaml": FED_A}
    (tmp_path / "moved.git").rename(bare)
    assert src.fetch() is good


def test_path_that_does_not_exist_is_unreachable(tmp_path: Path) -> None:
    src = source(tmp_path / "nothing-here", tmp_path)
    with pytest.raises(SourceError) as err:
        src.fetch()
    assert err.value.kind == "unreachable"
    assert src.last() is None


@pytest.mark.parametrize("scheme", ["http", "ssh"])
def test_closed_port_is_unreachable(tmp_path: Path, scheme: str) -> None:
    port = free_port()
    known = tmp_path / "known_hosts"
    known.write_text("")
    url = f"http://127.0.0.1:{port}/repo.git" if scheme == "http" else f"ssh://git@127.0.0.1:{port}/repo.git"
    src = source(url, tmp_path, known_hosts_file=known, timeout=10)
    started = time.monotonic()
    with pytest.raises(SourceError) as err:
        src.fetch()
    assert err.value.kind == "unreachable", err.value
    assert time.monotonic() - started < 5


def test_a_hanging_server_times_out(tmp_path: Path) -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)  # the kernel accepts connections; nobody ever answers
        src = source(f"http://127.0.0.1:{server.getsockname()[1]}/repo.git", tmp_path, timeout=1.0)
        started = time.monotonic()
        with pytest.raises(SourceError) as err:
            src.fetch()
    assert err.value.kind == "unreachable"
    assert "timed out" in str(err.value)
    assert time.monotonic() - started < 4


# -- HTTPS-style remote with a token -----------------------------------------------------------------------

TOKEN = "tok-3f9a1c77e2d04b5e9d1a"
WRONG = "wrong-8c1e4f2a9b7d6e5c"


@pytest.fixture
def http_server(tmp_path: Path, bare: Path) -> Iterator[GitHttpServer]:
    server = GitHttpServer(bare.parent, TOKEN).start()
    yield server
    server.stop()


def test_http_with_the_right_token(tmp_path: Path, bare: Path, pusher: Repo, http_server: GitHttpServer,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # A user's credential helper must never get to store the token.
    store = tmp_path / "credentials"
    gitconfig = tmp_path / "gitconfig"
    gitconfig.write_text(f"[credential]\n\thelper = store --file {store}\n")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(gitconfig))
    src = source(f"{http_server.base_url}/{bare.name}", tmp_path, token=TOKEN, username="x-access-token",
                 path="config")
    co = src.fetch()
    assert co.revision == pusher.head()
    assert files(co) == {"federations/a.yaml": FED_A}
    assert http_server.users and set(http_server.users) == {"x-access-token"}
    sha = pusher.commit("over http", {"config/federations/b.yaml": FED_B})
    pusher.git("push", "-q", "origin", "main")
    assert src.fetch().revision == sha
    assert_secret_nowhere(TOKEN, tmp_path)


def test_http_with_a_wrong_or_missing_token(tmp_path: Path, bare: Path, http_server: GitHttpServer,
                                            caplog: pytest.LogCaptureFixture,
                                            capfd: pytest.CaptureFixture[str]) -> None:
    caplog.set_level(logging.DEBUG)
    url = f"{http_server.base_url}/{bare.name}"
    for token in (WRONG, None):
        src = source(url, tmp_path, token=token)
        with capture_logs() as logs, pytest.raises(SourceError) as err:
            src.fetch()
        assert err.value.kind == "auth", err.value
        assert src.last() is None
        for text in (str(err.value), repr(err.value), err.value.message, repr(logs), caplog.text,
                     *capfd.readouterr()):
            assert WRONG not in text
            assert TOKEN not in text
    assert http_server.denied >= 2
    assert_secret_nowhere(WRONG, tmp_path / "cache")


def test_http_token_file_is_read_on_every_fetch(tmp_path: Path, bare: Path, http_server: GitHttpServer) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(WRONG + "\n")
    src = source(f"{http_server.base_url}/{bare.name}", tmp_path, token_file=token_file)
    with pytest.raises(SourceError) as err:
        src.fetch()
    assert err.value.kind == "auth"
    token_file.write_text(TOKEN + "\n")  # the mounted Secret rotates
    assert src.fetch().revision
    token_file.unlink()
    with pytest.raises(SourceError) as err:
        src.fetch()
    assert err.value.kind == "auth"
    assert "token" in str(err.value)


def test_http_repository_not_found(tmp_path: Path, http_server: GitHttpServer) -> None:
    with pytest.raises(SourceError) as err:
        source(f"{http_server.base_url}/missing.git", tmp_path, token=TOKEN).fetch()
    assert err.value.kind == "unreachable"


def test_credentials_in_the_url_are_not_shown(tmp_path: Path) -> None:
    src = source(f"https://user:{TOKEN}@127.0.0.1:{free_port()}/repo.git", tmp_path)
    assert TOKEN not in src.describe()
    assert TOKEN not in repr(SourceSpec(url="https://h/r.git", token=TOKEN))
    with pytest.raises(SourceError) as err:
        src.fetch()
    assert TOKEN not in str(err.value)


def assert_secret_nowhere(secret: str, directory: Path) -> None:
    for path in directory.rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), path


# -- SSH ---------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshServer]:
    require_sshd()
    server = SshServer(tmp_path_factory.mktemp("sshd")).start()
    yield server
    server.stop()


def test_ssh_with_a_known_host(tmp_path: Path, bare: Path, pusher: Repo, sshd: SshServer) -> None:
    known = tmp_path / "known_hosts"
    known.write_text(sshd.known_hosts_line)
    key = tmp_path / "id"
    shutil.copy(sshd.client_key, key)
    key.chmod(0o644)  # as a mounted Secret often is: ssh itself would refuse it
    src = source(sshd.url(bare), tmp_path, ssh_key_file=key, known_hosts_file=known)
    co = src.fetch()
    assert co.revision == pusher.head()
    assert files(co)["config/federations/a.yaml"] == FED_A
    sha = pusher.commit("over ssh", {"README.md": "ssh\n"})
    pusher.git("push", "-q", "origin", "main")
    assert src.fetch().revision == sha
    assert not list((tmp_path / "cache").glob("ssh-key*"))  # the 0600 copy is gone


@pytest.mark.parametrize("known_hosts", ["other-key", "empty"])
def test_ssh_with_an_unknown_host_key_fetches_nothing(tmp_path: Path, bare: Path, sshd: SshServer,
                                                      known_hosts: str) -> None:
    known = tmp_path / "known_hosts"
    if known_hosts == "other-key":
        other = keygen(tmp_path / "other_host_key")
        keytype, blob = Path(f"{other}.pub").read_text().split()[:2]
        known.write_text(f"[127.0.0.1]:{sshd.port} {keytype} {blob}\n")
    else:
        known.write_text("")
    src = source(sshd.url(bare), tmp_path, ssh_key_file=sshd.client_key, known_hosts_file=known)
    with pytest.raises(SourceError) as err:
        src.fetch()
    assert err.value.kind in ("auth", "unreachable")
    assert "host key" in str(err.value)
    assert src.last() is None
    tree = tmp_path / "cache" / "tree"
    assert not tree.exists() or not any(tree.iterdir())


def test_ssh_needs_known_hosts(tmp_path: Path) -> None:
    with pytest.raises(SourceError) as err:
        source("git@example.invalid:org/repo.git", tmp_path)
    assert err.value.kind == "invalid"
    assert "known_hosts_file" in str(err.value)


# -- local_paths and describe ------------------------------------------------------------------------------


def test_local_paths(tmp_path: Path, work: Repo, bare: Path) -> None:
    assert source(work.path, tmp_path).local_paths() == [work.path / ".git"]
    assert source(bare, tmp_path).local_paths() == [bare]
    assert source(f"file://{bare}", tmp_path).local_paths() == [bare]
    assert source("https://example.invalid/repo.git", tmp_path).local_paths() == []
    work.git("worktree", "add", "-q", str(tmp_path / "linked"))
    paths = source(tmp_path / "linked", tmp_path).local_paths()
    assert paths == [(work.path / ".git" / "worktrees" / "linked").resolve(), (work.path / ".git").resolve()]


def test_describe(tmp_path: Path) -> None:
    described = source(f"https://me:{TOKEN}@git.example/org/repo.git", tmp_path, ref="v1", path="fl").describe()
    assert described == "https://***@git.example/org/repo.git ref=v1 path=fl"


# -- the local repository watcher --------------------------------------------------------------------------


# How long a positive check waits for the watcher's call: it returns as soon as the call comes, so
# this is a deadline for a busy machine (two cores shared with other work), not the watcher's latency.
CALL_TIMEOUT = 30.0
# The watcher's promise: a call within about a second of a ref change. Measured as the time to the
# call, with room for a busy machine; what it rules out is a watcher that polls (every minute or so).
LATENCY_BOUND = 5.0


class Calls:
    def __init__(self) -> None:
        self.count = 0
        self.event = threading.Event()

    def __call__(self) -> None:
        self.count += 1
        self.event.set()

    def wait(self, timeout: float = CALL_TIMEOUT) -> bool:
        ok = self.event.wait(timeout)
        self.event.clear()
        return ok


@pytest.fixture
def watch() -> Iterator[Callable[[list[Path]], Calls]]:
    watchers: list[LocalRepoWatcher] = []

    def start(paths: list[Path]) -> Calls:
        calls = Calls()
        watcher = LocalRepoWatcher(paths, calls)
        watcher.start()
        watchers.append(watcher)
        return calls

    yield start
    for watcher in watchers:
        watcher.stop()


def test_watcher_sees_a_commit_in_a_working_tree(tmp_path: Path, work: Repo,
                                                 watch: Callable[[list[Path]], Calls]) -> None:
    calls = watch(source(work.path, tmp_path).local_paths())
    started = time.monotonic()
    work.commit("watched", {"README.md": "watched\n"})
    assert calls.wait(), "no call after a commit"
    assert time.monotonic() - started < LATENCY_BOUND
    assert not calls.wait(0.2)  # bounded negative check: one commit, one (debounced) call
    assert calls.count == 1


def test_watcher_sees_a_push_into_a_bare_repo(tmp_path: Path, bare: Path, pusher: Repo,
                                              watch: Callable[[list[Path]], Calls]) -> None:
    calls = watch(source(bare, tmp_path).local_paths())
    pusher.commit("pushed", {"README.md": "pushed\n"})
    pusher.git("push", "-q", "origin", "main")
    assert calls.wait(), "no call after a push"


def test_watcher_is_quiet_when_no_ref_changes(tmp_path: Path, work: Repo,
                                              watch: Callable[[list[Path]], Calls]) -> None:
    src = source(work.path, tmp_path)
    calls = watch(src.local_paths())
    work.write({"README.md": "uncommitted\n", "new.txt": "x\n"})
    work.git("add", "new.txt")  # rewrites the index, not a ref
    work.git("status", "--porcelain")
    work.git("log", "--oneline")
    src.fetch()  # reads refs through upload-pack
    assert not calls.wait(0.3)  # bounded negative check: fails as soon as a call comes
    assert calls.count == 0
    work.git("commit", "-q", "-m", "now a ref changes")
    assert calls.wait(), "no call after a commit"


def test_watcher_sees_a_branch_switch(tmp_path: Path, work: Repo, watch: Callable[[list[Path]], Calls]) -> None:
    work.git("branch", "other")
    calls = watch(source(work.path, tmp_path).local_paths())
    work.git("checkout", "-q", "other")
    assert calls.wait(), "no call after a branch switch"


def test_watcher_debounces_bursts(monkeypatch: pytest.MonkeyPatch) -> None:
    # The watcher's clock is the test's: a burst is 20 events 2 ms apart on it however long the
    # machine keeps this thread from running (on the real clock a 50 ms stall split the burst in two).
    clock = [1000.0]
    monkeypatch.setattr(watch_module, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    calls = Calls()
    watcher = LocalRepoWatcher([], calls, debounce=0.05)
    watcher.start()
    try:
        for _ in range(20):
            watcher._event()  # what the filesystem handler calls
            clock[0] += 0.002
        assert not calls.wait(0.2)  # bounded negative check: no call while the burst is not yet quiet
        clock[0] += 0.05  # quiet for the debounce
        assert calls.wait(), "no call once the burst was quiet for the debounce"
        assert not calls.wait(0.15)  # bounded negative check: the burst made one call
        assert calls.count == 1
    finally:
        watcher.stop()


def test_watcher_survives_a_failing_callback(tmp_path: Path, work: Repo) -> None:
    first, seen = threading.Event(), threading.Event()
    count = 0

    def boom() -> None:
        nonlocal count
        count += 1
        (seen if count > 1 else first).set()
        raise RuntimeError("callback failed")

    watcher = LocalRepoWatcher(source(work.path, tmp_path).local_paths(), boom)
    watcher.start()
    try:
        work.commit("one")
        assert first.wait(CALL_TIMEOUT), "no call after the first commit"  # it ran (and failed)
        work.commit("two")
        assert seen.wait(CALL_TIMEOUT), "no call after the second commit: the failing callback stopped the watcher"
    finally:
        watcher.stop()
