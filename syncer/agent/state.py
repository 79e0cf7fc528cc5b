"""The agent's data that its helper modules share, and the narrow view of the Agent they take.

`unitstate.py` (each unit's conditions, `/api/v1/status`) and `failures.py` (what a failed event
or sync reports) are the Agent's own handlers, kept beside it. They take an `AgentView`, the
tables and the few methods they read, never the `Agent` class: agent.py imports them, so they
must not import agent.py (tests/unit/test_layers.py fails on any import circle). `Agent`
satisfies the view structurally; mypy checks that where agent.py hands itself over.
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from syncer.agent.cache import LiveCache
from syncer.agent.flower_watch import FlowerWatch
from syncer.agent.holding import Holds
from syncer.agent.liveness import Liveness
from syncer.agent.messages import Event, Waiter
from syncer.agent.supervisor import Supervisor
from syncer.agent.workqueue import WorkQueue
from syncer.cluster.events import Event as ReportedEvent
from syncer.diagnostics import Diagnostic
from syncer.engine.changeset import UnitResult
from syncer.identity import DEFAULT_REPOSITORY, Unit
from syncer.observe.conditions import UnitCondition
from syncer.observe.metrics import Metrics
from syncer.observe.view import Changes
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


class Source(Protocol):
    """Where the agent's revisions come from: `syncer.source.git.GitSource`, or a test's fake."""

    def describe(self) -> str:
        """The source as a user names it (a URL without credentials, a path)."""

    def fetch(self) -> Checkout:
        """The newest revision, checked out (raises `SourceError` when it cannot)."""


class UnitTables(Protocol):
    """What a unit's conditions are computed from and published with (unitstate.py)."""

    health: dict[Unit, UnitCondition]  # replaced whole by each status round
    refusal: str  # why the source refused its newest revision (not signed as required); "" when it did not
    flower: FlowerWatch | None  # Flower-level health of the federations, when the runner set it up

    @property
    def installed(self) -> Installed: ...
    @property
    def units(self) -> dict[Unit, UnitState]: ...
    @property
    def published(self) -> dict[Unit, tuple[str, ...]]: ...
    @property
    def cache(self) -> LiveCache: ...
    @property
    def metrics(self) -> Metrics: ...
    @property
    def holds(self) -> Holds: ...
    @property
    def changes(self) -> Changes: ...

    def report(self, unit: Unit, event: ReportedEvent) -> None:
        """A Kubernetes Event and a notification (the leader only)."""


class AgentView(UnitTables, Protocol):
    """The unit tables and the agent's own state: the status answer (unitstate.agent_status) and
    the reports of failures (failures.py)."""

    fetch_error: str

    @property
    def options(self) -> AgentOptions: ...
    @property
    def source(self) -> Source: ...
    @property
    def checkout(self) -> Checkout | None: ...
    @property
    def leading(self) -> threading.Event: ...
    @property
    def work(self) -> WorkQueue[Unit]: ...
    @property
    def events(self) -> queue.Queue[Event]: ...
    @property
    def supervisor(self) -> Supervisor: ...
    @property
    def liveness(self) -> Liveness: ...
    @property
    def waiters(self) -> list[Waiter]: ...

    def ready(self) -> tuple[bool, str]: ...
    def ours(self, unit: Unit) -> bool: ...
