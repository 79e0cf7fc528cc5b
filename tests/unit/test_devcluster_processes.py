"""tools/devcluster.py tells its own processes from others by /proc, also in the middle of exec."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))

from devcluster import is_our_process


def test_a_process_just_spawned_is_ours_even_while_exec_is_in_progress() -> None:
    # Right after Popen returns, /proc/<pid>/cmdline can still be empty; the old check called
    # such a process dead and `up` stopped a healthy cluster.
    binary = shutil.which("sleep")
    assert binary
    procs = []
    try:
        for _ in range(150):
            proc = subprocess.Popen([binary, "30"], stdin=subprocess.DEVNULL, start_new_session=True)
            procs.append(proc)
            assert is_our_process(proc.pid, binary), f"pid {proc.pid} was taken for dead right after spawning"
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def test_other_binaries_and_the_dead_are_not_ours() -> None:
    binary = shutil.which("sleep")
    assert binary
    proc = subprocess.Popen([binary, "30"], stdin=subprocess.DEVNULL)
    try:
        assert not is_our_process(proc.pid, "/usr/bin/not-sleep")
    finally:
        proc.kill()
        proc.wait()
    assert not is_our_process(proc.pid, binary)  # reaped: gone
