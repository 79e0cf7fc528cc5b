"""The web view with a fake agent: HTML escaping, filters and order, the routes and their
authorization, and the event stream's limits (syncer.http.pages, syncer.http.webview)."""

from __future__ import annotations

import dataclasses
import http.client
import socket
import threading
import time
from collections.abc import Collection, Iterator
from typing import Any
from urllib.parse import urlencode

import pytest

from syncer.http import AgentServer
from syncer.http.pages import MAX_ROWS, overview, row_html, unit_page
from syncer.http.webview import BODY_INTERVAL, Follower, Snapshots, Streams, follow, peer_gone
from syncer.identity import UnknownUnit
from syncer.observe.metrics import Metrics
from syncer.observe.view import Changes, ObjectRow, PoolRow, UnitActivity, UnitRow, UnitView
from tests.conftest import wait_until
from tests.doubles import FakeAPI

TOKEN = "s3cret-api-token"
FED = "federation/flower/fed"
EVIL = "federation/flower/<script>alert(1)</script>"


def row(unit: str = FED, *, ok: bool = True, **kw: Any) -> UnitRow:
    base: dict[str, Any] = {"unit": unit, "repository": "config", "synced": "Synced" if ok else "ConfigError",
                                "synced_ok": ok, "healthy": "Healthy", "healthy_ok": True, "revision": "abc123",
                                "pools_ready": 1, "pools": 1, "gpus": 0,
                                "message": "" if ok else "federations/fed.yaml:3: spec: bad <b>"}
    return UnitRow(**{**base, **kw})


class FakeView:
    def __init__(self) -> None:
        self.units = [row(), row("federation/lab/other"), row(EVIL)]
        self.reads = 0
        self.suspends: list[tuple[str, bool]] = []
        self.releases: list[str] = []
        self.changes = Changes()
        self.activities: dict[str, UnitActivity] = {}

    def set(self, i: int, r: UnitRow) -> None:
        """Change a row as the agent would: the row, and its unit touched."""
        if i == len(self.units):
            self.units.append(r)
        else:
            self.units[i] = r
        self.changes.touch(r.unit)

    def rows(self, units: Collection[str] | None = None) -> list[UnitRow]:
        self.reads += 1
        return [r for r in self.units if units is None or r.unit in units]

    def activity(self, unit: str) -> UnitActivity | None:
        return self.activities.get(unit, UnitActivity()) if self.unit(unit) is not None else None

    def unit(self, unit: str) -> UnitView | None:
        found = [r for r in self.units if r.unit == unit]
        if not found:
            return None
        return UnitView(row=found[0], conditions=(("Synced", found[0].synced_ok, found[0].synced, found[0].message),),
                        pools=(PoolRow("a", "StatefulSet", "fed-supernode-a", 1, 2, False, "ImagePullBackOff: <x>"),),
                        objects=(ObjectRow("StatefulSet flower/fed-supernode-a", "configured", drift=True),))

    def suspend(self, unit: str, suspended: bool) -> bool:
        if self.unit(unit) is None:
            raise UnknownUnit(unit)
        self.suspends.append((unit, suspended))
        return True

    def release_hold(self, unit: str) -> bool:
        if self.unit(unit) is None:
            raise UnknownUnit(unit)
        self.releases.append(unit)
        return True


@pytest.fixture
def view() -> FakeView:
    return FakeView()


@pytest.fixture
def api() -> FakeAPI:
    return FakeAPI()


@pytest.fixture
def server(api: FakeAPI, view: FakeView) -> Iterator[AgentServer]:
    s = AgentServer(api, Metrics(), api_token=TOKEN, request_timeout=2.0, view=view)
    s.start()
    yield s
    s.stop()


def request(server: AgentServer, method: str, path: str, body: str | None = None,
            headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], str]:
    conn = http.client.HTTPConnection(*server.address, timeout=5)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read().decode()
    finally:
        conn.close()


FORM = {"Content-Type": "application/x-www-form-urlencoded"}


# -- rendering --------------------------------------------------------------------------------------

def scripts(page: str) -> list[str]:
    """Every <script ...> tag of a page: only our own file may be one."""
    out, at = [], page.find("<script")
    while at >= 0:
        out.append(page[at:page.find(">", at) + 1])
        at = page.find("<script", at + 1)
    return out


def test_a_unit_named_script_is_text_everywhere() -> None:
    page = overview([row(EVIL, ok=False)], {"q": "<script>"})
    assert scripts(page) == ['<script src="/ui/app.js">']
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "bad &lt;b&gt;" in page  # a Git-sourced message too
    assert 'value="&lt;script&gt;"' in page  # and the filter echoed back
    view = FakeView().unit(EVIL)
    assert view is not None
    unit = unit_page(view, actions=True)
    assert scripts(unit) == ['<script src="/ui/app.js">']
    assert 'value="federation/flower/&lt;script&gt;alert(1)&lt;/script&gt;"' in unit  # the forms' hidden id


def test_rows_needing_attention_come_first_and_filters_apply() -> None:
    rows = [row("federation/a/ok"), row("federation/b/broken", ok=False), row("federation/a/drift", drift=2),
            row("federation/a/paused", synced="Suspended", synced_ok=True, suspended=True)]
    page = overview(rows, {})
    order = [page.find(f'data-unit="{u}"') for u in ("federation/b/broken", "federation/a/drift",
                                                     "federation/a/ok")]
    assert order == sorted(order) and -1 not in order
    only_a = overview(rows, {"namespace": "a", "state": "attention"})
    assert 'data-unit="federation/a/drift"' in only_a
    assert 'data-unit="federation/b/broken"' not in only_a and 'data-unit="federation/a/ok"' not in only_a
    assert 'data-unit="federation/a/paused"' in overview(rows, {"state": "suspended"})
    assert "1 of 4 units" in overview(rows, {"q": "broken"})


def test_a_row_says_its_state_in_words_not_only_colour() -> None:
    html = row_html(row(ok=False, runs_running=1, runs_failed=2))
    assert '<span class="state bad">ConfigError</span>' in html and "2 failed" in html
    assert 'class="attention"' in html


def test_a_pools_reason_and_drifted_objects_show_on_the_units_page() -> None:
    view = FakeView().unit(FED)
    assert view is not None
    page = unit_page(view, actions=False)
    assert "ImagePullBackOff: &lt;x&gt;" in page and "1/2" in page
    assert "StatefulSet flower/fed-supernode-a" in page and "drifted" in page
    assert "Actions are off" in page and "<form" not in page


# -- routes -----------------------------------------------------------------------------------------

def test_pages_are_html_with_a_strict_content_security_policy(server: AgentServer) -> None:
    status, headers, body = request(server, "GET", "/ui/?state=attention&namespace=flower")
    assert status == 200 and headers["content-type"].startswith("text/html")
    assert "script-src 'self'" in headers["content-security-policy"]
    assert headers["cache-control"] == "no-store"
    status, headers, _ = request(server, "GET", "/")
    assert status == 303 and headers["location"] == "/ui/"
    status, _, body = request(server, "GET", "/ui/unit?" + urlencode({"id": FED}))
    assert status == 200 and "fed-supernode-a" in body
    assert request(server, "GET", "/ui/unit?id=federation/flower/nope")[0] == 404
    assert request(server, "GET", "/ui/app.js")[1]["content-type"].startswith("text/javascript")


def test_without_a_view_the_pages_are_not_there() -> None:
    s = AgentServer(FakeAPI(), Metrics())
    s.start()
    try:
        assert request(s, "GET", "/ui/")[0] == 404
        assert request(s, "GET", "/")[0] == 404
    finally:
        s.stop()


def test_protected_reads_protect_the_pages_too(api: FakeAPI, view: FakeView) -> None:
    s = AgentServer(api, Metrics(), api_token=TOKEN, protect_reads=True, view=view)
    s.start()
    try:
        assert request(s, "GET", "/ui/")[0] == 401
        assert request(s, "GET", "/ui/", headers={"Authorization": f"Bearer {TOKEN}"})[0] == 200
    finally:
        s.stop()


@pytest.mark.parametrize("token", ["", "wrong"])
def test_an_action_without_the_token_does_nothing(server: AgentServer, api: FakeAPI, view: FakeView,
                                                  token: str) -> None:
    body = urlencode({"id": FED, "token": token})
    status, headers, page = request(server, "POST", "/ui/resync", body, FORM)
    assert status == 401 and api.resyncs == []
    assert headers["content-type"].startswith("text/html") and "Nothing was done" in page
    status, _, _ = request(server, "POST", "/ui/suspend", urlencode({"id": FED, "token": token, "suspend": "suspend"}),
                           FORM)
    assert status == 401 and view.suspends == []


def test_an_action_with_the_token_is_done(server: AgentServer, api: FakeAPI, view: FakeView) -> None:
    status, headers, _ = request(server, "POST", "/ui/resync", urlencode({"id": FED, "token": TOKEN}), FORM)
    assert status == 303 and api.resyncs == [FED]
    assert headers["location"] == "/ui/unit?id=federation%2Fflower%2Ffed&done=resync"
    assert "Resync requested." in request(server, "GET", headers["location"])[2]
    status, _, _ = request(server, "POST", "/ui/suspend", urlencode({"id": FED, "suspend": "resume"}),
                           {**FORM, "Authorization": f"Bearer {TOKEN}"})
    assert status == 303 and view.suspends == [(FED, False)]


def test_a_held_unit_offers_its_release_behind_the_token(server: AgentServer, view: FakeView) -> None:
    view.set(0, dataclasses.replace(view.units[0], synced="Held", synced_ok=False))
    page = request(server, "GET", f"/ui/unit?id={FED}")[2]
    assert 'action="/ui/release-hold"' in page
    assert 'action="/ui/release-hold"' not in request(server, "GET", "/ui/unit?id=federation/lab/other")[2]
    status, _, _ = request(server, "POST", "/ui/release-hold", urlencode({"id": FED, "token": "wrong"}), FORM)
    assert status == 401 and view.releases == []
    status, headers, _ = request(server, "POST", "/ui/release-hold", urlencode({"id": FED, "token": TOKEN}), FORM)
    assert status == 303 and view.releases == [FED]
    assert "Hold released" in request(server, "GET", headers["location"])[2]


def test_a_cross_site_form_is_refused(server: AgentServer, api: FakeAPI) -> None:
    status, _, _ = request(server, "POST", "/ui/resync", urlencode({"id": FED, "token": TOKEN}),
                           {**FORM, "Origin": "https://evil.example"})
    assert status == 403 and api.resyncs == []
    host, port = server.address
    status, _, _ = request(server, "POST", "/ui/resync", urlencode({"id": FED, "token": TOKEN}),
                           {**FORM, "Origin": f"http://{host}:{port}"})
    assert status == 303 and api.resyncs == [FED]


def test_actions_are_off_without_an_api_token(api: FakeAPI, view: FakeView) -> None:
    s = AgentServer(api, Metrics(), view=view)
    s.start()
    try:
        status, _, _ = request(s, "POST", "/ui/resync", urlencode({"id": FED, "token": "x"}), FORM)
        assert status == 404 and api.resyncs == []
    finally:
        s.stop()


# -- the event stream -------------------------------------------------------------------------------

class Stream:
    """An /ui/events stream read on a raw socket."""

    def __init__(self, server: AgentServer, query: str = "view=overview") -> None:
        self.sock = socket.create_connection(server.address, timeout=5)
        self.sock.sendall(f"GET /ui/events?{query} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        self.data = b""

    def until(self, needle: bytes, timeout: float = 5.0) -> bytes:
        deadline = time.monotonic() + timeout
        while needle not in self.data:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            chunk = self.sock.recv(65536)
            if not chunk:
                break
            self.data += chunk
        assert needle in self.data, self.data[-2000:]
        return self.data

    def close(self) -> None:
        self.sock.close()


def test_nothing_is_read_while_no_page_is_open(server: AgentServer, view: FakeView) -> None:
    request(server, "GET", "/healthz")
    time.sleep(0.6)  # a stream's interval: a reading would have happened within it (bounded check)
    assert view.reads == 0


def test_the_stream_sends_a_changed_row_and_escapes_it(server: AgentServer, view: FakeView) -> None:
    s = Stream(server)
    try:
        head = s.until(b"event: rows")
        assert b"text/event-stream" in head and b"retry: 2000" in head
        view.set(0, dataclasses.replace(view.units[0], synced="ConfigError", synced_ok=False,
                                        message="<img src=x onerror=alert(1)>"))
        s.until(b"ConfigError")
        assert b"<img src=x" not in s.data and b"&lt;img src=x onerror=alert(1)&gt;" in s.data
    finally:
        s.close()


def test_a_unit_stream_follows_its_section(server: AgentServer, view: FakeView) -> None:
    s = Stream(server, urlencode({"view": "unit", "id": FED}))
    try:
        s.until(b"event: unit")
        view.set(0, dataclasses.replace(view.units[0], drift=3))
        s.until(b"3 objects")
    finally:
        s.close()


def test_streams_are_bounded_and_end_when_the_server_stops(api: FakeAPI, view: FakeView) -> None:
    s = AgentServer(api, Metrics(), request_timeout=2.0, view=view)
    assert s.streams is not None
    s.streams.max_per_client = 2
    s.start()
    streams = [Stream(s), Stream(s)]
    try:
        for st in streams:
            st.until(b"event: rows")
        wait_until("two streams", lambda: s.streams is not None and s.streams.open == 2)
        assert request(s, "GET", "/ui/events?view=overview")[0] == 503
        assert request(s, "GET", "/ui/")[0] == 200  # pages are still served
        stopped = threading.Thread(target=s.stop)
        stopped.start()
        for st in streams:
            st.sock.settimeout(3)
            while st.sock.recv(65536):
                pass  # until the server closes it
        stopped.join(5)
        assert not stopped.is_alive()
        wait_until("streams released", lambda: s.streams is not None and s.streams.open == 0)
    finally:
        for st in streams:
            st.close()



def test_a_closed_page_frees_its_stream_at_the_next_look_not_the_next_heartbeat(api: FakeAPI, view: FakeView) -> None:
    """A reloaded page's old stream held its slot until a write failed: the next heartbeat, 15 s
    later. A person reloading a page a few times had their next stream refused (503), and a
    browser does not reconnect after a 503."""
    s = AgentServer(api, Metrics(), request_timeout=2.0, view=view)
    assert s.streams is not None
    s.streams.max_per_client = 1
    s.start()
    first = Stream(s)
    second: Stream | None = None
    try:
        first.until(b"event: rows")
        assert request(s, "GET", "/ui/events?view=overview")[0] == 503  # the one slot is taken
        first.close()  # the page goes; nothing is sent to it meanwhile (nothing changes)
        # well within HEARTBEAT_SECONDS (15 s): what the old code waited for
        wait_until("the slot freed", lambda: s.streams is not None and s.streams.open == 0, timeout=5)
        second = Stream(s)
        assert b"200 OK" in second.until(b"event: rows")
    finally:
        first.close()
        if second is not None:
            second.close()
        s.stop()


def test_peer_gone_is_the_client_closing_its_connection() -> None:
    ours, theirs = socket.socketpair()
    try:
        assert not peer_gone(ours.fileno())
        theirs.close()
        assert peer_gone(ours.fileno())
    finally:
        ours.close()


def test_a_stream_sends_nothing_new_when_nothing_changed_but_a_heartbeat(view: FakeView) -> None:
    streams = Streams(view)
    follower = Follower(Snapshots(view), "overview", {})
    sent: list[bytes] = []
    now = [0.0]

    def clock() -> float:  # a second passes at each look
        now[0] += 1.0
        return now[0]

    def send(data: bytes) -> None:
        sent.append(data)
        if len(sent) == 4:
            streams.close()

    follow(streams, follower, send, interval=0.0, heartbeat=5.0, lifetime=100.0, clock=clock)
    assert sent[0].startswith(b"retry:") and sent[1].startswith(b"event: rows")
    assert sent[2:] == [b": heartbeat\n\n", b": heartbeat\n\n"]


def test_a_big_overview_shows_the_first_rows_those_needing_attention_first() -> None:
    rows = [row(f"federation/ns/fed-{i:04d}") for i in range(MAX_ROWS + 10)] + [row("federation/ns/zz", ok=False)]
    page = overview(rows, {})
    assert page.count("<tr data-unit=") == MAX_ROWS
    assert 'data-unit="federation/ns/zz"' in page and f"the first {MAX_ROWS} shown" in page
    assert 'data-unit="federation/ns/zz"' in overview(rows, {"q": "zz"})


def test_the_whole_table_is_sent_again_at_most_every_body_interval(view: FakeView) -> None:
    now = [0.0]
    follower = Follower(Snapshots(view), "overview", {}, clock=lambda: now[0])
    assert b'"tbody"' in follower.step()
    assert follower.step() == b""
    view.set(len(view.units), row("federation/lab/new"))  # a unit comes
    view.set(0, dataclasses.replace(view.units[0], drift=5))  # and a shown one changes
    now[0] += 1.0
    first = follower.step()
    assert b'"tbody"' not in first and b'"rows"' in first and b"federation/flower/fed" in first
    now[0] += BODY_INTERVAL
    assert b'"tbody"' in follower.step() and follower.step() == b""
