"""A client of the Flower SuperLink's Control API for SuperNode keys: list, register, unregister
(`flwr supernode ls|register|unregister` speak the same three RPCs of `flwr.proto.Control`).

The messages are tiny and fixed, so they are encoded here on protobuf's wire format instead of
pulling in the `flwr` package (numpy, SQLAlchemy, ~200 MB) for its generated classes;
tests/integration/test_node_auth.py checks this codec against flwr's own messages and runs it
against a real SuperLink. grpcio carries the calls (TLS with the federation's CA).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import grpc

SERVICE = "/flwr.proto.Control/"
UNREGISTERED = "unregistered"


class ControlApiError(Exception):
    """A Control API call failed: `detail` is the server's or the transport's message."""

    def __init__(self, call: str, address: str, detail: str, code: str = "") -> None:
        super().__init__(f"{call} at {address}: {detail}")
        self.call, self.address, self.detail, self.code = call, address, detail, code


@dataclass(frozen=True)
class RegisteredNode:
    node_id: int
    status: str  # registered | online | offline | unregistered
    public_key: bytes  # SubjectPublicKeyInfo PEM


class ControlClient:
    def __init__(self, address: str, root_certificates: bytes, *, timeout: float = 10.0) -> None:
        import grpc  # only agents with a SuperNode-authenticating federation load it

        self.address = address
        self.timeout = timeout
        self._grpc = grpc
        self._channel = grpc.secure_channel(address, grpc.ssl_channel_credentials(root_certificates))

    def close(self) -> None:
        self._channel.close()

    def _call(self, method: str, request: bytes) -> bytes:
        call: grpc.UnaryUnaryMultiCallable[bytes, bytes] = self._channel.unary_unary(
            SERVICE + method, request_serializer=None, response_deserializer=None)
        try:
            response: bytes = call(request, timeout=self.timeout)
        except self._grpc.RpcError as exc:
            raise ControlApiError(method, self.address, str(exc.details() or exc), str(exc.code().name)) from exc
        return response

    def list_nodes(self) -> list[RegisteredNode]:
        return decode_list_nodes(self._call("ListNodes", b""))

    def register(self, public_key: bytes) -> int:
        return int(dict(_fields(self._call("RegisterNode", _bytes_field(1, public_key)))).get(1, 0))

    def unregister(self, node_id: int) -> None:
        self._call("UnregisterNode", _varint_field(1, node_id))


# -- protobuf wire format (https://protobuf.dev/programming-guides/encoding/) ---------------------

def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _varint_field(number: int, value: int) -> bytes:
    return _varint(number << 3) + _varint(value)


def _bytes_field(number: int, value: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(value)) + value


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ValueError("truncated varint")
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, pos


def _fields(data: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) of a message: varints as int, length-delimited as bytes; fixed
    64/32-bit fields are skipped over (as bytes)."""
    pos = 0
    while pos < len(data):
        key, pos = _read_varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _read_varint(data, pos)
            yield number, value
        elif wire == 2:
            size, pos = _read_varint(data, pos)
            if pos + size > len(data):
                raise ValueError("truncated field")
            yield number, data[pos:pos + size]
            pos += size
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            yield number, data[pos:pos + size]
            pos += size
        else:
            raise ValueError(f"unsupported wire type {wire}")


def decode_list_nodes(data: bytes) -> list[RegisteredNode]:
    """ListNodesResponse: repeated NodeInfo nodes_info = 1 (node_id = 1, status = 4, public_key = 11)."""
    nodes = []
    for number, value in _fields(data):
        if number == 1 and isinstance(value, bytes):
            info = dict(_fields(value))
            node_id, status, key = info.get(1, 0), info.get(4, b""), info.get(11, b"")
            nodes.append(RegisteredNode(node_id if isinstance(node_id, int) else 0,
                                        status.decode() if isinstance(status, bytes) else "",
                                        key if isinstance(key, bytes) else b""))
    return nodes
