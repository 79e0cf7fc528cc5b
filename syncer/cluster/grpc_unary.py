"""Unary gRPC calls over one HTTP/2 connection, in the calling thread (python-hyper's `h2` for the
framing, a blocking socket, the standard library's ssl).

Why not grpcio: its C core runs its own threads in the agent, adds a large share to the agent's
resident memory once loaded, and closing a channel can freeze the whole process: `Channel.close()` destroys
the channel holding the interpreter's lock while it waits for the core's threads, one of which may
be waiting for that lock (grpc/grpc#20026, open since 2019; grpc/grpc#42247, still open in 2026).
The agent talks gRPC to one kind of server (the Control API of a SuperLink before Flower 1.37) in
a few small unary calls a check, which this covers: a request, one message back, the status in the
trailers (or a trailers-only answer). No compression, no retries, no streams.

What goes wrong comes back as `GrpcStatus` (the server answered with a status other than OK),
`NotGrpc` (the peer does not speak gRPC over HTTP/2; its own bytes are never kept), `Broken` (the
connection ended before the answer), the bounds of syncer.cluster.tenant_calls (`DeadlineExceeded`:
the whole call, connecting and the TLS handshake included, is bounded by one deadline;
`AnswerTooLarge`: every byte read counts, HTTP/2 framing and headers too; `Stopping`) or the
socket's and ssl's own OSErrors (refused, certificate not accepted)."""

from __future__ import annotations

import ssl
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass, field

import h2.config
import h2.connection
import h2.events
import h2.exceptions

from syncer.cluster.tenant_calls import (
    TENANT_CALLS,
    AnswerTooLarge,
    BoundedSocket,
    Call,
    InFlight,
    Stopping,
    open_socket,
)

__all__ = ["Broken", "GrpcStatus", "NotGrpc", "UnaryChannel", "status_name"]

# grpc/status.h
_STATUS_NAMES = {0: "OK", 1: "CANCELLED", 2: "UNKNOWN", 3: "INVALID_ARGUMENT", 4: "DEADLINE_EXCEEDED",
                 5: "NOT_FOUND", 6: "ALREADY_EXISTS", 7: "PERMISSION_DENIED", 8: "RESOURCE_EXHAUSTED",
                 9: "FAILED_PRECONDITION", 10: "ABORTED", 11: "OUT_OF_RANGE", 12: "UNIMPLEMENTED",
                 13: "INTERNAL", 14: "UNAVAILABLE", 15: "DATA_LOSS", 16: "UNAUTHENTICATED"}
_READ = 65536
OVERHEAD = 256 << 10  # bytes a call may read besides its message: HTTP/2 frames, headers, trailers


def status_name(code: int) -> str:
    return _STATUS_NAMES.get(code, "UNKNOWN")


class GrpcStatus(Exception):
    """The server ended the call with a status other than OK. `message` is the server's
    grpc-message, decoded: the caller decides whether it may be shown."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"{status_name(code)} ({code})")
        self.code = code
        self.name = status_name(code)
        self.message = message


class _Failed(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class NotGrpc(_Failed):
    """The peer is not a gRPC server over HTTP/2: `reason` says how it showed (never its bytes)."""


class Broken(_Failed):
    """The connection ended before the call's answer (closed, going away, the call reset)."""


@dataclass
class _Answer:
    """What arrived for one call so far."""

    headers: dict[str, str] | None = None
    data: bytearray = field(default_factory=bytearray)
    trailers: dict[str, str] | None = None
    ended: bool = False


class UnaryChannel:
    """Unary calls to one server (`host`, `port`), over TLS with `context` (None: HTTP/2 in plain
    text, prior knowledge). Connects on the first call and keeps the connection for the next ones;
    not for use by two threads at once. `max_response` bounds one answer's message (and
    `max_response + OVERHEAD` every byte a call reads); each call is one of `calls`."""

    def __init__(self, host: str, port: int, context: ssl.SSLContext | None, *, timeout: float,
                 max_response: int, user_agent: str = "flower-syncer", calls: InFlight = TENANT_CALLS) -> None:
        self.host, self.port = host, port
        self.context = context
        self.timeout = timeout
        self.max_response = max_response
        self.user_agent = user_agent
        self.calls = calls
        self._sock: BoundedSocket | None = None
        self._conn: h2.connection.H2Connection | None = None

    @property
    def connected(self) -> bool:
        """A connection is open (from an earlier call), which the server may have closed since."""
        return self._sock is not None

    def close(self) -> None:
        sock, conn, self._sock, self._conn = self._sock, self._conn, None, None
        if sock is None:
            return
        try:
            if conn is not None:
                conn.close_connection()
                sock.sock.settimeout(0.5)  # a goodbye, never waited on for long
                sock.sock.sendall(conn.data_to_send())
        except (OSError, h2.exceptions.ProtocolError):
            pass  # going away anyway
        finally:
            sock.close()

    def call(self, path: str, request: bytes, *, deadline: float | None = None) -> bytes:
        """Send `request` (one serialized message) to `path` (/package.Service/Method) and return
        the one message of the answer. The whole call, connecting included, within `timeout` (and
        before `deadline`, monotonic, when given)."""
        call = self.calls.begin(path, _authority(self.host, self.port), timeout=self.timeout,
                                limit=self.max_response + OVERHEAD, deadline=deadline)
        try:
            return self._call(call, path, request)
        except Exception as exc:
            if call.aborted and not isinstance(exc, Stopping):  # what the cut socket made of it
                raise Stopping("the agent is stopping") from exc
            raise
        finally:
            self.calls.end(call)

    def _call(self, deadline: Call, path: str, request: bytes) -> bytes:
        try:
            sock, conn = self._connected(deadline)
            stream = conn.get_next_available_stream_id()
            conn.send_headers(stream, [
                (":method", "POST"), (":scheme", "https" if self.context is not None else "http"),
                (":path", path), (":authority", _authority(self.host, self.port)),
                ("content-type", "application/grpc"), ("te", "trailers"),
                ("grpc-timeout", f"{max(1, int(deadline.left() * 1000))}m"),
                ("grpc-accept-encoding", "identity"), ("user-agent", self.user_agent)])
            answer = _Answer()
            self._send(sock, conn, stream, b"\x00" + len(request).to_bytes(4, "big") + request, answer, deadline)
            while not answer.ended:
                self._receive(sock, conn, stream, answer, deadline)
        except h2.exceptions.ProtocolError:
            self.close()
            raise Broken("the connection cannot take the call") from None
        except (ConnectionResetError, ConnectionAbortedError, BrokenPipeError):
            self.close()
            raise Broken("the server reset the connection") from None
        except BaseException:
            self.close()  # a connection in an unknown state is not used again
            raise
        try:
            return self._message(answer)
        except NotGrpc:
            self.close()
            raise

    def _connected(self, deadline: Call) -> tuple[BoundedSocket, h2.connection.H2Connection]:
        if self._sock is not None and self._conn is not None:
            self._sock.use(deadline)
            return self._sock, self._conn
        sock = BoundedSocket(open_socket(self.host, self.port, self.context, deadline), deadline)
        try:
            if isinstance(sock.sock, ssl.SSLSocket) and sock.sock.selected_alpn_protocol() != "h2":
                raise NotGrpc("the TLS server does not offer HTTP/2")
            conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
            conn.initiate_connection()
            sock.sendall(conn.data_to_send())
        except BaseException:
            sock.close()
            raise
        self._sock, self._conn = sock, conn
        return sock, conn

    def _send(self, sock: BoundedSocket, conn: h2.connection.H2Connection, stream: int, body: bytes,
              answer: _Answer, deadline: Call) -> None:
        """`body` on `stream` as the server's flow-control windows allow; an answer that comes
        before all of it was sent (a server refusing early) ends the sending."""
        view = memoryview(body)
        while view and not answer.ended:
            size = min(len(view), conn.local_flow_control_window(stream), conn.max_outbound_frame_size)
            if size:
                conn.send_data(stream, view[:size], end_stream=size == len(view))
                view = view[size:]
                sock.sendall(conn.data_to_send())
            else:
                self._receive(sock, conn, stream, answer, deadline)  # until the server opens its window

    def _receive(self, sock: BoundedSocket, conn: h2.connection.H2Connection, stream: int, answer: _Answer,
                 deadline: Call) -> None:
        """Read once from the socket (within the call's deadline and limit: `sock` sees to both)
        and fold what it brought for `stream` into `answer`."""
        chunk = sock.recv(_READ)
        if not chunk:
            raise Broken("the server closed the connection before answering")
        try:
            events = conn.receive_data(chunk)
        except h2.exceptions.ProtocolError:
            raise NotGrpc("the answer is not HTTP/2") from None
        for event in events:
            if isinstance(event, h2.events.ConnectionTerminated):
                if event.last_stream_id is None or event.last_stream_id < stream:
                    code = int(event.error_code or 0)
                    raise Broken(f"the server closed the connection (HTTP/2 GOAWAY, error {code})")
            elif getattr(event, "stream_id", None) != stream:
                continue
            elif isinstance(event, h2.events.ResponseReceived):
                answer.headers = _headers(event.headers)
            elif isinstance(event, h2.events.DataReceived):
                answer.data += event.data or b""
                if len(answer.data) > self.max_response + 5:
                    raise AnswerTooLarge(self.max_response)
                conn.acknowledge_received_data(event.flow_controlled_length or 0, stream)
            elif isinstance(event, h2.events.TrailersReceived):
                answer.trailers = _headers(event.headers)
            elif isinstance(event, h2.events.StreamEnded):
                answer.ended = True
            elif isinstance(event, h2.events.StreamReset):
                raise Broken(f"the server reset the call (HTTP/2 error {int(event.error_code or 0)})")
        pending = conn.data_to_send()
        if pending:
            sock.sendall(pending)

    def _message(self, answer: _Answer) -> bytes:
        headers = answer.headers or {}
        if headers.get(":status") != "200" or not headers.get("content-type", "").startswith("application/grpc"):
            raise NotGrpc("the answer is not gRPC")
        ending = answer.trailers if answer.trailers is not None else headers  # or a trailers-only answer
        code = ending.get("grpc-status", "")
        if not code.isdigit():
            raise NotGrpc("the answer has no gRPC status")
        if int(code) != 0:
            raise GrpcStatus(int(code), urllib.parse.unquote(ending.get("grpc-message", "")))
        data = answer.data
        if len(data) < 5 or data[0] != 0 or int.from_bytes(data[1:5], "big") != len(data) - 5:
            raise NotGrpc("the answer is not one uncompressed gRPC message")
        return bytes(data[5:])


def _headers(pairs: Iterable[tuple[str | bytes, str | bytes]]) -> dict[str, str]:
    """h2's header list (decoded as UTF-8: header_encoding) as a dict; HTTP/2 names are lower case."""
    return {_text(name): _text(value) for name, value in pairs}


def _text(value: str | bytes) -> str:
    return value if isinstance(value, str) else value.decode("utf-8", "replace")


def _authority(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
