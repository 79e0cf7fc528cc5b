"""The Git source: fetches the wanted revision of the config repository into a local cache clone.

An adapter with no knowledge of Kubernetes or rendering. ``GitSource.fetch()`` asks the remote which commit
the wanted ref points at (``git ls-remote``), returns at once when that is what is checked out already, and
otherwise fetches that single ref with a forced refspec and checks it out detached in a clean work tree.
The remote always wins: force-pushes and moved tags are followed, and the cache clone is only a cache -- a
corrupt or foreign one is thrown away and cloned again.

Cache layout (``SourceSpec.cache_dir``)::

    git/          the clone's git directory (bare; the work tree is given on every command)
    tree/         the checked-out files: ``Checkout.root`` is ``tree/<path>``
    askpass.sh    answers git's HTTPS credential prompts from this process's environment
    .lock         serializes fetches of processes sharing the cache directory

Secrets: the HTTPS token only ever travels in the environment of the git process (read back by askpass.sh);
it is never put into a URL, an argument, a config file or a message. Credential helpers are switched off so
git cannot store it either.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import re
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import git as gitpython
import structlog

from syncer.source import credentials, urls
from syncer.source.refs import (
    SourceError,
    classify,
    local_ref_for,
    normalize_subpath,
    resolve_ref,
    summarize,
    validate_ref,
)
from syncer.source.signatures import Verification, Verifier

log = structlog.get_logger("syncer.source")


_AUTO_CACHE_DIR = Path("<auto>")  # sentinel (compared by identity): derive the cache directory from the URL
_HEX_RE = re.compile(r"^[0-9a-fA-F]{4,64}\Z")
_FULL_SHA_LENGTHS = (40, 64)
# git stamps its index to the second: a file written in the second the index was written is "racily
# clean", and the next checkout reads and hashes it again to be sure
RACY_SECONDS = 2.0
# Options for every git command: no credential helper may see or store the token, no hook may run, garbage
# collection runs in the foreground (no detached process outliving the fetch), no detached-HEAD advice.
_GIT_OPTIONS = (
    "-c", "credential.helper=",
    "-c", "core.hooksPath=/dev/null",
    "-c", "gc.autoDetach=false",
    "-c", "maintenance.autoDetach=false",
    "-c", "advice.detachedHead=false",
    "-c", "core.askPass=",
)


def default_cache_dir(url: str, ref: str | None = None) -> Path:
    """``~/.cache/flower-syncer/source/<repo name>-<hash of url and ref>``."""
    return Path.home() / ".cache" / "flower-syncer" / "source" / urls.cache_key(url, ref)


@dataclass(frozen=True)
class SourceSpec:
    """Where the config lives. ``cache_dir`` defaults to a directory per URL and ref (see default_cache_dir);
    note that ``dataclasses.replace`` keeps the derived one."""

    url: str
    ref: str | None = None
    path: str = ""
    cache_dir: Path = _AUTO_CACHE_DIR
    token: str | None = field(default=None, repr=False)
    token_file: Path | None = None
    username: str = "git"
    ssh_key_file: Path | None = None
    known_hosts_file: Path | None = None
    timeout: float = 60.0
    verify: Verification | None = None
    """Signatures the admin requires (syncer.source.signatures); None: none."""
    admit: Callable[[str], str] | None = None
    """Called with the remote ref the wanted one resolved to (e.g. the default branch's name):
    why it may not be synced (the admin's policy gives it another entry), or ""."""

    def __post_init__(self) -> None:
        if self.cache_dir is _AUTO_CACHE_DIR:
            object.__setattr__(self, "cache_dir", default_cache_dir(self.url, self.ref))
        for name in ("cache_dir", "token_file", "ssh_key_file", "known_hosts_file"):
            value = getattr(self, name)
            if isinstance(value, str):  # lenient with callers that pass strings
                object.__setattr__(self, name, Path(value))


@dataclass(frozen=True)
class Checkout:
    revision: str
    root: Path
    ref: str
    subject: str
    author: str
    committed_at: float
    since: str = ""
    """The revision checked out before this one (empty for a first or fresh checkout)."""
    changed: frozenset[str] | None = None
    """Paths under `root` (relative, "/"-separated) that differ from `since`, as Git says; None
    when not known. A loader may trust every other file to be as it was at `since`."""


class _LocalFailure(Exception):
    """A git command on the cache clone itself failed: the clone is suspect."""


@dataclass
class _Result:
    status: int
    out: str
    err: str


@dataclass
class _Session:
    """What one fetch needs: the git environment (with the token, if any) and the secrets to scrub."""

    env: dict[str, str]
    secrets: list[str]


def head_revision(path: Path) -> str:
    """The commit checked out in the Git work tree that holds `path`, or "" when it is not in one."""
    try:
        repo = gitpython.Repo(path, search_parent_directories=True)
        return str(repo.head.commit.hexsha)
    except (gitpython.exc.GitError, ValueError, OSError):
        return ""


class GitSource:
    """Fetches revisions of one repository and ref; see the module docstring. Thread-safe (fetches
    serialize); meant to be driven from one thread."""

    def __init__(self, spec: SourceSpec) -> None:
        self.spec = spec
        try:
            self._kind = urls.url_kind(spec.url)
            self._url = urls.normalize(spec.url)
        except urls.UrlError as exc:
            raise SourceError("invalid", str(exc)) from None
        self._display = urls.redact(spec.url)
        self._path = normalize_subpath(spec.path)
        self._ref = validate_ref(spec.ref)
        if self._ref is not None and _HEX_RE.match(self._ref) and len(self._ref) in _FULL_SHA_LENGTHS:
            self._pinned: str | None = self._ref.lower()
        else:
            self._pinned = None
        if spec.token is not None and spec.token_file is not None:
            raise SourceError("invalid", "give either token or token_file, not both")
        if self._kind == "ssh" and spec.known_hosts_file is None:
            raise SourceError("invalid", f"known_hosts_file is required for the SSH URL {self._display} "
                                         "(unknown host keys are refused)")
        if spec.timeout <= 0:
            raise SourceError("invalid", "timeout must be positive")
        plain_http = self._kind == "http" and spec.url.startswith("http://")
        if plain_http and (spec.token or spec.token_file) and urls.host(spec.url) not in ("localhost", "127.0.0.1",
                                                                                          "::1"):
            log.warning("sending a Git token over plain http", source=self.describe())
        self._cache = spec.cache_dir.expanduser().resolve()
        self._gitdir = self._cache / "git"
        self._tree = self._cache / "tree"
        self._lock = threading.Lock()
        self._verifier = Verifier(spec.verify) if spec.verify is not None else None
        self._last: Checkout | None = None
        self._verified: tuple[int, ...] | None = None  # the clone's config file when it last named our URL
        self._whole_tree_at: float | None = None  # when a checkout last wrote every file (_refresh_index)

    # -- public API ----------------------------------------------------------------------------------

    def describe(self) -> str:
        """URL without credentials, ref and path, for logs and status."""
        text = f"{self._display} ref={self._ref or 'HEAD'}"
        return f"{text} path={self._path}" if self._path else text

    def last(self) -> Checkout | None:
        """The last successful checkout (its files stay in place until the next successful fetch)."""
        return self._last

    def local_paths(self) -> list[Path]:
        """For a local repository: its git directories (the one holding HEAD and, for a linked work tree, the
        common one holding refs/ and packed-refs). [] for remote URLs or when the path holds no repository."""
        base = urls.local_path(self._url)
        if base is None:
            return []
        return _git_dirs(base)

    def fetch(self) -> Checkout:
        """Fetch and check out the wanted revision; raises SourceError. Returns the previous checkout object
        unchanged when the remote still points at it."""
        with self._lock:
            started = time.monotonic()
            previous = self._last
            try:
                with self._session() as session:
                    checkout = self._fetch(session)
            except SourceError as exc:
                log.debug("source fetch failed", source=self.describe(), kind=exc.kind, error=exc.message,
                          ms=round((time.monotonic() - started) * 1000, 1))
                raise
            self._last = checkout
            ms = round((time.monotonic() - started) * 1000, 1)
            if previous is None or previous.revision != checkout.revision:
                log.info("source revision checked out", source=self.describe(), revision=checkout.revision,
                         ref=checkout.ref, subject=checkout.subject, ms=ms)
            else:
                log.debug("source unchanged", source=self.describe(), revision=checkout.revision, ms=ms)
            return checkout

    # -- fetch flow ----------------------------------------------------------------------------------

    def _fetch(self, s: _Session) -> Checkout:
        if self._pinned is not None:
            if self._is_current(self._pinned, self._pinned):
                assert self._last is not None
                self._refresh_index(s)
                return self._last
            return self._update(s, None, self._pinned)
        patterns = ["HEAD"] if self._ref is None else [self._ref, f"{self._ref}^{{}}"]
        refs, symrefs = self._ls_remote(s, patterns)
        hit = resolve_ref(self._ref, refs, symrefs)
        if hit is None:
            if self._ref is not None and _HEX_RE.match(self._ref):  # an abbreviated commit sha
                checkout = self._update(s, None, self._ref.lower())
                self._pinned = checkout.revision
                return checkout
            if self._ref is None:
                raise SourceError("ref-not-found", f"{self._display} has no commits on its default branch (HEAD)")
            raise SourceError("ref-not-found", f"{self._display} has no branch, tag or commit {self._ref!r}")
        name, sha = hit
        if self.spec.admit is not None and (refusal := self.spec.admit(name)):
            raise SourceError("invalid", refusal)
        if self._is_current(sha, name):
            assert self._last is not None
            self._refresh_index(s)
            return self._last
        return self._update(s, name, sha)

    def _refresh_index(self, s: _Session) -> None:
        """At a poll that found nothing new, once a checkout wrote the whole tree (a fresh clone, the
        first checkout of this process) at least RACY_SECONDS ago: refresh git's index. That checkout
        left most entries racily clean (written in the index's second), so the next checkout would
        read and hash every file again, on the path of the first commit after a start (a cost that
        grows with the tree, and with the machine's load). The refresh costs about the same once,
        here, off any commit's path, and writes the index with a later stamp."""
        if self._whole_tree_at is None or time.monotonic() - self._whole_tree_at < RACY_SECONDS:
            return
        self._whole_tree_at = None
        self._git(s, ["update-index", "-q", "--refresh"], self._gitdir)  # exits 1 for a changed file: fine

    def _is_current(self, sha: str, ref: str) -> bool:
        """The last checkout is ``sha`` (resolved as ``ref``) and the cache still holds it, checked cheaply."""
        last = self._last
        if last is None or last.revision != sha or last.ref != ref:
            return False
        try:
            head = (self._gitdir / "HEAD").read_text(encoding="ascii", errors="replace").strip()
        except OSError:
            return False
        return head == sha and (self._gitdir / "objects").is_dir() and last.root.is_dir()

    def _update(self, s: _Session, remote_ref: str | None, rev: str) -> Checkout:
        """Fetch ``remote_ref`` (or the commit ``rev``) and check it out; a suspect cache clone is replaced by
        a fresh one (cloned beside it, so the files of the last checkout stay until the new one is there)."""
        self._prepare_cache()
        fresh = not self._healthy(s)
        while True:
            gitdir = self._new_gitdir(s) if fresh else self._gitdir
            try:
                target = self._fetch_into(s, gitdir, remote_ref, rev)
            except (SourceError, _LocalFailure) as exc:
                if fresh:
                    shutil.rmtree(gitdir, ignore_errors=True)
                    if isinstance(exc, _LocalFailure):
                        raise SourceError("corrupt", f"cannot clone {self._display} into {self._cache}: {exc}") \
                            from None
                    raise
                # The remote answered ls-remote a moment ago: a fetch that now fails as "unreachable" more
                # likely tripped over the clone (its messages can look alike), so one fresh clone is tried.
                if isinstance(exc, SourceError) and not (
                    exc.kind == "corrupt" or (exc.kind == "unreachable" and remote_ref is not None)
                ):
                    raise
                log.warning("cache clone looks corrupt; cloning again", source=self.describe(),
                            cache=str(self._cache), error=str(exc))
                fresh = True
                continue
            if fresh:
                self._swap_in(gitdir)
            if self._verifier is not None:  # refused: raises, and the last checkout stays in place
                target = self._verifier.check(functools.partial(self._git_with, s), target, remote_ref,
                                              self._display)
            whole_tree = fresh or self._last is None
            try:
                checkout = self._checkout(s, target, remote_ref)
                if whole_tree:
                    self._whole_tree_at = time.monotonic()
                return checkout
            except _LocalFailure as exc:
                if fresh:
                    raise SourceError("corrupt", f"cannot check out {self._display} in {self._cache}: {exc}") \
                        from None
                log.warning("cache clone looks corrupt; cloning again", source=self.describe(),
                            cache=str(self._cache), error=str(exc))
                fresh = True

    def _fetch_into(self, s: _Session, gitdir: Path, remote_ref: str | None, rev: str) -> str:
        """Fetch into ``gitdir``; returns the local revision expression to check out."""
        if remote_ref is not None:
            dest = local_ref_for(remote_ref)
            self._remote(s, ["fetch", "--no-tags", "--no-recurse-submodules", "-q", "origin",
                             f"+{remote_ref}:{dest}"], gitdir)
            return dest
        if len(rev) in _FULL_SHA_LENGTHS:
            if self._git(s, ["cat-file", "-e", f"{rev}^{{commit}}"], gitdir).status == 0:
                return rev
            try:
                self._remote(s, ["fetch", "--no-tags", "--no-recurse-submodules", "-q", "origin", rev], gitdir)
            except SourceError as exc:  # servers may refuse wants by sha: fall back to fetching everything
                if exc.kind == "auth":
                    raise
                log.debug("fetch by sha refused; fetching all branches and tags", source=self.describe())
            else:
                return self._rev_parse(s, gitdir, rev)
        else:
            found = self._git(s, ["rev-parse", "--verify", "-q", f"{rev}^{{commit}}"], gitdir)
            if found.status == 0:
                return found.out.strip()
        self._remote(s, ["fetch", "--no-tags", "--no-recurse-submodules", "-q", "origin",
                         "+refs/heads/*:refs/remotes/origin/*", "+refs/tags/*:refs/tags/*"], gitdir)
        return self._rev_parse(s, gitdir, rev)

    def _rev_parse(self, s: _Session, gitdir: Path, rev: str) -> str:
        found = self._git(s, ["rev-parse", "--verify", "-q", f"{rev}^{{commit}}"], gitdir)
        if found.status != 0:
            raise SourceError("ref-not-found", f"{self._display} has no commit {rev!r} on any branch or tag")
        return found.out.strip()

    def _checkout(self, s: _Session, target: str, remote_ref: str | None) -> Checkout:
        info = self._git(s, ["log", "-1", "--no-show-signature", "--format=%H%x00%an%x00%ct%x00%s", target,
                             "--"], self._gitdir)
        fields = info.out.split("\0", 3)
        if info.status != 0 or len(fields) != 4:
            raise _LocalFailure(summarize(info.err) if info.err else "unreadable commit")
        sha, author, committed, subject = fields[0], fields[1], fields[2], fields[3].strip()
        if self._path:
            kind = self._git(s, ["cat-file", "-t", f"{sha}:{self._path}"], self._gitdir)
            if kind.status != 0:
                raise SourceError("path-not-found", f"{self._path!r} does not exist in {self._display} at "
                                                    f"{sha[:12]}")
            if kind.out.strip() != "tree":
                raise SourceError("path-not-found", f"{self._path!r} in {self._display} at {sha[:12]} is not a "
                                                    "directory (a file or a symlink)")
        for args in (["checkout", "-q", "-f", "--detach", sha], ["clean", "-q", "-ffdx"]):
            done = self._git(s, args, self._gitdir)
            if done.status != 0:
                raise _LocalFailure(summarize(done.err))
        root = self._tree / self._path if self._path else self._tree
        if not root.is_dir():  # cat-file said tree; only a broken work tree gets here
            raise _LocalFailure(f"{root} missing after checkout")
        try:
            committed_at = float(committed)
        except ValueError:
            committed_at = 0.0
        since = self._last.revision if self._last is not None and self._last.revision != sha else ""
        return Checkout(revision=sha, root=root, ref=remote_ref or sha, subject=subject, author=author,
                        committed_at=committed_at, since=since, changed=self._changed(s, since, sha))

    def _changed(self, s: _Session, since: str, sha: str) -> frozenset[str] | None:
        """The paths under the sub-path that differ between `since` and `sha` (None if git cannot
        tell, e.g. a fresh clone without `since`)."""
        if not since:
            return None
        args = ["diff", "--name-only", "-z", "--no-renames", "--no-ext-diff"]
        if self._path:
            args.append(f"--relative={self._path}/")
        res = self._git(s, [*args, since, sha, "--"], self._gitdir)
        if res.status != 0:
            return None
        return frozenset(p for p in res.out.split("\0") if p)

    def _ls_remote(self, s: _Session, patterns: list[str]) -> tuple[dict[str, str], dict[str, str]]:
        res = self._remote(s, ["ls-remote", "--symref", "--", self._url, *patterns], None)
        refs: dict[str, str] = {}
        symrefs: dict[str, str] = {}
        for line in res.out.splitlines():
            left, _, name = line.partition("\t")
            if left.startswith("ref: "):
                symrefs[name] = left.removeprefix("ref: ")
            elif name:
                refs[name] = left
        return refs, symrefs

    # -- the cache clone -----------------------------------------------------------------------------

    def _prepare_cache(self) -> None:
        """Remove leftovers of an interrupted re-clone; make sure the work tree is a plain directory."""
        for leftover in self._cache.glob("git.*-*"):
            shutil.rmtree(leftover, ignore_errors=True)
        if self._tree.is_symlink() or (self._tree.exists() and not self._tree.is_dir()):
            self._tree.unlink()
        self._tree.mkdir(exist_ok=True)

    def _healthy(self, s: _Session) -> bool:
        if not self._gitdir.is_dir() or self._gitdir.is_symlink():
            if self._gitdir.exists() or self._gitdir.is_symlink():
                log.warning("cache clone is not a git directory; cloning again", source=self.describe(),
                            cache=str(self._cache))
            return False
        signature = None
        with contextlib.suppress(OSError):  # unchanged since it named our URL: no need to ask git again
            st = (self._gitdir / "config").stat()
            if (signature := (st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns, st.st_ctime_ns)) == self._verified:
                return True
        origin = self._git(s, ["config", "--get", "remote.origin.url"], self._gitdir)
        ours = origin.status == 0 and origin.out.strip() == self._url
        self._verified = signature if ours else None
        if ours:
            return True
        log.warning("cache clone is corrupt or belongs to another repository; cloning again",
                    source=self.describe(), cache=str(self._cache))
        return False

    def _new_gitdir(self, s: _Session) -> Path:
        gitdir = self._cache / f"git.new-{uuid.uuid4().hex[:8]}"
        for args, where in ((["init", "-q", "--bare", "--template=", str(gitdir)], None),
                            (["config", "remote.origin.url", self._url], gitdir)):
            done = self._git(s, args, where)
            if done.status != 0:
                shutil.rmtree(gitdir, ignore_errors=True)
                raise SourceError("corrupt", f"cannot create a clone in {self._cache}: {summarize(done.err)}")
        return gitdir

    def _swap_in(self, gitdir: Path) -> None:
        if self._gitdir.exists() or self._gitdir.is_symlink():
            old = self._cache / f"git.old-{uuid.uuid4().hex[:8]}"
            self._gitdir.rename(old)
            gitdir.rename(self._gitdir)
            if old.is_dir() and not old.is_symlink():
                shutil.rmtree(old, ignore_errors=True)
            else:
                old.unlink()
        else:
            gitdir.rename(self._gitdir)

    # -- running git ---------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _session(self) -> Iterator[_Session]:
        self._cache.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self._cache / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        key_copy: Path | None = None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            askpass = credentials.write_askpass(self._cache)
            env = {
                "GIT_TERMINAL_PROMPT": "0",
                "GIT_ASKPASS": str(askpass),
                "GIT_ALLOW_PROTOCOL": "file:git:http:https:ssh",
                "GIT_CEILING_DIRECTORIES": str(self._cache.parent),
            }
            secrets: list[str] = []
            token = None
            if self._kind == "http":
                token = credentials.read_token(self.spec.token, self.spec.token_file, source=self.describe())
            if token:
                env[credentials.USERNAME_VAR] = self.spec.username
                env[credentials.TOKEN_VAR] = token
                secrets.append(token)
            if self._kind == "ssh":
                key_copy = credentials.private_key_copy(self.spec.ssh_key_file, self._cache)
                env["GIT_SSH_COMMAND"] = credentials.ssh_command(key_copy or self.spec.ssh_key_file,
                                                                 self.spec.known_hosts_file, self.spec.timeout)
            yield _Session(env, secrets)
        finally:
            if key_copy is not None:
                with contextlib.suppress(OSError):
                    key_copy.unlink()
            os.close(fd)  # releases the lock

    def _git(self, s: _Session, args: list[str], gitdir: Path | None) -> _Result:
        """Run git (through GitPython) in the cache directory; ``gitdir`` selects the clone. Never raises for a
        non-zero exit; raises SourceError for a missing git executable."""
        cmd = ["git", *_GIT_OPTIONS]
        env = dict(s.env)
        if gitdir is not None:
            cmd += [f"--git-dir={gitdir}", f"--work-tree={self._tree}"]
            # Override what a calling git hook may have exported (GIT_INDEX_FILE and friends).
            env["GIT_INDEX_FILE"] = str(gitdir / "index")
            env["GIT_OBJECT_DIRECTORY"] = str(gitdir / "objects")
        cmd += args
        try:
            status, out, err = gitpython.Git(str(self._cache)).execute(
                cmd, with_extended_output=True, with_exceptions=False, kill_after_timeout=self.spec.timeout,
                env=env, stdout_as_string=True, strip_newline_in_stdout=False,
            )
        except gitpython.GitCommandNotFound:
            raise SourceError("invalid", "the git executable was not found on PATH") from None
        if "did not complete in" in err and status != 0:
            err = f"timed out after {self.spec.timeout:g} s"
        return _Result(status, out, self._scrub(err, s))

    def _git_with(self, s: _Session, args: list[str], env: dict[str, str]) -> tuple[int, str, str]:
        """git in the cache clone with more environment (a verification's keyring)."""
        res = self._git(_Session({**s.env, **env}, s.secrets), args, self._gitdir)
        return res.status, res.out, res.err

    def _remote(self, s: _Session, args: list[str], gitdir: Path | None) -> _Result:
        """Run a git command that talks to the remote; failures become SourceError with their kind."""
        res = self._git(s, args, gitdir)
        if res.status == 0:
            return res
        kind = classify(res.err)
        detail = summarize(res.err)
        if kind == "host-key":
            raise SourceError("auth", f"SSH host key verification failed for {self._display}: the server's host key "
                                      f"is not in known_hosts_file {self.spec.known_hosts_file} or does not match "
                                      f"it ({detail})")
        if kind == "auth":
            raise SourceError("auth", f"authentication to {self._display} failed: {detail}")
        if kind == "ref-not-found":
            raise SourceError("ref-not-found", f"{self._display}: {detail}")
        if kind == "unreachable" or gitdir is None:
            raise SourceError("unreachable", f"cannot reach {self._display}: {detail}")
        raise SourceError("corrupt", f"git {args[0]} failed in {self._cache}: {detail}")

    def _scrub(self, text: str, s: _Session) -> str:
        for secret in s.secrets:
            text = text.replace(secret, "***")
        if self.spec.url != self._display:
            text = text.replace(self.spec.url, self._display)
        return text


def _git_dirs(base: Path) -> list[Path]:
    """The git directories of the repository at ``base`` (work tree or bare)."""
    dotgit = base / ".git"
    gitdir: Path | None = None
    if dotgit.is_dir():
        gitdir = dotgit
    elif dotgit.is_file():  # a linked work tree or submodule: "gitdir: <path>"
        try:
            text = dotgit.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError):
            return []
        if text.startswith("gitdir:"):
            gitdir = (base / text.removeprefix("gitdir:").strip()).resolve()
    elif (base / "HEAD").is_file() and (base / "objects").is_dir():
        gitdir = base
    if gitdir is None or not gitdir.is_dir():
        return []
    dirs = [gitdir]
    try:
        common = (gitdir / "commondir").read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        common = ""
    if common:
        common_dir = (gitdir / common).resolve()
        if common_dir.is_dir() and common_dir != gitdir:
            dirs.append(common_dir)
    return dirs
