"""A work queue keyed by unit, in the manner of client-go's workqueue.

- Adding a key that is already waiting does nothing: ten pushes in a row cause one sync.
- A key is never handed to two workers at once; a key added while it is being processed is
  handed out again once the worker is done (so no change is lost).
- Failed keys come back after an exponential backoff; success forgets the failures.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class WorkQueue(Generic[K]):
    def __init__(self, *, base_delay: float = 0.5, max_delay: float = 300.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._cond = threading.Condition()
        self._queue: list[K] = []  # FIFO of keys ready to hand out
        self._waiting: set[K] = set()  # keys in _queue
        self._processing: set[K] = set()
        self._dirty: set[K] = set()  # added while processing: requeue on done()
        self._delayed: list[tuple[float, int, K]] = []  # (due, seq, key) heap
        self._seq = itertools.count()
        self._failures: dict[K, int] = {}
        self._base = base_delay
        self._max = max_delay
        self._clock = clock
        self._closed = False

    def __len__(self) -> int:
        with self._cond:
            return len(self._waiting) + len(self._processing) + len(self._delayed)

    def busy(self) -> bool:
        """A key is ready to hand out or being processed (those only due later do not count)."""
        with self._cond:
            return bool(self._waiting or self._processing)

    def depth(self) -> int:
        """Keys waiting to be processed (ready or delayed), not counting those in progress."""
        with self._cond:
            return len(self._waiting) + len({k for _, _, k in self._delayed} - self._waiting)

    def add(self, key: K) -> None:
        with self._cond:
            if self._closed:
                return
            if key in self._processing:
                self._dirty.add(key)
                return
            if key not in self._waiting:
                self._waiting.add(key)
                self._queue.append(key)
                self._cond.notify()

    def add_after(self, key: K, delay: float) -> None:
        if delay <= 0:
            self.add(key)
            return
        with self._cond:
            if self._closed:
                return
            heapq.heappush(self._delayed, (self._clock() + delay, next(self._seq), key))
            self._cond.notify()

    def retry(self, key: K, cap: float | None = None) -> float:
        """Requeue a failed key after its backoff (0.5 s, 1 s, 2 s ... up to max, or up to `cap`
        for a failure that is expected to clear by itself soon); returns the delay."""
        with self._cond:
            n = self._failures.get(key, 0)
            self._failures[key] = n + 1
        delay: float = min(self._max if cap is None else min(cap, self._max), self._base * (2**n))
        self.add_after(key, delay)
        return delay

    def failing(self, key: K) -> bool:
        """The key failed and waits for its backoff (until it succeeds, or is forgotten)."""
        with self._cond:
            return key in self._failures

    def forget(self, key: K) -> None:
        with self._cond:
            self._failures.pop(key, None)

    def clear(self) -> int:
        """Drop every waiting and delayed key, and the re-adds of keys in progress (on lease loss:
        the next leader does the work). Keys being processed stay theirs until done(). Returns how
        many keys were dropped."""
        with self._cond:
            dropped = len(self._waiting | self._dirty | {k for _, _, k in self._delayed})
            self._queue.clear()
            self._waiting.clear()
            self._dirty.clear()
            self._delayed.clear()
            self._failures.clear()
            return dropped

    def get(self, timeout: float | None = None) -> K | None:
        """The next key to process (blocking); None on timeout or when the queue is shut down."""
        deadline = None if timeout is None else self._clock() + timeout
        with self._cond:
            while True:
                self._promote_due()
                if self._queue:
                    key = self._queue.pop(0)
                    self._waiting.discard(key)
                    self._processing.add(key)
                    return key
                if self._closed:
                    return None
                wait = None if deadline is None else deadline - self._clock()
                if self._delayed:
                    until_due = self._delayed[0][0] - self._clock()
                    wait = until_due if wait is None else min(wait, until_due)
                if wait is not None and wait <= 0:
                    if deadline is not None and self._clock() >= deadline:
                        return None
                    continue
                self._cond.wait(wait)

    def done(self, key: K) -> None:
        with self._cond:
            self._processing.discard(key)
            if key in self._dirty:
                self._dirty.discard(key)
                if key not in self._waiting:
                    self._waiting.add(key)
                    self._queue.append(key)
                    self._cond.notify()

    def shutdown(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def _promote_due(self) -> None:
        now = self._clock()
        while self._delayed and self._delayed[0][0] <= now:
            _, _, key = heapq.heappop(self._delayed)
            if key in self._processing:
                self._dirty.add(key)
            elif key not in self._waiting:
                self._waiting.add(key)
                self._queue.append(key)
