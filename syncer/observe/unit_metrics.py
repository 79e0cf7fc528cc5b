"""The per-unit series of the agent's metrics (syncs, their durations, applied objects, drift,
config errors, suspension, SuperNode keys), kept as plain figures per unit and turned into metric
families only when scraped.

prometheus_client keeps a metric object, a lock and a value object for every label set: about 18 KiB
per unit here, 36 MiB for 2,000 units. The same figures as numbers in a small record per unit take
a tenth of that, and a scrape exposes exactly what the labelled metrics did, `_created` samples
included. Writers serialise on one lock; a scrape reads without it (each figure is one attribute or
a copy of one str-keyed dict, both atomic), so a scrape of thousands of units never holds up a sync.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from syncer.observe.textformat import header, label_value, sample

RESULTS = ("success", "failed", "skipped")
SYNC_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0)
_LE = (*(repr(b) for b in SYNC_BUCKETS), "+Inf")  # as prometheus_client writes them: 0.01 ... 60.0
KEY_STATES = ("admitted", "failing")


@dataclass(slots=True)
class _Count:
    value: float
    created: float


@dataclass(slots=True)
class _Unit:
    created: float = 0.0  # of the sync_total and sync_duration series: 0 until a first sync or init()
    syncs: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])  # by RESULTS
    buckets: list[int] = field(default_factory=lambda: [0] * len(_LE))  # not cumulative; the last is +Inf
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


class UnitSeries(Collector):
    """The per-unit figures; `prefix` starts every metric name. Thread-safe."""

    def __init__(self, prefix: str) -> None:
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

    def describe(self) -> Iterable[Metric]:
        return self._families(())

    def write_text(self, out: bytearray) -> None:
        """Every family `collect` makes, in the text format, appended to `out` as
        prometheus_client's `generate_latest` writes them, but straight from the figures
        (syncer.observe.textformat): no metric family, sample or labels dict is made."""
        units = [(label_value(unit), u) for unit, u in sorted(self._units.items())]
        p = self.prefix
        counted = [(unit, u) for unit, u in units if u.created]
        _counter(out, p + "sync", _SYNC_HELP, lambda: (
            (f'result="{result}",unit="{unit}"', n, u.created)
            for unit, u in counted for result, n in zip(RESULTS, list(u.syncs), strict=True)))
        _histogram_text(out, p + "sync_duration_seconds", _DURATION_HELP, counted)
        for name, help_text, value_of in _GAUGES:
            out += header(p + name, help_text, "gauge").encode()
            for unit, u in units:
                value = value_of(u)
                if value is not None:
                    out += sample(p + name, f'unit="{unit}"', value).encode()
        out += header(p + "supernode_keys", _KEYS_HELP, "gauge").encode()
        for unit, u in units:
            if u.keys is not None:
                out += "".join(sample(p + "supernode_keys", f'state="{key_state}",unit="{unit}"', n)
                               for key_state, n in zip(KEY_STATES, u.keys, strict=True)).encode()
        out += header(p + "unit_state", _STATE_HELP, "gauge").encode()
        for unit, u in units:
            if u.state is not None:
                synced, health = u.state
                out += sample(p + "unit_state", f'health="{label_value(health)}",synced="{label_value(synced)}",'
                              f'unit="{unit}"', 1.0).encode()
        _counter(out, p + "objects_applied", _APPLIED_HELP, lambda: (
            (f'action="{label_value(action)}",unit="{unit}"', c.value, c.created)
            for unit, u in units for action, c in sorted(dict(u.applied).items())))
        out += header(p + "drift_objects", _DRIFT_HELP, "gauge").encode()
        for unit, u in units:
            out += "".join(sample(p + "drift_objects", f'kind="{label_value(kind)}",unit="{unit}"', n)
                           for kind, n in dict(u.drift).items()).encode()
        _counter(out, p + "drift_corrections", _CORRECTIONS_HELP, lambda: (
            (f'kind="{label_value(kind)}",unit="{unit}"', c.value, c.created)
            for unit, u in units for kind, c in sorted(dict(u.corrections).items())))

    def collect(self) -> Iterator[Metric]:
        yield from self._families(sorted(self._units.items()))  # a copy: the dict is not iterated live

    def _families(self, units: Sequence[tuple[str, _Unit]]) -> Iterator[Metric]:
        """One family at a time, each made only when the one before was taken: at 2,001 units a
        scrape is 147,000 samples, and made all at once they held 56 MiB of small objects at
        the peak, which the allocator then kept."""
        p = self.prefix
        yield _syncs(p, units)
        yield _durations(p, units)
        for name, help_text, value_of in _GAUGES:
            gauge = GaugeMetricFamily(p + name, help_text, labels=["unit"])
            for unit, u in units:
                value = value_of(u)
                if value is not None:
                    gauge.add_metric([unit], value)
            yield gauge
        del gauge  # not held while the next family is made
        yield _keys(p, units)
        yield _states(p, units)
        yield _applied(p, units)
        yield _drift(p, units)
        yield _corrections(p, units)


_SYNC_HELP = "Syncs of the unit, by result."
_DURATION_HELP = "How long a sync of the unit took."
_KEYS_HELP = ("SuperNode keys a Federation lists in Git, by state on its SuperLink: admitted (registered) or "
              "failing (cannot be registered).")
_STATE_HELP = ("Always 1: the unit's Synced and Healthy conditions, by reason (synced: Synced, ConfigError, "
               "SyncFailed, ...; health: Healthy, Progressing, Degraded, Unknown).")
_APPLIED_HELP = "Objects handled by syncs of the unit, by action."
_DRIFT_HELP = "Objects of the unit that currently differ from Git, by kind."
_CORRECTIONS_HELP = "Objects changed outside Git that a sync put back, by kind."


def _counter(out: bytearray, name: str, help_text: str, rows: Callable[[], Iterator[tuple[str, float, float]]]) -> None:
    """A counter family in the text format: `rows()` gives (labels, value, created), one at a time,
    and is called twice: the `_created` series follow as a gauge family of their own, as
    `generate_latest` writes them."""
    out += header(name + "_total", help_text, "counter").encode()
    for labels, value, _ in rows():
        out += sample(name + "_total", labels, value).encode()
    out += header(name + "_created", help_text, "gauge").encode()
    for labels, _, created in rows():
        out += sample(name + "_created", labels, created).encode()


def _histogram_text(out: bytearray, name: str, help_text: str, units: Sequence[tuple[str, _Unit]]) -> None:
    out += header(name, help_text, "histogram").encode()
    for unit, u in units:
        lines, total = [], 0
        for le, n in zip(_LE, list(u.buckets), strict=True):
            total += n
            lines.append(sample(name + "_bucket", f'le="{le}",unit="{unit}"', float(total)))
        lines.append(sample(name + "_count", f'unit="{unit}"', float(total)))
        lines.append(sample(name + "_sum", f'unit="{unit}"', u.duration_sum))
        out += "".join(lines).encode()
    out += header(name + "_created", help_text, "gauge").encode()
    for unit, u in units:
        out += sample(name + "_created", f'unit="{unit}"', u.created).encode()


def _syncs(p: str, units: Sequence[tuple[str, _Unit]]) -> Metric:
    family = CounterMetricFamily(p + "sync", _SYNC_HELP, labels=["unit", "result"])
    for unit, u in units:
        if u.created:
            for result, n in zip(RESULTS, list(u.syncs), strict=True):
                family.add_metric([unit, result], n, created=u.created)
    return family


def _durations(p: str, units: Sequence[tuple[str, _Unit]]) -> Metric:
    family = HistogramMetricFamily(p + "sync_duration_seconds", _DURATION_HELP, labels=["unit"])
    for unit, u in units:
        if u.created:
            counts, total = [], 0
            for le, n in zip(_LE, list(u.buckets), strict=True):
                total += n
                counts.append((le, float(total)))
            family.add_metric([unit], counts, u.duration_sum)
            family.samples.append(Sample(family.name + "_created", {"unit": unit}, u.created))
    return family


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


def _keys(p: str, units: Sequence[tuple[str, _Unit]]) -> Metric:
    family = GaugeMetricFamily(p + "supernode_keys", _KEYS_HELP, labels=["unit", "state"])
    for unit, u in units:
        if u.keys is not None:
            for key_state, n in zip(KEY_STATES, u.keys, strict=True):
                family.add_metric([unit, key_state], n)
    return family


def _states(p: str, units: Sequence[tuple[str, _Unit]]) -> Metric:
    family = GaugeMetricFamily(p + "unit_state", _STATE_HELP, labels=["unit", "synced", "health"])
    for unit, u in units:
        if u.state is not None:
            family.add_metric([unit, *u.state], 1.0)
    return family


def _applied(p: str, units: Sequence[tuple[str, _Unit]]) -> Metric:
    family = CounterMetricFamily(p + "objects_applied", _APPLIED_HELP, labels=["unit", "action"])
    for unit, u in units:
        for action, c in sorted(dict(u.applied).items()):
            family.add_metric([unit, action], c.value, created=c.created)
    return family


def _drift(p: str, units: Sequence[tuple[str, _Unit]]) -> Metric:
    family = GaugeMetricFamily(p + "drift_objects", _DRIFT_HELP, labels=["unit", "kind"])
    for unit, u in units:
        for kind, n in dict(u.drift).items():
            family.add_metric([unit, kind], n)
    return family


def _corrections(p: str, units: Sequence[tuple[str, _Unit]]) -> Metric:
    family = CounterMetricFamily(p + "drift_corrections", _CORRECTIONS_HELP, labels=["unit", "kind"])
    for unit, u in units:
        for kind, c in sorted(dict(u.corrections).items()):
            family.add_metric([unit, kind], c.value, created=c.created)
    return family
