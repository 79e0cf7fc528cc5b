"""The per-unit series of the agent's metrics (syncs, their durations, applied objects, drift,
config errors, suspension, SuperNode keys), kept as plain figures per unit and turned into metric
families only when scraped (syncer.observe.families: `families` describes each one once).

prometheus_client keeps a metric object, a lock and a value object for every label set, which at
thousands of units is most of what the agent's metrics hold; the same figures as numbers in a small
record per unit take a fraction of it, and a scrape exposes exactly what the labelled metrics did,
`_created` samples included (docs/performance.md has the figures). Writers serialise on one lock;
a scrape reads without it (each figure is one attribute or a copy of one str-keyed dict, both
atomic), so a scrape of thousands of units never holds up a sync.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from syncer.observe.families import (
    CounterFamily,
    CounterRow,
    Family,
    FamilyCollector,
    GaugeFamily,
    GaugeRow,
    HistogramFamily,
    HistogramRow,
)

RESULTS = ("success", "failed", "skipped")
SYNC_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0)
KEY_STATES = ("admitted", "failing")


@dataclass(slots=True)
class _Count:
    value: float
    created: float


@dataclass(slots=True)
class _Unit:
    created: float = 0.0  # of the sync_total and sync_duration series: 0 until a first sync or init()
    syncs: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])  # by RESULTS
    buckets: list[int] = field(default_factory=lambda: [0] * (len(SYNC_BUCKETS) + 1))  # not cumulative; the last: +Inf
    duration_sum: float = 0.0
    last_sync: float | None = None
    last_success: float | None = None
    commit_to_applied: float | None = None
    config_errors: float | None = None
    suspended: float | None = None
    keys: tuple[float, float] | None = None  # (admitted, failing)
    state: tuple[str, str] | None = None  # (Synced reason, Healthy reason): syncer.observe.conditions
    applied: dict[str, _Count] = field(default_factory=dict)  # action -> objects
    corrections: dict[str, _Count] = field(default_factory=dict)  # kind -> objects put back
    drift: dict[str, float] = field(default_factory=dict)  # kind -> objects differing from Git now


Units = Sequence[tuple[str, "_Unit"]]  # a scrape's snapshot: (unit id, its figures), sorted


class UnitSeries(FamilyCollector[Units]):
    """The per-unit figures; `prefix` starts every metric name. Thread-safe."""

    def __init__(self, prefix: str) -> None:
        super().__init__(families(prefix), self._snapshot)
        self.prefix = prefix
        self._units: dict[str, _Unit] = {}
        self._lock = threading.Lock()

    def _unit(self, unit: str) -> _Unit:  # with the lock held
        u = self._units.get(unit)
        if u is None:
            u = self._units[unit] = _Unit()
        return u

    def _counting(self, unit: str, now: float) -> _Unit:  # with the lock held
        u = self._unit(unit)
        if not u.created:
            u.created = now
        return u

    def init(self, unit: str, actions: Iterable[str], kinds: Iterable[str]) -> None:
        """The unit's counters and histogram, at 0 for the actions and kinds given."""
        now = time.time()
        with self._lock:
            u = self._counting(unit, now)
            for action in actions:
                u.applied.setdefault(action, _Count(0.0, now))
            for kind in kinds:
                u.corrections.setdefault(kind, _Count(0.0, now))

    def sync(self, unit: str, result: str, seconds: float, now: float, actions: Mapping[str, int]) -> None:
        with self._lock:
            u = self._counting(unit, now)
            u.syncs[RESULTS.index(result)] += 1
            u.buckets[next((i for i, b in enumerate(SYNC_BUCKETS) if seconds <= b), len(SYNC_BUCKETS))] += 1
            u.duration_sum += seconds
            u.last_sync = now
            if result == "success":
                u.last_success = now
            for action, n in actions.items():
                u.applied.setdefault(action, _Count(0.0, now)).value += n

    def corrected(self, unit: str, counts_by_kind: Mapping[str, int]) -> None:
        with self._lock:
            u = self._unit(unit)
            now = time.time()
            for kind, n in counts_by_kind.items():
                if n > 0:
                    u.corrections.setdefault(kind, _Count(0.0, now)).value += n

    def set_drift(self, unit: str, counts_by_kind: Mapping[str, int]) -> None:
        """Kinds that drifted before and are absent now go to 0."""
        with self._lock:
            u = self._unit(unit)
            u.drift = {k: float(counts_by_kind.get(k, 0)) for k in sorted({*u.drift, *counts_by_kind})}

    def set(self, unit: str, *, commit_to_applied: float | None = None, config_errors: int | None = None,
            suspended: bool | None = None, keys: tuple[int, int] | None = None,
            state: tuple[str, str] | None = None) -> None:
        """Set the gauges given (a gauge never set has no series)."""
        with self._lock:
            u = self._unit(unit)
            if commit_to_applied is not None:
                u.commit_to_applied = commit_to_applied
            if config_errors is not None:
                u.config_errors = float(config_errors)
            if suspended is not None:
                u.suspended = 1.0 if suspended else 0.0
            if keys is not None:
                u.keys = (float(keys[0]), float(keys[1]))
            if state is not None:
                u.state = state

    def forget(self, unit: str) -> None:
        with self._lock:
            self._units.pop(unit, None)

    def _snapshot(self) -> list[tuple[str, _Unit]]:
        return sorted(self._units.items())  # a copy: the dict is not iterated live


_SYNC_HELP = "Syncs of the unit, by result."
_DURATION_HELP = "How long a sync of the unit took."
_KEYS_HELP = ("SuperNode keys a Federation lists in Git, by state on its SuperLink: admitted (registered) or "
              "failing (cannot be registered).")
_STATE_HELP = ("Always 1: the unit's Synced and Healthy conditions, by reason (synced: Synced, ConfigError, "
               "SyncFailed, ...; health: Healthy, Progressing, Degraded, Unknown).")
_APPLIED_HELP = "Objects handled by syncs of the unit, by action."
_DRIFT_HELP = "Objects of the unit that currently differ from Git, by kind."
_CORRECTIONS_HELP = "Objects changed outside Git that a sync put back, by kind."

# the per-unit gauges with the unit as their only label: (name, help, the figure or None: no series)
_GAUGES: tuple[tuple[str, str, Callable[[_Unit], float | None]], ...] = (
    ("last_sync_timestamp_seconds", "Unix time the last sync of the unit ended, whatever its result.",
     lambda u: u.last_sync),
    ("last_success_timestamp_seconds", "Unix time the last successful sync of the unit ended.",
     lambda u: u.last_success),
    ("unit_commit_to_applied_seconds", "Seconds from the last revision that changed the unit reaching the agent "
     "to the unit applied.", lambda u: u.commit_to_applied),
    ("config_errors", "Configuration errors of the unit (0 when it loads cleanly).", lambda u: u.config_errors),
    ("unit_suspended", "1 while the unit is suspended (not applied or healed), 0 otherwise.",
     lambda u: u.suspended),
)


def _syncs(units: Units) -> Iterator[CounterRow]:
    for unit, u in units:
        if u.created:
            for result, n in zip(RESULTS, list(u.syncs), strict=True):
                yield (unit, result), n, u.created


def _durations(units: Units) -> Iterator[HistogramRow]:
    for unit, u in units:
        if u.created:
            yield (unit,), list(u.buckets), u.duration_sum, u.created


def _gauge_rows(value_of: Callable[[_Unit], float | None]) -> Callable[[Units], Iterator[GaugeRow]]:
    def rows(units: Units) -> Iterator[GaugeRow]:
        for unit, u in units:
            value = value_of(u)
            if value is not None:
                yield (unit,), value
    return rows


def _keys(units: Units) -> Iterator[GaugeRow]:
    for unit, u in units:
        keys = u.keys
        if keys is not None:
            for key_state, n in zip(KEY_STATES, keys, strict=True):
                yield (unit, key_state), n


def _states(units: Units) -> Iterator[GaugeRow]:
    for unit, u in units:
        state = u.state
        if state is not None:
            yield (unit, *state), 1.0


def _applied(units: Units) -> Iterator[CounterRow]:
    for unit, u in units:
        for action, c in sorted(dict(u.applied).items()):
            yield (unit, action), c.value, c.created


def _drift(units: Units) -> Iterator[GaugeRow]:
    for unit, u in units:
        for kind, n in dict(u.drift).items():
            yield (unit, kind), n


def _corrections(units: Units) -> Iterator[CounterRow]:
    for unit, u in units:
        for kind, c in sorted(dict(u.corrections).items()):
            yield (unit, kind), c.value, c.created


def families(p: str) -> tuple[Family[Units], ...]:
    """The per-unit families, in the order they are served; `p` starts every name."""
    return (
        CounterFamily(p + "sync", _SYNC_HELP, ("unit", "result"), _syncs),
        HistogramFamily(p + "sync_duration_seconds", _DURATION_HELP, ("unit",), SYNC_BUCKETS, _durations),
        *(GaugeFamily(p + name, help_text, ("unit",), _gauge_rows(value_of)) for name, help_text, value_of in _GAUGES),
        GaugeFamily(p + "supernode_keys", _KEYS_HELP, ("unit", "state"), _keys),
        GaugeFamily(p + "unit_state", _STATE_HELP, ("unit", "synced", "health"), _states),
        CounterFamily(p + "objects_applied", _APPLIED_HELP, ("unit", "action"), _applied),
        GaugeFamily(p + "drift_objects", _DRIFT_HELP, ("unit", "kind"), _drift),
        CounterFamily(p + "drift_corrections", _CORRECTIONS_HELP, ("unit", "kind"), _corrections),
    )
