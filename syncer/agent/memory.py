"""Hand memory the agent freed back to the operating system, and keep what it holds for long out
of the garbage collector's way (`Heap`).

The agent's big moments (the first sync of thousands of units, a revision that changes many
files, a re-list after a watch expired) allocate far more than it keeps. CPython frees those
objects, but glibc keeps the pages for reuse: at 28,000 objects the agent's resident size stayed
at its peak, about twice what it holds. `malloc_trim(0)` returns free pages to the system; it is
a no-op where the C library has no such call (musl, macOS)."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
import time
from collections.abc import Callable
from dataclasses import dataclass


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        trim: Callable[[int], int] = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None
    return trim


def release_free_memory() -> bool:
    """Returns whether the C library released anything (False where it cannot)."""
    trim = _malloc_trim()
    return bool(trim(0)) if trim is not None else False


@dataclass(frozen=True)
class Settled:
    full: bool  # the frozen objects were collected too
    collected: int  # unreachable objects freed
    frozen: int  # objects the collector skips from now on
    seconds: float


class Heap:
    """Keeps the objects the agent holds for long out of the garbage collector's way.

    A full collection walks every container object of the process: at 2,000 units, millions of
    them, 0.2 to 0.6 s during which every thread waits (observe/gc_pauses.py), and CPython starts one
    whenever a quarter more objects have survived since the last. So at quiet moments the agent
    collects what is garbage and then freezes the rest (`gc.freeze()`): the collector skips frozen
    objects, and later collections walk only what was allocated since. Freezing changes no
    object's lifetime: a frozen object whose last reference goes is freed at once, as before.
    What a frozen object can no longer be is cyclic garbage found by the collector; so once every
    `full_every` seconds, at a quiet moment too, the agent unfreezes everything and collects it
    whole before freezing again.

    `settle(idle)` is called every status round; it does nothing unless `idle` (no commit, sync
    or event in flight) and `every` seconds passed since the last time it froze."""

    def __init__(self, *, every: float = 60.0, full_every: float = 3600.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.every = every
        self.full_every = full_every
        self._clock = clock
        self._settled_at: float | None = None
        self._full_at: float | None = None

    def settle(self, idle: bool) -> Settled | None:
        now = self._clock()
        if not idle or (self._settled_at is not None and now - self._settled_at < self.every):
            release_free_memory()
            return None
        full = self._full_at is None or now - self._full_at >= self.full_every
        started = time.perf_counter()
        if full:
            gc.unfreeze()
            self._full_at = now
        collected = gc.collect()
        gc.freeze()
        self._settled_at = now
        seconds = time.perf_counter() - started
        release_free_memory()
        return Settled(full, collected, gc.get_freeze_count(), seconds)
