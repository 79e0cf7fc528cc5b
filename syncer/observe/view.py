"""What the web view shows (pure data, no I/O): one row per unit for the overview (`UnitRow`) and
a federation's page (`UnitView`), built by the agent from what it already computed
(`syncer.agent.view`) and rendered as HTML by `syncer.http.pages`. Every string here may come
from Git: the renderer escapes each one; none holds a secret value (the conditions' messages and
the changes' details are the ones the status API and the logs give)."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

# the `state` filter of the overview: what a person asks for
STATES = ("attention", "ready", "suspended")


@dataclass(frozen=True)
class UnitRow:
    """One unit on the overview. Counts are None when not known (no status round yet, not a
    federation, or no SuperLink answer)."""

    unit: str  # kind/namespace/name
    repository: str
    synced: str  # the Synced condition's reason
    synced_ok: bool
    healthy: str  # the Healthy condition's reason
    healthy_ok: bool
    message: str = ""  # why it is not Synced, else why it is not Healthy
    revision: str = ""
    pools_ready: int | None = None
    pools: int | None = None
    supernodes_online: int | None = None
    supernodes_expected: int | None = None
    runs_running: int | None = None
    runs_failed: int | None = None
    gpus: int | None = None  # GPUs held by its pods now
    drift: int = 0  # objects that differ from Git now (suspended units; objects that failed)
    suspended: bool = False

    @property
    def kind(self) -> str:
        return self.unit.split("/", 1)[0]

    @property
    def namespace(self) -> str:
        parts = self.unit.split("/", 2)
        return parts[1] if len(parts) > 1 else ""

    @property
    def name(self) -> str:
        return self.unit.split("/", 2)[-1]

    @property
    def ready(self) -> bool:
        return self.synced_ok and self.healthy_ok

    @property
    def attention(self) -> bool:
        """Shown first: not Synced, not Healthy, drifted or a failed run."""
        return not self.ready or self.drift > 0 or bool(self.runs_failed)

    def matches(self, query: Mapping[str, str]) -> bool:
        """The overview's filters: namespace, repository, state (attention, ready, suspended), and a
        substring of the unit's id (q). An empty or missing filter matches everything."""
        if query.get("namespace") and query["namespace"] != self.namespace:
            return False
        if query.get("repository") and query["repository"] != self.repository:
            return False
        if query.get("q") and query["q"].lower() not in self.unit.lower():
            return False
        state = query.get("state", "")
        if state == "attention":
            return self.attention
        if state == "ready":
            return self.ready and not self.attention
        if state == "suspended":
            return self.suspended
        return True


def ordered(rows: list[UnitRow]) -> list[UnitRow]:
    """Units that need attention first (not Synced before not Healthy), then by id."""
    return sorted(rows, key=lambda r: (not r.attention, r.synced_ok, r.healthy_ok, r.unit))


@dataclass(frozen=True)
class PoolRow:
    """One workload of a unit with its readiness, and the SuperNodes connected for it."""

    pool: str
    kind: str
    name: str
    ready: int
    desired: int
    healthy: bool
    reason: str = ""  # why not (image pull, crash loop, unschedulable, GPUs)
    gpus: int = 0  # GPUs its pods hold
    online: int | None = None  # SuperNodes connected (a federation's pools, from its SuperLink)
    expected: int | None = None


@dataclass(frozen=True)
class DialingRow:
    """SuperNodes of a chart release (or another unit's pool) dialling this federation's SuperLink."""

    unit: str
    pool: str
    online: int
    expected: int


@dataclass(frozen=True)
class ObjectRow:
    """One object the unit owns, and what its last sync (or a dry-run of a suspended unit) found."""

    ref: str  # Kind namespace/name
    action: str = ""  # the last change: created, configured, unchanged, failed... ("" unknown)
    drift: bool = False  # differs from Git now (a suspended unit's dry-run; or it failed to apply)
    corrected: bool = False  # was changed outside Git, and the last sync put it back
    detail: str = ""


@dataclass(frozen=True)
class HistoryRow:
    revision: str
    applied_at: str
    agent: str
    summary: str


@dataclass(frozen=True)
class UnitView:
    """A unit's page."""

    row: UnitRow
    conditions: tuple[tuple[str, bool, str, str], ...] = ()  # (type, status, reason, message)
    errors: tuple[str, ...] = ()
    pools: tuple[PoolRow, ...] = ()
    dialing: tuple[DialingRow, ...] = ()
    superlink: str = ""  # the address checked, and why it could not be, if so
    superlink_error: str = ""
    runs: Mapping[str, int] = field(default_factory=dict)
    last_failure: str = ""  # the last failed run: id and message
    objects: tuple[ObjectRow, ...] = ()
    history: tuple[HistoryRow, ...] = ()
    last_sync: str = ""  # when, in UTC


@dataclass(frozen=True)
class EventRow:
    """A Kubernetes Event flower-syncer posted about the unit (its inventory or one of its objects)."""

    at: str  # last seen, UTC
    type: str  # Normal, Warning
    reason: str
    regarding: str
    note: str
    count: int = 1


@dataclass(frozen=True)
class PlannedChange:
    """What the next sync would do to one object: its action, why, and the unified diff (live to
    desired; Secret values masked and every encrypted file's plaintext redacted, as
    `flower-syncer diff` prints it), cut to a bounded size."""

    ref: str
    action: str  # would create, configure, recreate, delete; failed: why it could not be worked out
    message: str = ""
    diff: str = ""
    cut: bool = False  # the diff was longer and is cut


@dataclass(frozen=True)
class UnitActivity:
    """The part of a unit's page computed when the page is requested, never by the event stream:
    its Events and what the next sync would change (a dry-run; see syncer.agent.activity)."""

    events: tuple[EventRow, ...] = ()
    events_error: str = ""  # why they could not be read ("" when they were)
    changes: tuple[PlannedChange, ...] = ()  # only the objects it would change
    more_changes: int = 0  # changed objects beyond those shown
    plan_error: str = ""  # why the next sync's changes could not be worked out
    planned: bool = False  # the dry-run ran (a unit that left Git, or failed to load, has none)
    suspended: bool = False  # the changes are what resuming it would do
    at: str = ""  # when this was computed, UTC


class Changes:
    """A counter of the changes of the units' state, so that an open page reads only what changed
    and a moment without change costs it one comparison. `touch(unit)` is called where a unit's
    state may have changed (`syncer.agent.unitstate.publish`: every revision, every sync, every
    status round, and when a unit is forgotten); `since(version)` says which units were touched
    after `version`. Thread-safe; one int per unit ever touched."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._version = 0
        self._at: dict[str, int] = {}  # unit id -> the version of its last touch

    @property
    def version(self) -> int:
        return self._version

    def touch(self, unit: str) -> None:
        with self._lock:
            self._version += 1
            self._at[unit] = self._version

    def touched_after(self, unit: str, version: int) -> bool:
        """Whether `unit` was touched after `version`."""
        return self._at.get(unit, 0) > version

    def since(self, version: int) -> tuple[int, frozenset[str]]:
        """The version now and the ids of the units touched after `version` (none: nothing changed)."""
        with self._lock:
            now = self._version
            if version >= now:
                return now, frozenset()
            return now, frozenset(u for u, at in self._at.items() if at > version)
