"""Hostile SuperLinks: the agent dials servers that tenants run (Flower-level health, key
registration), so each case here is a real server on 127.0.0.1 that answers as an attacker would
(huge, endless, trickling over TLS, redirecting, not protobuf, a huge certificate chain), against
the real Control API clients of both transports. Each call ends by its deadline or its size
limit with a typed error, keeps at most MAX_NODES entries, holds bounded memory, and the other
tenants' checks go on meanwhile (syncer.cluster.tenant_calls, syncer.agent.flower_probe)."""

from __future__ import annotations

import base64
import ssl
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from syncer.agent.flower_probe import FlowerProbe
from syncer.cluster import tenant_calls
from syncer.cluster.control_transports import MAX_RESPONSE, connect
from syncer.cluster.flower_control import MAX_NODES, ControlApiError, ControlErrorCode, Transport
from syncer.cluster.tenant_calls import InFlight
from syncer.engine import nodekeys
from syncer.engine.changeset import UnitResult
from syncer.identity import Unit
from syncer.plan import FlowerTarget, NodeAuth
from tests.conftest import wait_until
from tests.hostile_servers import (
    CHAIN_COPIES,
    PROTOBUF_HEAD,
    TINY,
    Hostile,
    Pki,
    Serve,
    answer,
    endless,
    grpc,
    silent,
    trickle,
    varint,
)
from tests.nodeauth import certificates, error_of


@pytest.fixture
def servers() -> Iterator[Callable[..., Hostile]]:
    made: list[Hostile] = []

    def start(serve: Serve, tls: ssl.SSLContext | None = None) -> Hostile:
        made.append(Hostile(serve, tls))
        return made[-1]

    yield start
    for server in made:
        server.close()


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki.make(tmp_path_factory.mktemp("pki"))


def in_thread(call: Callable[[], Any], within: float) -> tuple[Any, float]:
    """(what `call` returned or raised, the seconds it took); fails when it takes over `within`
    seconds (the old client never returned: the test must fail, not hang)."""
    out: list[Any] = []
    started = time.monotonic()

    def run() -> None:
        try:
            out.append(call())
        except BaseException as exc:
            out.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(within)
    assert out, f"the call did not end within {within}s"
    return out[0], time.monotonic() - started


def peak_of(call: Callable[[], Any]) -> tuple[Any, int]:
    """(what `call` returned or raised, the peak bytes Python allocated meanwhile)."""
    tracemalloc.start()
    try:
        try:
            result: Any = call()
        except Exception as exc:
            result = exc
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# -- HTTP (Flower 1.37+) -----------------------------------------------------------------------

@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
def test_an_answer_of_many_tiny_nodes_keeps_at_most_the_node_limit(servers: Any, pki: Any, tls: bool) -> None:
    server = servers(answer(PROTOBUF_HEAD, TINY * (MAX_NODES * 4)), pki.server_tls("http/1.1") if tls else None)
    nodes = connect(server.address, "http", pki.ca if tls else None, timeout=10).list_nodes()
    assert len(nodes) == MAX_NODES and nodes.truncated


def test_the_largest_answer_of_tiny_nodes_decodes_in_bounded_memory_and_time(servers: Any) -> None:
    """The attack of the issue: the most bytes an answer may have, all empty NodeInfos (2 million
    objects if decoded whole; the agent went from 64 to 1,544 MiB on 8 MiB of them)."""
    server = servers(answer(PROTOBUF_HEAD, TINY * (MAX_RESPONSE // 2)))
    (nodes, peak), _ = in_thread(lambda: peak_of(connect(server.address, "http", None, timeout=20).list_nodes),
                                       60)
    assert len(nodes) == MAX_NODES and nodes.truncated
    assert peak < 3 * MAX_RESPONSE + (8 << 20), f"peak {peak >> 20} MiB"


@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
def test_an_endless_answer_is_cut_while_reading(servers: Any, pki: Any, tls: bool) -> None:
    server = servers(answer(PROTOBUF_HEAD, endless(TINY * 32768)), pki.server_tls("http/1.1") if tls else None)
    (exc, peak), _ = in_thread(lambda: peak_of(connect(server.address, "http", pki.ca if tls else None,
                                                             timeout=20).list_nodes), 30)
    assert isinstance(exc, ControlApiError) and exc.code is ControlErrorCode.TOO_LARGE, exc
    assert peak < 3 * MAX_RESPONSE + (8 << 20), f"peak {peak >> 20} MiB"


def test_endless_headers_are_cut_while_reading(servers: Any) -> None:
    server = servers(answer(b"HTTP/1.1 200 OK\r\n", endless(b"x-pad: " + b"a" * 1000 + b"\r\n")))
    exc, _ = in_thread(lambda: connect(server.address, "http", None, timeout=20).list_nodes(), 30)
    assert isinstance(exc, ControlApiError) and exc.code in (ControlErrorCode.TOO_LARGE,
                                                             ControlErrorCode.NOT_CONTROL_API), exc


def test_a_trickle_over_tls_is_cut_at_the_calls_deadline(servers: Any, pki: Any) -> None:
    """One byte every 0.1 s: each read is quick, the call never ends (the old client bounded
    each read, not the call)."""
    server = servers(trickle, pki.server_tls("http/1.1"))
    exc, seconds = in_thread(lambda: connect(server.address, "http", pki.ca, timeout=1.0).list_nodes(), 10)
    assert isinstance(exc, ControlApiError) and exc.code is ControlErrorCode.DEADLINE, exc
    assert seconds < 3
    assert isinstance(exc.__cause__, TimeoutError)  # the typed error wraps its cause


def test_a_silent_tls_handshake_is_cut_at_the_calls_deadline(servers: Any) -> None:
    server = servers(silent)  # accepts, never says a word of TLS
    ca = certificates()[0]
    exc, seconds = in_thread(lambda: connect(server.address, "http", ca, timeout=1.0).list_nodes(), 10)
    assert isinstance(exc, ControlApiError) and exc.code is ControlErrorCode.DEADLINE, exc
    assert seconds < 3


def test_a_redirect_is_not_followed(servers: Any) -> None:
    elsewhere = servers(answer(PROTOBUF_HEAD, b""))
    server = servers(answer(f"HTTP/1.1 307 Temporary Redirect\r\nlocation: http://{elsewhere.address}/v1/control/"
                            "list-nodes\r\n".encode(), b""))
    exc = error_of(lambda: connect(server.address, "http", None, timeout=5).list_nodes())
    assert exc.code is ControlErrorCode.SERVER and "HTTP 307" in exc.detail
    assert elsewhere.connections == 0


@pytest.mark.parametrize("body", [b"\xff" * 64, b"\x0a\xff\xff\xff\xff\x0f", b"\x0b" * 10],
                         ids=["bad-varint", "length-past-the-end", "bad-wire-type"])
def test_an_answer_that_is_not_protobuf_is_a_typed_error(servers: Any, body: bytes) -> None:
    server = servers(answer(PROTOBUF_HEAD, body))
    exc = error_of(lambda: connect(server.address, "http", None, timeout=5).list_nodes())
    assert exc.code is ControlErrorCode.NOT_CONTROL_API


def test_one_node_of_a_million_fields_costs_bounded_time(servers: Any) -> None:
    """An entry made of 1.5 million tiny fields is decoded no further than MAX_SCANNED fields."""
    inner = b"\x08\x01" * 1_500_000
    body = b"\x0a" + varint(len(inner)) + inner
    server = servers(answer(PROTOBUF_HEAD, body))
    nodes, _ = in_thread(lambda: connect(server.address, "http", None, timeout=20).list_nodes(), 60)
    assert not isinstance(nodes, Exception) and nodes.truncated and len(nodes) == 0


def test_a_huge_certificate_chain_is_refused_in_bounded_memory(servers: Any, pki: Any) -> None:
    ca_pem = pki.ca
    server = servers(silent, pki.server_tls("http/1.1", chain=ca_pem * CHAIN_COPIES))  # ~2 MB
    (exc, peak), seconds = in_thread(lambda: peak_of(connect(server.address, "http", pki.ca, timeout=5).list_nodes),
                                     20)
    assert isinstance(exc, ControlApiError) and exc.code is ControlErrorCode.TLS, exc
    assert peak < (4 << 20) and seconds < 6


# -- gRPC (Flower before 1.37) -------------------------------------------------------------------

def test_grpc_an_answer_of_many_tiny_nodes_keeps_at_most_the_node_limit(servers: Any) -> None:
    server = servers(grpc(TINY * (MAX_NODES * 4)))
    nodes = connect(server.address, "grpc", None, timeout=10).list_nodes()
    assert len(nodes) == MAX_NODES and nodes.truncated


@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
def test_grpc_an_endless_answer_is_cut_while_reading(servers: Any, pki: Any, tls: bool) -> None:
    server = servers(grpc(stream=TINY * 8192), pki.server_tls("h2") if tls else None)
    (exc, peak), _ = in_thread(lambda: peak_of(connect(server.address, "grpc", pki.ca if tls else None,
                                                             timeout=20).list_nodes), 30)
    assert isinstance(exc, ControlApiError) and exc.code is ControlErrorCode.TOO_LARGE, exc
    assert peak < 3 * MAX_RESPONSE + (8 << 20), f"peak {peak >> 20} MiB"


def test_grpc_a_trickle_over_tls_is_cut_at_the_calls_deadline(servers: Any, pki: Any) -> None:
    server = servers(grpc(stream=b"\x0a", delay=0.1), pki.server_tls("h2"))
    exc, seconds = in_thread(lambda: connect(server.address, "grpc", pki.ca, timeout=1.0).list_nodes(), 10)
    assert isinstance(exc, ControlApiError) and exc.code is ControlErrorCode.DEADLINE, exc
    assert seconds < 3


def test_grpc_a_message_that_is_not_protobuf_is_a_typed_error(servers: Any) -> None:
    server = servers(grpc(b"\xff" * 64))
    exc = error_of(lambda: connect(server.address, "grpc", None, timeout=5).list_nodes())
    assert exc.code is ControlErrorCode.NOT_CONTROL_API


# -- the agent's side: shares, key registration, shutdown ------------------------------------------

def test_slow_superlinks_of_one_tenant_never_hold_the_health_checks_of_another(servers: Any) -> None:
    """Six trickling SuperLinks in one namespace and four workers: the tenant holds its share (one
    worker), and the other namespace's SuperLink is checked at once."""
    slow = [servers(trickle) for _ in range(6)]
    normal = servers(answer(PROTOBUF_HEAD + b"connection: close\r\n", b""))
    targets = {Unit("federation", "hostile", f"fed-{i}"): FlowerTarget(s.address, "http", "")
               for i, s in enumerate(slow)}
    other = Unit("federation", "other", "fed")
    targets[other] = FlowerTarget(normal.address, "http", "")
    probe = FlowerProbe(None, workers=4, timeout=2.0, cluster_dns=True)
    try:
        probe.round(targets)
        started = time.monotonic()
        wait_until("the other namespace's SuperLink checked", lambda: probe.round(targets)[other].reachable,
                   timeout=6)
        assert time.monotonic() - started < 1.5  # not after the slow ones' deadlines
        assert max(sum(1 for s in slow if s.connections) for _ in range(1)) <= 2
    finally:
        probe.close()


def test_key_registration_on_a_trickling_superlink_holds_the_sync_worker_no_longer_than_its_deadline(
        servers: Any, pki: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nodekeys, "KEY_CALL_TIMEOUT", 1.0)
    monkeypatch.setattr(nodekeys, "KEY_DEADLINE", 1.5)
    server = servers(trickle, pki.server_tls("http/1.1"))
    unit = Unit("federation", "hostile", "fed")
    auth = NodeAuth(server.address, "fed-ca", (("a", b"-----BEGIN PUBLIC KEY-----\nx\n-----END PUBLIC KEY-----\n"),))
    ca_copy = {"kind": "Secret", "metadata": {"name": "fed-ca"}, "data": {"ca.crt": base64.b64encode(pki.ca).decode()}}
    res = UnitResult(unit)
    done, seconds = in_thread(lambda: nodekeys.sync_node_keys(auth, unit, [ca_copy], res), 15)
    assert not isinstance(done, Exception), done
    assert seconds < 3
    assert res.node_keys is not None and res.node_keys.error_codes == (ControlErrorCode.DEADLINE,)


def test_shutdown_cuts_a_call_blocked_on_a_tenants_server_at_once(servers: Any, pki: Any) -> None:
    server = servers(trickle, pki.server_tls("http/1.1"))
    calls = InFlight()
    api = connect(server.address, "http", pki.ca, timeout=60, calls=calls)
    threading.Timer(0.5, calls.abort).start()
    exc, seconds = in_thread(api.list_nodes, 10)
    assert isinstance(exc, ControlApiError) and "stopping" in exc.detail, exc
    assert seconds < 2.5
    assert error_of(api.list_runs).code is ControlErrorCode.UNAVAILABLE  # and no new call starts


@pytest.mark.parametrize("transport", ["http", "grpc"])
def test_shutdown_cuts_a_call_in_a_silent_tls_handshake_at_once(servers: Any, transport: Transport) -> None:
    server = servers(silent)  # accepts, never says a word of TLS
    calls = InFlight()
    api = connect(server.address, transport, certificates()[0], timeout=60, calls=calls)
    threading.Timer(0.5, calls.abort).start()
    exc, seconds = in_thread(api.list_nodes, 10)
    assert isinstance(exc, ControlApiError) and "stopping" in exc.detail, exc
    assert seconds < 2.5


def test_a_call_past_its_deadline_is_named_by_the_registry() -> None:
    now = [100.0]
    calls = InFlight(clock=lambda: now[0])
    call = calls.begin("ListNodes", "x:1", timeout=3, limit=10)
    assert calls.overdue(5) == []
    now[0] = 108.5
    assert calls.overdue(5) == [call]
    calls.end(call)
    assert calls.overdue(5) == [] and tenant_calls.TENANT_CALLS is not calls


def test_key_registration_beyond_its_namespaces_share_of_workers_waits_and_asks_nothing(
        servers: Any, pki: Pki) -> None:
    """The agent's share (4 sync workers: one key registration per namespace, three in all): a
    federation of a namespace whose share is taken is not asked (WAITING, the sync stays ok and the
    agent asks again), another namespace's federation is, and the share is given back after."""
    server = servers(answer(PROTOBUF_HEAD, b""), pki.server_tls("http/1.1"))
    share = nodekeys.worker_share(4)
    ca_copy = {"kind": "Secret", "metadata": {"name": "fed-ca"}, "data": {"ca.crt": base64.b64encode(pki.ca).decode()}}
    auth = NodeAuth(server.address, "fed-ca")
    assert share.take("hostile")  # a slow SuperLink of the tenant holds its share
    waiting = UnitResult(Unit("federation", "hostile", "fed-2"))
    nodekeys.sync_node_keys(auth, waiting.unit, [ca_copy], waiting, share=share)
    assert waiting.node_keys is not None and waiting.node_keys.waiting and waiting.ok
    assert server.connections == 0
    other = UnitResult(Unit("federation", "other", "fed"))
    nodekeys.sync_node_keys(auth, other.unit, [ca_copy], other, share=share)
    assert other.node_keys is not None and not other.node_keys.waiting and other.ok, other.errors
    assert server.connections == 1 and share.running() == 1 and share.running("other") == 0
    assert share.take("second") and share.take("third") and not share.take("fourth")  # all but one worker
