"""The memory allocator the agent process runs with: the C library's `malloc`, not Python's own.

Python's allocator (pymalloc) serves small objects from 1 MiB arenas and gives an arena back to the
system only once every object in it is freed. The agent's big moments (a first sync of thousands
of units, a re-list of 12,000 pods, a revision that changes many files) leave a few long-lived
objects in most arenas, so its resident size stayed far above what it held. With glibc's malloc,
`malloc_trim` (agent.memory) returns every free page, wherever it is. At 2,000 units a load,
a second full load and a trim held 113 MiB this way and 135 MiB with pymalloc, for the same load
time (5.4-6.0 s either way).

Both settings are environment variables read when a process starts, so `flower-syncer run`
starts itself again with them, once, before it imports the agent or starts a thread. Whatever the
user set wins: with PYTHONMALLOC set (to anything), the process runs as it is. MALLOC_ARENA_MAX
caps glibc's arenas: it would otherwise give up to 8 per core to the agent's threads (59 at 2,000
units: watches, workers, the HTTP server), each keeping free memory of its own."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

SETTINGS = {"PYTHONMALLOC": "malloc", "MALLOC_ARENA_MAX": "2"}


def agent_environment(environ: Mapping[str, str]) -> dict[str, str] | None:
    """The environment to start the agent again in, or None when it should run as it is (it was
    started again already, or the user chose an allocator)."""
    if "PYTHONMALLOC" in environ:
        return None
    return {**environ, **{name: value for name, value in SETTINGS.items() if name not in environ}}


def restart_with_system_allocator() -> None:
    """Replace this process (same PID, arguments and interpreter flags) by one that runs with
    SETTINGS. Returns only when there is nothing to do or it cannot: the interpreter ignores the
    environment (-E, -I), or does not know how it was started."""
    environ = agent_environment(os.environ)
    if environ is None or sys.flags.ignore_environment or not sys.executable or not sys.orig_argv:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], environ)
