"""The API client's credentials, reloaded when the files they came from change.

A long-running agent outlives its kubeconfig: tokens rotate, certificates are renewed, the API
server moves to a new address or port. `Credentials` remembers the files the client was built from
(kubeconfig files) and, at most once per `check_every` seconds, compares their size, inode and
modification time; when one changed it builds a new client. A file caught half-written (or broken)
keeps the previous client and is tried again at its next change. In a pod, the service-account
token is re-read by the official client itself (its in-cluster loader refreshes the token).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import structlog

log = structlog.get_logger("syncer.cluster")

Stamp = tuple[tuple[str, int, int, int] | None, ...]


def _stamp(paths: Sequence[Path]) -> Stamp:
    out: list[tuple[str, int, int, int] | None] = []
    for p in paths:
        try:
            st = p.stat()
        except OSError:
            out.append(None)
            continue
        out.append((str(p), st.st_mtime_ns, st.st_size, st.st_ino))
    return tuple(out)


class Credentials:
    """Holds the current API client; `current()` rebuilds it when a watched file changed."""

    def __init__(self, load: Callable[[], Any], paths: Sequence[Path], *, check_every: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._load = load
        self._paths = list(paths)
        self._check_every = check_every
        self._clock = clock
        self._lock = threading.Lock()
        self._stamp = _stamp(self._paths)
        self.api = load()
        self._checked = clock()
        self.reloads = 0

    def current(self) -> Any:
        now = self._clock()
        if not self._paths or now - self._checked < self._check_every:
            return self.api
        with self._lock:
            if now - self._checked < self._check_every:
                return self.api
            self._checked = now
            stamp = _stamp(self._paths)
            if stamp == self._stamp:
                return self.api
            self._stamp = stamp
            try:
                api = self._load()
            except Exception as exc:  # a broken or half-written file: keep what works
                log.warning("the changed Kubernetes credentials cannot be loaded; keeping the previous ones",
                            files=[str(p) for p in self._paths], error=str(exc))
                return self.api
            self.api = api
            self.reloads += 1
            host = getattr(getattr(api, "configuration", None), "host", "")
            log.info("Kubernetes credentials reloaded", files=[str(p) for p in self._paths], host=host)
            return api
