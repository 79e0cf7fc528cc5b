"""How long CPython's cyclic garbage collector stops the agent.

A collection holds the GIL: every thread of the agent (the dispatcher, the workers, the watches)
waits until it is done. A full (generation 2) collection walks every container object the agent
holds, which at thousands of units is millions of objects, so its pause shows up in
commit-to-applied. `GCPauses` times each collection through `gc.callbacks` and serves the
figures as the histogram ``flower_syncer_gc_pause_seconds{generation}``; pauses of at least
`slow` seconds are also queued for the agent's log (`next_slow`).

The callback runs inside the collector, in whatever thread allocated at that moment, maybe one
holding a lock of the logging or metrics machinery. So it takes no lock and calls nothing that
could: it adds to plain counters and puts into a `queue.SimpleQueue` (safe to call from anywhere,
reentrant calls included)."""

from __future__ import annotations

import bisect
import gc
import queue
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from syncer.observe.families import FamilyCollector, HistogramFamily, HistogramRow

BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
GENERATIONS = 3
METRIC = "flower_syncer_gc_pause_seconds"


@dataclass(frozen=True)
class Pause:
    generation: int
    seconds: float
    collected: int  # unreachable objects freed


class GCPauses(FamilyCollector["GCPauses"]):
    """Install with `install()` (or as a context manager); one per process is enough (gc.callbacks
    is process-wide). Collections never overlap (the collector holds the GIL and does not nest),
    so one start time is enough."""

    def __init__(self, slow: float = 0.1, clock: Callable[[], float] = time.perf_counter) -> None:
        super().__init__((_FAMILY,), lambda: self)
        self.slow = slow
        self._clock = clock
        self._started = 0.0
        self._counts = [[0] * (len(BUCKETS) + 1) for _ in range(GENERATIONS)]  # the last one: +Inf
        self._sums = [0.0] * GENERATIONS
        self._slow: queue.SimpleQueue[Pause] = queue.SimpleQueue()

    def __enter__(self) -> GCPauses:
        self.install()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.uninstall()

    def install(self) -> None:
        if self._callback not in gc.callbacks:
            gc.callbacks.append(self._callback)

    def uninstall(self) -> None:
        if self._callback in gc.callbacks:
            gc.callbacks.remove(self._callback)

    def next_slow(self, timeout: float | None = None) -> Pause | None:
        """The next pause of at least `slow` seconds, waiting up to `timeout` (None: for ever)."""
        try:
            return self._slow.get(timeout=timeout)
        except queue.Empty:
            return None

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = self._clock()
            return
        if not self._started:  # installed during a collection
            return
        seconds, self._started = self._clock() - self._started, 0.0
        generation = min(max(int(info.get("generation", 0)), 0), GENERATIONS - 1)
        self._counts[generation][bisect.bisect_left(BUCKETS, seconds)] += 1
        self._sums[generation] += seconds
        if seconds >= self.slow:
            self._slow.put_nowait(Pause(generation, seconds, int(info.get("collected", 0))))

    def _rows(self) -> Iterator[HistogramRow]:
        for generation in range(GENERATIONS):
            # read once, no lock
            yield (str(generation),), list(self._counts[generation]), self._sums[generation], None


_HELP = ("Seconds each run of Python's cyclic garbage collector stopped the agent, by generation "
         "(2: a full collection over everything the agent holds).")
_FAMILY: HistogramFamily[GCPauses] = HistogramFamily(METRIC, _HELP, ("generation",), BUCKETS, GCPauses._rows)
