"""Bounds on every call to a server a tenant runs (a SuperLink's Control API, or the
`control-api-address` an admin allows): such a server may be slow, silent, endless or huge on
purpose, and must never hold the agent's threads or memory.

- One deadline for the whole call: connecting, the TLS handshake, every byte sent and every byte
  read (a server that trickles one byte a second is cut at the deadline, not after each read's
  timeout). A call of a longer task (key registration: several calls) may also get the task's
  deadline, whichever comes first.
- A limit on the bytes a call reads, counted as they arrive, before anything is decoded.
- `InFlight`: the calls in progress, with their deadlines. `overdue()` names a call that has run
  past its deadline (which the bounds above should make impossible: the agent's `/healthz` says
  so), and `abort()` shuts every call's socket down at once, so that a stopping agent never
  waits for a tenant's server. `TENANT_CALLS` is the agent's.
- `Share`: how many tasks that call tenants' servers may run at once per tenant (a namespace) and
  in all: a task over either is not started (never waited for), so one tenant's slow servers hold
  at most its share of the threads that run such tasks (key registration on the sync workers).

`BoundedSocket` wraps a connected socket (plain or TLS) for `http.client` and the gRPC channel:
before each operation it sets the socket's timeout to what is left of the call's deadline.
"""

from __future__ import annotations

import contextlib
import io
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["TENANT_CALLS", "AnswerTooLarge", "BoundedSocket", "Call", "DeadlineExceeded", "InFlight", "Share",
           "Stopping", "open_socket"]


class DeadlineExceeded(TimeoutError):
    """The call's deadline passed (connecting, in the TLS handshake, or waiting for its answer)."""


class AnswerTooLarge(Exception):
    """The server sent more bytes than the call's limit (counted while reading, before decoding)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"the answer is larger than {limit} bytes")
        self.limit = limit


class Stopping(Exception):
    """The agent is stopping: its calls were cut (`InFlight.abort`) and new ones are refused."""


@dataclass(eq=False)
class Call:
    """One call in flight: what, to where, until when, and how many bytes it may still read."""

    what: str
    address: str
    started: float
    deadline: float
    limit: int
    clock: Callable[[], float] = time.monotonic
    received: int = 0
    aborted: bool = False
    socks: list[socket.socket] = field(default_factory=list)  # the sockets to shut down on abort

    def left(self) -> float:
        """Seconds left before the deadline; DeadlineExceeded (or Stopping) when none are."""
        if self.aborted:
            raise Stopping("the agent is stopping")
        left = self.deadline - self.clock()
        if left <= 0:
            raise DeadlineExceeded(f"no answer within {self.deadline - self.started:.3g} s")
        return left

    def took(self, size: int) -> None:
        self.received += size
        if self.received > self.limit:
            raise AnswerTooLarge(self.limit)


class InFlight:
    """The calls to tenants' servers in progress (thread-safe)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._calls: set[Call] = set()
        self._stopping = False

    def begin(self, what: str, address: str, *, timeout: float, limit: int, deadline: float | None = None) -> Call:
        """A new call, bounded by `timeout` seconds from now and by `deadline` (monotonic; the
        task's) whichever comes first; it may read `limit` bytes. `end` it when done."""
        now = self.clock()
        until = now + timeout if deadline is None else min(now + timeout, deadline)
        call = Call(what, address, now, until, limit, self.clock)
        with self._lock:
            if self._stopping:
                raise Stopping("the agent is stopping")
            self._calls.add(call)
        return call

    def end(self, call: Call) -> None:
        with self._lock:
            self._calls.discard(call)

    def overdue(self, slack: float) -> list[Call]:
        """Calls still in progress `slack` seconds or more past their deadline, the oldest first."""
        now = self.clock()
        with self._lock:
            late = [c for c in self._calls if now - c.deadline >= slack]
        return sorted(late, key=lambda c: c.deadline)

    def count(self) -> int:
        with self._lock:
            return len(self._calls)

    def abort(self) -> int:
        """Cut every call in progress (its socket shut down: a blocked read returns at once) and
        refuse new ones. Returns how many were cut."""
        with self._lock:
            self._stopping = True
            calls = list(self._calls)
        for call in calls:
            call.aborted = True
            for sock in list(call.socks):
                _shut(sock)
        return len(calls)

    def reopen(self) -> None:
        """Take calls again (after `abort`; for tests and restarts in one process)."""
        with self._lock:
            self._stopping = False


TENANT_CALLS = InFlight()


class Share:
    """At most `per_tenant` tasks of one tenant and `total` tasks in all running at once
    (thread-safe). `take` never waits: a task over its share is not started (the caller tries
    again later), so a thread is never held waiting for a tenant's slow servers either."""

    def __init__(self, per_tenant: int, total: int) -> None:
        self.per_tenant, self.total = max(1, per_tenant), max(1, total)
        self._lock = threading.Lock()
        self._running: dict[str, int] = {}

    def take(self, tenant: str) -> bool:
        """Whether a task of `tenant` may start now (then `give_back` it when it ends)."""
        with self._lock:
            mine = self._running.get(tenant, 0)
            if mine >= self.per_tenant or sum(self._running.values()) >= self.total:
                return False
            self._running[tenant] = mine + 1
            return True

    def give_back(self, tenant: str) -> None:
        with self._lock:
            left = self._running.get(tenant, 0) - 1
            if left > 0:
                self._running[tenant] = left
            else:
                self._running.pop(tenant, None)

    def running(self, tenant: str | None = None) -> int:
        """Tasks running now: of `tenant`, or of every tenant."""
        with self._lock:
            return self._running.get(tenant, 0) if tenant is not None else sum(self._running.values())


def _shut(sock: socket.socket) -> None:
    # the plain socket's shutdown, also for a TLS socket (ssl.SSLSocket.shutdown would drop its
    # TLS state under a thread that is reading): the reader then sees the end of the stream
    with contextlib.suppress(OSError):  # closed already, or never connected
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


def open_socket(host: str, port: int, context: ssl.SSLContext | None, call: Call) -> socket.socket:
    """A TCP connection to (`host`, `port`), with TLS when `context` is given, made within the
    call's deadline (the handshake too: CPython bounds a whole handshake by the socket's timeout).
    Known to `call` while it is made, so `InFlight.abort` cuts it, mid-handshake too."""
    raw = socket.create_connection((host, port), timeout=call.left())
    sock = raw
    call.socks.append(raw)
    try:
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if context is not None:
            raw.settimeout(call.left())
            sock = context.wrap_socket(raw, server_hostname=host, do_handshake_on_connect=False)
            call.socks.append(sock)  # it holds the connection now: what abort shuts down
            if call.aborted:
                raise Stopping("the agent is stopping")
            sock.do_handshake()
        return sock
    except BaseException:
        sock.close()
        raw.close()
        raise
    finally:
        for made in (raw, sock):
            if made in call.socks:
                call.socks.remove(made)


class BoundedSocket:
    """A connected socket used for one call at a time (`use`): each operation gets what is left
    of the call's deadline as its timeout, and each read counts toward the call's limit. Enough
    of a socket for http.client (sendall, makefile, close) and the gRPC channel (recv, sendall)."""

    def __init__(self, sock: socket.socket, call: Call) -> None:
        self.sock = sock
        self.call = call
        call.socks.append(sock)
        self._readers = 0  # open `makefile` readers: as a socket, closed only once they are too
        self._closing = False

    def use(self, call: Call) -> None:
        """The socket now serves `call` (a kept connection's next call)."""
        if self.sock in self.call.socks:
            self.call.socks.remove(self.sock)
        self.call = call
        call.socks.append(self.sock)

    def _arm(self) -> None:
        self.sock.settimeout(self.call.left())

    def recv(self, size: int) -> bytes:
        self._arm()
        try:
            data = self.sock.recv(size)
        except TimeoutError:
            self._raise_late()
            raise
        self.call.took(len(data))
        return data

    def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
        self._arm()
        try:
            size = self.sock.recv_into(buffer, nbytes, flags)
        except TimeoutError:
            self._raise_late()
            raise
        self.call.took(size)
        return size

    def sendall(self, data: Any) -> None:
        self._arm()
        try:
            self.sock.sendall(data)
        except TimeoutError:
            self._raise_late()
            raise

    def _raise_late(self) -> None:
        self.call.left()  # DeadlineExceeded (or Stopping): the socket's timeout was what was left

    def makefile(self, mode: str = "rb") -> io.BufferedReader:
        if mode != "rb":
            raise ValueError("a BoundedSocket is read through a binary reader only")
        self._readers += 1
        return io.BufferedReader(socket.SocketIO(self, "rb"))  # type: ignore[arg-type]

    def _decref_socketios(self) -> None:
        """socket.SocketIO calls it on close (http.client closes the connection before the
        answer of an HTTP/1.0 server is read: the socket lives on until its reader is closed)."""
        self._readers = max(self._readers - 1, 0)
        if self._closing and not self._readers:
            self._close()

    def setsockopt(self, *args: Any) -> None:
        self.sock.setsockopt(*args)

    def close(self) -> None:
        self._closing = True
        if not self._readers:
            self._close()

    def _close(self) -> None:
        if self.sock in self.call.socks:
            self.call.socks.remove(self.sock)
        self.sock.close()

    def fileno(self) -> int:
        return self.sock.fileno()
