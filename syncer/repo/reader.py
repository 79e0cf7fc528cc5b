"""Reading a config repository's files: never outside its root, never a FIFO, socket or device,
never more than MAX_FILE_BYTES, each file read once per load (and, for the agent's next revision,
only if its inode, size or times changed: `Reader.digest`); YAML documents parsed with their
positions, SOPS-encrypted ones decrypted in memory (and kept, by content and keys, so a new
revision decrypts only the encrypted files that changed)."""

from __future__ import annotations

import copy
import errno
import hashlib
import os
import stat
import time
from dataclasses import dataclass, replace
from pathlib import Path

from syncer.diagnostics import Diagnostic
from syncer.repo.encrypted import Opened, open_documents
from syncer.secrets.keys import Decryption
from syncer.secrets.sops import is_encrypted
from syncer.yamldoc import MAX_FILE_BYTES, YamlDoc, decode_text, load_documents

YAML_SUFFIXES = (".yaml", ".yml")


@dataclass(frozen=True)
class _OpenedFile:
    docs: tuple[YamlDoc, ...]
    problems: tuple[Diagnostic, ...]
    encrypted: bool  # held a SOPS document (only such files are cached)
    secrets: frozenset[str]
    opaque: tuple[str, ...]
    seal_key: bytes = b""


# A file's identity on disk: inode, device, size, modification and change times (ns).
Signature = tuple[int, int, int, int, int]
# How long a file must have been left alone before it was read for its signature to be trusted
# next time (git's "racily clean" rule: a change within the file system's clock tick of the read
# could leave every field of the signature as it was).
RACY_NS = 1_000_000_000
_now_ns = time.time_ns  # the file system's clock (tests move it on)

# SOPS files by path, content and keys, parsed and decrypted: in memory only, bounded.
OPENED_SIZE = 4096
_OPENED: dict[tuple[str, str, bool, tuple[str, ...]], _OpenedFile] = {}


class Reader:
    """Reads files under the root, refusing anything that resolves outside it; decrypts SOPS files."""

    def __init__(self, root: Path, diags: list[Diagnostic], decryption: Decryption | None = None,
                 seen: dict[str, tuple[Signature, bytes]] | None = None) -> None:
        self.root = root.resolve()
        self.diags = diags
        self.decryption = decryption or Decryption(required=False)
        self.secrets: dict[str, frozenset[str]] = {}  # file -> plaintext values it held
        self.opaque: dict[str, list[str]] = {}  # file -> paths left encrypted (no key, validate only)
        self.encrypted: set[str] = set()  # files that were SOPS-encrypted
        self.seal_keys: dict[str, bytes] = {}  # file -> its seal key (see syncer.secrets.sops.Decrypted)
        self._texts: dict[Path, str | None] = {}  # read once per load (a second read reports nothing)
        self._root_text = str(self.root)
        self._prefix = self._root_text.rstrip(os.sep) + os.sep
        self._folders: dict[str, bool] = {}  # folder -> neither it nor one above it (to the root) is a symlink
        self._seen_before = seen or {}
        self.seen: dict[str, tuple[Signature, bytes]] = {}  # path -> signature and digest (see digest())

    def digest(self, path: Path) -> bytes | None:
        """The SHA-256 of a file's text (None when it cannot be read; read() says why). A file
        that a previous load (`seen`) read cleanly is not read again while its signature is the
        same and it had not changed for RACY_NS before that read: a revision that changes one
        file of 2,000 reads one file. Only plain files under the root (no symlink on the way)."""
        key = str(path)
        st = self._plain_stat(key)
        sig: Signature | None = None
        if st is not None:
            sig = (st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
            before = self._seen_before.get(key)
            if before is not None and before[0] == sig:
                self.seen[key] = before
                return before[1]
        started, problems = _now_ns(), len(self.diags)
        text = self.read(path)
        if text is None:
            return None
        digest = hashlib.sha256(text.encode()).digest()
        if sig is not None and len(self.diags) == problems and max(sig[3], sig[4]) < started - RACY_NS:
            self.seen[key] = (sig, digest)
        return digest

    def documents(self, text: str, rel: str) -> tuple[list[YamlDoc], list[Diagnostic]]:
        """The YAML documents of a file, SOPS-encrypted ones decrypted in memory (see syncer.secrets).
        A SOPS file seen before with the same content and keys is not parsed or decrypted again: a
        new revision costs only the encrypted files that changed."""
        key = (rel, hashlib.sha256(text.encode()).hexdigest(), self.decryption.required,
               tuple(str(i) for i in self.decryption.identities))
        hit = _OPENED.get(key)
        if hit is not None:
            return self._remember(rel, hit)
        opened = self._open(text, rel)
        if opened.encrypted:
            if len(_OPENED) >= OPENED_SIZE:
                _OPENED.pop(next(iter(_OPENED)))
            _OPENED[key] = opened
        return self._remember(rel, opened)

    def _remember(self, rel: str, opened: _OpenedFile) -> tuple[list[YamlDoc], list[Diagnostic]]:
        if opened.encrypted:
            self.encrypted.add(rel)
        if opened.secrets:
            self.secrets[rel] = self.secrets.get(rel, frozenset()) | opened.secrets
        if opened.opaque:
            self.opaque.setdefault(rel, []).extend(opened.opaque)
        if opened.seal_key:
            self.seal_keys[rel] = opened.seal_key
        if not opened.encrypted:  # not cached: the documents are the caller's already
            return list(opened.docs), list(opened.problems)
        # the callers own what they get: the cached documents stay as they were opened
        return [replace(d, data=copy.deepcopy(d.data)) for d in opened.docs], list(opened.problems)

    def _open(self, text: str, rel: str) -> _OpenedFile:
        docs, problems = load_documents(text, rel)
        sealed = [d for d in docs if is_encrypted(d.data)]
        if not sealed:
            return _OpenedFile(tuple(docs), tuple(problems), False, frozenset(), ())
        opened, more = open_documents(sealed, self.decryption)
        problems += more
        results = iter(opened)
        kept = []
        for doc in docs:  # in the file's order; a document that did not open is left out
            result = next(results) if is_encrypted(doc.data) else Opened(doc)
            if result is not None:
                kept.append(result.doc)
        good = [o for o in opened if o is not None]
        seal_key = next((o.seal_key for o in good if o.seal_key), b"")
        return _OpenedFile(tuple(kept), tuple(problems), bool(good), frozenset().union(*(o.secrets for o in good)),
                           tuple(p for o in good for p in o.opaque), seal_key)

    def rel(self, path: Path) -> str:
        text = str(path)
        if text.startswith(self._prefix):  # the common case, without pathlib's parsing
            return text[len(self._prefix):].replace(os.sep, "/")
        return path.relative_to(self.root).as_posix() if path.is_absolute() else path.as_posix()

    def inside(self, path: Path) -> bool:
        """Whether `path` resolves to somewhere under the root (else a diagnostic says why not).
        Resolved in full only when it or a folder on its way is a symlink; otherwise one lstat of
        the file and of each folder once per load (resolving every path in full was a large part
        of reading a big repository)."""
        if self._plain(str(path)):
            return True
        try:
            path.resolve(strict=False).relative_to(self.root)
        except RuntimeError:  # a symlink loop (Python < 3.13)
            self._problem(path, "symlink loop", "replace the symlink with the file itself")
            return False
        except (ValueError, OSError):
            self._problem(path, "symlink points outside the config repository",
                          "replace the symlink with the file itself")
            return False
        return True

    def plain(self, path: Path, *, folder: bool = False) -> bool:
        """`path` (a file, or a `folder`) lies under the root with no symlink on the way."""
        return self._plain_folder(str(path)) if folder else self._plain(str(path))

    def _plain(self, path: str) -> bool:
        """`path` lies under the root and neither it nor a folder between is a symlink."""
        return self._plain_stat(path) is not None

    def _plain_stat(self, path: str) -> os.stat_result | None:
        """The lstat of `path` if it is _plain, else None."""
        if not path.startswith(self._prefix) or f"{os.sep}..{os.sep}" in path or path.endswith(f"{os.sep}.."):
            return None
        try:
            st = os.lstat(path)
        except OSError:
            return None
        if stat.S_ISLNK(st.st_mode) or not self._plain_folder(path.rpartition(os.sep)[0]):
            return None
        return st

    def _plain_folder(self, folder: str) -> bool:
        if folder == self._root_text:
            return True
        known = self._folders.get(folder)
        if known is None:
            try:
                known = not stat.S_ISLNK(os.lstat(folder).st_mode) and folder.startswith(self._prefix) \
                    and self._plain_folder(folder.rpartition(os.sep)[0])
            except OSError:
                known = False
            self._folders[folder] = known
        return known

    def _problem(self, path: Path, message: str, hint: str) -> None:
        self.diags.append(Diagnostic(self.rel(path), 0, 0, "", message, hint))

    def read(self, path: Path) -> str | None:
        """The text of a regular file of at most MAX_FILE_BYTES; anything else is a diagnostic. Opened
        without blocking, so a FIFO named *.yaml cannot hang the loader. A file read before in this
        load gives the same text again (and its problems are not reported twice)."""
        if path in self._texts:
            return self._texts[path]
        text = self._texts[path] = self._read(path)
        return text

    def _read(self, path: Path) -> str | None:
        rel = self.rel(path)
        if not self.inside(path):
            return None
        try:
            kind = _special_kind(path.stat().st_mode)  # a socket cannot even be opened
            if kind:
                self._problem(path, f"not a regular file: it is {kind}", "config files must be plain files; remove it")
                return None
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                self._problem(path, "symlink loop", "replace the symlink with the file itself")
            else:
                self._problem(path, f"cannot read file: {exc.strerror}", "check that it exists and is readable")
            return None
        try:
            kind = _special_kind(os.fstat(fd).st_mode)  # again: it may have been swapped since
            if kind:
                self._problem(path, f"not a regular file: it is {kind}", "config files must be plain files; remove it")
                return None
            os.set_blocking(fd, True)
            with os.fdopen(fd, "rb", closefd=False) as fh:
                raw = fh.read(MAX_FILE_BYTES + 1)
        except OSError as exc:
            self._problem(path, f"cannot read file: {exc.strerror}", "check permissions")
            return None
        finally:
            os.close(fd)
        text, problems = decode_text(raw, rel)
        self.diags.extend(problems)
        return text

    def yaml_files(self, folder: Path) -> list[Path]:
        out: list[Path] = []
        for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
            here = Path(dirpath)
            kept = []
            for d in sorted(dirnames):
                sub = here / d
                if sub.is_symlink() and not self.inside(sub):
                    continue
                if d.startswith("."):
                    continue
                kept.append(d)
            dirnames[:] = kept
            out.extend(here / f for f in sorted(filenames) if f.endswith(YAML_SUFFIXES) and not f.startswith("."))
        return sorted(out, key=lambda path: path.parts)  # Path's own order, without its slow __lt__


def _special_kind(mode: int) -> str:
    """What a file that is not a regular file is ("" for a regular file)."""
    if stat.S_ISREG(mode):
        return ""
    for test, kind in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device")):
        if test(mode):
            return kind
    return "not a regular file"
