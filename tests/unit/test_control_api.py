"""The Control API's HTTPS transport against local servers on 127.0.0.1 that play a Flower 1.37+
SuperLink, another HTTP server, or no HTTP at all: calls go as Flower's own client sends them,
Flower's errors come back typed, and nothing a target says is echoed unless it is a parsed
Control API error (issue 25, finding 4). Real SuperLinks: tests/integration/test_node_auth.py."""

from __future__ import annotations

import json
import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from syncer.cluster import control_transports
from syncer.cluster.control_transports import connect
from syncer.cluster.flower_control import (
    ControlErrorCode,
    RegisteredNode,
    Transport,
    _bytes_field,
    _varint_field,
    one_line,
)
from syncer.engine.inventory import Inventory as Inv
from syncer.engine.inventory import OwnedKeys, decode
from syncer.identity import Unit
from tests.nodeauth import certificates, error_of

BANNER = "SECRET-BANNER"


@dataclass
class Reply:
    status: int = 200
    content_type: str = "application/protobuf"
    body: bytes = b""


@dataclass
class Server:
    port: int
    ca: bytes
    reply: Reply = field(default_factory=Reply)
    seen: list[tuple[str, str, str, bytes]] = field(default_factory=list)  # (path, content-type, accept, body)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, Path, Path]:
    ca, cert, key = certificates()
    tmp = tmp_path_factory.mktemp("tls")
    (tmp / "tls.crt").write_bytes(cert)
    (tmp / "tls.key").write_bytes(key)
    return ca, tmp / "tls.crt", tmp / "tls.key"


@pytest.fixture
def server(running: Server) -> Server:
    running.reply, running.seen[:] = Reply(), []
    return running


@pytest.fixture(scope="module")
def running(tls_files: tuple[bytes, Path, Path]) -> Iterator[Server]:
    ca, cert, key = tls_files
    state = Server(0, ca)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            state.seen.append((self.path, self.headers.get("content-type", ""), self.headers.get("accept", ""), body))
            reply = state.reply
            self.send_response(reply.status)
            self.send_header("content-type", reply.content_type)
            self.send_header("content-length", str(len(reply.body)))
            self.end_headers()
            self.wfile.write(reply.body)

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    state.port = httpd.server_address[1]
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield state
    httpd.shutdown()
    httpd.server_close()
    thread.join()


def raw_server(answer: bytes) -> tuple[int, Callable[[], None]]:
    """A TCP server on 127.0.0.1 that writes `answer` to whoever connects (no TLS, no HTTP)."""
    listener = socket.create_server(("127.0.0.1", 0))
    done = threading.Event()

    def serve() -> None:
        while not done.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                conn.sendall(answer)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()

    def stop() -> None:
        done.set()
        socket.create_connection(listener.getsockname()).close()  # wakes accept()
        thread.join()
        listener.close()

    return listener.getsockname()[1], stop


def test_calls_go_as_flowers_own_client_sends_them(server: Server) -> None:
    """POST /v1/control/<rpc>, content-type and accept application/protobuf, the request message
    as the body (flwr.supercore.protobuf.client in the 1.37 - 1.43 wheels)."""
    api = connect(server.address, "http", server.ca)
    node = _bytes_field(1, _varint_field(1, 7) + _bytes_field(4, b"online") + _bytes_field(11, b"PEM"))
    server.reply = Reply(body=node)
    assert api.list_nodes() == [RegisteredNode(7, "online", b"PEM")]
    server.reply = Reply(body=_varint_field(1, 42))
    assert api.register(b"PEM-B") == 42
    server.reply = Reply(body=b"")
    api.unregister(42)
    assert api.list_runs() == []
    api.close()
    assert [(p, ct, acc) for p, ct, acc, _ in server.seen] == [
        (f"/v1/control/{rpc}", "application/protobuf", "application/protobuf")
        for rpc in ("list-nodes", "register-node", "unregister-node", "list-runs")]
    assert [body for *_, body in server.seen] == [b"", _bytes_field(1, b"PEM-B"), _varint_field(1, 42), b""]


@pytest.mark.parametrize(("flower_code", "status", "code"), [
    (23, 412, ControlErrorCode.KEY_IN_USE), (22, 412, ControlErrorCode.KEY_INVALID),
    (24, 404, ControlErrorCode.NODE_NOT_FOUND), (2, 404, ControlErrorCode.SERVER)])
def test_flowers_errors_come_back_typed(server: Server, flower_code: int, status: int, code: ControlErrorCode) -> None:
    server.reply = Reply(status, "application/json", json.dumps({"code": flower_code, "detail": "Public key "
                                                                 "already in use."}).encode())
    exc = error_of(lambda: connect(server.address, "http", server.ca).register(b"PEM"))
    assert exc.code is code and exc.call == "RegisterNode" and "Public key already in use." in exc.detail


@pytest.mark.parametrize("reply", [
    Reply(500, "text/html", f"<h1>{BANNER}</h1>\nforged: line".encode()),
    Reply(200, "text/html", f"{BANNER}".encode()),
    Reply(404, "application/json", json.dumps({"detail": BANNER}).encode()),
    Reply(401, "text/plain", BANNER.encode()),
    Reply(200, "application/protobuf", b"\x0a\xff\xff\xff\xff\x0f" + BANNER.encode()),  # not a message
])
def test_an_answer_that_is_not_the_control_api_is_never_echoed(server: Server, reply: Reply) -> None:
    server.reply = reply
    exc = error_of(lambda: connect(server.address, "http", server.ca).list_nodes())
    assert BANNER not in str(exc) and "forged" not in str(exc) and "\n" not in str(exc)
    assert exc.code in (ControlErrorCode.NOT_CONTROL_API, ControlErrorCode.SERVER, ControlErrorCode.DENIED)


def test_a_parsed_error_is_bounded_and_escaped(server: Server) -> None:
    server.reply = Reply(412, "application/json", json.dumps({"code": 23, "detail": "x\nforged line\x1b[31m"
                                                                                    + "y" * 10_000}).encode())
    exc = error_of(lambda: connect(server.address, "http", server.ca).register(b"PEM"))
    assert "\n" not in str(exc) and "\x1b" not in str(exc) and len(exc.detail) <= 160
    assert exc.detail.startswith("x\\nforged line\\x1b[31m")


def test_a_huge_answer_is_not_read_whole(server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(control_transports, "MAX_RESPONSE", 1000)
    server.reply = Reply(body=b"\x0a\x00" * 1000)
    assert error_of(lambda: connect(server.address, "http", server.ca).list_nodes()).code is \
        ControlErrorCode.TOO_LARGE


def test_a_server_the_federations_ca_does_not_vouch_for_is_refused(server: Server) -> None:
    other_ca, _, _ = certificates()
    exc = error_of(lambda: connect(server.address, "http", other_ca).list_nodes())
    assert exc.code is ControlErrorCode.TLS and server.seen == []  # nothing was sent


@pytest.mark.parametrize("answer", [b"SSH-2.0-" + BANNER.encode() + b"\r\n",
                                    b"HTTP/1.1 200 OK\r\n\r\n" + BANNER.encode()])
def test_a_port_that_speaks_something_else_is_described_by_kind(answer: bytes) -> None:
    port, stop = raw_server(answer)
    try:
        exc = error_of(lambda: connect(f"127.0.0.1:{port}", "http", certificates()[0], timeout=5).list_nodes())
    finally:
        stop()
    assert exc.code in (ControlErrorCode.TLS, ControlErrorCode.NOT_CONTROL_API) and BANNER not in str(exc)


@pytest.mark.parametrize("transport", ["grpc", "http"])
def test_nothing_listening_is_unavailable(transport: Transport) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    exc = error_of(lambda: connect(f"127.0.0.1:{port}", transport, certificates()[0]).list_nodes())
    assert exc.code is ControlErrorCode.UNAVAILABLE and exc.detail == "connection refused"


def test_grpc_to_a_server_that_is_not_grpc_says_the_likely_cause(server: Server) -> None:
    exc = error_of(lambda: connect(server.address, "grpc", server.ca, timeout=5).list_nodes())
    assert exc.code is ControlErrorCode.NOT_CONTROL_API and "1.37 or newer" in exc.detail


def test_one_line_escapes_and_bounds() -> None:
    assert one_line("a\nb\tc\x00\u202e") == "a\\nb\\tc\\x00\\u202e"
    assert len(one_line("z" * 1000)) == 160


def test_the_keys_a_federation_registered_survive_on_its_inventory() -> None:
    unit = Unit("federation", "ns", "fed")
    inv = Inv(unit, node_keys=OwnedKeys("fed-superlink.ns.svc:8000", ((5, "sha256:ab"), (7, "sha256:cd"))))
    back = decode(inv.manifest())
    assert back is not None and back.node_keys == inv.node_keys
    broken = inv.manifest()
    broken["data"]["nodekeys.json"] = '{"address": 3}'
    assert (decode(broken) or inv).node_keys is None


@pytest.mark.parametrize(("status", "message", "code"), [
    ("FAILED_PRECONDITION", "Public key already in use", ControlErrorCode.KEY_IN_USE),
    ("NOT_FOUND", "Node ID not found for account", ControlErrorCode.NODE_NOT_FOUND),
    ("INTERNAL", f"{BANNER}\nforged: line", ControlErrorCode.SERVER),
    ("PERMISSION_DENIED", BANNER, ControlErrorCode.DENIED)])
def test_grpc_statuses_come_back_typed_and_unknown_texts_are_not_shown(
        tls_files: tuple[bytes, Path, Path], status: str, message: str, code: ControlErrorCode) -> None:
    """A gRPC server on 127.0.0.1 that answers every call with `status`: Flower's own messages
    (before 1.37 the only thing a status carries) map to codes; any other text is not echoed."""
    import grpc

    ca, cert, key = tls_files

    def abort(request: bytes, context: grpc.ServicerContext) -> bytes:
        context.abort(getattr(grpc.StatusCode, status), message)
        raise AssertionError  # abort raises

    class Handler(grpc.GenericRpcHandler):
        def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
            return grpc.unary_unary_rpc_method_handler(abort)

    grpc_server = grpc.server(ThreadPoolExecutor(2))
    grpc_server.add_generic_rpc_handlers((Handler(),))
    port = grpc_server.add_secure_port("127.0.0.1:0", grpc.ssl_server_credentials([(key.read_bytes(),
                                                                                      cert.read_bytes())]))
    grpc_server.start()
    try:
        api = connect(f"127.0.0.1:{port}", "grpc", ca)
        exc = error_of(lambda: api.register(b"PEM"))
        api.close()
    finally:
        grpc_server.stop(None)
    assert exc.code is code and BANNER not in str(exc) and "\n" not in str(exc)


@pytest.mark.parametrize("transport", ["grpc", "http"])
@pytest.mark.parametrize("address", ["unix:/var/run/docker.sock", "unix-abstract:x", "dns:///kubernetes:443",
                                     "ipv4:127.0.0.1:22", "127.0.0.1"])
def test_an_address_that_is_not_host_and_port_is_never_dialled(address: str, transport: Transport) -> None:
    exc = error_of(lambda: connect(address, transport, certificates()[0]))
    assert exc.code is ControlErrorCode.BAD_ADDRESS and exc.call == "connect"
