"""What the web view shows (pure data, no I/O): one row per unit for the overview (`UnitRow`) and
a federation's page (`UnitView`), built by the agent from what it already computed
(`syncer.agent.view`) and rendered as HTML by `syncer.http.pages`. Every string here may come
from Git: the renderer escapes each one; none holds a secret value (the conditions' messages and
the changes' details are the ones the status API and the logs give)."""

from __future__ import annotations

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
