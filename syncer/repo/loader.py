"""Read a config repository into validated units.

Layout:
    flower-syncer.yaml                   optional repo-wide settings
    federations/**/*.yaml                Federation documents (one or more per file)
    supernodes/<release>/values.yaml     SuperNode chart values; the folder name is the release name
    supernodes/<release>/release.yaml    optional per-release settings
or, for several clusters (syncer.repo.clusters), the two folders in each `clusters/<name>/`.

Loading never raises on bad input: every problem becomes a `Diagnostic`, and units that fail are
listed in `failed` (by identity, where it can be told) so the engine keeps their last applied state.

Given a `LoadCache` (the agent keeps one), a load parses and validates only the federation files
and release folders whose content changed since the previous load; the others contribute what they
contributed then (the very same `LoadedUnit` objects), and each `LoadedUnit` carries a digest of
what it was made from (`LoadedUnit.inputs`), which keys the render and plan caches.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Collection
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from syncer.diagnostics import Diagnostic
from syncer.identity import Unit
from syncer.models.base import validate_document
from syncer.models.federation import API_VERSION, KIND, Federation
from syncer.models.names import name_problem
from syncer.models.secret import SecretManifest
from syncer.models.settings import ReleaseSettings, RepoSettings
from syncer.models.supernode import SuperNodeValues, validate_values
from syncer.repo import clusters as layouts
from syncer.repo.duplicates import check_duplicates
from syncer.repo.encrypted import opaque_only, scrub
from syncer.repo.reader import YAML_SUFFIXES, Reader, Signature
from syncer.repo.secret_files import load_secrets, of_unit, plain_values, validate_secrets
from syncer.repo.sites import check_sites
from syncer.repo.skew import check_version_skew
from syncer.repo.state import LoadedUnit, RepoState
from syncer.secrets.keys import Decryption
from syncer.yamldoc import YamlDoc

SETTINGS_FILE = "flower-syncer.yaml"
FEDERATIONS_DIR = "federations"
SUPERNODES_DIR = "supernodes"
VALUES_FILE = "values.yaml"
RELEASE_FILE = "release.yaml"
SECRETS_FILE = "secrets.yaml"  # the release's Secret manifests (usually SOPS-encrypted)
MAX_RELEASE_NAME = 53  # Helm's limit for release names


@dataclass(frozen=True)
class _Piece:
    """What one federation file or one release folder added to a load."""

    units: tuple[LoadedUnit, ...]
    diagnostics: tuple[Diagnostic, ...]
    failed: frozenset[Unit]
    files: int
    secrets: tuple[tuple[str, frozenset[str]], ...]
    opaque: tuple[tuple[str, tuple[str, ...]], ...]
    encrypted: frozenset[str]


class LoadCache:
    """What each federation file and release folder contributed to the previous load, keyed by its
    path, the content of its files, the repository settings and the decryption keys it was loaded
    with. It keeps only what the latest load used, so it holds one repository's worth. In memory
    only; one load at a time.

    Invariant: a load through the cache equals a load without it (a piece is reused only when
    every input it was made from is the same); test_load_cache.py compares warm and fresh loads,
    broken inputs and changes included."""

    def __init__(self) -> None:
        self._pieces: dict[tuple[Any, ...], _Piece] = {}
        self._used: dict[tuple[Any, ...], _Piece] = {}
        self._files: dict[str, tuple[Signature, bytes]] = {}  # see Reader.digest
        # piece -> its key and files, for the pieces of the latest load read without a symlink on the
        # way: what a load told which paths changed (see load_repo) takes as it is
        self._plain: dict[str, tuple[tuple[Any, ...], tuple[str, ...]]] = {}
        self._plain_used: dict[str, tuple[tuple[Any, ...], tuple[str, ...]]] = {}
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._pieces)

    def _begin(self) -> None:
        self._used, self._plain_used = {}, {}
        self.hits = self.misses = 0

    def _get(self, key: tuple[Any, ...]) -> _Piece | None:
        piece = self._pieces.get(key)
        if piece is not None:
            self.hits += 1
            self._used[key] = piece
        return piece

    def _put(self, key: tuple[Any, ...], piece: _Piece) -> None:
        self.misses += 1
        self._used[key] = piece

    def _end(self) -> None:
        self._pieces, self._used = self._used, {}
        self._plain, self._plain_used = self._plain_used, {}


def load_repo(root: Path, decryption: Decryption | None = None, cache: LoadCache | None = None,
              changed: Collection[str] | None = None, cluster: str | None = None, *,
              require_encryption: bool = False) -> RepoState:
    """Load every unit of the repository at `root`. SOPS-encrypted files are decrypted with
    `decryption`'s keys (none given: checked with their encrypted values left opaque). With a
    `cache`, what did not change since the cache's previous load is not parsed again; given also
    the paths that `changed` since that load (relative to `root`, as Git lists them between two
    revisions), a federation file or release folder none of whose paths changed, and which was read
    without a symlink on the way, is not even looked at: a one-file commit to a repository of 2,000
    units opens one file. `cluster`: the cluster this load is for (syncer.repo.clusters: its
    units in `units`, the other clusters' in `elsewhere`); None loads every cluster's into `units`.
    `require_encryption`: the admin's policy requires SOPS encryption, whatever flower-syncer.yaml says."""
    if cache is not None:
        cache._begin()
    diags: list[Diagnostic] = []
    reader = Reader(root, diags, decryption, cache._files if cache is not None else None)
    settings = _load_settings(reader)
    by_admin = require_encryption and not settings.requireEncryption
    if by_admin:  # in the settings, so the read cache's key says so too
        settings = settings.model_copy(update={"requireEncryption": True})
    state = RepoState(root=reader.root, settings=settings, diagnostics=diags, cluster=cluster,
                      encryption_by="the admin's policy" if by_admin else SETTINGS_FILE)
    if not reader.root.is_dir():
        diags.append(Diagnostic(str(root), 0, 0, "", "config repository directory does not exist",
                                "pass the path of a directory holding federations/ and supernodes/"))
        return state
    pieces = _Pieces(reader, state, cache, changed)
    homes: dict[Unit, str] = {}
    try:
        _load_clusters(reader, state, pieces, homes)
    finally:
        if cache is not None:
            cache._end()
            cache._files = reader.seen
    homes.update((u.unit, u.cluster) for u in state.units)  # the checks below may fail loaded units
    homes.update(dict.fromkeys(check_duplicates(state), ""))  # in two clusters: every cluster's failure
    check_version_skew(state)
    check_sites(state)
    layouts.split(state, homes)
    state.diagnostics[:] = scrub(state.diagnostics, reader.secrets, reader.opaque)
    state.secrets = frozenset().union(*reader.secrets.values()) if reader.secrets else frozenset()
    state.diagnostics.sort()
    return state


class _Pieces:
    """Loads a federation file or a release folder into the state, or replays what it added to the
    cache's previous load when its files and the load's settings and keys are the same."""

    def __init__(self, reader: Reader, state: RepoState, cache: LoadCache | None,
                 changed: Collection[str] | None = None) -> None:
        self.reader, self.state, self.cache = reader, state, cache
        self.context: tuple[Any, ...] = ()
        self.use(reader.decryption)
        self.cluster = ""  # the cluster of the units being loaded (LoadedUnit.cluster)
        self.touched: set[str] | None = None  # the pieces (files, release folders) a change is in
        if cache is not None and changed is not None:
            self.touched = {*changed, *(_release_folder(p) for p in changed)}

    def use(self, decryption: Decryption) -> None:
        """Load the next pieces with `decryption` (another cluster's: syncer.repo.clusters)."""
        self.reader.decryption = decryption
        keys = hashlib.sha256("\0".join(str(i) for i in decryption.identities).encode()).digest()
        self.context = (self.state.settings.model_dump_json(), decryption.required, keys, self.state.cluster,
                        self.state.encryption_by)

    def replay(self, what: str) -> bool:
        """Add the piece `what` as the previous load did, without looking at its files, when the
        load was told what changed, nothing of it did, and the previous load read it plainly
        under the same settings and keys. False: load it as usual."""
        if self.touched is None or what in self.touched or self.cache is None:
            return False
        known = self.cache._plain.get(what)
        if known is None or known[0][0] != self.context:
            return False
        key, files = known
        piece = self.cache._get(key)
        if piece is None:
            return False
        self.cache._plain_used[what] = known
        for f in files:  # their signatures, for a later load not told what changed
            seen = self.cache._files.get(f)
            if seen is not None:
                self.reader.seen[f] = seen
        self._add(piece, replayed=True)
        return True

    def digest(self, path: Path) -> bytes | None:
        """What a file the piece reads holds, for its key (without a cache no key is needed)."""
        return self.reader.digest(path) if self.cache is not None else None

    def load(self, what: str, rels: list[str], inputs: list[bytes | None], load: Callable[[RepoState], None],
             folder: Path | None = None) -> None:
        """`load` adds the piece to the state it is given; `rels` are the files it reads, `inputs`
        the digests of everything it depends on besides the settings and keys; `folder` the release
        folder it lists, if any."""
        if self.cache is None:
            load(self.state)
            return
        key = (self.context, what, tuple(inputs))
        # replayable by a later load told what changed: its files were read cleanly (nothing said about
        # them outside the piece) and plainly (Reader.seen has them), and so was its folder
        files = tuple(str(self.reader.root / rel) for rel in rels)
        if all(f in self.reader.seen for f in files) and (folder is None or self.reader.plain(folder, folder=True)):
            self.cache._plain_used[what] = (key, files)
        piece = self.cache._get(key)
        hit = piece is not None
        if piece is None:
            scratch = RepoState(root=self.state.root, settings=self.state.settings,
                                encryption_by=self.state.encryption_by)
            load(scratch)
            r = self.reader
            piece = _Piece(_stamped(scratch.units, key), tuple(scratch.diagnostics), frozenset(scratch.failed),
                           scratch.files,
                           tuple((f, r.secrets[f]) for f in rels if f in r.secrets),
                           tuple((f, tuple(r.opaque[f])) for f in rels if f in r.opaque),
                           frozenset(f for f in rels if f in r.encrypted))
            self.cache._put(key, piece)
        self._add(piece, replayed=hit)

    def _add(self, piece: _Piece, *, replayed: bool) -> None:
        if replayed:  # what reading its files would have told the reader
            for f, values in piece.secrets:
                self.reader.secrets[f] = self.reader.secrets.get(f, frozenset()) | values
            for f, paths in piece.opaque:
                self.reader.opaque.setdefault(f, []).extend(paths)
            self.reader.encrypted |= piece.encrypted
        self.state.units.extend(piece.units)
        self.state.diagnostics.extend(piece.diagnostics)
        self.state.failed |= piece.failed
        self.state.files += piece.files


def _stamped(units: list[LoadedUnit], key: tuple[Any, ...]) -> tuple[LoadedUnit, ...]:
    """`units` with `inputs` set: the piece's key (everything they were made from) and their place."""
    base = hashlib.sha256(repr(key).encode()).digest()
    return tuple(replace(u, inputs=hashlib.sha256(base + i.to_bytes(4, "big")).digest()) for i, u in enumerate(units))


def _release_folder(path: str) -> str:
    """The release folder (`supernodes/<release>`, or under `clusters/<name>/`) a changed path is
    in, or the path itself."""
    parts = path.split("/")
    at = 2 if parts[0] == layouts.CLUSTERS_DIR else 0
    return "/".join(parts[:at + 2]) if len(parts) > at + 1 and parts[at] == SUPERNODES_DIR else path


def _load_clusters(reader: Reader, state: RepoState, pieces: _Pieces, homes: dict[Unit, str]) -> None:
    """The units of the repository, or of each cluster folder of its layout (syncer.repo.clusters);
    `homes` gets the cluster of each unit that failed to load."""
    names = layouts.layout(reader.root)
    if names is None:
        _load_units(reader, state, pieces, reader.root, "")
        return
    for top in (FEDERATIONS_DIR, SUPERNODES_DIR):
        if (reader.root / top).exists():
            state.diagnostics.append(Diagnostic(
                top, 0, 0, "", f"the repository lays out clusters under {layouts.CLUSTERS_DIR}/, so {top}/ at its "
                "root belongs to no cluster and is not read",
                f"move it into {layouts.CLUSTERS_DIR}/<name>/{top}/ of the cluster that applies it"))
    kept = []
    own = reader.decryption
    # Another cluster's Secrets are its agent's to open (with its own keys): here they are checked
    # with their encrypted values left opaque, as `validate` without a key does.
    others = own if state.cluster is None else Decryption(required=False)
    for name in names:
        problem = layouts.cluster_problem(name)
        if problem:
            state.diagnostics.append(Diagnostic(f"{layouts.CLUSTERS_DIR}/{name}", 0, 0, "", problem,
                                                "rename the folder (it is the cluster's name, --cluster NAME)"))
            continue
        kept.append(name)
        before = set(state.failed)
        pieces.use(own if state.cluster is None or name == state.cluster else others)
        _load_units(reader, state, pieces, reader.root / layouts.CLUSTERS_DIR / name,
                    "" if name == state.cluster else name)
        homes.update((u, "" if name == state.cluster else name) for u in state.failed - before)
    pieces.use(own)
    state.clusters = tuple(kept)


def _load_units(reader: Reader, state: RepoState, pieces: _Pieces, base: Path, cluster: str) -> None:
    diags = state.diagnostics
    pieces.cluster = cluster
    fed_dir = base / FEDERATIONS_DIR
    sn_dir = base / SUPERNODES_DIR
    if not fed_dir.is_dir() and not sn_dir.is_dir():
        diags.append(Diagnostic(reader.rel(base) or ".", 0, 0, "",
                                "no federations/ or supernodes/ folder found",
                                "is this the root of the config repository? (see docs/config-repo.md)"
                                if base == reader.root else "add federations/ or supernodes/ to the cluster's folder"))
    if fed_dir.is_dir():
        for path in reader.yaml_files(fed_dir):
            rel = reader.rel(path)
            if not pieces.replay(rel):
                pieces.load(rel, [rel], [pieces.digest(path)],
                            functools.partial(_load_federation_file, reader, path, cluster=cluster))
    if sn_dir.is_dir():
        # by name: the same order as sorting the Paths, without Path.__lt__ (with the sort in
        # Reader.yaml_files, a large part of a one-file load of a big repository, under a profiler)
        for release_dir in sorted((p for p in sn_dir.iterdir() if not p.name.startswith(".")),
                                  key=lambda p: p.name):
            if pieces.replay(reader.rel(release_dir)):
                continue
            if release_dir.is_dir():
                _load_release_folder(reader, release_dir, pieces)
            elif release_dir.suffix in YAML_SUFFIXES:
                diags.append(Diagnostic(reader.rel(release_dir), 0, 0, "",
                                        "SuperNode values must be in supernodes/<release>/values.yaml",
                                        f"move it to supernodes/{release_dir.stem}/values.yaml"))


def _load_release_folder(reader: Reader, folder: Path, pieces: _Pieces) -> None:
    """A release folder as one piece: its file names and the files _load_release reads."""
    if name_problem(folder.name, "release name", max_len=MAX_RELEASE_NAME):
        _load_release(reader, folder, pieces.state)  # reads nothing; says why
        return
    names = sorted(p.name for p in folder.iterdir())

    def exists(name: str) -> bool:  # as _load_release asks (a dangling symlink does not exist)
        return name in names and (folder / name).exists()

    values = VALUES_FILE if exists(VALUES_FILE) or not exists("values.yml") else "values.yml"
    read = [folder / n for n in (RELEASE_FILE, values, SECRETS_FILE) if exists(n)]
    inputs = [hashlib.sha256("\0".join(names).encode()).digest(), *(pieces.digest(path) for path in read)]
    pieces.load(reader.rel(folder), [reader.rel(p) for p in read], inputs,
                functools.partial(_load_release, reader, folder, cluster=pieces.cluster), folder)


def _load_settings(reader: Reader) -> RepoSettings:
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


def _load_federation_file(reader: Reader, path: Path, state: RepoState, cluster: str = "") -> None:
    rel = reader.rel(path)
    state.files += 1
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
        secrets, secrets_ok = validate_secrets(reader, rel, secret_docs, state, "")
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
        state.units.append(LoadedUnit(unit, rel, doc.position(("metadata", "name"))[0], model, policy,
                                      sealed=reader.secrets.get(rel, frozenset()),
                                      seal_key=reader.seal_keys.get(rel, b""), cluster=cluster))
    if secrets:
        for i in range(loaded_before, len(state.units)):
            state.units[i] = replace(state.units[i], secrets=tuple(secrets))


def _load_release(reader: Reader, folder: Path, state: RepoState, cluster: str = "") -> None:
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
    opened: list[YamlDoc] = []

    def check(doc: YamlDoc) -> tuple[Any, list[Diagnostic]]:
        opened.append(doc)
        return validate_values(doc, release, unit.id)

    mark = len(state.diagnostics)
    values = _load_single(reader, values_path, SuperNodeValues, state, unit=unit.id, empty_ok=True, validate=check)
    if values is None and opened:
        values = opaque_only(SuperNodeValues, opened[0], reader.opaque.get(opened[0].file, ()),
                             state.diagnostics[mark:])
    secrets_path = folder / SECRETS_FILE
    secrets: list[tuple[str, SecretManifest]] = []
    secrets_ok = True
    if secrets_path.exists():
        state.files += 1
        secrets, secrets_ok = load_secrets(reader, secrets_path, state, unit)
    for extra in sorted(folder.iterdir()):
        if extra.name not in (VALUES_FILE, "values.yml", RELEASE_FILE, SECRETS_FILE) and extra.suffix in YAML_SUFFIXES:
            state.diagnostics.append(Diagnostic(reader.rel(extra), 0, 0, "", "file is not read by flower-syncer",
                                                f"only {VALUES_FILE} and {RELEASE_FILE} are read in a release folder",
                                                severity="warning", unit=unit.id))
    if values is None or not settings_ok or not secrets_ok:
        state.failed.add(unit)
        return
    if settings.canary is not None and settings.canary >= values.supernode.replicas:
        state.diagnostics.append(_whole_release(reader, release_path, settings.canary, values.supernode.replicas,
                                                unit))
        state.failed.add(unit)
        return
    private_key = ("global", "nodeAuth", "authSupernodePrivateKey")
    if state.settings.requireEncryption and values.global_.nodeAuth.authSupernodePrivateKey \
            and plain_values(reader, reader.rel(values_path),
                              [(private_key, values.global_.nodeAuth.authSupernodePrivateKey)]):
        state.diagnostics.append(Diagnostic(
            reader.rel(values_path), 1, 1, "global.nodeAuth.authSupernodePrivateKey",
            f"a private key in plain text, and {state.encryption_by} sets requireEncryption",
            "encrypt the file with sops",
            unit=unit.id))
        state.failed.add(unit)
        return
    policy = settings.policy or state.settings.policy
    rel_values = reader.rel(values_path)
    state.units.append(LoadedUnit(unit, rel_values, 1, values, policy, tuple(secrets),
                                  reader.secrets.get(rel_values, frozenset()), reader.seal_keys.get(rel_values, b""),
                                  cluster, canary=settings.canary_settings()))


def _whole_release(reader: Reader, path: Path, canary: int, replicas: int, unit: Unit) -> Diagnostic:
    """A release's canary as large as its SuperNodes (release.yaml's `canary` against values.yaml's
    `supernode.replicas`), at the line of `canary`."""
    rel = reader.rel(path)
    docs, _ = reader.documents(reader.read(path) or "", rel)
    line, column = docs[0].position(("canary",)) if docs else (1, 1)
    return Diagnostic(rel, line, column, "canary", f"a canary of {canary} of the release's {replicas} SuperNode"
                      f"{'' if replicas == 1 else 's'} is all of them: nothing would wait for it",
                      f"use a canary smaller than supernode.replicas (at most {max(replicas - 1, 0)}), or add "
                      "replicas", unit=unit.id)


def _load_single(reader: Reader, path: Path, cls: type[Any], state: RepoState, unit: str = "",
                 empty_ok: bool = False,
                 validate: Callable[[YamlDoc], tuple[Any, list[Diagnostic]]] | None = None) -> Any:
    rel = reader.rel(path)
    text = reader.read(path)
    if text is None:
        return None
    docs, problems = reader.documents(text, rel)
    state.diagnostics.extend(of_unit(problems, unit))
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
