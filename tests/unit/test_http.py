"""The agent's HTTP server on 127.0.0.1 with a fake agent: routes, auth, limits, slow clients."""

from __future__ import annotations

import hashlib
import hmac
import http.client
import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from structlog.testing import capture_logs

from syncer.http import MAX_API_BODY_BYTES, AgentServer
from syncer.identity import UnknownUnit
from syncer.observe.metrics import Metrics
from syncer.source.webhook import MAX_BODY_BYTES, PushEvent
from tests.conftest import wait_until

TOKEN = "s3cret-api-token"
SECRET = "hook-secret"
FED = "federation/flower/fed"


class FakeAPI:
    def __init__(self) -> None:
        self.is_healthy = True
        self.readiness = (True, "")
        self.payload: dict[str, Any] = {"ready": True, "revision": "abc123", "units": [{"unit": FED}]}
        self.resyncs: list[tuple[str | None, bool, float]] = []
        self.events: list[PushEvent] = []
        self.fail_status = False
        self.resync_gate: threading.Event | None = None  # a resync waits for it when set

    def healthy(self) -> bool:
        return self.is_healthy

    def ready(self) -> tuple[bool, str]:
        return self.readiness

    def status(self) -> dict[str, Any]:
        if self.fail_status:
            raise RuntimeError("boom with a secret value")
        return self.payload

    def resync(self, unit: str | None, wait: bool, timeout: float) -> dict[str, Any]:
        self.resyncs.append((unit, wait, timeout))
        if unit is not None and unit not in (FED, "fed"):
            raise UnknownUnit(unit or "")
        if self.resync_gate is not None:
            assert self.resync_gate.wait(30), "the test never let the resync finish"
        return {"ok": True, "units": [unit or FED], "waited": wait}

    def webhook(self, event: PushEvent) -> None:
        self.events.append(event)


Response = tuple[int, dict[str, str], bytes]


class Client:
    def __init__(self, server: AgentServer) -> None:
        self.host, self.port = server.address

    def request(self, method: str, path: str, body: bytes | str | None = None,
                headers: dict[str, str] | None = None) -> Response:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=5)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            resp = conn.getresponse()
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
        finally:
            conn.close()

    def json(self, method: str, path: str, payload: Any = None, token: str | None = TOKEN) -> tuple[int, Any]:
        headers = {"Content-Type": "application/json"}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        body = json.dumps(payload) if payload is not None else None
        status, _, raw = self.request(method, path, body, headers)
        return status, json.loads(raw)

    def raw(self) -> socket.socket:
        return socket.create_connection((self.host, self.port), timeout=5)


def read_all(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


@pytest.fixture
def api() -> FakeAPI:
    return FakeAPI()


@pytest.fixture
def metrics() -> Metrics:
    return Metrics()


@pytest.fixture
def server(api: FakeAPI, metrics: Metrics) -> Iterator[AgentServer]:
    s = AgentServer(api, metrics, api_token=TOKEN, webhook_secret=SECRET, request_timeout=1.0, max_connections=8)
    s.start()
    yield s
    s.stop()


@pytest.fixture
def client(server: AgentServer) -> Client:
    return Client(server)


# -- plain routes ------------------------------------------------------------------------------------


def test_address_is_loopback_with_a_real_port(server: AgentServer) -> None:
    host, port = server.address
    assert host == "127.0.0.1" and port > 0


def test_metrics(client: Client, metrics: Metrics) -> None:
    metrics.set_queue_depth(4)
    status, headers, body = client.request("GET", "/metrics")
    assert status == 200
    assert headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    text = body.decode()
    assert "flower_syncer_up 1.0" in text
    assert "flower_syncer_queue_depth 4.0" in text


def test_healthz(client: Client, api: FakeAPI) -> None:
    assert client.request("GET", "/healthz")[::2] == (200, b"ok\n")
    api.is_healthy = False
    assert client.request("GET", "/healthz")[::2] == (503, b"unhealthy\n")


def test_readyz_says_why_not(client: Client, api: FakeAPI) -> None:
    assert client.request("GET", "/readyz")[::2] == (200, b"ok\n")
    api.readiness = (False, "the first revision is not loaded yet")
    status, headers, body = client.request("GET", "/readyz")
    assert status == 503
    assert body == b"not ready: the first revision is not loaded yet\n"
    assert headers["content-type"].startswith("text/plain")


def test_status_json(client: Client, api: FakeAPI) -> None:
    status, headers, body = client.request("GET", "/api/v1/status")
    assert status == 200
    assert headers["content-type"] == "application/json"
    assert json.loads(body) == api.payload


def test_protected_reads_need_the_api_token(api: FakeAPI, metrics: Metrics) -> None:
    s = AgentServer(api, metrics, api_token=TOKEN, protect_reads=True)
    s.start()
    c = Client(s)
    try:
        with capture_logs() as logs:
            for path in ("/metrics", "/api/v1/status"):
                for headers in ({}, {"Authorization": "Bearer guess-token"}, {"Authorization": f"Basic {TOKEN}"}):
                    status, resp_headers, raw = c.request("GET", path, headers=headers)
                    assert status == 401 and resp_headers["www-authenticate"].startswith("Bearer"), path
                    assert b"flower_syncer" not in raw and b"revision" not in raw
                assert c.request("GET", path, headers={"Authorization": f"Bearer {TOKEN}"})[0] == 200
            # the probes stay open: the kubelet sends no token
            assert c.request("GET", "/healthz")[0] == 200
            assert c.request("GET", "/readyz")[0] == 200
        assert TOKEN not in repr(logs) and "guess-token" not in repr(logs)
    finally:
        s.stop()
    # protected without a token configured: nobody reads
    s = AgentServer(api, metrics, api_token=None, protect_reads=True)
    s.start()
    try:
        with capture_logs():
            assert Client(s).request("GET", "/api/v1/status")[0] == 401
    finally:
        s.stop()


def test_handler_exception_is_a_500_without_details(client: Client, api: FakeAPI) -> None:
    api.fail_status = True
    with capture_logs():  # the traceback is logged, not printed
        status, body = client.json("GET", "/api/v1/status")
    assert status == 500
    assert body == {"error": "internal error"}


def test_unknown_path_and_wrong_method(client: Client) -> None:
    status, body = client.json("GET", "/nope")
    assert status == 404 and body == {"error": "no such path: /nope"}
    status, headers, raw = client.request("POST", "/metrics", b"x")
    assert status == 405
    assert headers["allow"] == "GET, HEAD"
    assert json.loads(raw) == {"error": "method POST not allowed"}
    status, headers, _ = client.request("GET", "/api/v1/resync")
    assert status == 405 and headers["allow"] == "POST"
    assert client.request("DELETE", "/healthz")[0] == 405


def test_head_and_query_strings(client: Client) -> None:
    status, headers, body = client.request("HEAD", "/healthz")
    assert status == 200 and body == b"" and headers["content-length"] == "3"
    assert client.request("GET", "/healthz?verbose=1")[0] == 200


def test_keep_alive_serves_several_requests_on_one_connection(server: AgentServer) -> None:
    conn = http.client.HTTPConnection(*server.address, timeout=5)
    try:
        for path in ("/healthz", "/readyz", "/metrics", "/api/v1/status"):
            conn.request("GET", path)
            resp = conn.getresponse()
            resp.read()
            assert resp.status == 200
    finally:
        conn.close()


def test_pipelined_requests_are_answered_in_order(server: AgentServer, api: FakeAPI) -> None:
    """Several requests in one write (a body among them): each is answered, in order; the
    server reads no further than each request's end."""
    body = json.dumps({"unit": FED}).encode()
    sock = Client(server).raw()
    try:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
                     b"POST /api/v1/resync HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + TOKEN.encode()
                     + b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
                     + b"GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        reply = read_all(sock)
    finally:
        sock.close()
    assert reply.count(b"HTTP/1.1 ") == reply.count(b"HTTP/1.1 200 OK\r\n") == 3
    assert reply.index(b"ok\n") < reply.index(b'"waited"') < reply.rindex(b"ok\n")
    assert api.resyncs == [(FED, False, 60.0)]


def test_expect_100_continue(server: AgentServer, api: FakeAPI) -> None:
    body = json.dumps({"unit": FED}).encode()
    sock = Client(server).raw()
    try:
        sock.sendall(b"POST /api/v1/resync HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + TOKEN.encode()
                     + b"\r\nExpect: 100-continue\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n")
        assert sock.recv(65536).startswith(b"HTTP/1.1 100 Continue\r\n")  # before the body is sent
        sock.sendall(body)
        assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")
    finally:
        sock.close()
    assert api.resyncs == [(FED, False, 60.0)]


def test_leading_empty_lines_and_http_1_0(server: AgentServer) -> None:
    sock = Client(server).raw()
    try:
        sock.sendall(b"\r\n\r\nGET /healthz HTTP/1.0\r\n\r\n")
        reply = read_all(sock)  # HTTP/1.0 without keep-alive: answered, then closed
    finally:
        sock.close()
    assert reply.startswith(b"HTTP/1.1 200 ") and reply.endswith(b"ok\n")


def test_ipv6_loopback(api: FakeAPI, metrics: Metrics) -> None:
    if not socket.has_ipv6:
        pytest.skip("no IPv6")
    s = AgentServer(api, metrics, host="::1")
    try:
        s.start()
    except OSError as exc:
        pytest.skip(f"no IPv6 loopback: {exc}")
    try:
        assert s.address[0] == "::1"
        assert Client(s).request("GET", "/healthz")[0] == 200
    finally:
        s.stop()


# -- resync --------------------------------------------------------------------------------------------


def test_resync_with_token(client: Client, api: FakeAPI) -> None:
    status, body = client.json("POST", "/api/v1/resync", {"unit": FED, "wait": True, "timeout": 30})
    assert status == 200
    assert body == {"ok": True, "units": [FED], "waited": True}
    assert api.resyncs == [(FED, True, 30.0)]


def test_resync_body_is_optional(client: Client, api: FakeAPI) -> None:
    status, _, raw = client.request("POST", "/api/v1/resync", None, {"Authorization": f"Bearer {TOKEN}"})
    assert status == 200
    assert json.loads(raw)["ok"] is True
    assert client.json("POST", "/api/v1/resync", {})[0] == 200
    assert api.resyncs == [(None, False, 60.0), (None, False, 60.0)]


@pytest.mark.parametrize("authorization", [None, "Bearer wrong", f"Basic {TOKEN}", f"Bearer {TOKEN}x", "Bearer ",
                                           TOKEN, f"bearer  {TOKEN[:-1]}"])
def test_resync_without_the_right_token_is_401(client: Client, api: FakeAPI, authorization: str | None) -> None:
    headers = {"Content-Type": "application/json"}
    if authorization is not None:
        headers["Authorization"] = authorization
    status, resp_headers, raw = client.request("POST", "/api/v1/resync", json.dumps({"unit": FED}), headers)
    assert status == 401
    assert resp_headers["www-authenticate"].startswith("Bearer")
    assert json.loads(raw) == {"error": "missing or invalid bearer token"}
    assert api.resyncs == []


def test_resync_scheme_is_case_insensitive(client: Client) -> None:
    status, _, _ = client.request("POST", "/api/v1/resync", None, {"Authorization": f"bearer {TOKEN}"})
    assert status == 200


def test_resync_unknown_unit_is_404(client: Client) -> None:
    status, body = client.json("POST", "/api/v1/resync", {"unit": "federation/x/missing"})
    assert status == 404
    assert body == {"error": "unknown unit: federation/x/missing"}


@pytest.mark.parametrize(("body", "message"), [
    (b"{not json", "not valid JSON"),
    (b"[1, 2]", "must be a JSON object"),
    (b'{"unit": 3}', "unit must be"),
    (b'{"unit": ""}', "unit must be"),
    (b'{"wait": "yes"}', "wait must be"),
    (b'{"timeout": -1}', "timeout must be"),
    (b'{"timeout": true}', "timeout must be"),
    (b'{"timeout": 1e9}', "timeout must be"),
    (b'{"units": ["a"]}', "unknown field(s): units"),
])
def test_resync_bad_body_is_400(client: Client, api: FakeAPI, body: bytes, message: str) -> None:
    status, _, raw = client.request("POST", "/api/v1/resync", body,
                                    {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})
    assert status == 400
    assert message in json.loads(raw)["error"]
    assert api.resyncs == []


def test_resync_oversize_body_is_413(client: Client, api: FakeAPI) -> None:
    body = b'{"unit": "' + b"x" * MAX_API_BODY_BYTES + b'"}'
    status, headers, raw = client.request("POST", "/api/v1/resync", body, {"Authorization": f"Bearer {TOKEN}"})
    assert status == 413
    assert headers["connection"] == "close"
    assert "larger than" in json.loads(raw)["error"]
    assert api.resyncs == []


def test_resync_disabled_without_a_token(api: FakeAPI, metrics: Metrics) -> None:
    s = AgentServer(api, metrics, api_token=None)
    s.start()
    try:
        status, body = Client(s).json("POST", "/api/v1/resync", {"unit": FED})
        assert status == 404
        assert "not configured" in body["error"]
        assert api.resyncs == []
        # and "" is no token either
        assert AgentServer(api, metrics, api_token="").api_token is None
    finally:
        s.stop()


def test_a_waiting_resync_does_not_block_other_requests(client: Client, api: FakeAPI) -> None:
    # The resync holds until the health check has its answer: a server that serves one request at a
    # time would never answer it (the client's timeout), however busy or quiet the machine is.
    api.resync_gate = threading.Event()
    done: list[int] = []
    t = threading.Thread(target=lambda: done.append(client.json("POST", "/api/v1/resync", {"wait": True})[0]))
    t.start()
    try:
        wait_until("the resync is in progress", lambda: len(api.resyncs) == 1, timeout=30)
        assert client.request("GET", "/healthz")[0] == 200
        assert done == []  # answered while the resync was still waiting
    finally:
        api.resync_gate.set()
    t.join(30)
    assert done == [200]


# -- webhook -------------------------------------------------------------------------------------------


def github_headers(body: bytes, secret: str = SECRET, event: str = "push") -> dict[str, str]:
    digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return {"X-GitHub-Event": event, "X-Hub-Signature-256": f"sha256={digest}",
            "Content-Type": "application/json"}


PUSH = json.dumps({"ref": "refs/heads/main", "after": "0123456789abcdef0123456789abcdef01234567"}).encode()


def test_webhook_good_signature_is_accepted(client: Client, api: FakeAPI) -> None:
    status, _, raw = client.request("POST", "/hooks/git", PUSH, github_headers(PUSH))
    assert status == 202
    assert json.loads(raw) == {"accepted": True, "provider": "github", "ref": "refs/heads/main",
                               "after": "0123456789abcdef0123456789abcdef01234567"}
    assert api.events == [PushEvent("github", "refs/heads/main", "0123456789abcdef0123456789abcdef01234567")]


def test_webhook_gitlab_token_and_github_ping(client: Client, api: FakeAPI) -> None:
    status, _, _ = client.request("POST", "/hooks/git", PUSH, {"X-Gitlab-Event": "Push Hook",
                                                              "X-Gitlab-Token": SECRET})
    assert status == 202
    status, _, _ = client.request("POST", "/hooks/git", b"{}", github_headers(b"{}", event="ping"))
    assert status == 202
    assert [e.provider for e in api.events] == ["gitlab", "github"]


@pytest.mark.parametrize("headers", [
    github_headers(PUSH, secret="wrong"),
    github_headers(PUSH + b" "),
    {"X-GitHub-Event": "push"},
    {"X-Gitlab-Event": "Push Hook", "X-Gitlab-Token": "wrong"},
    {},
])
def test_webhook_bad_signature_is_401_and_changes_nothing(client: Client, api: FakeAPI,
                                                          headers: dict[str, str]) -> None:
    status, _, raw = client.request("POST", "/hooks/git", PUSH, headers)
    assert status == 401
    assert json.loads(raw)["error"]
    assert api.events == []


def test_webhook_replayed_delivery_is_a_duplicate_and_fetches_nothing(client: Client, api: FakeAPI) -> None:
    headers = {**github_headers(PUSH), "X-GitHub-Delivery": "delivery-1"}
    assert client.request("POST", "/hooks/git", PUSH, headers)[0] == 202
    status, _, raw = client.request("POST", "/hooks/git", PUSH, headers)
    assert status == 200
    assert json.loads(raw) == {"accepted": False, "duplicate": True, "provider": "github", "ref": "refs/heads/main",
                               "after": "0123456789abcdef0123456789abcdef01234567", "delivery": "delivery-1"}
    assert [e.delivery for e in api.events] == ["delivery-1"]
    # a bad signature with a seen id is still a 401, and an unseen id is not burnt by a bad signature
    bad = {**github_headers(PUSH, secret="wrong"), "X-GitHub-Delivery": "delivery-2"}
    with capture_logs():
        assert client.request("POST", "/hooks/git", PUSH, bad)[0] == 401
    assert client.request("POST", "/hooks/git", PUSH, {**github_headers(PUSH), "X-GitHub-Delivery": "delivery-2"})[0] \
        == 202
    assert [e.delivery for e in api.events] == ["delivery-1", "delivery-2"]


def test_rejections_are_logged_at_a_bounded_rate_with_a_count(api: FakeAPI, metrics: Metrics) -> None:
    s = AgentServer(api, metrics, api_token=TOKEN, webhook_secret=SECRET, reject_log_interval=1.0)
    s.start()
    c = Client(s)
    try:
        with capture_logs() as logs:
            start = time.monotonic()
            for _ in range(20):
                assert c.request("POST", "/hooks/git", PUSH, github_headers(PUSH, secret="nope"))[0] == 401
                assert c.json("POST", "/api/v1/resync", {}, token="guess")[0] == 401
            end = time.monotonic()
            quick = end - start < 1.0  # the 40 requests fit in one interval (normally ~0.1 s)
            first = [e for e in logs if e["event"] == "http: webhook rejected"]
            wait_until("an interval after every line logged so far", lambda: time.monotonic() - end >= 1.0, timeout=5)
            assert c.request("POST", "/hooks/git", PUSH, github_headers(PUSH, secret="nope"))[0] == 401
    finally:
        s.stop()
    hooks = [e for e in logs if e["event"] == "http: webhook rejected"]
    tokens = [e for e in logs if e["event"] == "http: resync refused: missing or wrong bearer token"]
    assert first[0]["suppressed"] == 0 and first[0]["log_level"] == "warning"
    assert any(e["suppressed"] >= 1 for e in hooks)  # which line carries the count depends on the load
    # each of the 21 rejections: a line or a count (on the next line, or on a summary line once the
    # interval has passed without one)
    assert sum(0 if e.get("summary") else 1 for e in hooks) + sum(e["suppressed"] for e in hooks) == 21
    if quick:
        assert len(first) == 1 and sum(e["suppressed"] for e in hooks) == 19
        assert [e["suppressed"] for e in tokens if not e.get("summary")] == [0]
    text = repr(logs)
    for secret in (TOKEN, SECRET, "nope", "guess", "sha256="):
        assert secret not in text


def test_webhook_oversize_is_413_without_reading_the_body(client: Client, api: FakeAPI) -> None:
    sock = client.raw()
    try:
        sock.sendall(b"POST /hooks/git HTTP/1.1\r\nHost: x\r\nX-GitHub-Event: push\r\n"
                     b"Content-Length: " + str(MAX_BODY_BYTES + 1).encode() + b"\r\n\r\n")
        reply = sock.recv(65536)  # answered at once, not after a megabyte
    finally:
        sock.close()
    assert reply.startswith(b"HTTP/1.1 413 ")
    assert b"Connection: close" in reply
    assert api.events == []


def test_webhook_not_configured_is_404(api: FakeAPI, metrics: Metrics) -> None:
    s = AgentServer(api, metrics, api_token=TOKEN, webhook_secret=None)
    s.start()
    try:
        status, _, raw = Client(s).request("POST", "/hooks/git", PUSH, github_headers(PUSH))
        assert status == 404
        assert json.loads(raw) == {"error": "webhook not configured"}
        assert api.events == []
    finally:
        s.stop()


def test_chunked_body_is_refused(client: Client) -> None:
    sock = client.raw()
    try:
        sock.sendall(b"POST /hooks/git HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                     b"5\r\nhello\r\n0\r\n\r\n")
        reply = read_all(sock)
    finally:
        sock.close()
    assert reply.startswith(b"HTTP/1.1 411 ")


# -- slow and many clients -------------------------------------------------------------------------------


def test_slow_clients_do_not_block_others(api: FakeAPI, metrics: Metrics) -> None:
    """Two clients that never finish their requests, and a server whose deadline (30 s) is longer
    than the health check's client waits (5 s): a server that served one request at a time would
    never answer it, however busy or quiet the machine is."""
    server = AgentServer(api, metrics, api_token=TOKEN, request_timeout=30.0, max_connections=8)
    server.start()
    client = Client(server)
    slow_headers = client.raw()
    slow_headers.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # headers never finished
    slow_body = client.raw()
    slow_body.sendall(b"POST /api/v1/resync HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + TOKEN.encode()
                      + b"\r\nContent-Length: 100\r\n\r\n{\"un")  # body never finished
    try:
        assert client.request("GET", "/healthz")[0] == 200
    finally:
        slow_headers.close()
        slow_body.close()
        server.stop()


def test_slow_clients_time_out(client: Client) -> None:
    slow_headers = client.raw()
    slow_headers.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # headers never finished
    slow_body = client.raw()
    slow_body.sendall(b"POST /api/v1/resync HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + TOKEN.encode()
                      + b"\r\nContent-Length: 100\r\n\r\n{\"un")  # body never finished
    try:
        begin = time.monotonic()
        # the body deadline (request_timeout 1 s) answers 408 and closes
        reply = slow_body.recv(65536)
        assert reply.startswith(b"HTTP/1.1 408 ")
        assert time.monotonic() - begin < 3
        # the header reader is cut at the head deadline: 408, then closed
        slow_headers.settimeout(3)
        assert read_all(slow_headers).startswith(b"HTTP/1.1 408 ")
    finally:
        slow_headers.close()
        slow_body.close()


def test_trickling_body_is_cut_off_at_the_deadline(client: Client, api: FakeAPI) -> None:
    sock = client.raw()
    try:
        sock.sendall(b"POST /api/v1/resync HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + TOKEN.encode()
                     + b"\r\nContent-Length: 40\r\n\r\n")
        begin = time.monotonic()
        sock.settimeout(0.25)
        reply = b""
        for _ in range(12):  # a byte every 0.25 s: each read is quick, the whole is not
            try:
                sock.sendall(b" ")
                reply = sock.recv(65536)
                if reply:
                    break
            except TimeoutError:
                continue
            except OSError:
                break
        assert reply.startswith(b"HTTP/1.1 408 ")
        assert time.monotonic() - begin < 2
        assert api.resyncs == []
    finally:
        sock.close()



def test_connection_limit(api: FakeAPI, metrics: Metrics) -> None:
    s = AgentServer(api, metrics, request_timeout=5.0, max_connections=2)
    s.start()
    c = Client(s)
    idle = [c.raw(), c.raw()]
    try:
        wait_until("both accepted and holding a slot", lambda: s.open_connections == 2, timeout=5)
        with capture_logs():
            status, _, raw = c.request("GET", "/api/v1/status")
        assert status == 503
        assert json.loads(raw) == {"error": "too many connections"}
        # over the limit, the health probes still get their answer
        assert c.request("GET", "/healthz")[0] == 200
        assert c.request("HEAD", "/readyz")[0] == 200
        for sock in idle:
            sock.close()
        wait_until("the server sees EOF and gives the slots back", lambda: s.open_connections == 0, timeout=5)
        assert c.request("GET", "/api/v1/status")[0] == 200
    finally:
        for sock in idle:
            sock.close()
        s.stop()


def test_malformed_request_line_gets_a_json_400(client: Client) -> None:
    sock = client.raw()
    try:
        sock.sendall(b"GARBAGE\r\n\r\n")
        reply = read_all(sock)
    finally:
        sock.close()
    assert reply.startswith(b"HTTP/1.1 400 ")
    assert b'{"error":' in reply


def test_stop_closes_the_port(api: FakeAPI, metrics: Metrics) -> None:
    s = AgentServer(api, metrics)
    s.start()
    host, port = s.address
    s.stop()
    with pytest.raises(OSError):
        socket.create_connection((host, port), timeout=1).close()
    s.stop()  # twice is fine


# -- logging -------------------------------------------------------------------------------------------------


def test_requests_are_logged_at_debug_without_headers_or_bodies(client: Client) -> None:
    with capture_logs() as logs:
        client.json("POST", "/api/v1/resync?x=1", {"unit": FED})
        client.json("POST", "/api/v1/resync", {"unit": FED}, token="not-the-token")
        client.request("POST", "/hooks/git", PUSH, github_headers(PUSH, secret="nope"))
        wait_until("logged after the answer",  # (>=: a server of an earlier test may still log a line)
                   lambda: len([e for e in logs if e["event"] == "http request"]) >= 3, timeout=5)
    requests = [e for e in logs if e["event"] == "http request" and e["method"] == "POST"]
    assert [(e["log_level"], e["method"], e["path"], e["status"]) for e in requests][-3:] == [
        ("debug", "POST", "/api/v1/resync", 200), ("debug", "POST", "/api/v1/resync", 401),
        ("debug", "POST", "/hooks/git", 401)]
    text = repr(logs)
    for secret in (TOKEN, "not-the-token", SECRET, "refs/heads/main", "Authorization", "x=1"):
        assert secret not in text


def test_a_suppressed_count_is_said_once_the_interval_passes_without_a_next_line() -> None:
    from syncer.http.limits import RateLimitedLog

    now = [0.0]
    rate_log = RateLimitedLog(10.0, clock=lambda: now[0])
    with capture_logs() as logs:
        assert rate_log("warning", "http: bad", client="a")
        assert not any(rate_log("warning", "http: bad", client="a") for _ in range(5))
        rate_log.flush()  # within the interval: nothing yet
        now[0] = 10.0
        rate_log.flush()
        rate_log.flush()  # said once
        assert rate_log("warning", "http: bad", client="a")  # the next line goes out at once
    assert [(e.get("summary", False), e["suppressed"]) for e in logs] == [(False, 0), (True, 5), (False, 0)]
