"""Hand memory the agent freed back to the operating system, and keep what it holds for long out
of the garbage collector's way (`Heap`).

The agent's big moments (the first sync of thousands of units, a revision that changes many
files, a re-list after a watch expired) allocate far more than it keeps. CPython frees those
objects, but glibc keeps the pages for reuse: the agent's resident size stayed at its peak, far
above what it holds. `malloc_trim(0)` returns free pages to the system; it is
a no-op where the C library has no such call (musl, macOS)."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import tracemalloc


@functools.cache
def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None


def _libc_function(name: str) -> Callable[..., int] | None:
    """The C library's function `name`, or None where there is no such function (musl, macOS)."""
    function: Callable[..., int] | None = getattr(_libc(), name, None)
    return function


# glibc's mallopt parameter: how many malloc arenas the process may have (its default is eight
# per core; each thread that allocates gets one of its own until then).
M_ARENA_MAX = -8


def limit_malloc_arenas(arenas: int = 2) -> bool:
    """Let glibc's malloc keep at most `arenas` arenas; call it before the threads start. Returns
    whether the C library took it (False where it has no such setting: musl, macOS).

    An arena keeps its free pieces for the threads that use it, so every extra arena holds memory
    the others cannot reuse. The agent runs dozens of threads (watches, workers, the HTTP server),
    but they allocate one at a time anyway, holding the interpreter: the arenas bought them
    nothing, and their free pieces were a large share of the agent's resident memory."""
    opt = _libc_function("mallopt")
    return bool(opt(M_ARENA_MAX, arenas)) if opt is not None else False


# glibc's mallopt parameter: the size from which malloc maps a block of its own (freed, it goes
# straight back to the system) instead of cutting it from a heap.
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 256 * 1024


def fix_mmap_threshold(size: int = MMAP_THRESHOLD) -> bool:
    """Map every block of `size` bytes or more on its own, always; call it before the threads
    start. Returns whether the C library took it (False where it has no such setting).

    glibc starts at 128 KiB but raises the threshold to the size of each mapped block freed (up to
    32 MiB), and the point at which it trims a heap with it. After the agent's first scrape of
    /metrics (megabytes of text at thousands of units) or a first big API answer, blocks of
    megabytes came from the heaps, where the small allocations made meanwhile kept their pages:
    the agent grew by a scrape's size and no trim gave it back. A fixed threshold keeps that from
    happening; the price is a mapping and its page faults
    for each such block, which the agent makes a few of a second at most."""
    opt = _libc_function("mallopt")
    return bool(opt(M_MMAP_THRESHOLD, size)) if opt is not None else False


def release_free_memory() -> bool:
    """Returns whether the C library released anything (False where it cannot)."""
    trim = _libc_function("malloc_trim")
    return bool(trim(0)) if trim is not None else False


@dataclass(frozen=True)
class Settled:
    full: bool  # the frozen objects were collected too
    collected: int  # unreachable objects freed
    frozen: int  # objects the collector skips from now on
    seconds: float


class Heap:
    """Keeps the objects the agent holds for long out of the garbage collector's way.

    A full collection walks every container object of the process, about a million at thousands
    of units, during which every thread waits (observe/gc_pauses.py measures it), and CPython
    starts one whenever a quarter more objects have survived since the last. So at quiet moments
    the agent freezes what it holds (`gc.freeze()`): the collector skips frozen objects, and later
    collections walk only what was allocated since. Freezing changes no object's lifetime: a frozen
    object whose last reference goes is freed at once, as before.

    `settle(idle)` is called every status round and does nothing unless `idle` (no commit, sync or
    event in flight) and `every` seconds passed since it last froze. Then:
    - the first time, it only freezes. Nearly everything is alive then (a whole collection would
      stop the agent for a long walk that frees next to nothing);
    - later, it collects what is not frozen (what was allocated since: a short walk), then freezes
      the rest;
    - once every `full_every` seconds it unfreezes everything and collects it whole before freezing
      again: a frozen object that became cyclic garbage (reference counting alone cannot free a
      cycle) is reclaimed there, so nothing leaks for longer than that."""

    def __init__(self, *, every: float = 60.0, full_every: float = 3600.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.every = every
        self.full_every = full_every
        self._clock = clock
        self._settled_at: float | None = None
        self._full_at = 0.0

    def settle(self, idle: bool) -> Settled | None:
        now = self._clock()
        if not idle or (self._settled_at is not None and now - self._settled_at < self.every):
            release_free_memory()
            return None
        started = time.perf_counter()
        full, collected = False, 0
        if self._settled_at is None:
            self._full_at = now
        elif now - self._full_at >= self.full_every:
            gc.unfreeze()
            full, collected, self._full_at = True, gc.collect(), now
        else:
            collected = gc.collect()
        gc.freeze()
        self._settled_at = now
        seconds = time.perf_counter() - started
        release_free_memory()
        return Settled(full, collected, gc.get_freeze_count(), seconds)


def allocation_report(limit: int = 20) -> list[dict[str, object]] | None:
    """Where the memory the process holds now was allocated: the `limit` source lines that hold
    the most, largest first (file:line, MiB, blocks), and the total. None unless Python traces its
    allocations (started with PYTHONTRACEMALLOC=1 or -X tracemalloc): tracing costs memory and
    time, so the agent never turns it on by itself."""
    import tracemalloc

    if not tracemalloc.is_tracing():
        return None
    snapshot = tracemalloc.take_snapshot().filter_traces((tracemalloc.Filter(False, tracemalloc.__file__),))
    stats = snapshot.statistics("lineno")
    rows: list[dict[str, object]] = [{"where": "total", "mib": round(sum(s.size for s in stats) / 2**20, 1),
                                      "blocks": sum(s.count for s in stats)}]
    callers = _callers(snapshot) if tracemalloc.get_traceback_limit() > 1 else {}
    for s in stats[:limit]:
        where = _place(s.traceback[0])
        rows.append({"where": where, "mib": round(s.size / 2**20, 1), "blocks": s.count,
                     **({"via": callers[where]} if where in callers else {})})
    return rows


def _place(frame: tracemalloc.Frame) -> str:
    return f"{frame.filename}:{frame.lineno}"


def _callers(snapshot: tracemalloc.Snapshot) -> dict[str, list[str]]:
    """For each allocating line, the callers (most recent first) of the path that holds the most
    there: which code asked for what a line of a library allocated. Needs more than one frame
    traced (PYTHONTRACEMALLOC=N)."""
    out: dict[str, list[str]] = {}
    for s in snapshot.statistics("traceback"):  # largest first: the first path seen per line is kept
        places = [_place(f) for f in reversed(s.traceback)]  # most recent first
        # a comprehension is a frame of its own on the same line: named once
        out.setdefault(places[0], [p for i, p in enumerate(places) if i and p != places[i - 1]])
    return out
