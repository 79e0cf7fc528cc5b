"""Repository URLs: what kind of transport a URL means, its local path, and a credential-free form for logs.

Pure functions; the rules follow git's own (see ``git help clone``, "GIT URLS"): ``scheme://...`` is a
URL, ``[user@]host:path`` with the colon before any slash is SSH, anything else is a local path.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Literal
from urllib.parse import unquote, urlsplit, urlunsplit

UrlKind = Literal["local", "file", "http", "ssh", "git"]

_SCHEMES: dict[str, UrlKind] = {
    "file": "file",
    "http": "http",
    "https": "http",
    "ssh": "ssh",
    "git+ssh": "ssh",
    "ssh+git": "ssh",
    "git": "git",
}
_SCHEME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


class UrlError(ValueError):
    """The URL names no transport this source supports."""


def url_kind(url: str) -> UrlKind:
    """Classify ``url``; raises UrlError for empty URLs, option-like URLs and unsupported schemes."""
    if not url or not url.strip():
        raise UrlError("the repository URL is empty")
    if url.startswith("-"):
        raise UrlError(f"the repository URL {url!r} starts with '-'")
    if any(c in url for c in "\0\n\r"):
        raise UrlError("the repository URL contains control characters")
    m = _SCHEME_RE.match(url)
    if m:
        kind = _SCHEMES.get(m.group(1).lower())
        if kind is None:
            raise UrlError(f"unsupported URL scheme {m.group(1)!r} (use https://, ssh://, file:// or a local path)")
        if kind in ("http", "ssh", "git") and not urlsplit(url).hostname:
            raise UrlError(f"the repository URL {redact(url)!r} has no host")
        return kind
    if "::" in url.split("/", 1)[0]:
        raise UrlError(f"unsupported remote helper URL {url!r}")
    if _is_scp_like(url):
        host = url.split(":", 1)[0].rsplit("@", 1)[-1]
        if not host or host.startswith("-"):
            raise UrlError(f"the repository URL {url!r} has no usable host")
        return "ssh"
    return "local"


def _is_scp_like(url: str) -> bool:
    colon = url.find(":")
    if colon <= 0:
        return False
    slash = url.find("/")
    return slash < 0 or colon < slash


def redact(url: str) -> str:
    """``url`` without secrets: an HTTP(S) user-info part becomes ``***`` (tokens are often passed as the
    user name), any other password becomes ``***``. SSH user names (``git@``) are kept."""
    m = _SCHEME_RE.match(url)
    if not m:
        return url
    try:
        parts = urlsplit(url)
    except ValueError:
        return m.group(0) + "***"
    if "@" not in parts.netloc:
        return url
    userinfo, _, hostport = parts.netloc.rpartition("@")
    if _SCHEMES.get(m.group(1).lower()) == "http":
        userinfo = "***"
    elif ":" in userinfo:
        userinfo = userinfo.split(":", 1)[0] + ":***"
    return urlunsplit((parts.scheme, f"{userinfo}@{hostport}", parts.path, parts.query, parts.fragment))


def local_path(url: str) -> Path | None:
    """The filesystem path of a local or ``file://`` URL (absolute), else None."""
    kind = url_kind(url)
    if kind == "local":
        return Path(url).expanduser().resolve()
    if kind == "file":
        parts = urlsplit(url)
        if parts.netloc not in ("", "localhost"):
            return None
        return Path(unquote(parts.path))
    return None


def normalize(url: str) -> str:
    """The URL as given to git: local paths made absolute (git runs in the cache directory)."""
    if url_kind(url) == "local":
        return str(local_path(url))
    return url


def cache_key(url: str, ref: str | None) -> str:
    """A directory name for the cache clone of ``url`` at ``ref``: readable prefix plus a hash."""
    try:
        norm = normalize(url)
    except UrlError:  # reported when the source is created; any stable name will do here
        norm = url
    digest = hashlib.sha256(f"{norm}\0{ref or ''}".encode()).hexdigest()[:16]
    tail = re.split(r"[/:]", norm.rstrip("/"))[-1]
    tail = tail.removesuffix(".git")
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", tail).strip(".-")[:40]
    return f"{name}-{digest}" if name else digest


def host(url: str) -> str | None:
    """The host name of a ``scheme://`` URL, else None."""
    if not _SCHEME_RE.match(url):
        return None
    try:
        return urlsplit(url).hostname
    except ValueError:
        return None
