"""Nothing stops the agent: every long-running thread of the agent runs under one `Supervisor`.

Two levels:

- `guard(where, step, ...)` runs one step of a loop (an event, a unit's sync, a notification, a
  status round). An exception becomes a reported error: a log line with the diagnostic text (type,
  message, the file and line it came from) and the traceback, a count, and `on_error`, which
  records it where a user looks (the unit's status and Events, the waiting request). The loop
  goes on with its next step.
- `spawn(name, loop)` runs a loop on a thread of its own. A loop that escapes anyway (a bug
  outside any step) is restarted with exponential backoff; while it is down, and while it crashes
  `crash_loop` times within `window` seconds, `healthy()` says so at once, so `/healthz` turns
  503 and the kubelet restarts a replica that cannot recover by itself.

Logging here never raises: a field that clashes with structlog's reserved ``event`` argument is
renamed, and when logging itself fails, the line goes to stderr.
"""

from __future__ import annotations

import contextlib
import sys
import sysconfig
import threading
import time
import traceback
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import structlog

log = structlog.get_logger("syncer.agent")

T = TypeVar("T")
OnError = Callable[[BaseException, str], None]
"""Called with the exception and its diagnostic text (`describe`)."""

RESERVED = frozenset({"event"})  # structlog's first argument: a keyword of that name is a TypeError
MAX_ERROR_CHARS = 500
_STDLIB = sysconfig.get_paths()["stdlib"]


def describe(exc: BaseException) -> str:
    """One line a user can act on: ``TypeError: message (at syncer/x.py:12 in f)``, where: the
    innermost frame outside the standard library and the installed packages; never longer than
    ``MAX_ERROR_CHARS``."""
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if not _library(f.filename)] or frames
    where = ""
    if ours:
        f = ours[-1]
        path = f.filename.replace("\\", "/")
        for top in ("/syncer/", "/tests/", "/tools/", "/bench/"):
            if top in path:
                path = top[1:] + path.rsplit(top, 1)[1]
                break
        where = f" (at {path}:{f.lineno} in {f.name})"
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    if len(text) > MAX_ERROR_CHARS:
        text = text[:MAX_ERROR_CHARS - 3] + "..."
    return text + where


def _library(filename: str) -> bool:
    return "site-packages" in filename or filename.startswith(_STDLIB) or filename.startswith("<")


def safe_log(level: str, message: str, **fields: Any) -> None:
    """`log.<level>(message, **fields)` that cannot raise: reserved keys are renamed (``event`` ->
    ``event_``), and a failure of the logging itself writes the line to stderr instead."""
    fields = {(f"{k}_" if k in RESERVED else k): v for k, v in fields.items()}
    try:
        getattr(log, level)(message, **fields)
    except Exception as exc:  # the last resort: the agent goes on even when its log does not
        with contextlib.suppress(Exception):  # nowhere left to say it
            sys.stderr.write(f"{message} {fields!r} (logging failed: {type(exc).__name__}: {exc})\n")


@dataclass
class _Loop:
    name: str
    target: Callable[[], None]
    thread: threading.Thread | None = None
    crashes: deque[float] = field(default_factory=deque)  # when it crashed, within the window
    down: bool = False  # crashed, waiting to be restarted
    finished: bool = False  # returned: asked to stop
    last_error: str = ""
    restarts: int = 0


class Supervisor:
    """Runs the agent's loops and steps; see the module docstring. Thread-safe."""

    def __init__(self, stop: threading.Event, *, backoff: float = 0.5, backoff_max: float = 30.0,
                 crash_loop: int = 3, window: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.stop = stop
        self.backoff = backoff
        self.backoff_max = backoff_max
        self.crash_loop = crash_loop
        self.window = window
        self._clock = clock
        self._lock = threading.Lock()
        self._loops: list[_Loop] = []
        self.errors: Counter[str] = Counter()  # step errors by where they happened
        self._traced: dict[str, float] = {}  # failure -> when its traceback was last logged
        self.last_error = ""
        # what every error text passes through before it is shown anywhere: the agent sets it to
        # take out the plaintext of the repository's encrypted files (an exception's message may
        # quote a rendered value; tracebacks quote source lines, not values)
        self.scrub: Callable[[str], str] = lambda text: text

    # -- steps ------------------------------------------------------------------------------------

    def guard(self, where: str, step: Callable[[], T], *, on_error: OnError | None = None,
              quiet: tuple[type[BaseException], ...] = (), about: dict[str, Any] | None = None) -> T | None:
        """`step()`; on an exception, report it (see `report`), hand it to `on_error` and return
        None. `quiet`: exception types that are expected (handed to `on_error` without an error
        line); `about`: fields for the log line (the unit, the event)."""
        try:
            return step()
        except Exception as exc:
            if not isinstance(exc, quiet):
                self.report(where, exc, **(about or {}))
            if on_error is not None:
                try:
                    on_error(exc, self.scrub(describe(exc)))
                except Exception as again:
                    self.report(f"{where} (reporting the error)", again, **(about or {}))
            return None

    def report(self, where: str, exc: BaseException, **fields: Any) -> str:
        """Count and log one failure of a step; returns its diagnostic text. The traceback comes
        with the first line of the same failure in `window` seconds (a failure that repeats with
        every event must not flood the log with it)."""
        text = self.scrub(describe(exc))
        now = self._clock()
        with self._lock:
            self.errors[where] += 1
            self.last_error = f"{where}: {text}"
            key = f"{where}|{text}"
            first = now - self._traced.get(key, -self.window) >= self.window
            if first:
                if len(self._traced) >= 1000:
                    self._traced.clear()
                self._traced[key] = now
        if first:
            fields["traceback"] = self.scrub("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
        safe_log("error", f"{where} failed; the agent goes on", error=text, **fields)
        return text

    # -- loops ------------------------------------------------------------------------------------

    def spawn(self, name: str, target: Callable[[], None]) -> threading.Thread:
        """Run `target` on a daemon thread, restarted with backoff whenever it raises, until it
        returns (which a loop does when asked to stop)."""
        loop = _Loop(name, target)
        loop.thread = threading.Thread(target=self._run, args=(loop,), name=name, daemon=True)
        with self._lock:
            self._loops.append(loop)
        loop.thread.start()
        return loop.thread

    def _run(self, loop: _Loop) -> None:
        delay = self.backoff
        while True:
            started = self._clock()
            try:
                loop.target()
            except Exception as exc:
                text = self.report(f"thread {loop.name}", exc, thread=loop.name)
                now = self._clock()
                with self._lock:
                    loop.last_error = text
                    loop.crashes.append(now)
                    while loop.crashes and loop.crashes[0] < now - self.window:
                        loop.crashes.popleft()
                    loop.down = True
                if now - started > self.window:
                    delay = self.backoff  # it ran well for a while: start over
                safe_log("warning", "thread crashed; restarting it", thread=loop.name, retry_in=round(delay, 2),
                         crashes=len(loop.crashes))
                if self.stop.wait(delay):
                    loop.finished = True
                    return
                delay = min(delay * 2, self.backoff_max)
                with self._lock:
                    loop.down = False
                    loop.restarts += 1
                continue
            except BaseException:
                loop.finished = True  # SystemExit, KeyboardInterrupt: not ours to catch
                raise
            loop.finished = True
            return

    def healthy(self) -> tuple[bool, str]:
        """(False, why) while a loop is down, crash-looping, or dead without having been asked to stop."""
        now = self._clock()
        with self._lock:
            for loop in self._loops:
                recent = sum(1 for t in loop.crashes if t >= now - self.window)
                if loop.down:
                    return False, f"thread {loop.name} crashed and is restarting: {loop.last_error}"
                if recent >= self.crash_loop:
                    return False, (f"thread {loop.name} crashed {recent} times in {self.window:g}s: "
                                   f"{loop.last_error}")
                if not loop.finished and loop.thread is not None and not loop.thread.is_alive():
                    return False, f"thread {loop.name} stopped"
        return True, "ok"

    def summary(self) -> dict[str, Any]:
        """For the status API: the step errors so far and each loop's state."""
        healthy, why = self.healthy()
        with self._lock:
            return {"healthy": healthy, "reason": "" if healthy else why, "errors": sum(self.errors.values()),
                    "lastError": self.last_error,
                    "restarts": {loop.name: loop.restarts for loop in self._loops if loop.restarts}}
