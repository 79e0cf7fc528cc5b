"""The Git source's vocabulary without I/O: its typed error, and the checks and readings of what
users and git say - sub-paths, ref names, `ls-remote` output, and git's error messages."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Literal

ErrorKind = Literal["unreachable", "auth", "ref-not-found", "path-not-found", "corrupt", "invalid", "unverified"]


class SourceError(Exception):
    """A fetch that did not produce a checkout; ``message`` is plain words and never holds a secret."""

    def __init__(self, kind: ErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind: ErrorKind = kind
        self.message = message

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"SourceError({self.kind!r}, {self.message!r})"


def normalize_subpath(path: str) -> str:
    """``path`` as a clean relative POSIX path ('' for the repo root); raises SourceError('invalid') for
    absolute paths, '..' components and control characters."""
    if any(c in path for c in "\0\n\r\\"):
        raise SourceError("invalid", f"the config path {path!r} contains a backslash or control characters")
    if path.startswith("/"):
        raise SourceError("invalid", f"the config path {path!r} must be relative to the repository root")
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise SourceError("invalid", f"the config path {path!r} must stay inside the repository (no '..')")
    if any(p == ".git" for p in parts):
        raise SourceError("invalid", f"the config path {path!r} points into git's own directory")
    return "/".join(parts)


_BAD_REF_RE = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]|\.\.|@\{|//|/\.|\.lock(/|$)")


def validate_ref(ref: str | None) -> str | None:
    """``ref`` if it is a well-formed branch, tag, full ref name or sha ('HEAD' and '' mean None);
    raises SourceError('invalid') otherwise."""
    if ref is None or ref in ("", "HEAD"):
        return None
    if ref.startswith(("-", "/")) or ref.endswith(("/", ".")) or ref == "@" or _BAD_REF_RE.search(ref):
        raise SourceError("invalid", f"{ref!r} is not a valid branch, tag or commit name")
    return ref


def resolve_ref(
    wanted: str | None, refs: Mapping[str, str], symrefs: Mapping[str, str]
) -> tuple[str, str] | None:
    """Pick the remote ref ``wanted`` means from ``git ls-remote`` output. Returns (ref name, commit
    sha; annotated tags peeled), or None. ``wanted`` None means the remote's HEAD: its branch when
    HEAD is symbolic.

    Unlike git's own precedence (where a tag shadows the branch of the same name, and any
    ``refs/<x>`` shadows both), a name resolves only as what it says: a full name (``refs/...``)
    as itself, ``heads/<x>`` and ``tags/<x>`` under ``refs/heads/`` and ``refs/tags/``, and a short
    name as the branch or the tag of that name. A short name that names both is refused
    (SourceError 'invalid'): whoever may push a tag must not decide which commit a branch deploys,
    nor the reverse."""
    if wanted is None:
        sha = refs.get("HEAD")
        if sha is None:
            return None
        return symrefs.get("HEAD") or "HEAD", sha
    if wanted.startswith("refs/"):
        candidates = [wanted]
    elif wanted.startswith(("heads/", "tags/")):
        candidates = [f"refs/{wanted}"]
    else:
        candidates = [f"refs/heads/{wanted}", f"refs/tags/{wanted}"]
    found = [name for name in candidates if name in refs]
    if len(found) > 1:
        raise SourceError("invalid", f"the ref {wanted!r} names both the branch {found[0]} and the tag {found[1]}; "
                                     f"nothing is fetched (the last good revision stays): set the ref to the full "
                                     f"name of the one meant ({found[0]} or {found[1]})")
    if not found:
        return None
    name = found[0]
    return name, refs.get(f"{name}^{{}}", refs[name])


def local_ref_for(remote_ref: str) -> str:
    """Where a fetched remote ref is kept in the cache clone (forced refspec destination)."""
    if remote_ref.startswith("refs/tags/"):
        return remote_ref
    if remote_ref.startswith("refs/heads/"):
        return "refs/remotes/origin/" + remote_ref.removeprefix("refs/heads/")
    if remote_ref == "HEAD":
        return "refs/remotes/origin/HEAD"
    return "refs/remotes/origin/" + remote_ref.removeprefix("refs/")


_HOST_KEY = ("host key verification failed", "remote host identification has changed", "no matching host key",
             "host key for", "no hostkey alg")
_AUTH = ("authentication failed", "could not read username", "could not read password", "terminal prompts disabled",
         "permission denied (publickey", "permission denied, please try again", "returned error: 401",
         "returned error: 403", "http basic: access denied", "invalid username or password", "access denied",
         "too many authentication failures", "load key")
_REF = ("couldn't find remote ref", "no such ref was fetched")
_UNREACHABLE = ("could not resolve", "connection refused", "failed to connect", "couldn't connect",
                "timed out", "did not complete in", "network is unreachable", "no route to host",
                "does not appear to be a git repository", "not found", "could not read from remote repository",
                "unable to access", "connection reset", "connection closed", "early eof", "hung up unexpectedly",
                "ssl", "certificate", "unable to connect", "empty reply from server", "proxy")


def classify(stderr: str) -> Literal["host-key", "auth", "ref-not-found", "unreachable"] | None:
    """What a failed remote operation's stderr says went wrong; None when it does not look remote."""
    text = stderr.lower()
    if any(p in text for p in _HOST_KEY):
        return "host-key"
    if any(p in text for p in _AUTH):
        return "auth"
    if any(p in text for p in _REF):
        return "ref-not-found"
    if any(p in text for p in _UNREACHABLE):
        return "unreachable"
    return None


def summarize(stderr: str) -> str:
    lines = []
    for raw in stderr.splitlines():
        line = raw.strip()
        for prefix in ("fatal: ", "error: ", "remote: ", "warning: "):
            line = line.removeprefix(prefix)
        boilerplate = line.startswith(("hint:", "Please make sure you have the correct access rights",
                                       "and the repository exists"))
        if line and line not in lines and not boilerplate:
            lines.append(line)
    text = "; ".join(lines) or "git exited with an error"
    return text if len(text) <= 400 else text[:397] + "..."
