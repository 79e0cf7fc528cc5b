"""The agent's HTTP server: metrics, health, the status/resync API and the Git webhook.

Standard library only (`http.server.ThreadingHTTPServer`), on a thread of its own:

=======  ==================  =============================================================================
method   path                answer
=======  ==================  =============================================================================
GET      ``/metrics``        Prometheus text format
GET      ``/healthz``        200 ``ok`` / 503 (the agent's loops are stuck)
GET      ``/readyz``         200 ``ok`` / 503 with the reason
GET      ``/api/v1/status``  the agent's status (JSON)
POST     ``/api/v1/resync``  ``Authorization: Bearer <token>``; body ``{"unit", "wait", "timeout"}``, all
                             optional; 200 with the result, 401, 400, 404 (unknown unit; or no token is
                             configured), 413
POST     ``/hooks/git``      a push webhook (GitHub, GitLab, generic; see `syncer.source.webhook`): 202
                             accepted, 401 rejected (nothing happens), 404 when no secret is configured,
                             413 over ``MAX_BODY_BYTES``
=======  ==================  =============================================================================

GET routes answer HEAD too. Errors are JSON ``{"error": "..."}``. Each connection gets its own
thread (at most `max_connections` at once; more are answered 503 and closed) and a socket timeout,
and a request body must arrive within `request_timeout` in total, so a slow client holds only its
own thread. Requests are logged at debug level: method, path without the query, status, time and
client address, never headers or bodies.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import selectors
import socket
import sys
import threading
import time
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol
from urllib.parse import urlsplit

import orjson
import structlog

from syncer.observe.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from syncer.observe.metrics import Metrics
from syncer.source.webhook import MAX_BODY_BYTES, PushEvent, WebhookRejected, verify

log = structlog.get_logger("syncer.http")

MAX_API_BODY_BYTES = 64 * 1024
MAX_RESYNC_TIMEOUT = 3600.0
DEFAULT_RESYNC_TIMEOUT = 60.0
JSON = "application/json"
TEXT = "text/plain; charset=utf-8"


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


class AgentServer:
    """`start()` binds and serves on a daemon thread; `stop()` stops accepting and closes."""

    def __init__(self, api: AgentAPI, metrics: Metrics, *, host: str = "127.0.0.1", port: int = 0,
                 api_token: str | None = None, webhook_secret: str | None = None,
                 request_timeout: float = 10.0, max_connections: int = 64) -> None:
        self.api = api
        self.metrics = metrics
        self.host = host
        self.port = port
        self.api_token = api_token or None
        self.webhook_secret = webhook_secret or None
        self.request_timeout = request_timeout
        self.max_connections = max_connections
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._wake: tuple[socket.socket, socket.socket] | None = None
        self._stopping = threading.Event()

    @property
    def address(self) -> tuple[str, int]:
        """The bound host and port (the real port when 0 was asked for)."""
        if self._server is None:
            raise RuntimeError("the server is not started")
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    def start(self) -> None:
        if self._server is not None:
            raise RuntimeError("the server is already started")
        server_cls = _Server6 if ":" in self.host else _Server
        self._server = server_cls((self.host, self.port), _Handler, self)
        self._stopping.clear()
        self._wake = socket.socketpair()
        self._thread = threading.Thread(target=self._serve, args=(self._server, self._wake[0]), name="http",
                                        daemon=True)
        self._thread.start()
        log.debug("http server listening", address=f"{self.address[0]}:{self.address[1]}")

    def stop(self) -> None:
        """Stop accepting connections and close the socket, at once. Requests in flight finish on
        their (daemon) threads."""
        server, thread, wake = self._server, self._thread, self._wake
        if server is None:
            return
        self._stopping.set()
        if wake is not None:
            with contextlib.suppress(OSError):
                wake[1].send(b"x")
        if thread is not None:
            thread.join(5)
        server.server_close()
        if wake is not None:
            for sock in wake:
                sock.close()
        self._server = self._thread = self._wake = None

    def _serve(self, server: _Server, wake: socket.socket) -> None:
        """Accept connections until `stop()` (which wakes the selector through `wake`)."""
        with selectors.DefaultSelector() as selector:
            selector.register(server, selectors.EVENT_READ)
            selector.register(wake, selectors.EVENT_READ)
            while not self._stopping.is_set():
                for key, _ in selector.select():
                    if key.fileobj is server and not self._stopping.is_set():
                        server.handle_request()  # ready: accepts one connection without waiting


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True

    timeout = 0.5  # handle_request() gives up after this when the connection went away before accept

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], agent: AgentServer) -> None:
        self.agent = agent
        self.slots = threading.BoundedSemaphore(agent.max_connections)
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            log.warning("http: too many connections; refusing one", limit=self.agent.max_connections)
            body = b'{"error": "too many connections"}'
            with contextlib.suppress(OSError):
                request.settimeout(1.0)
                request.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                                b"Content-Length: " + str(len(body)).encode() + b"\r\nConnection: close\r\n"
                                b"Retry-After: 1\r\n\r\n" + body)
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def handle_error(self, request: Any, client_address: Any) -> None:
        """An exception outside the routes (e.g. the client went away during the final flush): log
        it instead of printing a traceback to stderr."""
        exc = sys.exc_info()[1]
        if isinstance(exc, ConnectionError | TimeoutError):
            log.debug("http: connection error", error=repr(exc))
        else:
            log.exception("http: connection failed")

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()


class _Server6(_Server):
    address_family = socket.AF_INET6


Route = Callable[["_Handler"], None]


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    server_version = "flower-syncer"
    sys_version = ""
    wbufsize = -1  # buffered: headers and body leave together (flushed after each request by the base class)
    disable_nagle_algorithm = True

    # -- plumbing ----------------------------------------------------------------------------------

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(self.server.agent.request_timeout)  # every read and write

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
        deadline = time.monotonic() + self.server.agent.request_timeout
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
            self.connection.settimeout(self.server.agent.request_timeout)
        return b"".join(chunks)

    # -- routes --------------------------------------------------------------------------------------

    def metrics(self) -> None:
        self._send(200, self.server.agent.metrics.exposition(), METRICS_CONTENT_TYPE)

    def healthz(self) -> None:
        try:
            healthy = self.server.agent.api.healthy()
        except Exception as exc:
            log.warning("http: health check failed", error=str(exc))
            healthy = False
        if healthy:
            self._text(200, "ok\n")
        else:
            self._text(503, "unhealthy\n")

    def readyz(self) -> None:
        try:
            ready, reason = self.server.agent.api.ready()
        except Exception as exc:
            log.warning("http: readiness check failed", error=str(exc))
            ready, reason = False, "readiness check failed"
        if ready:
            self._text(200, "ok\n")
        else:
            self._text(503, f"not ready: {reason or 'unknown'}\n")

    def status(self) -> None:
        self._json(200, self.server.agent.api.status())

    def resync(self) -> None:
        token = self.server.agent.api_token
        if token is None:
            raise HttpError(404, "the resync API is not configured (no API token)", close=self._has_body())
        if not _bearer_ok(self.headers.get("Authorization", ""), token):
            log.info("http: resync refused: missing or wrong bearer token", client=self.client_address[0])
            raise HttpError(401, "missing or invalid bearer token", close=self._has_body(),
                            headers={"WWW-Authenticate": 'Bearer realm="flower-syncer"'})
        unit, wait, timeout = _resync_args(self._read_body(MAX_API_BODY_BYTES))
        try:
            result = self.server.agent.api.resync(unit, wait, timeout)
        except KeyError:
            raise HttpError(404, f"unknown unit: {unit}") from None
        self._json(200, result)

    def webhook(self) -> None:
        secret = self.server.agent.webhook_secret
        if secret is None:
            raise HttpError(404, "webhook not configured", close=self._has_body())
        body = self._read_body(MAX_BODY_BYTES)
        try:
            event = verify(dict(self.headers.items()), body, secret)
        except WebhookRejected as exc:
            log.info("http: webhook rejected", reason=exc.reason, client=self.client_address[0])
            raise HttpError(401, exc.reason) from None
        log.debug("http: webhook accepted", provider=event.provider, ref=event.ref, after=event.after)
        self.server.agent.api.webhook(event)
        self._json(202, {"accepted": True, "provider": event.provider, "ref": event.ref, "after": event.after})


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
