"""The Git source's pure helpers: URL kinds and redaction, ref resolution, sub-paths, error classification."""

from __future__ import annotations

from pathlib import Path

import pytest
from watchdog.events import (
    DirModifiedEvent,
    FileClosedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
)

from syncer.source import urls
from syncer.source.refs import (
    SourceError,
    classify,
    local_ref_for,
    normalize_subpath,
    resolve_ref,
    validate_ref,
)
from syncer.source.watch import _Handler


@pytest.mark.parametrize(
    ("url", "kind"),
    [
        ("/srv/config", "local"),
        ("./config", "local"),
        ("relative/dir", "local"),
        ("a/b:c", "local"),  # a colon after a slash is a path
        ("file:///srv/config.git", "file"),
        ("https://github.com/org/repo.git", "http"),
        ("HTTP://git.example/repo", "http"),
        ("ssh://git@github.com/org/repo.git", "ssh"),
        ("git+ssh://git@host:2222/repo", "ssh"),
        ("git@github.com:org/repo.git", "ssh"),
        ("host:repo.git", "ssh"),
        ("git://git.example/repo.git", "git"),
    ],
)
def test_url_kind(url: str, kind: str) -> None:
    assert urls.url_kind(url) == kind


@pytest.mark.parametrize(
    "url",
    ["", "  ", "-uhelp", "ext::sh -c touch% /tmp/pwned", "fd::17", "ftp://host/repo", "https:///nohost",
     "-oProxyCommand=x:repo", "line\nbreak"],
)
def test_unsupported_urls(url: str) -> None:
    with pytest.raises(urls.UrlError):
        urls.url_kind(url)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://x-access-token:tok123@github.com/o/r.git", "https://***@github.com/o/r.git"),
        ("https://tok123@github.com/o/r.git", "https://***@github.com/o/r.git"),
        ("https://github.com/o/r.git", "https://github.com/o/r.git"),
        ("ssh://git:pw@host/r.git", "ssh://git:***@host/r.git"),
        ("ssh://git@host/r.git", "ssh://git@host/r.git"),
        ("git@github.com:o/r.git", "git@github.com:o/r.git"),
        ("/srv/repo", "/srv/repo"),
    ],
)
def test_redact(url: str, shown: str) -> None:
    assert urls.redact(url) == shown


def test_local_path_and_cache_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert urls.local_path("repo") == tmp_path / "repo"
    assert urls.local_path(f"file://{tmp_path}/a%20b.git") == tmp_path / "a b.git"
    assert urls.local_path("https://host/repo") is None
    assert urls.cache_key("repo", None) == urls.cache_key(str(tmp_path / "repo"), None)
    assert urls.cache_key("https://h/org/my-repo.git", None).startswith("my-repo-")
    assert urls.cache_key("https://h/org/my-repo.git", "v1") != urls.cache_key("https://h/org/my-repo.git", None)
    assert urls.cache_key("ext::sh", None)  # invalid URLs are refused by GitSource, not by the cache key


REFS = {
    "HEAD": "a" * 40,
    "refs/heads/main": "a" * 40,
    "refs/heads/v1": "b" * 40,
    "refs/tags/v1": "c" * 40,  # an annotated tag object...
    "refs/tags/v1^{}": "d" * 40,  # ...and the commit it points at
    "refs/tags/light": "e" * 40,
    "refs/heads/feature/x": "f" * 40,
}


def test_resolve_ref() -> None:
    assert resolve_ref(None, REFS, {"HEAD": "refs/heads/main"}) == ("refs/heads/main", "a" * 40)
    assert resolve_ref(None, {"HEAD": "1" * 40}, {}) == ("HEAD", "1" * 40)  # detached HEAD
    assert resolve_ref(None, {}, {"HEAD": "refs/heads/main"}) is None  # no commits yet
    assert resolve_ref("main", REFS, {}) == ("refs/heads/main", "a" * 40)
    with pytest.raises(SourceError, match="names both the branch refs/heads/v1 and the tag refs/tags/v1"):
        resolve_ref("v1", REFS, {})  # never git's precedence, where the tag shadows the branch
    assert resolve_ref("tags/v1", REFS, {}) == ("refs/tags/v1", "d" * 40)  # peeled
    assert resolve_ref("refs/tags/v1", REFS, {}) == ("refs/tags/v1", "d" * 40)
    assert resolve_ref("heads/v1", REFS, {}) == ("refs/heads/v1", "b" * 40)
    assert resolve_ref("refs/heads/v1", REFS, {}) == ("refs/heads/v1", "b" * 40)
    assert resolve_ref("light", REFS, {}) == ("refs/tags/light", "e" * 40)
    assert resolve_ref("x", REFS, {}) is None  # no tail matching: feature/x is not x
    assert resolve_ref("feature/x", REFS, {}) == ("refs/heads/feature/x", "f" * 40)


def test_local_ref_for() -> None:
    assert local_ref_for("refs/heads/main") == "refs/remotes/origin/main"
    assert local_ref_for("refs/tags/v1") == "refs/tags/v1"
    assert local_ref_for("HEAD") == "refs/remotes/origin/HEAD"
    assert local_ref_for("refs/pull/1/head") == "refs/remotes/origin/pull/1/head"


@pytest.mark.parametrize("ref", ["main", "feature/x", "v1.2.3", "refs/heads/main", "abc1234", "a" * 40])
def test_valid_refs(ref: str) -> None:
    assert validate_ref(ref) == ref


def test_head_means_default() -> None:
    assert validate_ref(None) is None
    assert validate_ref("") is None
    assert validate_ref("HEAD") is None


@pytest.mark.parametrize("ref", ["-main", "a..b", "a b", "a:b", "a~1", "a^", "x@{1}", "a/", "/a", "a.lock", "a\\b",
                                 "a*", "@"])
def test_invalid_refs(ref: str) -> None:
    with pytest.raises(SourceError) as err:
        validate_ref(ref)
    assert err.value.kind == "invalid"


@pytest.mark.parametrize(
    ("path", "clean"),
    [("", ""), (".", ""), ("./", ""), ("config", "config"), ("./a//b/./c/", "a/b/c")],
)
def test_normalize_subpath(path: str, clean: str) -> None:
    assert normalize_subpath(path) == clean


@pytest.mark.parametrize("path", ["..", "../x", "a/../../b", "a/..", "/abs", "a\\b", "a\0b", ".git", "x/.git/refs"])
def test_subpath_escapes_are_invalid(path: str) -> None:
    with pytest.raises(SourceError) as err:
        normalize_subpath(path)
    assert err.value.kind == "invalid"


@pytest.mark.parametrize(
    ("stderr", "kind"),
    [
        ("fatal: Authentication failed for 'https://h/r.git/'", "auth"),
        ("fatal: could not read Username for 'https://h': terminal prompts disabled", "auth"),
        ("fatal: unable to access 'https://h/r.git/': The requested URL returned error: 403", "auth"),
        ("git@h: Permission denied (publickey).\r\nfatal: Could not read from remote repository.", "auth"),
        ("No ED25519 host key is known for [127.0.0.1]:2222 and you have requested strict checking.\n"
         "Host key verification failed.", "host-key"),
        ("@@@ WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED! @@@", "host-key"),
        ("fatal: couldn't find remote ref refs/heads/gone", "ref-not-found"),
        ("fatal: unable to access 'http://127.0.0.1:1/r/': Failed to connect to 127.0.0.1 port 1", "unreachable"),
        ("ssh: connect to host 127.0.0.1 port 1: Connection refused", "unreachable"),
        ("fatal: '/nope' does not appear to be a git repository", "unreachable"),
        ("fatal: repository 'https://h/r.git/' not found", "unreachable"),
        ("ssh: Could not resolve hostname nope: Name or service not known", "unreachable"),
        ("timed out after 5 s", "unreachable"),
        ("fatal: bad object HEAD", None),
        ("error: unable to write file .git/objects/ab/cd", None),
    ],
)
def test_classify(stderr: str, kind: str | None) -> None:
    assert classify(stderr) == kind


def ref_events(names: frozenset[str] | None, *events: FileSystemEvent) -> int:
    """How many of `events` the watcher's handler reports."""
    seen: list[None] = []
    handler = _Handler(lambda: seen.append(None), names)
    for event in events:
        handler.dispatch(event)
    return len(seen)


def test_a_ref_counts_once_git_renames_its_lock_over_it() -> None:
    """How git updates a ref: NAME.lock created, written, renamed over NAME. Before the rename the ref
    still has its old value, so a fetch then would find nothing new."""
    lock, ref = "/r/refs/heads/main.lock", "/r/refs/heads/main"
    assert ref_events(None, FileCreatedEvent(lock), FileModifiedEvent(lock), FileClosedEvent(lock)) == 0
    assert ref_events(None, FileMovedEvent(lock, ref)) == 1
    assert ref_events(None, FileDeletedEvent("/r/refs/heads/gone")) == 1  # a branch deleted
    assert ref_events(None, FileDeletedEvent(lock)) == 0  # an update given up
    top = frozenset({"HEAD", "packed-refs"})
    assert ref_events(top, FileCreatedEvent("/r/HEAD.lock"), FileMovedEvent("/r/HEAD.lock", "/r/HEAD")) == 1
    assert ref_events(top, FileMovedEvent("/r/packed-refs.lock", "/r/packed-refs")) == 1
    assert ref_events(top, FileMovedEvent("/r/index.lock", "/r/index"), FileModifiedEvent("/r/config")) == 0
    assert ref_events(None, DirModifiedEvent("/r/refs/heads")) == 0
