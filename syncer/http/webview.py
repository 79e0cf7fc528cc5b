"""The web view's server side, below the routes of `syncer.http.handler`: what it needs from the
agent (`ViewAPI`), the query and form parsing, the snapshot the event streams share, and the
event stream itself (`follow`).

Live updates are server-sent events on `/ui/events`, within the server's limits:

- at most ``MAX_STREAMS`` streams at once, ``MAX_STREAMS_PER_CLIENT`` from one address (over that:
  503 and `Retry-After`, which a browser's EventSource does not retry: the page's script asks again
  every 5 s), each holding one request thread and one connection;
- a stream looks every ``STREAM_INTERVAL`` seconds and sends only what changed (one overview row,
  a unit's section; the whole table when units came or went, at most every ``BODY_INTERVAL``).
  A look costs one comparison when nothing changed: the agent counts its units' changes
  (`syncer.observe.view.Changes`, touched where a unit's state may change), and the readings,
  shared by all streams (`Snapshots`), read again only the units touched since the last one, so
  ten open pages cost one reading of what changed; with no page open nothing is read at all;
- a unit's Events and the next sync's diff (`UnitActivity`) are computed when its page is
  requested, never by a stream;
- a comment line every ``HEARTBEAT_SECONDS`` (proxies keep the connection);
- a page closed or reloaded frees its slot at the stream's next look: its connection turns
  readable (`peer_gone`; a client sends nothing after its request), where a write would notice it
  only at the next heartbeat (a person reloading a page 4 times had their next page refused);
- a stream ends after ``MAX_STREAM_SECONDS`` (the browser reconnects on its own) and at once when
  the server stops (`Streams.close`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Mapping
from select import POLLIN, POLLPRI, poll
from typing import Any, Protocol
from urllib.parse import parse_qs

import orjson

from syncer.http.limits import HttpError
from syncer.http.pages import FILTERS, MAX_ROWS, row_html, rows_html, select, summary
from syncer.http.pages import detail_html as unit_detail_html
from syncer.observe.view import Changes, UnitActivity, UnitRow, UnitView

MAX_STREAMS = 16
MAX_STREAMS_PER_CLIENT = 4
STREAM_INTERVAL = 0.5  # seconds between two looks at the agent's changes while a page is open
MAX_UNIT_SECTIONS = 64  # units' sections kept for the streams of unit pages
HEARTBEAT_SECONDS = 15.0
MAX_STREAM_SECONDS = 300.0
RETRY_MS = 2000  # how long the browser waits before reconnecting
BODY_INTERVAL = 5.0  # an overview's whole table is sent again at most this often (its rows: at once)
MAX_QUERY_VALUE = 256
HTML = "text/html; charset=utf-8"
EVENT_STREAM = "text/event-stream; charset=utf-8"
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
       "form-action 'self'; frame-ancestors 'none'; base-uri 'none'")


class ViewAPI(Protocol):
    """What the web view reads from the agent and asks of it. Called from request threads."""

    @property
    def changes(self) -> Changes:
        """The count of the units' changes: what a stream looks at before reading anything."""
        ...

    def rows(self, units: Collection[str] | None = None) -> list[UnitRow]:
        """Every unit the agent reports on; with `units`, those of these ids it reports on."""
        ...

    def unit(self, unit: str) -> UnitView | None:
        """The page of the unit whose id is `unit`; None when the agent knows no such unit."""
        ...

    def activity(self, unit: str) -> UnitActivity | None:
        """The unit's Events and its next sync's changes, computed now (only for a page request);
        None when the agent knows no such unit."""
        ...

    def suspend(self, unit: str, suspended: bool) -> bool:
        """Suspend (or resume) the unit; True when that changed something. Raises UnknownUnit."""
        ...

    def release_hold(self, unit: str) -> bool:
        """Let the unit's held restarts go ahead now; True when one was held. Raises UnknownUnit."""
        ...


def query_of(raw: str, names: tuple[str, ...] = FILTERS) -> dict[str, str]:
    """The first value of each known parameter, stripped and bounded; the rest is ignored."""
    parsed = parse_qs(raw, keep_blank_values=False, max_num_fields=32)
    return {k: v[0].strip()[:MAX_QUERY_VALUE] for k, v in parsed.items() if k in names and v and v[0].strip()}


def form_of(body: bytes) -> dict[str, str]:
    """A urlencoded form body (400 when it is not one)."""
    try:
        text = body.decode("utf-8")
        parsed = parse_qs(text, keep_blank_values=True, max_num_fields=16, strict_parsing=bool(text))
    except (UnicodeDecodeError, ValueError):
        raise HttpError(400, "the form is not valid application/x-www-form-urlencoded") from None
    return {k: v[0] for k, v in parsed.items()}


class Snapshots:
    """Readings of the agent shared by the streams: the rows (and their HTML), and each followed
    unit's section, read again only for the units the agent touched since (`ViewAPI.changes`).
    Nothing is read unless a stream asks; a look with no change reads nothing."""

    def __init__(self, view: ViewAPI) -> None:
        self._view = view
        self._lock = threading.Lock()
        self._version = -1  # the agent's change count the rows were read at (-1: never)
        self._rows: dict[str, UnitRow] = {}
        self._list: list[UnitRow] = []
        self._html: dict[str, str] = {}
        self._units: dict[str, tuple[int, str | None]] = {}  # unit id -> (change count read at, HTML)
        self.read = 0  # rows read from the agent (tests, the benchmark)

    def rows(self) -> tuple[int, list[UnitRow], dict[str, str]]:
        """The change count they were read at, every row, and each row's HTML (rendered once per
        change of the row, whatever the number of streams). The returned list and dict are never
        changed afterwards: a new reading makes new ones."""
        with self._lock:
            changes = self._view.changes
            if self._version < 0:
                version = changes.version  # before reading: a change meanwhile is read again next time
                rows = self._view.rows()
                self.read += len(rows)
                self._rows = {r.unit: r for r in rows}
                self._html = {r.unit: row_html(r) for r in rows}
                self._list = list(rows)
            else:
                version, touched = changes.since(self._version)
                if touched:
                    fresh = {r.unit: r for r in self._view.rows(touched)}
                    self.read += len(fresh)
                    rows_now, html = dict(self._rows), dict(self._html)
                    for unit in touched:
                        row = fresh.get(unit)
                        if row is None:  # gone
                            rows_now.pop(unit, None)
                            html.pop(unit, None)
                        elif row != rows_now.get(unit):
                            rows_now[unit] = row
                            html[unit] = row_html(row)
                    self._rows, self._html, self._list = rows_now, html, list(rows_now.values())
            self._version = version
            return version, self._list, self._html

    def unit(self, unit: str) -> str | None:
        """The HTML of the unit's changing section; None when the unit is gone."""
        with self._lock:
            changes = self._view.changes
            got = self._units.get(unit)
            if got is None or changes.touched_after(unit, got[0]):
                version = changes.version
                view = self._view.unit(unit)
                got = (version, unit_detail_html(view) if view is not None else None)
                if len(self._units) >= MAX_UNIT_SECTIONS:
                    self._units.clear()
                self._units[unit] = got
            return got[1]


class Streams:
    """The open event streams: slots, and the signal that ends them all when the server stops."""

    def __init__(self, view: ViewAPI, max_streams: int = MAX_STREAMS,
                 max_per_client: int = MAX_STREAMS_PER_CLIENT) -> None:
        self.snapshots = Snapshots(view)
        self.max_streams = max_streams
        self.max_per_client = max_per_client
        self.closed = threading.Event()
        self._lock = threading.Lock()
        self._open: dict[str, int] = {}

    @property
    def open(self) -> int:
        with self._lock:
            return sum(self._open.values())

    def acquire(self, client: str) -> bool:
        with self._lock:
            if (self.closed.is_set() or sum(self._open.values()) >= self.max_streams
                    or self._open.get(client, 0) >= self.max_per_client):
                return False
            self._open[client] = self._open.get(client, 0) + 1
            return True

    def release(self, client: str) -> None:
        with self._lock:
            left = self._open.get(client, 1) - 1
            if left > 0:
                self._open[client] = left
            else:
                self._open.pop(client, None)

    def close(self) -> None:
        self.closed.set()


def event(name: str, payload: Any) -> bytes:
    """One server-sent event: JSON on a single data line (orjson escapes newlines)."""
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"


class Follower:
    """What one stream sent last, and what to send next: `step` returns the events (bytes) for
    the agent's state now, empty when nothing changed."""

    def __init__(self, snapshots: Snapshots, view: str, query: Mapping[str, str],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._snapshots = snapshots
        self._clock = clock
        self._body_at = 0.0
        self._view = view
        self._query = dict(query)
        self._sent: dict[str, str] = {}
        self._order: list[str] = []
        self._summary = ""
        self._unit: str | None = ""
        self._seen = -1  # the change count of the rows last compared
        self._owed = False  # the whole table is owed (its order changed within BODY_INTERVAL)

    def step(self) -> bytes:
        if self._view == "unit":
            html = self._snapshots.unit(self._query.get("id", ""))
            if html == self._unit:
                return b""
            self._unit = html
            return event("unit", {"html": html} if html is not None else {"gone": True})
        version, rows, htmls = self._snapshots.rows()
        if version == self._seen and not self._owed:
            return b""  # nothing changed: no filtering, sorting or comparing
        self._seen = version
        chosen = select(rows, self._query)
        order = [r.unit for r in chosen[:MAX_ROWS]]
        text = summary(chosen, len(rows))
        payload: dict[str, Any] = {}
        now = self._clock()
        if order != self._order and (not self._order or now - self._body_at >= BODY_INTERVAL):
            # a unit came, went or moved (attention first): the whole body, at most every BODY_INTERVAL
            # (with thousands of units, pods starting move rows all the time)
            payload["tbody"] = rows_html(chosen)
            self._order, self._body_at = order, now
            self._sent = {u: htmls[u] for u in order}
        else:
            changed = {u: htmls[u] for u in self._order if u in htmls and self._sent.get(u) != htmls[u]}
            if changed:
                payload["rows"] = changed
                self._sent.update(changed)
        self._owed = order != self._order
        if text != self._summary:
            payload["summary"] = text
            self._summary = text
        return event("rows", payload) if payload else b""


def peer_gone(fd: int) -> bool:
    """Whether the client of an event stream on connection `fd` closed it. The client sends
    nothing after its request, so the connection turning readable is its end (or a client that
    breaks the protocol, whose stream ends as well). `poll`, not `select`: no bound on `fd`."""
    poller = poll()
    poller.register(fd, POLLIN | POLLPRI)
    return bool(poller.poll(0))


def follow(streams: Streams, follower: Follower, send: Callable[[bytes], None], *,
           interval: float = STREAM_INTERVAL, heartbeat: float = HEARTBEAT_SECONDS,
           lifetime: float = MAX_STREAM_SECONDS, clock: Callable[[], float] = time.monotonic,
           gone: Callable[[], bool] = lambda: False) -> None:
    """Send what changed every `interval` until the server stops, `lifetime` passes or the client
    is gone (`gone()` says so at a look, or `send` raises). The first step sends the whole state
    the page may have missed."""
    send(f"retry: {RETRY_MS}\n\n".encode())
    start = last = clock()
    while not streams.closed.is_set() and clock() - start < lifetime and not gone():
        data = follower.step()
        now = clock()
        if data:
            send(data)
            last = now
        elif now - last >= heartbeat:
            send(b": heartbeat\n\n")
            last = now
        streams.closed.wait(interval)
