"""The two transports of the Control API (see syncer.cluster.flower_control), and `connect`, which
picks one for a SuperLink's release: gRPC for Flower before 1.37 (unary calls over HTTP/2,
syncer.cluster.grpc_unary), HTTPS POST with protobuf bodies from 1.37 (the standard library's
http.client; uvicorn speaks HTTP/1.1, which is what we offer in ALPN). Both over an ssl context
that trusts only the federation's CA.

Neither ever returns a target's own words unless they are a parsed Control API error: an HTTP
answer that is not one is reported by its status code only, a transport failure by its kind.

Every call is bounded (syncer.cluster.tenant_calls): one deadline for all of it (connecting, the
TLS handshake, every byte; `timeout` seconds, and the client's `deadline` when a task of several
calls has one), a limit on the bytes it reads (MAX_RESPONSE and the headers, counted while they
arrive), redirects never followed; `DEADLINE` and `TOO_LARGE` say which bound cut it. The entries
kept of an answer are bounded by the decoders (flower_control.MAX_NODES, MAX_RUNS)."""

from __future__ import annotations

import http.client
import json
import socket
import ssl
from collections.abc import Callable
from typing import TypeVar

from syncer.cluster.flower_control import (
    CALLS,
    ControlApi,
    ControlApiError,
    ControlErrorCode,
    Listing,
    RegisteredNode,
    RunInfo,
    Transport,
    decode_list_nodes,
    decode_list_runs,
    decode_register,
    encode_register,
    encode_unregister,
)
from syncer.cluster.grpc_unary import Broken, GrpcStatus, NotGrpc, UnaryChannel
from syncer.cluster.tenant_calls import (
    TENANT_CALLS,
    AnswerTooLarge,
    BoundedSocket,
    Call,
    InFlight,
    Stopping,
    open_socket,
)

T = TypeVar("T")
PROTOBUF = "application/protobuf"
# bytes of a Control API answer: ListNodes of 10,000 keyed SuperNodes (flower_control.MAX_NODES)
# fits. Each of the 16 health workers and each sync worker may hold one answer at a time
MAX_RESPONSE = 4 << 20
MAX_ERROR = 64 << 10  # bytes of an error answer read (Flower's own client reads as much)
MAX_HEAD = 64 << 10  # bytes of an HTTP answer's status line and headers

# Flower's ApiErrorCode (flwr.supercore.error.base, 1.37 - 1.43) of the calls made here
_HTTP_CODES = {22: ControlErrorCode.KEY_INVALID, 23: ControlErrorCode.KEY_IN_USE, 24: ControlErrorCode.NODE_NOT_FOUND}
# Flower's own messages before 1.37 (flwr.common.constant), the only thing a gRPC status carries
_GRPC_MESSAGES = {"Public key already in use": ControlErrorCode.KEY_IN_USE,
                  "The provided public key is not valid": ControlErrorCode.KEY_INVALID,
                  "Node ID not found for account": ControlErrorCode.NODE_NOT_FOUND}


def split_address(address: str) -> tuple[str, int]:
    """host and port of `host:port` or `[v6]:port` (validated earlier: models.nodeauth)."""
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


def _transport_error(call: str, address: str, exc: BaseException) -> ControlApiError:
    """A failure below the Control API, described by its kind (never the peer's bytes), with
    `exc` as its cause."""
    error = _described(call, address, exc)
    error.__cause__ = exc
    return error


def _described(call: str, address: str, exc: BaseException) -> ControlApiError:
    if isinstance(exc, TimeoutError):  # DeadlineExceeded, or a socket's timeout: what was left of the deadline
        return ControlApiError(call, address, ControlErrorCode.DEADLINE, f"no whole answer in time ({exc}): the "
                               "server is silent, slow or endless")
    if isinstance(exc, AnswerTooLarge):
        return ControlApiError(call, address, ControlErrorCode.TOO_LARGE, f"{exc}: cut while reading, not decoded")
    if isinstance(exc, Stopping):
        return ControlApiError(call, address, ControlErrorCode.UNAVAILABLE, "the agent is stopping: call cut")
    if isinstance(exc, ssl.SSLCertVerificationError):
        reason = exc.verify_message or "certificate verify failed"
        return ControlApiError(call, address, ControlErrorCode.TLS, f"the server's certificate is not accepted "
                               f"({reason}): it must chain to the federation's CA and name this address")
    if isinstance(exc, ssl.SSLError):
        return ControlApiError(call, address, ControlErrorCode.TLS, "the TLS handshake failed (not a TLS server "
                               "of the federation?)")
    if isinstance(exc, ConnectionRefusedError):
        return ControlApiError(call, address, ControlErrorCode.UNAVAILABLE, "connection refused")
    if isinstance(exc, socket.gaierror):
        return ControlApiError(call, address, ControlErrorCode.NOT_RESOLVED, "the host name does not resolve")
    if isinstance(exc, http.client.HTTPException | ConnectionError):
        return ControlApiError(call, address, ControlErrorCode.NOT_CONTROL_API,
                               "the connection broke, or the answer is not HTTP")
    return ControlApiError(call, address, ControlErrorCode.UNAVAILABLE, f"cannot connect ({type(exc).__name__})")


class _Calls:
    """The calls, over a transport's `_call(name, request) -> response bytes`."""

    address: str

    def _call(self, name: str, body: bytes) -> bytes:
        raise NotImplementedError

    def list_nodes(self) -> Listing[RegisteredNode]:
        return _decoded("ListNodes", self.address, decode_list_nodes, self._call("list_nodes", b""))

    def register(self, public_key: bytes) -> int:
        return _decoded("RegisterNode", self.address, decode_register,
                        self._call("register", encode_register(public_key)))

    def unregister(self, node_id: int) -> None:
        self._call("unregister", encode_unregister(node_id))

    def list_runs(self) -> Listing[RunInfo]:
        return _decoded("ListRuns", self.address, decode_list_runs, self._call("list_runs", b""))


READS = frozenset({"list_nodes", "list_runs"})  # calls that change nothing: safe to send again


class _Connection(http.client.HTTPConnection):
    """http.client over a BoundedSocket: connecting, the TLS handshake and every read and write
    of the call are within its deadline, and every byte read counts toward its limit."""

    def __init__(self, host: str, port: int, context: ssl.SSLContext | None, call: Call) -> None:
        super().__init__(host, port)
        self.context = context
        self.call = call

    def connect(self) -> None:
        self.sock = BoundedSocket(open_socket(self.host, self.port, self.context, self.call),
                                  self.call)

    def use(self, call: Call) -> None:
        self.call = call
        if isinstance(self.sock, BoundedSocket):
            self.sock.use(call)


class HttpControl(_Calls):
    """The Control API over HTTPS (Flower 1.37+). `timeout`: seconds per call, all of it;
    `deadline` (monotonic): no call goes on past it (a task of several calls)."""

    transport: Transport = "http"

    def __init__(self, address: str, root_certificates: bytes | None, *, timeout: float = 10.0,
                 deadline: float | None = None, calls: InFlight = TENANT_CALLS) -> None:
        self.address = address
        self.host, self.port = split_address(address)
        self.timeout = timeout
        self.deadline = deadline
        self.calls = calls
        self._context: ssl.SSLContext | None = None  # None: plain HTTP (a federation with `insecure: true`)
        if root_certificates is not None:
            self._context = ssl.create_default_context(cadata=root_certificates.decode("ascii", "replace"))
            self._context.set_alpn_protocols(["http/1.1"])
        self._kept: _Connection | None = None  # after a read, for the next read only

    def close(self) -> None:
        if self._kept is not None:
            self._kept.close()
            self._kept = None

    def _call(self, name: str, body: bytes) -> bytes:
        rpc, path = CALLS[name]
        try:
            call = self.calls.begin(rpc, self.address, timeout=self.timeout, limit=MAX_RESPONSE + MAX_HEAD,
                                    deadline=self.deadline)
        except Stopping as exc:
            raise _transport_error(rpc, self.address, exc) from exc
        try:
            return self._bounded(name, rpc, path, body, call)
        finally:
            self.calls.end(call)

    def _bounded(self, name: str, rpc: str, path: str, body: bytes, call: Call) -> bytes:
        # A read (list-nodes, list-runs) keeps its connection for the next read of the same check
        # (one TLS handshake for ListNodes + ListRuns); a read on a kept connection that the server
        # closed meanwhile is sent again on a new one (reads are safe to repeat), within the same
        # deadline. Writes get a connection of their own, closed after: a RegisterNode must not be
        # sent twice on a guess that the first never arrived (and uvicorn drops idle keep-alive
        # connections after 5 s).
        read = name in READS
        kept, self._kept = self._kept, None
        if kept is not None and not read:
            kept.close()
            kept = None
        if kept is not None:
            kept.use(call)
        conn = kept or _Connection(self.host, self.port, self._context, call)
        try:
            try:
                status, content_type, data = self._exchange(conn, path, body, keep=read)
            except (ConnectionError, http.client.RemoteDisconnected, http.client.BadStatusLine):
                if kept is None:
                    raise
                conn.close()  # the server closed the kept connection: once more, on a new one
                conn = _Connection(self.host, self.port, self._context, call)
                status, content_type, data = self._exchange(conn, path, body, keep=read)
        except (OSError, http.client.HTTPException, AnswerTooLarge, Stopping) as exc:
            conn.close()
            if call.aborted:  # the socket was cut under the read: what it made of that does not matter
                raise _transport_error(rpc, self.address, Stopping("the agent is stopping")) from exc
            raise _transport_error(rpc, self.address, exc) from exc
        if read and status == 200 and conn.sock is not None:  # still open: the server keeps it alive
            self._kept = conn
        else:
            conn.close()
        if status == 200 and content_type == PROTOBUF and len(data) <= MAX_RESPONSE:
            return data
        if status == 200 and len(data) > MAX_RESPONSE:
            raise ControlApiError(rpc, self.address, ControlErrorCode.TOO_LARGE,
                                  f"the answer is larger than {MAX_RESPONSE} bytes: cut while reading, not decoded")
        raise self._error(rpc, status, content_type, data)

    @staticmethod
    def _exchange(conn: http.client.HTTPConnection, path: str, body: bytes, *, keep: bool) -> tuple[int, str, bytes]:
        conn.request("POST", path, body, {"content-type": PROTOBUF, "accept": PROTOBUF,
                                          "connection": "keep-alive" if keep else "close"})
        response = conn.getresponse()
        content_type = (response.getheader("content-type") or "").split(";")[0].strip().lower()
        data = response.read(MAX_RESPONSE + 1 if response.status == 200 else MAX_ERROR + 1)
        if not response.isclosed():
            conn.close()  # an answer over the limit (never read whole): the connection cannot be used again
        return response.status, content_type, data

    def _error(self, rpc: str, status: int, content_type: str, data: bytes) -> ControlApiError:
        if status == 200:
            return ControlApiError(rpc, self.address, ControlErrorCode.NOT_CONTROL_API,
                                   "HTTP 200 without a protobuf body: not a Flower Control API")
        parsed = None
        if content_type == "application/json" and len(data) <= MAX_ERROR:
            try:
                parsed = json.loads(data)
            except ValueError:
                parsed = None
        if isinstance(parsed, dict) and isinstance(parsed.get("code"), int) and isinstance(parsed.get("detail"), str):
            code = _HTTP_CODES.get(parsed["code"], ControlErrorCode.SERVER)
            return ControlApiError(rpc, self.address, code, f"{parsed['detail']} (HTTP {status}, Flower error "
                                   f"{parsed['code']})")
        if status in (401, 403):
            return ControlApiError(rpc, self.address, ControlErrorCode.DENIED, f"HTTP {status}: the SuperLink "
                                   "asks for credentials (Control API authentication is not supported)")
        return ControlApiError(rpc, self.address, ControlErrorCode.NOT_CONTROL_API if status in (404, 405, 415)
                               else ControlErrorCode.SERVER, f"HTTP {status}, not an answer of a Flower 1.37+ "
                               "Control API (is the SuperLink older, or the address another server?)")


class GrpcControl(_Calls):
    """The Control API over gRPC (Flower before 1.37): unary calls on one HTTP/2 connection
    (syncer.cluster.grpc_unary; not grpcio, whose channel close can freeze the agent)."""

    transport: Transport = "grpc"

    def __init__(self, address: str, root_certificates: bytes | None, *, timeout: float = 10.0,
                 deadline: float | None = None, calls: InFlight = TENANT_CALLS) -> None:
        self.address = address
        self.timeout = timeout
        self.deadline = deadline
        host, port = split_address(address)
        context: ssl.SSLContext | None = None  # None: plain text (a federation with `insecure: true`)
        if root_certificates is not None:
            context = ssl.create_default_context(cadata=root_certificates.decode("ascii", "replace"))
            context.set_alpn_protocols(["h2"])
        self._channel = UnaryChannel(host, port, context, timeout=timeout, max_response=MAX_RESPONSE, calls=calls)

    def close(self) -> None:
        self._channel.close()

    def _call(self, name: str, request: bytes) -> bytes:
        method = CALLS[name][0]
        path = "/flwr.proto.Control/" + method
        # the calls of one check share a connection; a read on it that the server closed meanwhile
        # is sent once more on a new one (reads are safe to repeat, writes are never sent twice)
        again = self._channel.connected and name in READS
        try:
            try:
                return self._channel.call(path, request, deadline=self.deadline)
            except Broken:
                if not again:
                    raise
                return self._channel.call(path, request, deadline=self.deadline)
        except GrpcStatus as exc:
            raise self._error(method, exc) from None
        except NotGrpc as exc:
            raise ControlApiError(method, self.address, ControlErrorCode.NOT_CONTROL_API,
                                  f"{exc.reason}: not a gRPC server (is the SuperLink Flower 1.37 or newer, which "
                                  "serves the Control API over HTTP?)") from None
        except Broken as exc:
            raise ControlApiError(method, self.address, ControlErrorCode.UNAVAILABLE, exc.reason) from None
        except (OSError, AnswerTooLarge, Stopping) as exc:
            raise _transport_error(method, self.address, exc) from exc

    def _error(self, method: str, exc: GrpcStatus) -> ControlApiError:
        known = _GRPC_MESSAGES.get(exc.message.rstrip("."))
        if known is not None:
            return ControlApiError(method, self.address, known, f"{exc.message} ({exc.name})")
        if exc.name in ("UNAVAILABLE", "DEADLINE_EXCEEDED"):
            return ControlApiError(method, self.address, ControlErrorCode.UNAVAILABLE,
                                   f"{exc.name}: the SuperLink did not answer in time or is shutting down")
        if exc.name in ("UNAUTHENTICATED", "PERMISSION_DENIED"):
            return ControlApiError(method, self.address, ControlErrorCode.DENIED, f"{exc.name}: the SuperLink asks "
                                   "for credentials (Control API authentication is not supported)")
        if exc.name == "UNIMPLEMENTED":
            return ControlApiError(method, self.address, ControlErrorCode.NOT_CONTROL_API,
                                   f"{exc.name}: no Flower Control API at this address")
        # a status text that is not one of Flower's known messages is not shown: a gRPC server that
        # is not Flower's could say anything there
        return ControlApiError(method, self.address, ControlErrorCode.SERVER, f"{exc.name} (the server's message is "
                               "not shown: not one Flower's Control API is known to send)")


def _decoded(rpc: str, address: str, decode: Callable[[bytes], T], data: bytes) -> T:
    try:
        return decode(data)
    except ValueError:
        raise ControlApiError(rpc, address, ControlErrorCode.NOT_CONTROL_API,
                              "the answer is not the expected protobuf message") from None


def connect(address: str, transport: Transport, root_certificates: bytes | None, *,
            timeout: float = 10.0, deadline: float | None = None, calls: InFlight = TENANT_CALLS) -> ControlApi:
    """A client of the Control API at `address` (host:port) over `transport`, verifying the
    server against `root_certificates` (PEM; None: plaintext, for a federation with `insecure:
    true`, whose SuperLink serves no TLS: only Flower-health reads go there). Each call within
    `timeout` seconds, and none past `deadline` (monotonic) when given. An address that
    is not host:port is refused here too (validation refuses it first): gRPC would dial `unix:`
    sockets and other schemes."""
    from syncer.models.nodeauth import control_address_problem

    problem = control_address_problem(address)
    if problem:
        raise ControlApiError("connect", address, ControlErrorCode.BAD_ADDRESS, f"the address {problem}")
    if transport == "http":
        return HttpControl(address, root_certificates, timeout=timeout, deadline=deadline, calls=calls)
    # only for SuperLinks before 1.37
    return GrpcControl(address, root_certificates, timeout=timeout, deadline=deadline, calls=calls)
