"""The Control API over gRPC (Flower before 1.37) without grpcio: against a real grpcio server on
127.0.0.1 (TLS with the federation's CA, and plain text), and against a scripted HTTP/2 server (h2)
for what a real server rarely does on cue: close a kept connection, reset a call, answer more
than the limit, say nothing. Real SuperLinks: tests/integration/test_node_auth.py."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import h2.config
import h2.connection
import h2.events
import pytest

from syncer.cluster import control_transports
from syncer.cluster.control_transports import connect
from syncer.cluster.flower_control import (
    ControlErrorCode,
    RegisteredNode,
    _bytes_field,
    _varint_field,
)
from tests.nodeauth import certificates, error_of

NODE = _bytes_field(1, _varint_field(1, 7) + _bytes_field(4, b"online") + _bytes_field(11, b"PEM"))


@dataclass
class Seen:
    calls: list[tuple[str, bytes, str]] = field(default_factory=list)  # (method, request, peer)


@pytest.fixture
def grpc_server(tmp_path: Any) -> Iterator[Callable[[bool], tuple[str, bytes | None, Seen]]]:
    """Start a grpcio server playing the Control API (ListNodes answers NODE, RegisterNode node 42,
    the rest empty); `start(tls)` gives its address, the CA (None in plain text) and what it saw."""
    import grpc

    servers: list[Any] = []
    answers = {"ListNodes": NODE, "RegisterNode": _varint_field(1, 42)}

    def start(tls: bool) -> tuple[str, bytes | None, Seen]:
        seen = Seen()

        def handle(method: str) -> Callable[[bytes, grpc.ServicerContext], bytes]:
            def answer(request: bytes, context: grpc.ServicerContext) -> bytes:
                seen.calls.append((method, request, context.peer()))
                return answers.get(method, b"")
            return answer

        class Handler(grpc.GenericRpcHandler):
            def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
                return grpc.unary_unary_rpc_method_handler(handle(str(details.method).rsplit("/", 1)[1]))

        server = grpc.server(ThreadPoolExecutor(2))
        server.add_generic_rpc_handlers((Handler(),))
        ca: bytes | None = None
        if tls:
            ca, cert, key = certificates()
            port = server.add_secure_port("127.0.0.1:0", grpc.ssl_server_credentials([(key, cert)]))
        else:
            port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        servers.append(server)
        return f"127.0.0.1:{port}", ca, seen

    yield start
    for server in servers:
        server.stop(None)


@pytest.mark.parametrize("tls", [True, False])
def test_the_calls_reach_a_grpc_server_on_one_connection(
        grpc_server: Callable[[bool], tuple[str, bytes | None, Seen]], tls: bool) -> None:
    """Flower's method paths and messages, over TLS verified with the federation's CA (or in plain
    text for `insecure: true`); the calls of one client share one HTTP/2 connection."""
    address, ca, seen = grpc_server(tls)
    api = connect(address, "grpc", ca)
    assert api.list_nodes() == [RegisteredNode(7, "online", b"PEM")]
    assert api.register(b"PEM-B") == 42
    api.unregister(42)
    assert api.list_runs() == []
    api.close()
    assert [(method, request) for method, request, _ in seen.calls] == [
        ("ListNodes", b""), ("RegisterNode", _bytes_field(1, b"PEM-B")), ("UnregisterNode", _varint_field(1, 42)),
        ("ListRuns", b"")]
    assert len({peer for *_, peer in seen.calls}) == 1


def test_a_server_the_federations_ca_does_not_vouch_for_is_refused(
        grpc_server: Callable[[bool], tuple[str, bytes | None, Seen]]) -> None:
    address, _, seen = grpc_server(True)
    exc = error_of(lambda: connect(address, "grpc", certificates()[0]).list_nodes())
    assert exc.code is ControlErrorCode.TLS and seen.calls == []


class ScriptedServer:
    """HTTP/2 in plain text on 127.0.0.1, answering each call with `reply(connection number, call
    number on it, method)`: a list of actions, ("answer", message), ("status", code, text),
    ("data", raw bytes), ("reset",), ("goaway",) or ("silence",)."""

    def __init__(self, reply: Callable[[int, int, str], list[tuple[Any, ...]]]) -> None:
        self.reply = reply
        self.calls: list[tuple[int, str]] = []  # (connection number, method)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self._threads: list[threading.Thread] = []
        self._accepting = threading.Thread(target=self._accept, daemon=True)
        self._accepting.start()

    def stop(self) -> None:
        self.listener.shutdown(socket.SHUT_RDWR)  # wakes accept()
        self.listener.close()
        self._accepting.join(5)
        assert not self._accepting.is_alive()

    def _accept(self) -> None:
        number = 0
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            number += 1
            thread = threading.Thread(target=self._serve, args=(sock, number), daemon=True)
            thread.start()
            self._threads.append(thread)

    def _serve(self, sock: socket.socket, number: int) -> None:
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding="utf-8"))
        conn.initiate_connection()
        sock.sendall(conn.data_to_send())
        paths: dict[int, str] = {}
        served = 0
        with sock:
            while True:
                data = sock.recv(65536)
                if not data:
                    return
                for event in conn.receive_data(data):
                    if isinstance(event, h2.events.RequestReceived):
                        paths[event.stream_id] = dict(event.headers or [])[":path"]
                    elif isinstance(event, h2.events.StreamEnded):
                        served += 1
                        method = paths[event.stream_id].rsplit("/", 1)[1]
                        self.calls.append((number, method))
                        for action in self.reply(number, served, method):
                            if not self._act(conn, sock, event.stream_id, action):
                                return
                sock.sendall(conn.data_to_send())

    @staticmethod
    def _act(conn: h2.connection.H2Connection, sock: socket.socket, stream: int, action: tuple[Any, ...]) -> bool:
        kind = action[0]
        if kind == "goaway":
            conn.close_connection(last_stream_id=stream - 2)  # this call was not processed
            sock.sendall(conn.data_to_send())
            return False
        if kind == "silence":
            return True
        if kind == "reset":
            conn.reset_stream(stream)
            return True
        ok = [(":status", "200"), ("content-type", "application/grpc")]
        if kind == "status":
            conn.send_headers(stream, [*ok, ("grpc-status", str(action[1])), ("grpc-message", action[2])],
                              end_stream=True)
            return True
        body = action[1] if kind == "data" else b"\x00" + len(action[1]).to_bytes(4, "big") + action[1]
        conn.send_headers(stream, ok)
        view = memoryview(body)
        while view:  # the test answers fit the client's windows
            size = min(len(view), conn.max_outbound_frame_size)
            conn.send_data(stream, view[:size])
            view = view[size:]
        conn.send_headers(stream, [("grpc-status", "0")], end_stream=True)
        return True


@pytest.fixture
def scripted() -> Iterator[Callable[[Callable[[int, int, str], list[tuple[Any, ...]]]], ScriptedServer]]:
    started: list[ScriptedServer] = []

    def start(reply: Callable[[int, int, str], list[tuple[Any, ...]]]) -> ScriptedServer:
        started.append(ScriptedServer(reply))
        return started[-1]

    yield start
    for server in started:
        server.stop()


def test_a_read_on_a_connection_the_server_closed_is_sent_once_more(scripted: Any) -> None:
    """The server goes away before the second call of a check (as a SuperLink that restarts, or
    closes idle connections): a read is sent again on a new connection."""
    server = scripted(lambda conn, call, method: [("goaway",)] if call == 2 else [("answer", NODE)])
    api = connect(server.address, "grpc", None)
    assert api.list_nodes() == [RegisteredNode(7, "online", b"PEM")]
    assert api.list_nodes() == [RegisteredNode(7, "online", b"PEM")]
    api.close()
    assert server.calls == [(1, "ListNodes"), (1, "ListNodes"), (2, "ListNodes")]


def test_a_write_is_never_sent_twice(scripted: Any) -> None:
    server = scripted(lambda conn, call, method: [("goaway",)] if call == 2 else [("answer", NODE)])
    api = connect(server.address, "grpc", None)
    api.list_nodes()
    exc = error_of(lambda: api.register(b"PEM"))
    api.close()
    assert exc.code is ControlErrorCode.UNAVAILABLE and "GOAWAY" in exc.detail
    assert server.calls == [(1, "ListNodes"), (1, "RegisterNode")]


@pytest.mark.parametrize(("action", "code"), [
    (("reset",), ControlErrorCode.UNAVAILABLE),
    (("data", b"\x01\x00\x00\x00\x01x"), ControlErrorCode.NOT_CONTROL_API),  # compressed: never asked for
    (("data", b"\x00\x00\x00\x00\x09short"), ControlErrorCode.NOT_CONTROL_API),
    (("status", 9, "Public key already in use"), ControlErrorCode.KEY_IN_USE),
    (("status", 13, "SECRET-BANNER%0Aforged"), ControlErrorCode.SERVER),
])
def test_answers_that_are_not_a_message_come_back_typed(scripted: Any, action: tuple[Any, ...],
                                                          code: ControlErrorCode) -> None:
    server = scripted(lambda conn, call, method: [action])
    exc = error_of(lambda: connect(server.address, "grpc", None).register(b"PEM"))
    assert exc.code is code and "SECRET-BANNER" not in str(exc) and "\n" not in str(exc)


def test_an_answer_over_the_limit_is_refused(scripted: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(control_transports, "MAX_RESPONSE", 1000)
    server = scripted(lambda conn, call, method: [("answer", b"\x0a\x00" * 1000)])
    exc = error_of(lambda: connect(server.address, "grpc", None).list_nodes())
    assert exc.code is ControlErrorCode.TOO_LARGE and "larger than 1000 bytes" in exc.detail


def test_a_server_that_never_answers_fails_the_call_at_its_deadline(scripted: Any) -> None:
    server = scripted(lambda conn, call, method: [("silence",)])
    exc = error_of(lambda: connect(server.address, "grpc", None, timeout=0.5).list_nodes())
    assert exc.code is ControlErrorCode.DEADLINE and exc.detail.startswith("no whole answer in time")


def test_the_agent_does_not_load_grpcio() -> None:
    """gRPC to old SuperLinks needs no grpcio in the agent (its channel close can freeze the
    process; see syncer.cluster.grpc_unary): importing the agent and dialling gRPC loads none."""
    import subprocess
    import sys

    code = ("import sys, syncer.agent.runner, syncer.cli\n"
            "from syncer.cluster.control_transports import connect\n"
            "try:\n    connect('127.0.0.1:9', 'grpc', None, timeout=1).list_nodes()\nexcept Exception:\n    pass\n"
            "print(sorted(m for m in sys.modules if m == 'grpc' or m.startswith('grpc.')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
