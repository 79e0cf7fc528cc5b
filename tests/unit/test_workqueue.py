"""The agent's work queue: coalescing, one worker per key, no lost updates, backoff."""

from __future__ import annotations

import threading

from syncer.agent.workqueue import WorkQueue
from tests.doubles import Clock


def test_bursts_coalesce() -> None:
    q: WorkQueue[str] = WorkQueue()
    for _ in range(10):
        q.add("fed")
    q.add("other")
    assert q.get(timeout=0) == "fed"
    assert q.get(timeout=0) == "other"
    assert q.get(timeout=0) is None


def test_key_added_while_processing_comes_back_after_done() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add("fed")
    assert q.get(timeout=0) == "fed"
    q.add("fed")  # a new commit arrives mid-sync
    assert q.get(timeout=0) is None  # not handed to a second worker meanwhile
    q.done("fed")
    assert q.get(timeout=0) == "fed"


def test_retry_backs_off_exponentially_and_forget_resets() -> None:
    clock = Clock(0.0)
    q: WorkQueue[str] = WorkQueue(base_delay=0.5, max_delay=4, clock=clock)
    delays = [q.retry("fed") for _ in range(5)]
    assert delays == [0.5, 1.0, 2.0, 4.0, 4.0]
    q.forget("fed")
    assert q.retry("fed") == 0.5


def test_delayed_key_is_handed_out_when_due() -> None:
    clock = Clock(0.0)
    q: WorkQueue[str] = WorkQueue(clock=clock)
    q.add_after("fed", 2.0)
    assert q.get(timeout=0) is None
    clock.now = 2.5
    assert q.get(timeout=0) == "fed"


def test_slow_key_does_not_block_others() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add("slow")
    q.add("fast")
    seen: list[str] = []
    release, fast_done = threading.Event(), threading.Event()

    def worker() -> None:
        while (key := q.get(timeout=2)) is not None:
            if key == "slow":
                release.wait(5)
            seen.append(key)
            q.done(key)
            if key == "fast":
                fast_done.set()

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    assert fast_done.wait(5)  # while the other worker still holds "slow"
    assert seen == ["fast"]
    release.set()
    q.shutdown()
    for t in threads:
        t.join(5)
    assert sorted(seen) == ["fast", "slow"]


def test_shutdown_wakes_blocked_getters() -> None:
    q: WorkQueue[str] = WorkQueue()
    got: list[str | None] = []
    t = threading.Thread(target=lambda: got.append(q.get()))
    t.start()
    t.join(0.2)  # bounded negative check: a getter on an empty queue has not returned, it blocks
    assert t.is_alive() and got == []
    q.shutdown()
    t.join(2)
    assert not t.is_alive() and got == [None]


def test_a_capped_retry_backs_off_no_further_than_its_cap() -> None:
    q: WorkQueue[str] = WorkQueue(base_delay=0.5, max_delay=300, clock=Clock(0.0))
    delays = [q.retry("fed", cap=10.0) for _ in range(8)]
    assert delays == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0, 10.0]
    assert q.retry("fed") == 128.0  # the count goes on: an uncapped failure backs off as before


def test_busy_while_a_key_is_ready_or_processed_not_while_one_is_only_due_later() -> None:
    clock = Clock(0.0)
    q: WorkQueue[str] = WorkQueue(clock=clock)
    assert not q.busy()
    q.add_after("later", 5.0)
    assert not q.busy()
    q.add("fed")
    assert q.busy()
    assert q.get(timeout=0) == "fed"
    assert q.busy()  # processing
    q.done("fed")
    assert not q.busy()
    clock.now = 5.0
    assert q.get(timeout=0) == "later"
    assert q.busy()
