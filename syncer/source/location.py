"""Where a config repository comes from, for its default identity (see
syncer.identity.derived_repository_name): a remote URL without credentials, or a local path."""

from __future__ import annotations

import re
from pathlib import Path

from syncer.source import urls
from syncer.source.refs import normalize_subpath


def source_location(repo: str, path: str = "") -> tuple[str, str]:
    """Where a config repository comes from, for its default identity (a repository without `name`
    in flower-syncer.yaml): (source, sub-path). A remote is its URL without credentials; a local
    repository or working tree is its `origin` remote when it has one - so `flower-syncer sync` in
    a clone and an agent syncing the remote agree - else its absolute path."""
    try:
        local = urls.local_path(repo) if urls.url_kind(repo) in ("local", "file") else None
    except urls.UrlError:
        local = None
    if local is None:
        return _plain_url(repo), normalize_subpath(path)
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
    origin = next((r for r in git_repo.remotes if r.name == "origin"), None)
    url = next(iter(origin.urls), "") if origin is not None else ""
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


def _plain_url(url: str) -> str:
    """`url` without credentials, trailing slash or `.git`: one repository, one spelling."""
    text = urls.redact(url)
    if re.match(r"^https?://", text, re.I):
        text = re.sub(r"^([A-Za-z][A-Za-z0-9+.-]*://)[^/@]*@", r"\1", text)  # who fetches is not which repo
    return text.rstrip("/").removesuffix(".git")
