"""The two transports of the Control API (see syncer.cluster.flower_control), and `connect`, which
picks one for a SuperLink's release: gRPC for Flower before 1.37 (unary calls over HTTP/2,
syncer.cluster.grpc_unary), HTTPS POST with protobuf bodies from 1.37 (the standard library's
http.client; uvicorn speaks HTTP/1.1, which is what we offer in ALPN). Both over an ssl context
that trusts only the federation's CA.

Neither ever returns a target's own words unless they are a parsed Control API error: an HTTP
answer that is not one is reported by its status code only, a transport failure by its kind."""

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

T = TypeVar("T")
PROTOBUF = "application/protobuf"
MAX_RESPONSE = 8 << 20  # bytes of a Control API answer (ListNodes with thousands of keys fits)
MAX_ERROR = 64 << 10  # bytes of an error answer read (Flower's own client reads as much)

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
    """A failure below the Control API, described by its kind (never the peer's bytes)."""
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
    if isinstance(exc, TimeoutError):
        return ControlApiError(call, address, ControlErrorCode.UNAVAILABLE, "timed out")
    if isinstance(exc, http.client.HTTPException | ConnectionError):
        return ControlApiError(call, address, ControlErrorCode.NOT_CONTROL_API,
                               "the connection broke, or the answer is not HTTP")
    return ControlApiError(call, address, ControlErrorCode.UNAVAILABLE, f"cannot connect ({type(exc).__name__})")


class _Calls:
    """The calls, over a transport's `_call(name, request) -> response bytes`."""

    address: str

    def _call(self, name: str, body: bytes) -> bytes:
        raise NotImplementedError

    def list_nodes(self) -> list[RegisteredNode]:
        return _decoded("ListNodes", self.address, decode_list_nodes, self._call("list_nodes", b""))

    def register(self, public_key: bytes) -> int:
        return _decoded("RegisterNode", self.address, decode_register,
                        self._call("register", encode_register(public_key)))

    def unregister(self, node_id: int) -> None:
        self._call("unregister", encode_unregister(node_id))

    def list_runs(self) -> list[RunInfo]:
        return _decoded("ListRuns", self.address, decode_list_runs, self._call("list_runs", b""))


READS = frozenset({"list_nodes", "list_runs"})  # calls that change nothing: safe to send again


class HttpControl(_Calls):
    """The Control API over HTTPS (Flower 1.37+)."""

    transport: Transport = "http"

    def __init__(self, address: str, root_certificates: bytes | None, *, timeout: float = 10.0) -> None:
        self.address = address
        self.host, self.port = split_address(address)
        self.timeout = timeout
        self._context: ssl.SSLContext | None = None  # None: plain HTTP (a federation with `insecure: true`)
        if root_certificates is not None:
            self._context = ssl.create_default_context(cadata=root_certificates.decode("ascii", "replace"))
            self._context.set_alpn_protocols(["http/1.1"])
        self._kept: http.client.HTTPConnection | None = None  # after a read, for the next read only

    def close(self) -> None:
        if self._kept is not None:
            self._kept.close()
            self._kept = None

    def _connection(self) -> http.client.HTTPConnection:
        return (http.client.HTTPSConnection(self.host, self.port, timeout=self.timeout, context=self._context)
                if self._context is not None
                else http.client.HTTPConnection(self.host, self.port, timeout=self.timeout))

    def _call(self, name: str, body: bytes) -> bytes:
        rpc, path = CALLS[name]
        # A read (list-nodes, list-runs) keeps its connection for the next read of the same check
        # (one TLS handshake for ListNodes + ListRuns); a read on a kept connection that the server
        # closed meanwhile is sent again on a new one (reads are safe to repeat). Writes get a
        # connection of their own, closed after: a RegisterNode must not be sent twice on a guess
        # that the first never arrived (and uvicorn drops idle keep-alive connections after 5 s).
        read = name in READS
        kept, self._kept = self._kept, None
        if kept is not None and not read:
            kept.close()
            kept = None
        conn = kept or self._connection()
        try:
            try:
                status, content_type, data = self._exchange(conn, path, body, keep=read)
            except (ConnectionError, http.client.RemoteDisconnected, http.client.BadStatusLine):
                if kept is None:
                    raise
                conn.close()  # the server closed the kept connection: once more, on a new one
                conn = self._connection()
                status, content_type, data = self._exchange(conn, path, body, keep=read)
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            raise _transport_error(rpc, self.address, exc) from None
        if read and status == 200 and conn.sock is not None:  # still open: the server keeps it alive
            self._kept = conn
        else:
            conn.close()
        if status == 200 and content_type == PROTOBUF and len(data) <= MAX_RESPONSE:
            return data
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

    def __init__(self, address: str, root_certificates: bytes | None, *, timeout: float = 10.0) -> None:
        self.address = address
        self.timeout = timeout
        host, port = split_address(address)
        context: ssl.SSLContext | None = None  # None: plain text (a federation with `insecure: true`)
        if root_certificates is not None:
            context = ssl.create_default_context(cadata=root_certificates.decode("ascii", "replace"))
            context.set_alpn_protocols(["h2"])
        self._channel = UnaryChannel(host, port, context, timeout=timeout, max_response=MAX_RESPONSE)

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
                return self._channel.call(path, request)
            except Broken:
                if not again:
                    raise
                return self._channel.call(path, request)
        except GrpcStatus as exc:
            raise self._error(method, exc) from None
        except NotGrpc as exc:
            raise ControlApiError(method, self.address, ControlErrorCode.NOT_CONTROL_API,
                                  f"{exc.reason}: not a gRPC server (is the SuperLink Flower 1.37 or newer, which "
                                  "serves the Control API over HTTP?)") from None
        except Broken as exc:
            raise ControlApiError(method, self.address, ControlErrorCode.UNAVAILABLE, exc.reason) from None
        except OSError as exc:
            raise _transport_error(method, self.address, exc) from None

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
            timeout: float = 10.0) -> ControlApi:
    """A client of the Control API at `address` (host:port) over `transport`, verifying the
    server against `root_certificates` (PEM; None: plaintext, for a federation with `insecure:
    true`, whose SuperLink serves no TLS: only Flower-health reads go there). An address that
    is not host:port is refused here too (validation refuses it first): gRPC would dial `unix:`
    sockets and other schemes."""
    from syncer.models.nodeauth import control_address_problem

    problem = control_address_problem(address)
    if problem:
        raise ControlApiError("connect", address, ControlErrorCode.BAD_ADDRESS, f"the address {problem}")
    if transport == "http":
        return HttpControl(address, root_certificates, timeout=timeout)
    return GrpcControl(address, root_certificates, timeout=timeout)  # only for SuperLinks before 1.37
