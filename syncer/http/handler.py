"""One request of the agent's HTTP server, on a request thread: the routes and their answers."""

from __future__ import annotations

import hashlib
import hmac
import socket
import time
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlencode, urlsplit

import orjson

from syncer.cluster.client import ApiError, ClusterUnreachable
from syncer.cluster.fence import Fenced
from syncer.http import pages
from syncer.http.assets import CSS, JS
from syncer.http.limits import (
    DEFAULT_RESYNC_TIMEOUT,
    JSON,
    MAX_API_BODY_BYTES,
    MAX_RESYNC_TIMEOUT,
    TEXT,
    HttpError,
    log,
)
from syncer.http.pages import FILTERS
from syncer.http.webview import (
    CSP,
    EVENT_STREAM,
    HTML,
    Follower,
    Streams,
    ViewAPI,
    follow,
    form_of,
    peer_gone,
    query_of,
)
from syncer.identity import UnknownUnit
from syncer.observe.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from syncer.source.webhook import MAX_BODY_BYTES, WebhookRejected, verify

if TYPE_CHECKING:
    from syncer.http.context import Conn, RequestContext

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


Route = Callable[["Handler"], None]


class Handler(BaseHTTPRequestHandler):
    """Serves one request whose head the event loop has read (`Conn.buf`), on a request thread."""

    protocol_version = "HTTP/1.1"
    server_version = "flower-syncer"
    sys_version = ""
    rfile: _Reader  # type: ignore[assignment]
    wfile: _Writer  # type: ignore[assignment]

    def __init__(self, conn: Conn, agent: RequestContext) -> None:  # not BaseRequestHandler's signature
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
        self.agent.rate_log("debug", "http: protocol error", detail=(format % args)[:300],
                            client=self.client_address[0])

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
        self.agent.rate_log("debug", "http: bad request", status=int(code), error=message,
                            client=self.client_address[0])
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
        except Exception as exc:  # a bug of ours: a 500, and one line with the traceback at a bounded rate
            self.agent.rate_log("error", "http: request failed", method=self.command, path=path,
                                error=f"{type(exc).__name__}: {exc}"[:300], exc_info=exc)
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

    def _send(self, status: int, body: bytes | bytearray, content_type: str, *, close: bool = False,
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
                self.wfile.write(cast(bytes, body))  # any buffer will do; typeshed's writer says bytes
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
        if not (raw.isascii() and raw.isdigit()):  # "²".isdigit() is True, and int("²") a ValueError
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
            self.agent.rate_log("warning", "http: health check failed", error=f"{type(exc).__name__}: {exc}"[:300])
            healthy = False
        if healthy:
            self._text(200, "ok\n")
        else:
            self._text(503, "unhealthy\n")

    def readyz(self) -> None:
        try:
            ready, reason = self.agent.api.ready()
        except Exception as exc:
            self.agent.rate_log("warning", "http: readiness check failed",
                                error=f"{type(exc).__name__}: {exc}"[:300])
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
        except UnknownUnit as exc:
            raise HttpError(404, f"unknown unit: {exc.selector}") from None
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

    # -- the web view (syncer.http.webview, syncer.http.pages) -------------------------------------------

    def _view(self) -> tuple[ViewAPI, Streams]:
        """The web view, or 404 when the agent serves none; with `protect_reads`, the token first."""
        view, streams = self.agent.view, self.agent.streams
        if view is None or streams is None:
            raise HttpError(404, "the web view is not enabled", close=self._has_body())
        if self.agent.protect_reads and self.command == "GET":
            self._require_token("web view")
        return view, streams

    def _html(self, status: int, text: str, headers: dict[str, str] | None = None) -> None:
        self._send(status, text.encode(), HTML, headers={"Content-Security-Policy": CSP,
                                                         "Referrer-Policy": "no-referrer", **(headers or {})})

    def _redirect(self, location: str) -> None:
        self._send(303, b"", HTML, headers={"Location": location})

    def root(self) -> None:
        self._view()
        self._redirect("/ui/")

    def ui_css(self) -> None:
        self._view()
        self._send(200, CSS.encode(), "text/css; charset=utf-8")

    def ui_js(self) -> None:
        self._view()
        self._send(200, JS.encode(), "text/javascript; charset=utf-8")

    def ui_overview(self) -> None:
        view, _ = self._view()
        query = query_of(urlsplit(self.path).query)
        self._html(200, pages.overview(view.rows(), query))

    def ui_unit(self) -> None:
        view, _ = self._view()
        query = query_of(urlsplit(self.path).query, ("id", "done"))
        unit = view.unit(query.get("id", ""))
        if unit is None:
            self._html(404, pages.message_page("No such unit", f"The agent knows no unit {query.get('id', '')!r}."))
            return
        notice = _DONE.get(query.get("done", ""), "")
        activity = view.activity(query.get("id", ""))  # Events and the next sync: this request only
        self._html(200, pages.unit_page(unit, actions=self.agent.api_token is not None, notice=notice,
                                        activity=activity))

    def ui_events(self) -> None:
        """Server-sent events: what changed on the page (see syncer.http.webview)."""
        _, streams = self._view()
        query = query_of(urlsplit(self.path).query, (*FILTERS, "view", "id"))
        kind = query.get("view", "overview")
        if kind not in ("overview", "unit"):
            raise HttpError(400, "view must be overview or unit")
        client = self.client_address[0]
        if not streams.acquire(client):
            self.agent.rate_log("warning", "http: too many web view streams; refusing one", client=client)
            raise HttpError(503, "too many open pages", close=True, headers={"Retry-After": "5"})
        try:
            self.close_connection = True
            self._status = 200
            self.send_response(200)
            for name, value in (("Content-Type", EVENT_STREAM), ("Cache-Control", "no-store"),
                                ("X-Content-Type-Options", "nosniff"), ("Connection", "close")):
                self.send_header(name, value)
            self.end_headers()
            self.wfile.flush()
            if self.command == "HEAD":
                return

            def send(data: bytes) -> None:
                self.wfile.write(data)
                self.wfile.flush()

            connection = self.connection.fileno()
            follow(streams, Follower(streams.snapshots, kind, query), send, gone=lambda: peer_gone(connection))
        except (OSError, TimeoutError):  # the client went away, or stopped reading
            self.close_connection = True
        finally:
            streams.release(client)

    def _authorized_action(self) -> tuple[ViewAPI, str, dict[str, str]] | None:
        """`_action`, its refusals (401, 403) answered as a page a person can read; None then."""
        try:
            return self._action()
        except HttpError as exc:
            if exc.status not in (401, 403):
                raise
            if exc.close:
                self.close_connection = True
            self._html(exc.status, pages.message_page("Not allowed", f"Nothing was done: {exc.message}."),
                       headers=exc.headers)
            return None

    def _action(self) -> tuple[ViewAPI, str, dict[str, str]]:
        """An action's form, authorized: the API token in the form (or the Authorization header),
        never a cookie, and no cross-site Origin; 401/403 otherwise, and nothing happens."""
        view, _ = self._view()
        if self.agent.api_token is None:
            raise HttpError(404, "actions are off: the agent has no API token", close=self._has_body())
        origin = self.headers.get("Origin")
        # `Origin: null` is let through: with the pages' Referrer-Policy no-referrer, Chromium sends it on
        # a same-origin form POST (the token in the form is what authorizes an action)
        if origin and origin != "null" and urlsplit(origin).netloc != self.headers.get("Host", ""):
            self.agent.rate_log("warning", "http: web view action refused: cross-site request",
                                client=self.client_address[0])
            raise HttpError(403, "cross-site request refused", close=self._has_body())
        form = form_of(self._read_body(MAX_API_BODY_BYTES))
        token = form.get("token", "")
        if not (token and _bearer_ok("Bearer " + token, self.agent.api_token)):
            self._require_token("web view action")
        unit = form.get("id", "").strip()
        if not unit:
            raise HttpError(400, "the form names no unit (id)")
        return view, unit, form

    def _unit_or_404(self, view: ViewAPI, unit: str) -> bool:
        if view.unit(unit) is None:
            self._html(404, pages.message_page("No such unit", f"The agent knows no unit {unit!r}."))
            return False
        return True

    def _act_on(self, view: ViewAPI, unit: str, act: Callable[[], str], missing: str) -> None:
        """One web view action on `unit`: 404 when the view knows no such unit (or `act` says so),
        503 when the cluster refused the write, else back to the unit's page saying what `act` did
        (a key of _DONE)."""
        if not self._unit_or_404(view, unit):
            return
        try:
            done = act()
        except UnknownUnit:
            self._html(404, pages.message_page("No such unit", missing.format(unit=unit)))
            return
        except (ApiError, ClusterUnreachable, Fenced) as exc:  # the cluster said no: the page says so
            self._html(503, pages.message_page("Not changed", f"The cluster did not take the change: {exc}"))
            return
        self._redirect(pages.unit_href(unit) + "&" + urlencode({"done": done}))

    def ui_resync(self) -> None:
        action = self._authorized_action()
        if action is None:
            return
        view, unit, _ = action

        def resync() -> str:
            self.agent.api.resync(unit, False, DEFAULT_RESYNC_TIMEOUT)
            return "resync"

        self._act_on(view, unit, resync, "The agent knows no unit {unit!r}.")

    def ui_suspend(self) -> None:
        action = self._authorized_action()
        if action is None:
            return
        view, unit, form = action
        if form.get("suspend") not in ("suspend", "resume"):
            raise HttpError(400, "suspend must be suspend or resume")
        wanted = form["suspend"]

        def suspend() -> str:
            return wanted if view.suspend(unit, wanted == "suspend") else "unchanged"

        self._act_on(view, unit, suspend, "The agent has applied no unit {unit!r}.")

    def ui_release_hold(self) -> None:
        action = self._authorized_action()
        if action is None:
            return
        view, unit, _ = action
        self._act_on(view, unit, lambda: "release" if view.release_hold(unit) else "unchanged",
                     "The agent has no unit {unit!r} in Git.")


ROUTES: dict[str, dict[str, Route]] = {
    "/": {"GET": Handler.root},
    "/ui/": {"GET": Handler.ui_overview},
    "/ui/unit": {"GET": Handler.ui_unit},
    "/ui/events": {"GET": Handler.ui_events},
    "/ui/app.css": {"GET": Handler.ui_css},
    "/ui/app.js": {"GET": Handler.ui_js},
    "/ui/resync": {"POST": Handler.ui_resync},
    "/ui/suspend": {"POST": Handler.ui_suspend},
    "/ui/release-hold": {"POST": Handler.ui_release_hold},
    "/metrics": {"GET": Handler.metrics},
    "/healthz": {"GET": Handler.healthz},
    "/readyz": {"GET": Handler.readyz},
    "/api/v1/status": {"GET": Handler.status},
    "/api/v1/resync": {"POST": Handler.resync},
    "/hooks/git": {"POST": Handler.webhook},
}


_DONE = {"resync": "Resync requested.", "suspend": "Suspended.", "resume": "Resumed.",
         "release": "Hold released: the held restarts go ahead now.",
         "unchanged": "Nothing to do: it already was in that state."}


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

