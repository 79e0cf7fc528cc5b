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
    through a Secret (syncer.render.sealed)."""
    seal_key: bytes = b""  # that file's seal key (syncer.secrets.sops.Decrypted)


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
