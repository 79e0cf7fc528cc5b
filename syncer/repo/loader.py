"""Read a config repository into validated units.

Layout:
    flower-syncer.yaml                   optional repo-wide settings
    federations/**/*.yaml                Federation documents (one or more per file)
    supernodes/<release>/values.yaml     SuperNode chart values; the folder name is the release name
    supernodes/<release>/release.yaml    optional per-release settings

Loading never raises on bad input: every problem becomes a `Diagnostic`, and units that fail are
listed in `failed` (by identity, where it can be told) so the engine keeps their last applied state.
"""

from __future__ import annotations

import copy
import errno
import hashlib
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from syncer.diagnostics import Diagnostic
from syncer.identity import Unit
from syncer.models.base import validate_document
from syncer.models.federation import API_VERSION, KIND, Federation
from syncer.models.names import name_problem
from syncer.models.secret import SecretManifest
from syncer.models.settings import ReleaseSettings, RepoSettings, SyncPolicy
from syncer.models.supernode import SuperNodeValues, validate_values
from syncer.repo.encrypted import Opened, open_documents, scrub
from syncer.secrets.keys import Decryption
from syncer.secrets.sops import is_encrypted
from syncer.yamldoc import MAX_FILE_BYTES, YamlDoc, decode_text, load_documents

SETTINGS_FILE = "flower-syncer.yaml"
FEDERATIONS_DIR = "federations"
SUPERNODES_DIR = "supernodes"
VALUES_FILE = "values.yaml"
RELEASE_FILE = "release.yaml"
SECRETS_FILE = "secrets.yaml"  # the release's Secret manifests (usually SOPS-encrypted)
YAML_SUFFIXES = (".yaml", ".yml")
MAX_RELEASE_NAME = 53  # Helm's limit for release names


@dataclass(frozen=True)
class LoadedUnit:
    unit: Unit
    source: str  # repo-relative path of the defining file
    line: int
    model: Federation | SuperNodeValues
    policy: SyncPolicy
    secrets: tuple[tuple[str, SecretManifest], ...] = ()  # (file, Secret) kept in Git for this unit


@dataclass
class RepoState:
    root: Path
    settings: RepoSettings
    units: list[LoadedUnit] = field(default_factory=list)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    failed: set[Unit] = field(default_factory=set)
    """Units that exist in Git but did not load; their last applied state must be kept."""
    files: int = 0
    secrets: frozenset[str] = frozenset()
    """Plaintext values of SOPS-encrypted files: kept out of output unless asked for."""

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.severity == "error"]

    @property
    def clean(self) -> bool:
        """Everything loaded: only then may units that vanished from Git be pruned."""
        return not self.errors


@dataclass(frozen=True)
class _OpenedFile:
    docs: tuple[YamlDoc, ...]
    problems: tuple[Diagnostic, ...]
    encrypted: bool  # held a SOPS document (only such files are cached)
    secrets: frozenset[str]
    opaque: tuple[str, ...]


# SOPS files by path, content and keys, parsed and decrypted: in memory only, bounded.
OPENED_SIZE = 4096
_OPENED: dict[tuple[str, str, bool, tuple[str, ...]], _OpenedFile] = {}


class _Reader:
    """Reads files under the root, refusing anything that resolves outside it; decrypts SOPS files."""

    def __init__(self, root: Path, diags: list[Diagnostic], decryption: Decryption | None = None) -> None:
        self.root = root.resolve()
        self.diags = diags
        self.decryption = decryption or Decryption(required=False)
        self.secrets: dict[str, frozenset[str]] = {}  # file -> plaintext values it held
        self.opaque: dict[str, list[str]] = {}  # file -> paths left encrypted (no key, validate only)
        self.encrypted: set[str] = set()  # files that were SOPS-encrypted

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
        return _OpenedFile(tuple(kept), tuple(problems), bool(good), frozenset().union(*(o.secrets for o in good)),
                           tuple(p for o in good for p in o.opaque))

    def rel(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix() if path.is_absolute() else path.as_posix()

    def inside(self, path: Path) -> bool:
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

    def _problem(self, path: Path, message: str, hint: str) -> None:
        self.diags.append(Diagnostic(self.rel(path), 0, 0, "", message, hint))

    def read(self, path: Path) -> str | None:
        """The text of a regular file of at most MAX_FILE_BYTES; anything else is a diagnostic. Opened
        without blocking, so a FIFO named *.yaml cannot hang the loader."""
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
        return sorted(out)


def _special_kind(mode: int) -> str:
    """What a file that is not a regular file is ("" for a regular file)."""
    if stat.S_ISREG(mode):
        return ""
    for test, kind in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device")):
        if test(mode):
            return kind
    return "not a regular file"


def load_repo(root: Path, decryption: Decryption | None = None) -> RepoState:
    """Load every unit of the repository at `root`. SOPS-encrypted files are decrypted with
    `decryption`'s keys (none given: checked with their encrypted values left opaque)."""
    diags: list[Diagnostic] = []
    reader = _Reader(root, diags, decryption)
    settings = _load_settings(reader)
    state = RepoState(root=reader.root, settings=settings, diagnostics=diags)
    if not reader.root.is_dir():
        diags.append(Diagnostic(str(root), 0, 0, "", "config repository directory does not exist",
                                "pass the path of a directory holding federations/ and supernodes/"))
        return state
    fed_dir = reader.root / FEDERATIONS_DIR
    sn_dir = reader.root / SUPERNODES_DIR
    if not fed_dir.is_dir() and not sn_dir.is_dir():
        diags.append(Diagnostic(reader.rel(reader.root) or ".", 0, 0, "",
                                "no federations/ or supernodes/ folder found",
                                "is this the root of the config repository? (see README: config repo format)"))
    if fed_dir.is_dir():
        for path in reader.yaml_files(fed_dir):
            state.files += 1
            _load_federation_file(reader, path, state)
    if sn_dir.is_dir():
        for release_dir in sorted(p for p in sn_dir.iterdir() if not p.name.startswith(".")):
            if release_dir.is_dir():
                _load_release(reader, release_dir, state)
            elif release_dir.suffix in YAML_SUFFIXES:
                diags.append(Diagnostic(reader.rel(release_dir), 0, 0, "",
                                        "SuperNode values must be in supernodes/<release>/values.yaml",
                                        f"move it to supernodes/{release_dir.stem}/values.yaml"))
    _check_duplicates(state)
    state.diagnostics[:] = scrub(state.diagnostics, reader.secrets, reader.opaque)
    state.secrets = frozenset().union(*reader.secrets.values()) if reader.secrets else frozenset()
    state.diagnostics.sort()
    return state


def _load_settings(reader: _Reader) -> RepoSettings:
    path = reader.root / SETTINGS_FILE
    if not path.exists():
        return RepoSettings()
    text = reader.read(path)
    if text is None:
        return RepoSettings()
    docs, problems = reader.documents(text, SETTINGS_FILE)
    reader.diags.extend(problems)
    if not docs:
        return RepoSettings()
    if len(docs) > 1:
        reader.diags.append(Diagnostic(SETTINGS_FILE, docs[1].start_line, 1, "", "expected one YAML document",
                                       "keep all settings in a single document"))
    if not _is_mapping(docs[0], reader.diags):
        return RepoSettings()
    model, problems = validate_document(RepoSettings, docs[0])
    reader.diags.extend(problems)
    return model or RepoSettings()


def _is_mapping(doc: YamlDoc, diags: list[Diagnostic]) -> bool:
    if isinstance(doc.data, dict):
        return True
    kind = "a list" if isinstance(doc.data, list) else f"the value {doc.data!r}"[:60]
    diags.append(Diagnostic(doc.file, doc.start_line, 1, "", f"expected a mapping (key: value pairs), got {kind}",
                            "each document must be a YAML mapping"))
    return False


def _raw_name(data: Any) -> tuple[str | None, str | None]:
    meta = data.get("metadata") if isinstance(data, dict) else None
    if not isinstance(meta, dict):
        return None, None
    name, ns = meta.get("name"), meta.get("namespace")
    return (name if isinstance(name, str) else None), (ns if isinstance(ns, str) else None)


def _load_federation_file(reader: _Reader, path: Path, state: RepoState) -> None:
    rel = reader.rel(path)
    text = reader.read(path)
    if text is None:
        return
    docs, problems = reader.documents(text, rel)
    state.diagnostics.extend(problems)
    file_broken = any(p.severity == "error" for p in problems)  # e.g. a duplicate key: fail its units too
    secret_docs = [d for d in docs if isinstance(d.data, dict) and d.data.get("kind") == "Secret"
                   and d.data.get("apiVersion") == "v1"]
    docs = [d for d in docs if d not in secret_docs]
    secrets: list[tuple[str, SecretManifest]] = []
    if secret_docs:
        secrets, secrets_ok = _validate_secrets(reader, rel, secret_docs, state, "")
        fed_docs = [d for d in docs if isinstance(d.data, dict) and d.data.get("kind") == KIND]
        if len(fed_docs) != 1:
            state.diagnostics.append(Diagnostic(rel, secret_docs[0].start_line, 1, "",
                                                "a Secret in a federations/ file belongs to that file's Federation, "
                                                f"but the file has {len(fed_docs)}",
                                                "keep Secrets in a file with exactly one Federation"))
            file_broken = True
        file_broken = file_broken or not secrets_ok
    loaded_before = len(state.units)
    for doc in docs:
        if not _is_mapping(doc, state.diagnostics):
            continue
        api, kind = doc.data.get("apiVersion"), doc.data.get("kind")
        if kind != KIND or api != API_VERSION:
            line, col = doc.position(("kind",))
            state.diagnostics.append(Diagnostic(
                rel, line, col, "kind", f"expected apiVersion {API_VERSION} kind {KIND}, got {api} {kind}",
                "federations/ holds Federation documents; SuperNode values go to supernodes/<release>/values.yaml"))
            continue
        name, namespace = _raw_name(doc.data)
        namespace = namespace or state.settings.defaultNamespace
        unit = Unit("federation", namespace, name) if name else None
        model, problems = validate_document(Federation, doc, unit=unit.id if unit else "")
        policy, policy_problems = state.settings.policy.with_annotations(
            model.metadata.annotations if model else {}
        )
        for key, message in policy_problems:
            line, col = doc.position(("metadata", "annotations", key))
            problems.append(Diagnostic(rel, line, col, f"metadata.annotations[{key!r}]", message,
                                       "fix the annotation value", unit=unit.id if unit else ""))
        state.diagnostics.extend(problems)
        if unit is None:
            continue
        if model is None or policy_problems or file_broken:
            state.failed.add(unit)
            continue
        state.units.append(LoadedUnit(unit, rel, doc.position(("metadata", "name"))[0], model, policy))
    if secrets:
        for i in range(loaded_before, len(state.units)):
            state.units[i] = replace(state.units[i], secrets=tuple(secrets))


def _load_secrets(reader: _Reader, path: Path, state: RepoState,
                  unit: Unit) -> tuple[list[tuple[str, SecretManifest]], bool]:
    """`supernodes/<release>/secrets.yaml`: the release's Secret manifests (one per document)."""
    rel = reader.rel(path)
    text = reader.read(path)
    if text is None:
        return [], False
    docs, problems = reader.documents(text, rel)
    state.diagnostics.extend(problems)
    if any(p.severity == "error" for p in problems):
        return [], False
    return _validate_secrets(reader, rel, docs, state, unit.id)


def _validate_secrets(reader: _Reader, rel: str, docs: list[YamlDoc], state: RepoState,
                      unit: str) -> tuple[list[tuple[str, SecretManifest]], bool]:
    out: list[tuple[str, SecretManifest]] = []
    ok = True
    for doc in docs:
        model, problems = validate_document(SecretManifest, doc, unit=unit)
        state.diagnostics.extend(problems)
        if model is None:
            ok = False
            continue
        if state.settings.requireEncryption and rel not in reader.encrypted:
            state.diagnostics.append(Diagnostic(rel, doc.start_line, 1, "", f"Secret {model.metadata.name!r} is in "
                                                "plain text, and flower-syncer.yaml sets requireEncryption",
                                                "encrypt the file with sops", unit=unit))
            ok = False
            continue
        out.append((rel, model))
    return out, ok


def _load_release(reader: _Reader, folder: Path, state: RepoState) -> None:
    release = folder.name
    rel_dir = reader.rel(folder)
    values_path = folder / VALUES_FILE
    if not values_path.exists() and (folder / "values.yml").exists():
        values_path = folder / "values.yml"
    problem = name_problem(release, "release name", max_len=MAX_RELEASE_NAME)
    if problem:
        state.diagnostics.append(Diagnostic(rel_dir, 0, 0, "", problem, "rename the folder (it is the release name)"))
        return
    settings = ReleaseSettings()
    settings_ok = True
    release_path = folder / RELEASE_FILE
    if release_path.exists():
        state.files += 1
        loaded = _load_single(reader, release_path, ReleaseSettings, state)
        settings_ok = loaded is not None
        settings = loaded or settings
    namespace = settings.namespace or state.settings.defaultNamespace
    unit = Unit("supernode", namespace, release)
    if not values_path.exists():
        state.diagnostics.append(Diagnostic(rel_dir, 0, 0, "", f"release folder has no {VALUES_FILE}",
                                            f"add {rel_dir}/{VALUES_FILE} (it may be empty to use the chart defaults)",
                                            unit=unit.id))
        state.failed.add(unit)
        return
    state.files += 1
    values = _load_single(reader, values_path, SuperNodeValues, state, unit=unit.id, empty_ok=True,
                          validate=lambda doc: validate_values(doc, release, unit.id))
    secrets_path = folder / SECRETS_FILE
    secrets: list[tuple[str, SecretManifest]] = []
    secrets_ok = True
    if secrets_path.exists():
        state.files += 1
        secrets, secrets_ok = _load_secrets(reader, secrets_path, state, unit)
    for extra in sorted(folder.iterdir()):
        if extra.name not in (VALUES_FILE, "values.yml", RELEASE_FILE, SECRETS_FILE) and extra.suffix in YAML_SUFFIXES:
            state.diagnostics.append(Diagnostic(reader.rel(extra), 0, 0, "", "file is not read by flower-syncer",
                                                f"only {VALUES_FILE} and {RELEASE_FILE} are read in a release folder",
                                                severity="warning", unit=unit.id))
    if values is None or not settings_ok or not secrets_ok:
        state.failed.add(unit)
        return
    if state.settings.requireEncryption and values.global_.nodeAuth.authSupernodePrivateKey \
            and reader.rel(values_path) not in reader.encrypted:
        state.diagnostics.append(Diagnostic(
            reader.rel(values_path), 1, 1, "global.nodeAuth.authSupernodePrivateKey",
            "a private key in plain text, and flower-syncer.yaml sets requireEncryption", "encrypt the file with sops",
            unit=unit.id))
        state.failed.add(unit)
        return
    policy = settings.policy or state.settings.policy
    state.units.append(LoadedUnit(unit, reader.rel(values_path), 1, values, policy, tuple(secrets)))


def _load_single(reader: _Reader, path: Path, cls: type[Any], state: RepoState, unit: str = "",
                 empty_ok: bool = False,
                 validate: Callable[[YamlDoc], tuple[Any, list[Diagnostic]]] | None = None) -> Any:
    rel = reader.rel(path)
    text = reader.read(path)
    if text is None:
        return None
    docs, problems = reader.documents(text, rel)
    state.diagnostics.extend(problems)
    if any(p.severity == "error" for p in problems):
        return None
    if not docs:
        return cls() if empty_ok or cls is ReleaseSettings else None
    if len(docs) > 1:
        state.diagnostics.append(Diagnostic(rel, docs[1].start_line, 1, "", "expected a single YAML document",
                                            "remove the extra '---' documents", unit=unit))
        return None
    if not _is_mapping(docs[0], state.diagnostics):
        return None
    model, problems = validate(docs[0]) if validate else validate_document(cls, docs[0], unit=unit)
    state.diagnostics.extend(problems)
    return model


def _check_duplicates(state: RepoState) -> None:
    seen: dict[Unit, LoadedUnit] = {}
    kept: list[LoadedUnit] = []
    for loaded in state.units:
        first = seen.get(loaded.unit)
        if first is None:
            seen[loaded.unit] = loaded
            kept.append(loaded)
            continue
        state.diagnostics.append(Diagnostic(
            loaded.source, loaded.line, 1, "metadata.name",
            f"{loaded.unit.kind} {loaded.unit.name!r} in namespace {loaded.unit.namespace!r} is also defined in "
            f"{first.source}:{first.line}", "rename one of them or remove the duplicate", unit=loaded.unit.id))
        state.failed.add(loaded.unit)
    state.units = [u for u in kept if u.unit not in state.failed]
