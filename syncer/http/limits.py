"""What the agent's HTTP server accepts (sizes, deadlines, slots), what it needs from the agent,
and its error and rate-limited logging."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

import structlog

from syncer.source.webhook import PushEvent

log = structlog.get_logger("syncer.http")

MAX_API_BODY_BYTES = 64 * 1024
MAX_RESYNC_TIMEOUT = 3600.0
DEFAULT_RESYNC_TIMEOUT = 60.0
JSON = "application/json"
TEXT = "text/plain; charset=utf-8"
MAX_HEAD_BYTES = 64 * 1024  # request line and headers together
HEALTH_PATHS = frozenset({"/healthz", "/readyz"})
HEALTH_SLOTS = 4  # threads for health probes that came over a connection limit
LINGER_SECONDS = 1.0  # after an error answer, how long to drop what the client still sends before closing
LISTEN_BACKLOG = 1024
ACCEPT_BATCH = 64  # connections accepted per round of the loop
EVICT_AFTER = 1.0  # over max_open, a connection waiting this long for its head may be dropped for a new one


class AgentAPI(Protocol):
    """What the server needs from the agent. Called from request threads: must be thread-safe."""

    def healthy(self) -> bool: ...

    def ready(self) -> tuple[bool, str]: ...

    def status(self) -> dict[str, Any]: ...

    def resync(self, unit: str | None, wait: bool, timeout: float) -> dict[str, Any]:
        """Resync one unit (None: all). Raises UnknownUnit for a selector that matches no unit."""
        ...

    def webhook(self, event: PushEvent) -> None: ...


class HttpError(Exception):
    def __init__(self, status: int, message: str, *, close: bool = False,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.close = close  # the request body was not read: the connection cannot be reused
        self.headers = headers or {}


# ---------------------------------------------------------------------------------------------


class RateLimitedLog:
    """At most one line per `interval` seconds per event (two with a summary); the next line says
    how many were suppressed in between, and so does `flush` (called by the server's loop about once a second)
    once the interval has passed without a next line. For everything a client can repeat at will
    (rejected webhooks and tokens, malformed requests, refused connections, our own 500s), so a
    flood cannot flood the log too. Lines carry no traceback unless asked (`exc_info`)."""

    def __init__(self, interval: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = interval
        self._clock = clock
        self._lock = threading.Lock()
        self._last: dict[str, tuple[float, int]] = {}  # event -> (time of the last line, suppressed since)
        self._levels: dict[str, str] = {}
        self._pending = 0  # events with suppressed lines not yet counted in a line

    def __call__(self, level: str, event: str, **fields: Any) -> bool:
        """Log unless a line of this event went out less than `interval` ago; True when logged."""
        with self._lock:
            now = self._clock()
            last = self._last.get(event)
            if last is not None and now - last[0] < self.interval:
                if last[1] == 0:
                    self._pending += 1
                self._last[event] = (last[0], last[1] + 1)
                self._levels[event] = level
                return False
            if last is not None and last[1]:
                self._pending -= 1
            self._last[event] = (now, 0)
        getattr(log, level)(event, suppressed=last[1] if last else 0, **fields)
        return True

    def flush(self) -> None:
        """A summary line (`suppressed=N`) for each event whose lines were suppressed and whose
        interval has passed since its last line."""
        if not self._pending:
            return
        with self._lock:
            now = self._clock()
            due = [(e, t, n) for e, (t, n) in self._last.items() if n and now - t >= self.interval]
            for event, at, _ in due:
                self._last[event] = (at, 0)  # not a new interval: the next line of the event goes out at once
            self._pending -= len(due)
        for event, _, n in due:
            getattr(log, self._levels.get(event, "warning"))(event, suppressed=n, summary=True)
