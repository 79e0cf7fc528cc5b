"""How a policy entry's `source`, `ref` and `path` patterns meet a repository: both sides are
brought to one spelling first, so that another spelling of the same repository, ref or folder
never falls through to a later, wider entry (and a spelling that git reads as another repository
never matches this one's entry). Pure.

- **source**: the scheme and host in lower case, without a trailing dot; no user or password; no
  default port (https 443, http 80, ssh 22, git 9418); `host:path` (scp-like SSH) is
  `ssh://host/path`; `file:///x` is `/x`; in the path, percent-escapes of unreserved characters
  decoded (`%6C` is `l`) and other escapes in upper case, `//` collapsed, `.` and `..` segments
  resolved (`team-a/../team-b` is `team-b`), no trailing `/` or `.git`. The path keeps its case
  (a Git server on a file system tells `Team-A` from `team-a`), except on the hosting services
  whose owner and repository names ignore case (`CASE_INSENSITIVE_HOSTS`: GitHub, GitLab.com,
  Bitbucket, Codeberg, Azure DevOps), where it is in lower case: `github.com/Team-A/cfg` is
  the repository of an entry for `github.com/team-a/*`, never a fall-through to a wider one.
- **ref**: `refs/heads/main`, `heads/main` and `main` are `main`; `refs/tags/v1` and `tags/v1`
  are `v1`; `HEAD` is "" (the remote's default branch); a commit sha is in lower case. A pattern
  that names the kind (`refs/heads/*`, `refs/tags/v*`) matches only refs of that kind, or a short
  name whose kind is not known yet. Any other `refs/...` (a pull request's `refs/pull/1/head`, a
  review's `refs/changes/...`) is a kind of its own, kept whole: a pattern on branches or tags
  never matches it. What a ref is (and which branch the default one is) is known
  only once the remote answers: the agent checks then that the ref it got still has its entry,
  and that no earlier entry matches it (see `syncer.agent.runner`), else it refuses the revision.
- **path**: no leading, trailing or doubled `/`, no `.` segment.
"""

from __future__ import annotations

import fnmatch
import re

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://([^/]*)(.*)$", re.S)
_DEFAULT_PORTS = {"https": "443", "http": "80", "ssh": "22", "git+ssh": "22", "ssh+git": "22", "git": "9418"}
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_ESCAPE = re.compile(r"%([0-9A-Fa-f]{2})")
_SHA = re.compile(r"^[0-9A-Fa-f]+$")
CASE_INSENSITIVE_HOSTS = frozenset({"github.com", "gitlab.com", "bitbucket.org", "codeberg.org", "dev.azure.com",
                                    "ssh.dev.azure.com"})


def _unescape(match: re.Match[str]) -> str:
    char = chr(int(match.group(1), 16))
    return char if char in _UNRESERVED else f"%{match.group(1).upper()}"


def _clean_path(path: str, *, absolute: bool) -> str:
    """`path` with unreserved escapes decoded, `//` collapsed and dot segments resolved."""
    parts: list[str] = []
    for part in _ESCAPE.sub(_unescape, path).split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if parts:
                parts.pop()
            continue
        parts.append(part)
    text = "/".join(parts)
    return f"/{text}" if absolute else text


def canonical_source(text: str) -> str:
    """One spelling of a repository's URL or local path (or of a pattern on them)."""
    text = text.strip()
    match = _SCHEME.match(text)
    if match is not None:
        scheme, netloc, path = match.group(1).lower(), match.group(2), match.group(3)
        if scheme == "file":
            return _strip(_clean_path(path, absolute=True))
        hostport = netloc.rpartition("@")[2]
        if hostport.startswith("["):  # [IPv6]:port
            host, _, port = hostport[1:].partition("]")
            port = port.removeprefix(":")
            host = f"[{host.lower()}]"
        else:
            host, _, port = hostport.partition(":")
            host = host.lower().rstrip(".")
        if scheme in ("git+ssh", "ssh+git"):
            scheme = "ssh"
        path = _clean_path(path, absolute=True)
        if host in CASE_INSENSITIVE_HOSTS:
            path = path.lower()
        if port and port != _DEFAULT_PORTS.get(scheme):
            host = f"{host}:{port}"
        return _strip(f"{scheme}://{host}{path}")
    colon, slash = text.find(":"), text.find("/")
    if colon > 0 and (slash < 0 or colon < slash):  # [user@]host:path
        host = text[:colon].rpartition("@")[2].lower().rstrip(".")
        path = _clean_path(text[colon + 1:], absolute=True)
        return _strip(f"ssh://{host}{path.lower() if host in CASE_INSENSITIVE_HOSTS else path}")
    return _strip(_clean_path(text, absolute=text.startswith("/")))


def _strip(text: str) -> str:
    return text.rstrip("/").removesuffix(".git").rstrip("/")


def canonical_ref(ref: str) -> str:
    """One spelling of a ref (or of a pattern on refs): a branch or tag by its short name, the
    default branch as ""."""
    ref = ref.strip()
    if ref == "HEAD":
        return ""
    for prefix in ("refs/heads/", "refs/tags/", "heads/", "tags/"):
        if ref.startswith(prefix):
            return ref.removeprefix(prefix)
    return ref.lower() if len(ref) in (40, 64) and _SHA.match(ref) else ref


def ref_kind(ref: str) -> str | None:
    """"branch" or "tag" when the spelling says so, "other" for any other `refs/...` (pull
    requests, reviews, notes), else None (a short name, a sha, a pattern)."""
    ref = ref.strip()
    if ref.startswith(("refs/heads/", "heads/")):
        return "branch"
    if ref.startswith(("refs/tags/", "tags/")):
        return "tag"
    if ref.startswith("refs/"):
        return "other"
    return None


def refs_match(ref: str, pattern: str) -> bool:
    """Whether the shell pattern `pattern` on refs matches `ref`, both in one spelling, kinds agreeing."""
    kinds = ref_kind(ref), ref_kind(pattern)
    if None not in kinds and kinds[0] != kinds[1]:
        return False
    return fnmatch.fnmatchcase(canonical_ref(ref), canonical_ref(pattern))


def canonical_path(path: str) -> str:
    """One spelling of a sub-path of a repository (or of a pattern on them): "" for the root."""
    return _clean_path(path.strip(), absolute=False)
