"""`kill -QUIT` never kills (issue 39, item 6; reliability suite): the agent's SIGQUIT handler
(`syncer.agent.stacks`) writes every thread's stack and the process goes on, however often the
signal comes and whatever the other threads are doing meanwhile.

The handler runs in a child process whose threads keep calling and returning (frames made and freed)
and threads made and freed all the time: what crashed the C-level all-threads dump, "agent exited
with -11"; with it, this process died within 2,000 signals in 5 of 5 tries, most within a few
hundred); the test sends a flood of SIGQUIT, then 50 one at a time, waiting for each stack dump."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from syncer.agent.stacks import format_stacks
from tests.conftest import wait_until

ROOT = Path(__file__).resolve().parents[2]

BUSY = r"""
import sys, threading
from syncer.agent.stacks import StackDump

stop = threading.Event()

def deep(n):
    return 0 if n == 0 else 1 + deep(n - 1)

def churn():  # frames made and freed without a pause
    while not stop.is_set():
        deep(60)
        list(x for x in range(50))

def spawner():  # threads that start and end, their thread states made and freed
    while not stop.is_set():
        threads = [threading.Thread(target=deep, args=(5,)) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

for i in range(2):
    threading.Thread(target=churn, name=f"churn-{i}", daemon=True).start()
for i in range(3):
    threading.Thread(target=spawner, name=f"spawner-{i}", daemon=True).start()
StackDump().install()
import signal
signal.signal(signal.SIGTERM, lambda *_: stop.set())
print("ready", flush=True)
while not stop.wait(0.05):  # as runner.run's main thread: woken often, so a Python handler runs
    pass
sys.exit(0)
"""

MARK = "(kill -QUIT); the agent goes on"


def test_fifty_sigquits_while_threads_run_write_stacks_and_the_process_goes_on(tmp_path: Path) -> None:
    err = tmp_path / "stderr"
    with err.open("wb") as sink:
        proc = subprocess.Popen([sys.executable, "-c", BUSY], cwd=ROOT, stdout=subprocess.PIPE, stderr=sink,
                                env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"

        def dumps() -> int:
            return err.read_text(errors="replace").count(MARK)

        def alive() -> None:
            assert proc.poll() is None, f"exited with {proc.returncode}:\n{err.read_text(errors='replace')[-3000:]}"

        for _ in range(2000):  # a flood, 1 ms apart: signals that come while threads start and end
            proc.send_signal(signal.SIGQUIT)  # and while a dump is being written
            time.sleep(0.001)
            alive()
        wait_until("a dump after the flood", lambda: dumps() >= 1, timeout=20)
        for _ in range(50):  # one at a time, each dump waited for
            before = dumps()
            proc.send_signal(signal.SIGQUIT)
            wait_until("the next dump", lambda before=before: dumps() > before or proc.poll() is not None,  # type: ignore[misc]
                       timeout=20)
            alive()
        text = err.read_text(errors="replace")
        last = text[text.rindex(MARK):]
        assert "(MainThread) (most recent call first)" in last
        assert all(f"(churn-{i})" in last and f"(spawner-{i})" in last for i in range(2))
        assert 'in deep' in last or 'in churn' in last
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_the_stacks_are_read_with_no_source_lookup_between_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    """A source lookup (linecache stats files) lets the other threads run between the snapshot and
    the reading of their calls, and a call that returned meanwhile has lost its callers: a busy CI
    run's last dump showed the churn threads without `churn` or `deep` (2026-11-29)."""
    import linecache

    def lookup(*_: object, **__: object) -> None:
        raise AssertionError("a source file looked up while the stacks were read")

    for name in ("checkcache", "getline", "lazycache", "updatecache"):
        monkeypatch.setattr(linecache, name, lookup)
    me = threading.get_ident()
    text = format_stacks(sys._current_frames(), {me: "MainThread"}, me)
    assert "Current thread (MainThread) (most recent call first):" in text
    assert "in test_the_stacks_are_read_with_no_source_lookup_between_threads" in text
