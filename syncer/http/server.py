"""The event loop of the agent's HTTP server: accepts connections, reads request heads under a
deadline and per-client caps, keeps slots for health probes, hands complete heads to request
threads (`syncer.http.handler`)."""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
import time
from collections import OrderedDict, deque
from http import HTTPStatus
from urllib.parse import urlsplit

import orjson

from syncer.http.context import Conn, RequestContext
from syncer.http.handler import Handler
from syncer.http.limits import (
    ACCEPT_BATCH,
    EVICT_AFTER,
    HEALTH_PATHS,
    HEALTH_SLOTS,
    JSON,
    LINGER_SECONDS,
    LISTEN_BACKLOG,
    MAX_HEAD_BYTES,
    AgentAPI,
    RateLimitedLog,
    log,
)
from syncer.http.webview import Streams, ViewAPI
from syncer.observe.metrics import Metrics
from syncer.source.webhook import REPLAY_WINDOW, ReplayGuard


class AgentServer:
    """`start()` binds and serves on a thread of its own; `stop()` stops accepting and closes.

    One event-loop thread accepts connections and reads every request head (request line and
    headers) without blocking, so a slow client costs a socket and a buffer, never a thread.
    A complete head is served on a thread of its own; the connection then comes back to the loop
    for its next request (keep-alive). Limits:

    - the whole head must arrive within `request_timeout` of the connection being accepted (or of
      the previous answer, for a keep-alive connection): a trickle of one byte a second is cut at
      the deadline (408), an idle connection is closed; at most ``MAX_HEAD_BYTES`` (431);
    - the body, likewise, within `request_timeout` in total (408), and the answer is sent within
      `request_timeout`;
    - `max_connections` connections at once, `max_connections_per_client` from one address. A
      connection over either limit may only ask for ``/healthz`` or ``/readyz`` (served on
      ``HEALTH_SLOTS`` threads of their own, so the probes of the kubelet keep their answer under
      a flood); anything else is answered 503 and closed;
    - at most `max_open` sockets in all: over it, the connection that has waited longest for its
      head (at least ``EVICT_AFTER``) is dropped to make room, or else the new one is answered 503.
    """

    def __init__(self, api: AgentAPI, metrics: Metrics, *, host: str = "127.0.0.1", port: int = 0,
                 api_token: str | None = None, webhook_secret: str | None = None,
                 request_timeout: float = 10.0, max_connections: int = 64, max_connections_per_client: int = 16,
                 max_open: int | None = None, replay_window: float = REPLAY_WINDOW,
                 reject_log_interval: float = 10.0, protect_reads: bool = False,
                 view: ViewAPI | None = None) -> None:
        self.api = api
        self.metrics = metrics
        self.host = host
        self.port = port
        self.api_token = api_token or None
        self.webhook_secret = webhook_secret or None
        self.protect_reads = protect_reads  # /metrics and /api/v1/status need the API token too
        self.request_timeout = request_timeout
        self.max_connections = max_connections
        self.max_connections_per_client = max_connections_per_client
        self.max_open = max(max_open or 4 * max_connections, max_connections + HEALTH_SLOTS)
        self.replays = ReplayGuard(replay_window)
        self.rate_log = RateLimitedLog(reject_log_interval)
        self.streams = Streams(view) if view is not None else None  # the web view's live pages
        self.context = RequestContext(api=api, metrics=metrics, api_token=self.api_token,
                                      webhook_secret=self.webhook_secret, protect_reads=protect_reads,
                                      request_timeout=request_timeout, replays=self.replays, rate_log=self.rate_log,
                                      view=view, streams=self.streams)
        self._listener: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._wake: tuple[socket.socket, socket.socket] | None = None
        self._stopping = threading.Event()
        self._lock = threading.Lock()  # _open and _per_host (request threads close connections on stop)
        self._open = 0
        self._per_host: dict[str, int] = {}
        self._health_slots = threading.BoundedSemaphore(HEALTH_SLOTS)
        # owned by the loop thread; insertion order is deadline order (deadlines only grow)
        self._reading: OrderedDict[Conn, None] = OrderedDict()
        self._closing: OrderedDict[Conn, None] = OrderedDict()
        self._returned: deque[Conn] = deque()  # from request threads

    @property
    def address(self) -> tuple[str, int]:
        """The bound host and port (the real port when 0 was asked for)."""
        if self._listener is None:
            raise RuntimeError("the server is not started")
        host, port = self._listener.getsockname()[:2]
        return str(host), int(port)

    @property
    def open_connections(self) -> int:
        with self._lock:
            return self._open

    def start(self) -> None:
        if self._listener is not None:
            raise RuntimeError("the server is already started")
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        listener = socket.socket(family, socket.SOCK_STREAM)
        try:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind((self.host, self.port))
            listener.listen(LISTEN_BACKLOG)
            listener.setblocking(False)
        except BaseException:
            listener.close()
            raise
        self._listener = listener
        self._stopping.clear()
        if self.streams is not None:
            self.streams.closed.clear()
        self._wake = socket.socketpair()
        self._wake[0].setblocking(False)
        self._thread = threading.Thread(target=self._serve, args=(listener, self._wake[0]), name="http",
                                        daemon=True)
        self._thread.start()
        log.debug("http server listening", address=f"{self.address[0]}:{self.address[1]}")

    def stop(self) -> None:
        """Stop accepting connections and close the socket, at once. Requests in flight finish on
        their (daemon) threads, then close their connections."""
        listener, thread, wake = self._listener, self._thread, self._wake
        if listener is None:
            return
        self._stopping.set()
        if self.streams is not None:  # the web view's event streams end now, not at their next heartbeat
            self.streams.close()
        self._poke()
        if thread is not None:
            thread.join(5)
        while self._returned:  # handed back by a request thread after the loop's last sweep
            self._close(self._returned.popleft(), None)
        listener.close()
        if wake is not None:
            for sock in wake:
                sock.close()
        self._listener = self._thread = self._wake = None

    def _poke(self) -> None:
        wake = self._wake
        if wake is not None:
            with contextlib.suppress(OSError):
                wake[1].send(b"x")

    # -- the event loop ------------------------------------------------------------------------------

    def _serve(self, listener: socket.socket, wake: socket.socket) -> None:
        with selectors.DefaultSelector() as selector:
            selector.register(listener, selectors.EVENT_READ, "accept")
            selector.register(wake, selectors.EVENT_READ, "wake")
            try:
                while not self._stopping.is_set():
                    for key, _ in selector.select(self._next_timeout()):
                        if key.data == "accept":
                            self._accept(listener, selector)
                        elif key.data == "wake":
                            with contextlib.suppress(OSError):
                                wake.recv(4096)
                        else:
                            self._on_readable(key.data, selector)
                    self._take_back(selector)
                    self._expire(selector)
                    self.rate_log.flush()  # the count of lines a flood had suppressed, once it is over
            except Exception:
                log.exception("http: the server loop failed")
            finally:
                for conn in [*self._reading, *self._closing, *self._returned]:
                    self._close(conn, selector)
                self._returned.clear()

    def _next_timeout(self) -> float:
        deadlines = [next(iter(d)).deadline for d in (self._reading, self._closing) if d]
        if not deadlines:
            return 1.0
        return min(1.0, max(0.0, min(deadlines) - time.monotonic()))

    def _accept(self, listener: socket.socket, selector: selectors.BaseSelector) -> None:
        for _ in range(ACCEPT_BATCH):
            try:
                sock, addr = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # e.g. out of file descriptors: try again on the next round
                self.rate_log("warning", "http: cannot accept a connection", error=str(exc))
                return
            sock.setblocking(False)
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            host = str(addr[0])
            now = time.monotonic()
            for _ in range(2):  # at most one lingering refusal and one slow reader make room
                if self._open < self.max_open:
                    break
                victim = next(iter(self._closing), None)
                if victim is None:
                    slowest = next(iter(self._reading), None)
                    # one that has waited a while for its head, not one that just connected
                    if slowest is not None and slowest.deadline - self.request_timeout <= now - EVICT_AFTER:
                        victim = slowest
                        self.rate_log("warning", "http: too many open connections; dropping the slowest one",
                                      limit=self.max_open, client=victim.host)
                if victim is None:
                    break
                self._close(victim, selector)
            refuse = self._open >= self.max_open
            with self._lock:
                limited = (self._open >= self.max_connections
                           or self._per_host.get(host, 0) >= self.max_connections_per_client)
                self._open += 1
                self._per_host[host] = self._per_host.get(host, 0) + 1
            conn = Conn(sock, (host, int(addr[1])), limited, now + self.request_timeout)
            if refuse:  # answered at once; lingers, and is the first to go when the next one comes
                self.rate_log("warning", "http: too many open connections; refusing one", limit=self.max_open,
                              client=host)
                self._answer_and_close(conn, selector, 503, "too many connections", {"Retry-After": "1"})
                continue
            self._reading[conn] = None
            self._register(conn, selector)

    def _register(self, conn: Conn, selector: selectors.BaseSelector) -> None:
        if not conn.registered:
            selector.register(conn.sock, selectors.EVENT_READ, conn)
            conn.registered = True

    def _unregister(self, conn: Conn, selector: selectors.BaseSelector) -> None:
        if conn.registered:
            with contextlib.suppress(KeyError, ValueError, OSError):
                selector.unregister(conn.sock)
            conn.registered = False

    def _on_readable(self, conn: Conn, selector: selectors.BaseSelector) -> None:
        try:
            data = conn.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(conn, selector)
            return
        if not data or conn.closing:  # EOF; or the rest of what a refused client sends
            if not data:
                self._close(conn, selector)
            return
        if not conn.buf:
            data = data.lstrip(b"\r\n")  # empty lines before a request line are ignored (RFC 9112 2.2)
        conn.buf += data
        self._check_head(conn, selector)

    def _check_head(self, conn: Conn, selector: selectors.BaseSelector) -> None:
        end = _head_end(conn.buf, conn.scanned)
        if end < 0 and len(conn.buf) <= MAX_HEAD_BYTES:
            conn.scanned = max(0, len(conn.buf) - 2)
            return
        if end < 0 or end > MAX_HEAD_BYTES:
            self._answer_and_close(conn, selector, 431, f"the request head is larger than {MAX_HEAD_BYTES} bytes")
            return
        self._reading.pop(conn, None)
        self._unregister(conn, selector)
        slot = False
        if conn.limited:
            if not _is_health_probe(conn.buf) or not self._health_slots.acquire(blocking=False):
                self.rate_log("warning", "http: too many connections; refusing a request",
                              limit=self.max_connections, per_client=self.max_connections_per_client,
                              client=conn.host)
                self._answer_and_close(conn, selector, 503, "too many connections", {"Retry-After": "1"})
                return
            slot = True
        try:
            threading.Thread(target=self._work, args=(conn, slot), name="http-request", daemon=True).start()
        except RuntimeError:  # cannot start a thread
            if slot:
                self._health_slots.release()
            self._answer_and_close(conn, selector, 503, "too busy", {"Retry-After": "1"})

    def _answer_and_close(self, conn: Conn, selector: selectors.BaseSelector, status: int, message: str,
                          headers: dict[str, str] | None = None) -> None:
        """Answer from the loop (small, so it fits the socket buffer), then linger: read and drop
        what the client still sends for a moment, so closing does not reset the answer away."""
        if status != 503:
            log.debug("http: bad request", status=status, error=message, client=conn.host)
        with contextlib.suppress(OSError):
            conn.sock.send(_plain_answer(status, message, headers))
            conn.sock.shutdown(socket.SHUT_WR)
        self._linger(conn, selector)

    def _linger(self, conn: Conn, selector: selectors.BaseSelector) -> None:
        self._reading.pop(conn, None)
        conn.closing = True
        conn.buf = bytearray()
        conn.deadline = time.monotonic() + LINGER_SECONDS
        self._closing[conn] = None
        try:
            self._register(conn, selector)
        except (OSError, ValueError):
            self._close(conn, selector)

    def _take_back(self, selector: selectors.BaseSelector) -> None:
        """Connections whose request was served: read the next head, or linger and close."""
        while self._returned:
            conn = self._returned.popleft()
            if not conn.keep:
                if _unread(conn.sock):  # e.g. a body refused unread: closing now could reset the answer
                    with contextlib.suppress(OSError):
                        conn.sock.shutdown(socket.SHUT_WR)
                    self._linger(conn, selector)
                else:
                    self._close(conn, selector)
                continue
            try:
                conn.sock.setblocking(False)
                conn.deadline = time.monotonic() + self.request_timeout
                conn.scanned = 0
                self._reading[conn] = None
                self._register(conn, selector)
            except (OSError, ValueError):
                self._close(conn, selector)
                continue
            if conn.buf:  # a pipelined request came with the previous one
                self._check_head(conn, selector)

    def _expire(self, selector: selectors.BaseSelector) -> None:
        now = time.monotonic()
        while self._closing:
            conn = next(iter(self._closing))
            if conn.deadline > now:
                break
            self._close(conn, selector)
        while self._reading:
            conn = next(iter(self._reading))
            if conn.deadline > now:
                break
            if conn.buf:  # part of a head: say why
                self._answer_and_close(conn, selector, 408, "the request head took too long")
            else:  # idle (keep-alive or never sent anything): just close
                self._close(conn, selector)

    def _close(self, conn: Conn, selector: selectors.BaseSelector | None) -> None:
        if selector is not None:
            self._unregister(conn, selector)
        self._reading.pop(conn, None)
        self._closing.pop(conn, None)
        with contextlib.suppress(OSError):
            conn.sock.close()
        with self._lock:
            self._open -= 1
            left = self._per_host.get(conn.host, 1) - 1
            if left > 0:
                self._per_host[conn.host] = left
            else:
                self._per_host.pop(conn.host, None)

    # -- a request thread ------------------------------------------------------------------------------

    def _work(self, conn: Conn, health_slot: bool) -> None:
        keep = False
        try:
            conn.sock.setblocking(True)
            conn.sock.settimeout(self.request_timeout)
            handler = Handler(conn, self.context)
            keep = not handler.close_connection and not conn.limited
            conn.buf = bytearray(handler.rfile.leftover()) if keep else bytearray()
        except (ConnectionError, TimeoutError) as exc:
            log.debug("http: connection error", error=repr(exc), client=conn.host)
        except Exception as exc:
            self.rate_log("error", "http: connection failed", error=f"{type(exc).__name__}: {exc}"[:300],
                          client=conn.host, exc_info=exc)
        finally:
            if health_slot:
                self._health_slots.release()
            conn.keep = keep
            if self._stopping.is_set():
                self._close(conn, None)
            else:
                self._returned.append(conn)
                self._poke()


def _unread(sock: socket.socket) -> bool:
    """Whether the client sent something not read yet (the socket is made non-blocking)."""
    try:
        sock.setblocking(False)
        return bool(sock.recv(1, socket.MSG_PEEK))
    except (BlockingIOError, InterruptedError):
        return False
    except OSError:
        return False


def _head_end(buf: bytearray, start: int) -> int:
    """The offset just past the empty line that ends a request head, or -1."""
    ends = [i + n for i, n in ((buf.find(b"\n\r\n", start), 3), (buf.find(b"\n\n", start), 2)) if i >= 0]
    return min(ends) if ends else -1


def _is_health_probe(head: bytearray) -> bool:
    line = bytes(head[:head.find(b"\n")]).split()
    if len(line) < 2 or line[0] not in (b"GET", b"HEAD"):
        return False
    return urlsplit(line[1].decode("latin-1")).path in HEALTH_PATHS


def _plain_answer(status: int, message: str, headers: dict[str, str] | None = None) -> bytes:
    body = orjson.dumps({"error": message})
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = "Error"
    lines = [f"HTTP/1.1 {status} {phrase}", "Server: flower-syncer", f"Content-Type: {JSON}",
             f"Content-Length: {len(body)}", "Cache-Control: no-store", "Connection: close",
             *(f"{k}: {v}" for k, v in (headers or {}).items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


