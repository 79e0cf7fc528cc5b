"""`kill -QUIT`: every thread's stack into the agent's log, and the agent goes on.

Why not `faulthandler.register(SIGQUIT, all_threads=True)`: its C handler walks the other threads'
frames from inside the signal handler while those threads run, and a thread or frame freed under it
crashes the agent (SIGSEGV, seen in CI on a fresh machine). So the signal only wakes a thread of ours
(a byte down a pipe); that thread takes `sys._current_frames()` (frame objects, made under the
interpreter's lock and kept alive while we read them), formats them and writes them to stderr with
`os.write`, so no buffered stream another thread is writing is entered again. The price: a Python
handler runs on the main thread, which `runner.run` wakes every half second; a dump waits for that.

The C-level dump stays only for the thread the signal interrupted (usually the main one; for a
crash, the crashing one): that thread is stopped inside the handler, so its own frames cannot
change under the dump. On SIGQUIT it comes first and shows where the main thread is should it
never come back to the interpreter (then no Python handler runs); the full dump follows.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import signal
import sys
import threading
import traceback
from types import FrameType

HEADER = "flower-syncer: the stacks of its {count} threads (kill -QUIT); the agent goes on\n"


def format_stacks(frames: dict[int, FrameType], names: dict[int, str], current: int) -> str:
    """Every thread's stack, newest call first, in faulthandler's layout (one `Thread 0x...`
    block per thread, the dumping thread named `Current thread`)."""
    # Every thread's calls are read first, together, with no I/O between them: the other threads
    # run on whenever this one lets go of the interpreter's lock (a source line looked up, a file
    # stat-ed), and a call that returns meanwhile loses its callers (a frame object that finished
    # has no f_back), so a thread read late showed only its last frame.
    calls = {ident: [(f.f_code.co_filename, line, f.f_code.co_name) for f, line in traceback.walk_stack(frame)]
             for ident, frame in frames.items()}
    blocks = [HEADER.format(count=len(frames))]
    for ident in sorted(calls):
        who = "Current thread" if ident == current else f"Thread 0x{ident:016x}"
        blocks.append(f"{who} ({names.get(ident, 'unnamed')}) (most recent call first):\n")
        for filename, line, name in calls[ident]:
            blocks.append(f'  File "{filename}", line {line} in {name}\n')
        blocks.append("\n")
    return "".join(blocks)


def write_all(fd: int, data: bytes) -> None:
    """All of `data` to `fd` (a write to a pipe may take only part of it)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


class StackDump:
    """On SIGQUIT, every thread's stack on `fd` (stderr), written by a daemon thread of its own."""

    def __init__(self, fd: int = 2) -> None:
        self.fd = fd
        self.dumps = 0  # how many were written (for tests)
        # the handler writes a byte to this pipe, nothing else: no lock (a handler may run nested in
        # itself when signals come fast, and a lock it took would then be held by its own thread)
        self._wake_read, self._wake_write = os.pipe()
        os.set_blocking(self._wake_write, False)
        self._thread = threading.Thread(target=self._run, name="stack-dump", daemon=True)

    def install(self) -> None:
        """From the main thread (Python only lets it set a signal handler)."""
        self._thread.start()
        signal.signal(signal.SIGQUIT, self._on_signal)
        # from C, only the stack of the thread the signal interrupted (usually the main one), which
        # is stopped meanwhile: it shows where the main thread is stuck should it never come back
        # to the interpreter (then the Python handler never runs); then Python's handler (chain)
        faulthandler.register(signal.SIGQUIT, file=self.fd, all_threads=False, chain=True)
        # a crash: the crashing thread's stack, from C (the only thread that is stopped meanwhile)
        faulthandler.enable(file=self.fd, all_threads=False)

    def _on_signal(self, _signum: int, _frame: FrameType | None) -> None:
        with contextlib.suppress(BlockingIOError):  # the pipe is full: dumps are due anyway
            os.write(self._wake_write, b"q")

    def _run(self) -> None:
        while True:
            os.read(self._wake_read, 4096)  # every signal up to now: one dump
            try:
                self.dump()
            except Exception as exc:  # one failed dump (a deep stack, no memory) never ends the thread
                with contextlib.suppress(OSError):
                    write_all(self.fd, f"flower-syncer: the stack dump failed: {exc!r}\n".encode("utf-8", "replace"))

    def dump(self) -> None:
        names = {thread.ident: thread.name for thread in threading.enumerate() if thread.ident is not None}
        text = format_stacks(sys._current_frames(), names, threading.get_ident())
        with contextlib.suppress(OSError):  # stderr gone: nothing to tell, and the agent goes on
            write_all(self.fd, text.encode("utf-8", "replace"))
        self.dumps += 1
