"""Triggers for fetches: a filesystem watcher for local repositories and a jittered poller.

Neither ever fetches: they call a callback that is expected to post an event and return quickly. Callback
exceptions are logged and swallowed so a trigger keeps running.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import structlog
from watchdog.events import (
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver

log = structlog.get_logger("syncer.source")

# Reads (opened/closed events) and attribute changes never mean new commits.
_EVENT_TYPES: list[type[FileSystemEvent]] = [
    FileCreatedEvent, FileDeletedEvent, FileModifiedEvent, FileMovedEvent,
    DirCreatedEvent, DirDeletedEvent, DirMovedEvent,
]  # fmt: skip
_CHANGE_KINDS = frozenset({"created", "deleted", "modified", "moved"})
# Files at the top of a git directory whose change means the checked-out commit may differ.
_TOP_LEVEL_NAMES = frozenset({"HEAD", "packed-refs"})


def _name(path: str | bytes) -> str:
    return Path(os.fsdecode(path)).name


class _Handler(FileSystemEventHandler):
    """Reports change events, optionally only for some file names; git's ``.lock`` files never count."""

    def __init__(self, notify: Callable[[], None], names: frozenset[str] | None) -> None:
        self._notify = notify
        self._names = names

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type not in _CHANGE_KINDS:
            return
        if event.is_directory and event.event_type == "modified":
            return
        # git writes a ref (HEAD, packed-refs, refs/...) as NAME.lock and renames that over NAME: the
        # lock's own events come before the ref has its new value; the rename (or NAME deleted) is the change
        names = [_name(p) for p in (event.src_path, getattr(event, "dest_path", "") or "") if p]
        names = [n for n in names if not n.endswith(".lock")]
        if not names or (self._names is not None and not any(n in self._names for n in names)):
            return
        self._notify()


class LocalRepoWatcher:
    """Watches git directories (``GitSource.local_paths()``) and calls ``on_change`` once changes have been
    quiet for ``debounce`` seconds (at most ~1 s after the first one under a constant stream of changes).

    In a git directory only ref changes count: HEAD, packed-refs and anything under refs/ -- a commit, a
    branch switch, a push into a bare repository; objects, the index and reads are ignored. A path that is a
    plain directory is watched recursively, a file through its parent. Missing paths are skipped (logged).
    """

    MAX_DELAY = 1.0

    def __init__(self, paths: list[Path], on_change: Callable[[], None], debounce: float = 0.01) -> None:
        self.paths = list(paths)
        self.on_change = on_change
        self.debounce = debounce
        self._cond = threading.Condition()
        self._first: float | None = None  # monotonic time of the first undelivered event
        self._latest = 0.0
        self._stopping = False
        self._observer: BaseObserver | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is not None:
            return
        observer = Observer()
        watched = 0
        for path in self.paths:
            for where, recursive, names in _watch_plan(path):
                try:
                    observer.schedule(_Handler(self._event, names), str(where), recursive=recursive,
                                      event_filter=_EVENT_TYPES)
                    watched += 1
                except OSError as exc:
                    log.warning("cannot watch path", path=str(where), error=str(exc))
        observer.daemon = True
        observer.start()
        self._observer = observer
        self._stopping = False
        self._thread = threading.Thread(target=self._deliver, name="source-watch", daemon=True)
        self._thread.start()
        log.debug("watching local repository", paths=[str(p) for p in self.paths], watches=watched)

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._observer is not None:
            self._observer.stop()
            if threading.current_thread() is not self._observer:
                self._observer.join(timeout=2)
            self._observer = None
        if self._thread is not None and threading.current_thread() is not self._thread:
            self._thread.join(timeout=2)
        self._thread = None

    def _event(self) -> None:
        now = time.monotonic()
        with self._cond:
            if self._first is None:
                self._first = now
            self._latest = now
            self._cond.notify_all()

    def _deliver(self) -> None:
        while True:
            with self._cond:
                while not self._stopping:
                    if self._first is None:
                        self._cond.wait()
                        continue
                    now = time.monotonic()
                    due = min(self._latest + self.debounce, self._first + max(self.MAX_DELAY, self.debounce))
                    if now >= due:
                        break
                    self._cond.wait(due - now)
                if self._stopping:
                    return
                self._first = None
            try:
                self.on_change()
            except Exception:
                log.exception("local repository change callback failed")


def _watch_plan(path: Path) -> list[tuple[Path, bool, frozenset[str] | None]]:
    """(directory, recursive, names filter) for each watch ``path`` needs."""
    if path.is_dir():
        if (path / "HEAD").is_file() or (path / "refs").is_dir():  # a git directory
            plan: list[tuple[Path, bool, frozenset[str] | None]] = [(path, False, _TOP_LEVEL_NAMES)]
            if (path / "refs").is_dir():
                plan.append((path / "refs", True, None))
            return plan
        return [(path, True, None)]
    if path.parent.is_dir():
        return [(path.parent, False, frozenset({path.name}))]
    log.warning("cannot watch missing path", path=str(path))
    return []

