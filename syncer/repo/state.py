"""What a load of a config repository produced (syncer.repo.loader makes it): the units that loaded,
with their model and policy, and the diagnostics and failed units of the rest. Its own module so that
the checks across units (syncer.repo.skew) read it without importing the loader."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from syncer.diagnostics import Diagnostic
from syncer.identity import Unit
from syncer.models.federation import Federation
from syncer.models.secret import SecretManifest
from syncer.models.settings import RepoSettings, SyncPolicy
from syncer.models.supernode import SuperNodeValues


@dataclass(frozen=True)
class LoadedUnit:
    unit: Unit
    source: str  # repo-relative path of the defining file
    line: int
    model: Federation | SuperNodeValues
    policy: SyncPolicy
    secrets: tuple[tuple[str, SecretManifest], ...] = ()  # (file, Secret) kept in Git for this unit
    sealed: frozenset[str] = frozenset()
    """The decrypted values (as text) of the unit's own SOPS-encrypted file: they reach pods only
    through a Secret (syncer.render.encrypted_values)."""
    seal_key: bytes = b""  # that file's seal key (syncer.secrets.sops.Decrypted)
    cluster: str = ""
    """The cluster that applies the unit (`clusters/<name>/...` in the repository, see
    syncer.repo.clusters); "" = the cluster this load is for (the agent's own, `--cluster`), and
    every unit of a repository without a cluster layout."""
    canary: tuple[int, float, float] | None = None
    """A SuperNode release's canary from its release.yaml: (count, gate, deadline in seconds)."""
    inputs: bytes = field(default=b"", compare=False, repr=False)
    """A digest of everything the loader made it from (with a LoadCache: the bytes of its file or
    release folder, the settings, the decryption keys, the cluster; see LoadCache) and of its place
    among that file's units; b"" when loaded without a cache. The render and plan caches key it by
    this (syncer.render.cachekey)."""


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
    cluster: str | None = None
    """The cluster this load is for (`--cluster`; "" = none named); None = the whole repository
    (`validate` and `render` without --cluster: every cluster's units in `units`)."""
    clusters: tuple[str, ...] = ()
    """The clusters the repository lays out (`clusters/<name>/`); () = no cluster layout."""
    elsewhere: list[LoadedUnit] = field(default_factory=list)
    """Units other clusters apply: loaded and checked (cross-site references), never applied,
    pruned or reported here."""
    elsewhere_diagnostics: list[Diagnostic] = field(default_factory=list)
    """Diagnostics of the files of other clusters (their own agents report them)."""
    encryption_by: str = "flower-syncer.yaml"
    """Who set `requireEncryption` (the repository, or the admin's policy), for the messages."""

    def cluster_of(self, unit: Unit) -> str | None:
        """The cluster that applies `unit` ("" = this load's own), None for a unit not loaded."""
        for loaded in (*self.units, *self.elsewhere):
            if loaded.unit == unit:
                return loaded.cluster
        return None

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.severity == "error"]

    @property
    def clean(self) -> bool:
        """Everything loaded: only then may units that vanished from Git be pruned."""
        return not self.errors
