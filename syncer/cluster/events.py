"""Kubernetes Events (events.k8s.io/v1) for what an operator wants to see in `kubectl events`:
a unit synced, drift corrected, a conflict, a prune, a config error, a unit suspended or resumed.

Like client-go's EventRecorder: events are posted from a background thread (a sync never waits
for them, and a full queue drops them rather than block); the same event (object, reason, note)
within `SERIES_WINDOW` updates the first one's `series.count` instead of creating another; and
each object gets at most `BURST` events at once, refilled at one per `REFILL_SECONDS` (the spam
filter), so a flapping unit cannot flood the API server. Notes never carry Secret data: they name
objects, files and revisions. An event about a unit's object carries the unit's labels, so that
`recent` (the web view's unit page) finds a unit's events with two selective reads: those about its
inventory, and those labelled with it.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

import structlog

from syncer.cluster.client import RESOURCES, ApiError, ClusterUnreachable, Kube, path_for
from syncer.cluster.fence import Fenced
from syncer.identity import ObjectRef, Unit

log = structlog.get_logger("syncer.events")

CONTROLLER = "flower-syncer"
SERIES_WINDOW = 600.0  # seconds within which a repeat counts into the first event's series
BURST = 25  # events per object at once (client-go's spam filter)
REFILL_SECONDS = 300.0  # then one per this many seconds
QUEUE_SIZE = 1000
MAX_NOTE = 1024  # the API server's limit for `note`

EventType = Literal["Normal", "Warning"]


@dataclass(frozen=True)
class Event:
    regarding: ObjectRef
    type: EventType
    reason: str  # UpperCamelCase: Synced, DriftCorrected, Conflict, Pruned, ConfigError, Suspended, Resumed
    action: str  # what flower-syncer did: Sync, Apply, Prune, Validate, Suspend
    note: str
    unit: Unit | None = None  # the unit it is about, when `regarding` is one of its objects (labels the event)


def _micro_time(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class EventRecorder:
    """Posts events for the agent; `record` never blocks and never raises."""

    def __init__(self, kube: Kube, instance: str, *, clock: Callable[[], float] = time.monotonic,
                 wall_clock: Callable[[], float] = time.time) -> None:
        self.kube = kube
        self.instance = instance
        self._clock = clock
        self._wall = wall_clock
        self._queue: queue.Queue[Event | None] = queue.Queue(QUEUE_SIZE)
        self._series: dict[tuple[ObjectRef, str, str], tuple[str, int, float]] = {}  # -> (name, count, first)
        self._tokens: dict[ObjectRef, tuple[float, float]] = {}  # -> (tokens, last refill)
        self._thread: threading.Thread | None = None
        self.posted = 0
        self.dropped = 0

    def start(self, spawn: Callable[[str, Callable[[], None]], threading.Thread] | None = None) -> None:
        """The posting thread; `spawn(name, loop)` starts it (the agent's supervisor, which restarts
        a loop that raises), else a plain daemon thread."""
        if spawn is not None:
            self._thread = spawn("events", self._run)
            return
        self._thread = threading.Thread(target=self._run, name="events", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout)

    def record(self, event: Event) -> None:
        try:
            self._queue.put_nowait(event)
        except queue.Full:
            self.dropped += 1

    def flush(self) -> None:
        """Post everything queued now, on this thread (tests, and without start())."""
        while True:
            try:
                event = self._queue.get_nowait()
            except queue.Empty:
                return
            if event is not None:
                self.post(event)

    def _run(self) -> None:
        while True:
            event = self._queue.get()
            if event is None:
                return
            self.post(event)

    def post(self, event: Event) -> None:
        """Create the event, or count it into its series; drop it when its object is over budget."""
        now = self._clock()
        key = (event.regarding, event.reason, event.note)
        series = self._series.get(key)
        try:
            if series is not None and now - series[2] < SERIES_WINDOW:
                name, count, first = series
                self.kube.request("PATCH", path_for("events.k8s.io/Event", event.regarding.namespace, name),
                                  body={"series": {"count": count + 1, "lastObservedTime": _micro_time(self._wall())}},
                                  content_type="application/merge-patch+json")
                self._series[key] = (name, count + 1, first)
            else:
                if not self._take_token(event.regarding, now):
                    self.dropped += 1
                    return
                name = f"{event.regarding.name}.{time.time_ns():x}"[:253]
                self.kube.request("POST", path_for("events.k8s.io/Event", event.regarding.namespace),
                                  body=self._manifest(event, name))
                self._series[key] = (name, 1, now)
            self.posted += 1
        except Fenced:
            self.dropped += 1  # not the leader any more: the next leader reports what it does
        except (ApiError, ClusterUnreachable, OSError) as exc:
            self.dropped += 1
            log.debug("event not recorded", reason=event.reason, regarding=str(event.regarding), error=str(exc))
        if len(self._series) > 10_000:  # forget old series (bounded memory)
            self._series = {k: v for k, v in self._series.items() if now - v[2] < SERIES_WINDOW}

    def _take_token(self, ref: ObjectRef, now: float) -> bool:
        tokens, last = self._tokens.get(ref, (float(BURST), now))
        tokens = min(float(BURST), tokens + (now - last) / REFILL_SECONDS)
        if tokens < 1:
            self._tokens[ref] = (tokens, now)
            return False
        self._tokens[ref] = (tokens - 1, now)
        return True

    def _manifest(self, event: Event, name: str) -> dict[str, Any]:
        ref = event.regarding
        note = event.note if len(event.note) <= MAX_NOTE else event.note[: MAX_NOTE - 3] + "..."
        return {
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": name, "namespace": ref.namespace,
                         **({"labels": event.unit.labels()} if event.unit is not None else {})},
            "eventTime": _micro_time(self._wall()),
            "reportingController": CONTROLLER, "reportingInstance": self.instance[:128],
            "action": event.action, "reason": event.reason, "type": event.type, "note": note,
            "regarding": {"apiVersion": RESOURCES[ref.kind].api_version, "kind": ref.kind,
                          "namespace": ref.namespace, "name": ref.name},
        }


MAX_READ = 500  # events read per query of `recent` (one page: the API's events live an hour)
READ_TIMEOUT = 5.0  # seconds: a page waits no longer for them


@dataclass(frozen=True)
class Recorded:
    """An event flower-syncer posted, as read back from the API."""

    at: str  # when it was last seen (RFC 3339, UTC)
    type: str
    reason: str
    regarding: str  # Kind/namespace/name
    note: str
    count: int = 1  # times seen (its series)


def recent(kube: Kube, regarding: ObjectRef, labels: str, limit: int) -> list[Recorded]:
    """The newest `limit` events flower-syncer posted in `regarding`'s namespace about `regarding`
    or labelled `labels`, newest first: two reads, each selected by the API server and bounded to
    one page of ``MAX_READ``. Raises ApiError or ClusterUnreachable when the API cannot answer."""
    found: dict[str, dict[str, Any]] = {}
    wanted = dict(pair.split("=", 1) for pair in labels.split(",") if "=" in pair)

    def about(item: dict[str, Any]) -> bool:  # what the API server selected, checked (it is cheap)
        ref = item.get("regarding") or {}
        own = item.get("metadata", {}).get("labels") or {}
        return ((ref.get("kind"), ref.get("name")) == (regarding.kind, regarding.name)
                or (bool(wanted) and all(own.get(k) == v for k, v in wanted.items())))

    path = path_for("events.k8s.io/Event", regarding.namespace)
    for query in ({"fieldSelector": f"regarding.kind={regarding.kind},regarding.name={regarding.name}"},
                  {"labelSelector": labels}):
        page = kube.request("GET", path, query={**query, "limit": MAX_READ}, timeout=READ_TIMEOUT)
        for item in (page or {}).get("items") or []:
            if item.get("reportingController") == CONTROLLER and about(item):
                found[item.get("metadata", {}).get("name", "")] = item
    events = [_recorded(item) for item in found.values()]
    return sorted(events, key=lambda e: e.at, reverse=True)[:limit]


def _recorded(item: dict[str, Any]) -> Recorded:
    series = item.get("series") or {}
    about = item.get("regarding") or {}
    at = series.get("lastObservedTime") or item.get("eventTime") or item.get("deprecatedLastTimestamp") or ""
    where = "/".join(str(x) for x in (about.get("kind", ""), about.get("namespace", ""), about.get("name", "")) if x)
    return Recorded(at=str(at), type=str(item.get("type", "")), reason=str(item.get("reason", "")), regarding=where,
                    note=str(item.get("note", "")), count=int(series.get("count", 1) or 1))
