"""Where a config repository comes from, for its default identity (see
syncer.identity.derived_repository_name): a remote URL without credentials, or a local path."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from syncer.source import urls
from syncer.source.refs import normalize_subpath


def source_location(repo: str, path: str = "", *, origin: bool = True) -> tuple[str, str]:
    """Where a config repository comes from, for its default identity (a repository without `name`
    in flower-syncer.yaml): (source, sub-path). A remote is its URL without credentials; a local
    repository or working tree is its absolute path, or with `origin` (the CLI, run by whoever owns
    the clone) its `origin` remote when it has one - so `flower-syncer sync` in a clone and an
    agent syncing the remote agree. The agent passes `origin=False`: a local repository's
    `.git/config` is written by whoever may write the repository, and must not choose who it is,
    which policy entry applies or which ServiceAccount its writes are made as."""
    try:
        local = urls.local_path(repo) if urls.url_kind(repo) in ("local", "file") else None
    except urls.UrlError:
        local = None
    if local is None:
        return _plain_url(repo), normalize_subpath(path)
    if not origin:  # the path as configured: nothing git reads from the repository's config (core.worktree...)
        return str(local), normalize_subpath(path)
    folder = (local / path) if path else local
    import git as gitpython  # GitPython: only for a local repository, and only when a name is derived

    try:
        git_repo = gitpython.Repo(folder, search_parent_directories=True)
    except (gitpython.exc.GitError, ValueError, OSError):
        return str(local), normalize_subpath(path)
    top = Path(git_repo.working_tree_dir or git_repo.git_dir).resolve()
    try:
        sub = folder.resolve().relative_to(top).as_posix()
    except ValueError:
        sub = path
    url = origin_url(git_repo)
    try:
        kind = urls.url_kind(url) if url else None
    except urls.UrlError:
        kind = None
    if url and kind not in ("local", "file"):
        return _plain_url(url), normalize_subpath(sub)
    if url:  # a clone of a local repository: that repository, as an agent syncing it would name it
        origin_path = urls.local_path(url)
        if origin_path is not None:
            return str(origin_path.resolve()), normalize_subpath(sub)
    return str(top), normalize_subpath(sub)


def origin_url(git_repo: Any) -> str:
    """The URL of a GitPython repository's `origin` remote, "" when it has none."""
    remote = next((r for r in git_repo.remotes if r.name == "origin"), None)
    return next(iter(remote.urls), "") if remote is not None else ""


def local_origin(repo: str) -> str:
    """The `origin` URL (without credentials) of the local repository at `repo`; "" when `repo` is
    remote, or has no origin. Only for a hint in the agent's log: never an identity."""
    try:
        local = urls.local_path(repo) if urls.url_kind(repo) in ("local", "file") else None
    except urls.UrlError:
        return ""
    if local is None:
        return ""
    import git as gitpython

    try:
        url = origin_url(gitpython.Repo(local, search_parent_directories=True))
    except (gitpython.exc.GitError, ValueError, OSError):
        return ""
    return _plain_url(url) if url else ""


def _plain_url(url: str) -> str:
    """`url` without credentials, trailing slash or `.git`: one repository, one spelling."""
    text = urls.redact(url)
    if re.match(r"^https?://", text, re.I):
        text = re.sub(r"^([A-Za-z][A-Za-z0-9+.-]*://)[^/@]*@", r"\1", text)  # who fetches is not which repo
    return text.rstrip("/").removesuffix(".git")


def branch_off_default(root: str) -> tuple[str, str] | None:
    """(branch, default branch) when the clone at `root` has a branch checked out that is not its
    origin's default branch (refs/remotes/origin/HEAD); None when it is on that branch, detached,
    or its origin's default branch is not known. For the CLI: such a clone is synced as that
    branch, so it must say which identity it takes (--ref)."""
    import git as gitpython

    try:
        git_repo = gitpython.Repo(root, search_parent_directories=True)
        if git_repo.head.is_detached:
            return None
        branch = git_repo.active_branch.name
        default = gitpython.SymbolicReference(git_repo, "refs/remotes/origin/HEAD").reference.path
    except (gitpython.exc.GitError, ValueError, OSError, TypeError):
        return None
    default = default.removeprefix("refs/remotes/origin/")
    return (branch, default) if branch != default else None
