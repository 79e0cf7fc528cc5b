"""The agent's HTTP server: metrics, health, the status/resync API and the Git webhook.

Standard library only: an event loop reads request heads, a thread per request serves them (see
`AgentServer` for the limits that keep slow and many clients from starving the health probes):

=======  ==================  =============================================================================
method   path                answer
=======  ==================  =============================================================================
GET      ``/metrics``        Prometheus text format (with `protect_reads`: bearer token, else 401)
GET      ``/healthz``        200 ``ok`` / 503 (the agent's loops are stuck)
GET      ``/readyz``         200 ``ok`` / 503 with the reason
GET      ``/api/v1/status``  the agent's status (JSON) (with `protect_reads`: bearer token, else 401)
POST     ``/api/v1/resync``  ``Authorization: Bearer <token>``; body ``{"unit", "wait", "timeout"}``, all
                             optional; 200 with the result, 401, 400, 404 (unknown unit; or no token is
                             configured), 413
POST     ``/hooks/git``      a push webhook (GitHub, GitLab, generic; see `syncer.source.webhook`): 202
                             accepted, 200 ``{"duplicate": true}`` for a delivery id seen within
                             ``replay_window`` (nothing happens), 401 rejected (nothing happens), 404
                             when no secret is configured, 413 over ``MAX_BODY_BYTES``
=======  ==================  =============================================================================

GET routes answer HEAD too. Errors are JSON ``{"error": "..."}``. Requests are logged at debug
level: method, path without the query, status, time and client address, never headers or bodies.
What a client can repeat at will (rejected webhooks and tokens, refused connections) is logged at
most once per `reject_log_interval` seconds, with the count of lines suppressed meanwhile.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import selectors
import socket
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from typing import Any, Protocol
from urllib.parse import urlsplit

import orjson
import structlog

from syncer.observe.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from syncer.observe.metrics import Metrics
from syncer.source.webhook import MAX_BODY_BYTES, REPLAY_WINDOW, PushEvent, ReplayGuard, WebhookRejected, verify

log = structlog.get_logger("syncer.http")

MAX_API_BODY_BYTES = 64 * 1024
MAX_RESYNC_TIMEOUT = 3600.0
DEFAULT_RESYNC_TIMEOUT = 60.0
JSON = "application/json"
TEXT = "text/plain; charset=utf-8"
MAX_HEAD_BYTES = 64 * 1024  # request line and headers together
HEALTH_PATHS = frozenset({"/healthz", "/readyz"})
HEALTH_SLOTS = 4  # threads for health probes that came over a connection limit
LINGER_SECONDS = 1.0  # after an error answer, how long to drop what the client still sends before closing
LISTEN_BACKLOG = 1024
ACCEPT_BATCH = 64  # connections accepted per round of the loop
EVICT_AFTER = 1.0  # over max_open, a connection waiting this long for its head may be dropped for a new one


class AgentAPI(Protocol):
    """What the server needs from the agent. Called from request threads: must be thread-safe."""

    def healthy(self) -> bool: ...

    def ready(self) -> tuple[bool, str]: ...

    def status(self) -> dict[str, Any]: ...

    def resync(self, unit: str | None, wait: bool, timeout: float) -> dict[str, Any]:
        """Resync one unit (None: all). Raises KeyError for an unknown unit."""
        ...

    def webhook(self, event: PushEvent) -> None: ...


class HttpError(Exception):
    def __init__(self, status: int, message: str, *, close: bool = False,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.close = close  # the request body was not read: the connection cannot be reused
        self.headers = headers or {}


# ---------------------------------------------------------------------------------------------


class RateLimitedLog:
    """At most one line per `interval` seconds per event; the next line says how many were
    suppressed in between. For what an attacker can repeat at will (rejected webhooks, refused
    connections), so a flood cannot flood the log too."""

    def __init__(self, interval: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = interval
        self._clock = clock
        self._lock = threading.Lock()
        self._last: dict[str, tuple[float, int]] = {}  # event -> (time of the last line, suppressed since)

    def __call__(self, level: str, event: str, **fields: Any) -> bool:
        """Log unless a line of this event went out less than `interval` ago; True when logged."""
        with self._lock:
            now = self._clock()
            last = self._last.get(event)
            if last is not None and now - last[0] < self.interval:
                self._last[event] = (last[0], last[1] + 1)
                return False
            self._last[event] = (now, 0)
        getattr(log, level)(event, suppressed=last[1] if last else 0, **fields)
        return True


class _Conn:
    """One client connection. Owned by the event loop while its request head arrives (and while it
    lingers before closing), by one request thread while a request is served."""

    __slots__ = ("addr", "buf", "closing", "deadline", "host", "keep", "limited", "registered", "scanned",
                 "sock")

    def __init__(self, sock: socket.socket, addr: tuple[str, int], limited: bool, deadline: float) -> None:
        self.sock = sock
        self.addr = addr
        self.host = addr[0]
        self.limited = limited  # over a connection limit: health probes only, then closed
        self.deadline = deadline
        self.buf = bytearray()
        self.scanned = 0  # where to resume the search for the end of the head
        self.closing = False
        self.registered = False
        self.keep = False


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
                 reject_log_interval: float = 10.0, protect_reads: bool = False) -> None:
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
        self._listener: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._wake: tuple[socket.socket, socket.socket] | None = None
        self._stopping = threading.Event()
        self._lock = threading.Lock()  # _open and _per_host (request threads close connections on stop)
        self._open = 0
        self._per_host: dict[str, int] = {}
        self._health_slots = threading.BoundedSemaphore(HEALTH_SLOTS)
        # owned by the loop thread; insertion order is deadline order (deadlines only grow)
        self._reading: OrderedDict[_Conn, None] = OrderedDict()
        self._closing: OrderedDict[_Conn, None] = OrderedDict()
        self._returned: deque[_Conn] = deque()  # from request threads

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
            conn = _Conn(sock, (host, int(addr[1])), limited, now + self.request_timeout)
            if refuse:  # answered at once; lingers, and is the first to go when the next one comes
                self.rate_log("warning", "http: too many open connections; refusing one", limit=self.max_open,
                              client=host)
                self._answer_and_close(conn, selector, 503, "too many connections", {"Retry-After": "1"})
                continue
            self._reading[conn] = None
            self._register(conn, selector)

    def _register(self, conn: _Conn, selector: selectors.BaseSelector) -> None:
        if not conn.registered:
            selector.register(conn.sock, selectors.EVENT_READ, conn)
            conn.registered = True

    def _unregister(self, conn: _Conn, selector: selectors.BaseSelector) -> None:
        if conn.registered:
            with contextlib.suppress(KeyError, ValueError, OSError):
                selector.unregister(conn.sock)
            conn.registered = False

    def _on_readable(self, conn: _Conn, selector: selectors.BaseSelector) -> None:
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

    def _check_head(self, conn: _Conn, selector: selectors.BaseSelector) -> None:
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

    def _answer_and_close(self, conn: _Conn, selector: selectors.BaseSelector, status: int, message: str,
                          headers: dict[str, str] | None = None) -> None:
        """Answer from the loop (small, so it fits the socket buffer), then linger: read and drop
        what the client still sends for a moment, so closing does not reset the answer away."""
        if status != 503:
            log.debug("http: bad request", status=status, error=message, client=conn.host)
        with contextlib.suppress(OSError):
            conn.sock.send(_plain_answer(status, message, headers))
            conn.sock.shutdown(socket.SHUT_WR)
        self._linger(conn, selector)

    def _linger(self, conn: _Conn, selector: selectors.BaseSelector) -> None:
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

    def _close(self, conn: _Conn, selector: selectors.BaseSelector | None) -> None:
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

    def _work(self, conn: _Conn, health_slot: bool) -> None:
        keep = False
        try:
            conn.sock.setblocking(True)
            conn.sock.settimeout(self.request_timeout)
            handler = _Handler(conn, self)
            keep = not handler.close_connection and not conn.limited
            conn.buf = bytearray(handler.rfile.leftover()) if keep else bytearray()
        except (ConnectionError, TimeoutError) as exc:
            log.debug("http: connection error", error=repr(exc), client=conn.host)
        except Exception:
            log.exception("http: connection failed")
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


class _Reader:
    """The handler's `rfile`: the request head from the loop's buffer, then the socket (the body
    only, read by `_read_body` with its deadline). Never reads past what it is asked for, so a
    pipelined next request stays for the loop (`leftover`)."""

    def __init__(self, data: bytes | bytearray, sock: socket.socket) -> None:
        self._buf = bytes(data)
        self._pos = 0
        self._sock = sock

    def readline(self, limit: int | None = -1) -> bytes:
        end = self._buf.find(b"\n", self._pos)
        stop = len(self._buf) if end < 0 else end + 1
        if limit is not None and limit >= 0:
            stop = min(stop, self._pos + limit)
        line = self._buf[self._pos:stop]
        self._pos = stop
        return line

    def read1(self, n: int = -1) -> bytes:
        if self._pos < len(self._buf):
            stop = len(self._buf) if n < 0 else min(len(self._buf), self._pos + n)
            chunk = self._buf[self._pos:stop]
            self._pos = stop
            return chunk
        return self._sock.recv(n if n > 0 else 65536)

    def read(self, n: int = -1) -> bytes:
        chunks: list[bytes] = []
        while n < 0 or n > 0:
            chunk = self.read1(n if n > 0 else 65536)
            if not chunk:
                break
            chunks.append(chunk)
            n -= len(chunk) if n > 0 else 0
        return b"".join(chunks)

    def leftover(self) -> bytes:
        return self._buf[self._pos:]

    def close(self) -> None:
        pass


class _Writer:
    """The handler's `wfile`: buffers the answer; `flush` sends it within the timeout in total."""

    def __init__(self, sock: socket.socket, timeout: float) -> None:
        self._sock = sock
        self._timeout = timeout
        self._parts: list[bytes] = []

    def write(self, data: bytes) -> int:
        self._parts.append(bytes(data))
        return len(data)

    def flush(self) -> None:
        if self._parts:
            data = b"".join(self._parts)
            self._parts.clear()
            self._sock.settimeout(self._timeout)
            self._sock.sendall(data)  # the timeout bounds the whole call (Python >= 3.5)

    def close(self) -> None:
        pass


Route = Callable[["_Handler"], None]


class _Handler(BaseHTTPRequestHandler):
    """Serves one request whose head the event loop has read (`_Conn.buf`), on a request thread."""

    protocol_version = "HTTP/1.1"
    server_version = "flower-syncer"
    sys_version = ""
    rfile: _Reader  # type: ignore[assignment]
    wfile: _Writer  # type: ignore[assignment]

    def __init__(self, conn: _Conn, agent: AgentServer) -> None:  # not BaseRequestHandler's signature
        self.conn = conn
        self.agent = agent
        self.request = conn.sock
        self.connection = conn.sock
        self.client_address = conn.addr
        self.rfile = _Reader(conn.buf, conn.sock)
        self.wfile = _Writer(conn.sock, agent.request_timeout)  # headers and body leave together
        self.close_connection = True
        try:
            self.handle_one_request()
        finally:
            self.wfile.flush()  # an error the base class sent without flushing

    # -- plumbing ----------------------------------------------------------------------------------

    def handle_expect_100(self) -> bool:
        ok = super().handle_expect_100()
        self.wfile.flush()
        return ok

    def log_message(self, format: str, *args: Any) -> None:
        """The base class's stderr log (parse errors, timeouts): to structlog, debug level."""
        log.debug("http: " + (format % args), client=self.client_address[0])

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        pass  # logged by _dispatch, with the time taken

    def do_GET(self) -> None:
        self._dispatch()

    def do_HEAD(self) -> None:
        self._dispatch()

    def do_POST(self) -> None:
        self._dispatch()

    def do_PUT(self) -> None:
        self._dispatch()

    def do_DELETE(self) -> None:
        self._dispatch()

    def do_PATCH(self) -> None:
        self._dispatch()

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """Errors the base class finds (malformed request line, headers too large...), as JSON."""
        self.close_connection = True
        if self.request_version == "HTTP/0.9":  # the request line did not parse: answer with headers anyway
            self.request_version = "HTTP/1.0"
        log.debug("http: bad request", status=int(code), error=message, client=self.client_address[0])
        try:
            text = message or HTTPStatus(code).phrase
        except ValueError:
            text = message or "error"
        self._send(code, orjson.dumps({"error": text}), JSON, close=True)

    def _dispatch(self) -> None:
        start = time.monotonic()
        path = urlsplit(self.path).path
        self._status = 0
        if self.conn.limited:  # over a connection limit: one answer, then the connection closes
            self.close_connection = True
        try:
            routes = ROUTES.get(path)
            if routes is None:
                raise HttpError(404, f"no such path: {path}", close=self._has_body())
            method = "GET" if self.command == "HEAD" else self.command
            route = routes.get(method)
            if route is None:
                allow = ", ".join(sorted({*routes, *(["HEAD"] if "GET" in routes else [])}))
                raise HttpError(405, f"method {self.command} not allowed", close=self._has_body(),
                                headers={"Allow": allow})
            route(self)
        except HttpError as exc:
            self._json(exc.status, {"error": exc.message}, close=exc.close, headers=exc.headers)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception:
            log.exception("http: request failed", method=self.command, path=path)
            if not self._status:
                self._json(500, {"error": "internal error"}, close=True)
            else:
                self.close_connection = True
        finally:
            log.debug("http request", method=self.command, path=path, status=self._status,
                      seconds=round(time.monotonic() - start, 4), client=self.client_address[0])

    def _has_body(self) -> bool:
        return bool(self.headers.get("Content-Length", "0").strip() not in ("", "0")
                    or self.headers.get("Transfer-Encoding"))

    def _send(self, status: int, body: bytes, content_type: str, *, close: bool = False,
              headers: dict[str, str] | None = None) -> None:
        self._status = status
        if close:
            self.close_connection = True
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.send_header("X-Content-Type-Options", "nosniff")
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            self.close_connection = True

    def _json(self, status: int, payload: Any, *, close: bool = False, headers: dict[str, str] | None = None) -> None:
        self._send(status, orjson.dumps(payload, default=str), JSON, close=close, headers=headers)

    def _text(self, status: int, text: str) -> None:
        self._send(status, text.encode(), TEXT)

    def _read_body(self, limit: int) -> bytes:
        """The request body, at most `limit` bytes, arriving within the request timeout in total."""
        if self.headers.get("Transfer-Encoding"):
            raise HttpError(411, "a Content-Length is required (no chunked bodies)", close=True)
        raw = self.headers.get("Content-Length", "0").strip() or "0"
        if not raw.isdigit():
            raise HttpError(400, "invalid Content-Length", close=True)
        length = int(raw)
        if length > limit:
            raise HttpError(413, f"body larger than {limit} bytes", close=True)
        deadline = time.monotonic() + self.agent.request_timeout
        chunks: list[bytes] = []
        left = length
        try:
            while left > 0:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise HttpError(408, "the request body took too long", close=True)
                self.connection.settimeout(remaining)
                chunk = self.rfile.read1(min(left, 65536))
                if not chunk:
                    raise HttpError(400, "the request body ended early", close=True)
                chunks.append(chunk)
                left -= len(chunk)
        except TimeoutError:
            raise HttpError(408, "the request body took too long", close=True) from None
        finally:
            self.connection.settimeout(self.agent.request_timeout)
        return b"".join(chunks)

    # -- routes --------------------------------------------------------------------------------------

    def _require_token(self, what: str) -> None:
        """401 unless the request carries the API bearer token (always 401 when none is configured)."""
        token = self.agent.api_token
        if token is None or not _bearer_ok(self.headers.get("Authorization", ""), token):
            self.agent.rate_log("warning", f"http: {what} refused: missing or wrong bearer token",
                                client=self.client_address[0])
            raise HttpError(401, "missing or invalid bearer token", close=self._has_body(),
                            headers={"WWW-Authenticate": 'Bearer realm="flower-syncer"'})

    def metrics(self) -> None:
        if self.agent.protect_reads:
            self._require_token("metrics")
        self._send(200, self.agent.metrics.exposition(), METRICS_CONTENT_TYPE)

    def healthz(self) -> None:
        try:
            healthy = self.agent.api.healthy()
        except Exception as exc:
            log.warning("http: health check failed", error=str(exc))
            healthy = False
        if healthy:
            self._text(200, "ok\n")
        else:
            self._text(503, "unhealthy\n")

    def readyz(self) -> None:
        try:
            ready, reason = self.agent.api.ready()
        except Exception as exc:
            log.warning("http: readiness check failed", error=str(exc))
            ready, reason = False, "readiness check failed"
        if ready:
            self._text(200, "ok\n")
        else:
            self._text(503, f"not ready: {reason or 'unknown'}\n")

    def status(self) -> None:
        if self.agent.protect_reads:
            self._require_token("status")
        self._json(200, self.agent.api.status())

    def resync(self) -> None:
        token = self.agent.api_token
        if token is None:
            raise HttpError(404, "the resync API is not configured (no API token)", close=self._has_body())
        self._require_token("resync")
        unit, wait, timeout = _resync_args(self._read_body(MAX_API_BODY_BYTES))
        try:
            result = self.agent.api.resync(unit, wait, timeout)
        except KeyError:
            raise HttpError(404, f"unknown unit: {unit}") from None
        self._json(200, result)

    def webhook(self) -> None:
        secret = self.agent.webhook_secret
        if secret is None:
            raise HttpError(404, "webhook not configured", close=self._has_body())
        body = self._read_body(MAX_BODY_BYTES)
        try:
            event = verify(dict(self.headers.items()), body, secret)
        except WebhookRejected as exc:
            self.agent.rate_log("warning", "http: webhook rejected", reason=exc.reason,
                                client=self.client_address[0])
            raise HttpError(401, exc.reason) from None
        answer = {"provider": event.provider, "ref": event.ref, "after": event.after}
        if not self.agent.replays.first_time(event):
            log.debug("http: webhook delivery seen before; ignored", provider=event.provider,
                      delivery=event.delivery)
            self._json(200, {"accepted": False, "duplicate": True, **answer, "delivery": event.delivery})
            return
        log.debug("http: webhook accepted", provider=event.provider, ref=event.ref, after=event.after,
                  delivery=event.delivery)
        self.agent.api.webhook(event)
        self._json(202, {"accepted": True, **answer})


ROUTES: dict[str, dict[str, Route]] = {
    "/metrics": {"GET": _Handler.metrics},
    "/healthz": {"GET": _Handler.healthz},
    "/readyz": {"GET": _Handler.readyz},
    "/api/v1/status": {"GET": _Handler.status},
    "/api/v1/resync": {"POST": _Handler.resync},
    "/hooks/git": {"POST": _Handler.webhook},
}


def _bearer_ok(header: str, token: str) -> bool:
    scheme, _, value = header.strip().partition(" ")
    if scheme.lower() != "bearer":
        return False
    # constant time, and digests of equal length so not even the token's length shows
    given = hashlib.sha256(value.strip().encode("utf-8", "surrogateescape")).digest()
    expected = hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()
    return hmac.compare_digest(given, expected)


def _resync_args(body: bytes) -> tuple[str | None, bool, float]:
    """(unit, wait, timeout) from an optional JSON object; HttpError 400 when it is not one."""
    if not body.strip():
        return None, False, DEFAULT_RESYNC_TIMEOUT
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise HttpError(400, f"the body is not valid JSON (at character {exc.pos})") from None
    if not isinstance(payload, dict):
        raise HttpError(400, "the body must be a JSON object")
    unknown = sorted(set(payload) - {"unit", "wait", "timeout"})
    if unknown:
        raise HttpError(400, f"unknown field(s): {', '.join(unknown)} (expected unit, wait, timeout)")
    unit = payload.get("unit")
    if unit is not None and (not isinstance(unit, str) or not unit.strip()):
        raise HttpError(400, "unit must be a non-empty string")
    wait = payload.get("wait", False)
    if not isinstance(wait, bool):
        raise HttpError(400, "wait must be true or false")
    timeout = payload.get("timeout", DEFAULT_RESYNC_TIMEOUT)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout <= MAX_RESYNC_TIMEOUT:
        raise HttpError(400, f"timeout must be a number of seconds in (0, {MAX_RESYNC_TIMEOUT:g}]")
    return (unit.strip() if unit else None), wait, float(timeout)
