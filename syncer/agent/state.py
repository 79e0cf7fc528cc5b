"""The agent's data that its components share: its options, the installed revision (`Installed`,
held in the one `Current` cell the installer replaces and everyone else reads), each unit's
bookkeeping (`UnitState`) and where revisions come from (`Source`). Components take these and
each other's narrow objects, never the `Agent` (agent.wiring connects them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from syncer.diagnostics import Diagnostic
from syncer.engine.changeset import UnitResult
from syncer.identity import DEFAULT_REPOSITORY, Unit
from syncer.plan import Plan
from syncer.render.tenancy import Tenancy
from syncer.source.git import Checkout


@dataclass
class AgentOptions:
    namespaces: list[str] | None = None  # restrict cluster reads/writes (namespaced RBAC)
    workers: int = 4
    poll_interval: float = 60.0
    prune: bool = True
    repository: str = DEFAULT_REPOSITORY  # the name when flower-syncer.yaml sets none (derived from the source)
    identity: str = "agent"  # recorded in each unit's history as who applied it
    decryption_key_files: tuple[Path, ...] = ()  # age identities for SOPS-encrypted files
    tenancy: Tenancy | None = None  # where the repository comes from, and the admin's policy for it
    cluster: str = ""  # this cluster's name in a repository of several (syncer.repo.clusters)
    fetch_backoff: float = 1.0  # first wait after a failed fetch; doubles up to fetch_backoff_max
    fetch_backoff_max: float = 300.0


@dataclass(frozen=True)
class Installed:
    """What one revision asks for, swapped in as a whole: a worker reads one snapshot, so the
    manifests it applies, the revision it records and the claims it checks always agree. Each unit
    keeps the revision its manifests were rendered from."""

    plan: Plan = field(default_factory=lambda: Plan(units={}, prune_allowed=False))
    digests: dict[Unit, str] = field(default_factory=dict)  # manifests + policy, to tell what changed


@dataclass
class UnitState:
    last_result: UnitResult | None = None
    last_sync: float = 0.0
    last_revision: str = ""
    config_errors: list[Diagnostic] = field(default_factory=list)
    drift_corrections: int = 0
    internal_error: str = ""  # the agent failed handling an event of the unit (cleared by its next sync)


class Current:
    """The installed revision: replaced whole by the installer (agent.installer), read by the unit
    tables, the workers and the status, each through this one cell rather than through the agent."""

    def __init__(self) -> None:
        self.installed = Installed()

    @property
    def plan(self) -> Plan:
        return self.installed.plan


class Source(Protocol):
    """Where the agent's revisions come from: `syncer.source.git.GitSource`, or a test's fake."""

    def describe(self) -> str:
        """The source as a user names it (a URL without credentials, a path)."""

    def fetch(self) -> Checkout:
        """The newest revision, checked out (raises `SourceError` when it cannot)."""
