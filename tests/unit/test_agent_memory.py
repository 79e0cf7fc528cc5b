"""The agent hands freed memory back to the system (issue 14: resident size at scale)."""

from __future__ import annotations

import platform
from pathlib import Path

import pytest

from syncer.agent.memory import release_free_memory


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
