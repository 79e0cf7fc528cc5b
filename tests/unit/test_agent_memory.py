"""The agent hands freed memory back to the system (issue 14: resident size at scale), and keeps
what it holds for long out of the garbage collector's walks (issue 29: GC pauses)."""

from __future__ import annotations

import gc
import platform
import subprocess
import sys
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest

from syncer.agent.memory import Heap, allocation_report, release_free_memory
from tests.doubles import Clock


def resident_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_freed_memory_goes_back_to_the_system() -> None:
    release_free_memory()
    before = resident_kib()
    # 200 MiB in blocks too big for Python's small-object allocator, interleaved with small keepers
    # so the heap cannot simply shrink from its top
    big = [b"x" * (64 * 1024) for _ in range(3200)]
    keep = [bytearray(600) for _ in range(3200)]
    grown = resident_kib()
    assert grown - before > 150 * 1024
    del big
    assert release_free_memory()
    assert resident_kib() - before < 60 * 1024, (before, grown, resident_kib())
    assert len(keep) == 3200


@pytest.fixture
def heap_clock() -> Iterator[Clock]:
    clock = Clock()
    yield clock
    gc.unfreeze()  # the rest of the test session collects as usual


class Cycle:
    def __init__(self) -> None:
        self.me = self


def test_the_heap_is_settled_only_when_the_agent_is_idle_and_not_too_often(heap_clock: Clock) -> None:
    heap = Heap(every=60.0, full_every=3600.0, clock=heap_clock)
    assert heap.settle(idle=False) is None
    first = heap.settle(idle=True)  # t = 0 s
    assert first is not None and not first.full and first.collected == 0  # the first only freezes
    assert first.frozen > 0 and gc.get_freeze_count() > 0
    heap_clock.now += 59.0
    assert heap.settle(idle=True) is None  # settled less than a minute ago
    heap_clock.now += 1.0
    assert heap.settle(idle=False) is None  # busy
    again = heap.settle(idle=True)  # t = 60 s
    assert again is not None and not again.full
    heap_clock.now += 3539.0
    later = heap.settle(idle=True)  # t = 3599 s
    assert later is not None and not later.full
    heap_clock.now += 60.0
    full = heap.settle(idle=True)  # t = 3659 s: an hour since the first
    assert full is not None and full.full


def test_what_was_frozen_is_still_freed_when_its_last_reference_goes(heap_clock: Clock) -> None:
    heap = Heap(clock=heap_clock)
    kept = Keeper()
    probe = weakref.ref(kept)
    assert heap.settle(idle=True) is not None
    assert gc.is_tracked(kept)
    del kept
    assert probe() is None  # reference counting, frozen or not


def test_frozen_cyclic_garbage_is_collected_by_the_next_full_settle(heap_clock: Clock) -> None:
    heap = Heap(every=60.0, full_every=3600.0, clock=heap_clock)
    cycle = Cycle()
    probe = weakref.ref(cycle)
    assert heap.settle(idle=True) is not None  # the cycle is frozen alive
    del cycle
    gc.collect()
    assert probe() is not None  # the collector skips frozen objects: not found yet
    heap_clock.now += 60.0
    partial = heap.settle(idle=True)
    assert partial is not None and not partial.full and probe() is not None
    heap_clock.now += 3600.0
    full = heap.settle(idle=True)
    assert full is not None and full.full and full.collected >= 1
    assert probe() is None


class Keeper:
    pass


def test_the_allocation_report_names_the_lines_that_hold_the_memory() -> None:
    import tracemalloc

    assert allocation_report() is None  # not tracing: nothing to report, and nothing is turned on
    tracemalloc.start()
    try:
        held = [bytes(64 * 1024) for _ in range(160)]  # 10 MiB from this one line
        rows = allocation_report(limit=5)
    finally:
        tracemalloc.stop()
    assert rows is not None and rows[0]["where"] == "total"
    top = rows[1]
    assert str(top["where"]).endswith(f"{Path(__file__).name}:{held_line()}"), rows
    assert 9.5 <= float(str(top["mib"])) <= 11 and 160 <= int(str(top["blocks"])) <= 162  # the bytes, their list
    assert len(held) == 160


def held_line() -> int:
    """The line of the allocation above, found by its text, so that editing the file above it
    does not break the test."""
    lines = Path(__file__).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if "held = [bytes(64 * 1024)" in line and "for _" in line)


def allocate_for_caller() -> list[bytes]:
    return [bytes(64 * 1024) for _ in range(160)]  # 10 MiB, allocated here for the caller


def test_with_more_frames_traced_the_report_names_who_asked_for_the_memory() -> None:
    """A library line (orjson.loads, say) holds the memory; the callers say whose it is."""
    import tracemalloc

    tracemalloc.start(4)
    try:
        held = allocate_for_caller()  # the caller the report must name
        rows = allocation_report(limit=3)
    finally:
        tracemalloc.stop()
    assert rows is not None
    top = rows[1]
    lines = Path(__file__).read_text().splitlines()
    inner = next(i for i, line in enumerate(lines, 1) if "allocated here for the caller" in line)
    outer = next(i for i, line in enumerate(lines, 1) if "the caller the report must name" in line)
    assert str(top["where"]).endswith(f"{Path(__file__).name}:{inner}"), rows
    assert isinstance(top["via"], list) and str(top["via"][0]).endswith(f"{Path(__file__).name}:{outer}"), top
    assert len(held) == 160


ARENAS_SCRIPT = """
import re, sys, threading
from syncer.agent.memory import limit_malloc_arenas
if sys.argv[1] == "limited":
    assert limit_malloc_arenas(2)
ready, go = threading.Barrier(9), threading.Event()
held = []
def allocate():
    ready.wait()
    go.wait()
    held.append([bytes(4096) for _ in range(256)])  # above pymalloc's 512 bytes: glibc's malloc
threads = [threading.Thread(target=allocate) for _ in range(8)]
for t in threads:
    t.start()
ready.wait()
go.set()
for t in threads:
    t.join()
maps = [re.match(r"([0-9a-f]+)-([0-9a-f]+) (\\S+) \\S+ \\S+ \\S+\\s*(\\S*)", line).groups()
        for line in open("/proc/self/maps")]
arenas = sum(1 for a, b in zip(maps, maps[1:]) if a[2] == "rw-p" and b[2] == "---p" and not a[3] and not b[3]
             and int(b[1], 16) - int(a[0], 16) == 64 << 20)
print(arenas)
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt(M_ARENA_MAX) is glibc's")
@pytest.mark.parametrize("mode", ["limited", "default"])
def test_threads_share_two_malloc_arenas(mode: str) -> None:
    """With the limit, eight threads allocating at once make at most one arena beside the main
    heap; without it (the control), glibc gives them several."""
    done = subprocess.run([sys.executable, "-c", ARENAS_SCRIPT, mode], check=False, capture_output=True, text=True,
                          timeout=60, cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr
    arenas = int(done.stdout)
    assert arenas <= 1 if mode == "limited" else arenas >= 2


MMAP_SCRIPT = """
import sys
from syncer.agent.memory import fix_mmap_threshold
if sys.argv[1] == "fixed":
    assert fix_mmap_threshold()
def heap() -> int:  # the main heap's size: what malloc cut from it rather than mapping on its own
    for line in open("/proc/self/maps"):
        if line.rstrip().endswith("[heap]"):
            start, end = line.split()[0].split("-")
            return int(end, 16) - int(start, 16)
    return 0
big = bytearray(8 << 20)  # mapped on its own (above 128 KiB); freed, glibc would raise its threshold to 8 MiB
del big
before = heap()
block = bytearray(4 << 20)
print(heap() - before)
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt(M_MMAP_THRESHOLD) is glibc's")
@pytest.mark.parametrize("mode", ["fixed", "default"])
def test_big_blocks_are_mapped_on_their_own_even_after_a_bigger_one_was_freed(mode: str) -> None:
    """With the threshold fixed, a 4 MiB block after an 8 MiB one was freed is still mapped on its
    own (the heap does not grow); without it (the control), glibc cuts it from the heap."""
    done = subprocess.run([sys.executable, "-c", MMAP_SCRIPT, mode], check=False, capture_output=True, text=True,
                          timeout=60, cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr
    grown = int(done.stdout)
    assert grown < 1 << 20 if mode == "fixed" else grown >= 4 << 20
