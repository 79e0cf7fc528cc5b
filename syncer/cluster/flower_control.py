"""A client of the Flower SuperLink's Control API for SuperNode keys and runs: list, register,
unregister SuperNodes, list runs (`flwr supernode ls|register|unregister` and `flwr ls` speak the
same RPCs of `flwr.proto.Control`).

Two transports carry the same protobuf messages (checked in the wheels 1.26, 1.37, 1.42 and the
1.43 nightly: the field numbers of these messages never changed):

- gRPC (`/flwr.proto.Control/<Rpc>` on `--control-api-address`, default port 9093) for Flower
  before 1.37;
- HTTPS POST `/v1/control/<rpc>` with `content-type: application/protobuf` on the SuperLink's
  `--host`/`--port` (uvicorn, HTTP/1.1, default port 8000) from 1.37, where gRPC Control is served
  only with an internal environment variable (and 1.43 removes it). Errors come back as JSON
  `{"code": <ApiErrorCode>, "detail": <public message>}` (flwr.supercore.error).

The messages are tiny and fixed, so they are encoded here on protobuf's wire format instead of
pulling in the `flwr` package (numpy, SQLAlchemy, ~200 MB) for its generated classes;
tests/unit/test_node_auth.py checks this codec against flwr's own messages and
tests/integration/test_node_auth.py runs both transports against real SuperLinks. TLS verifies the
server against the federation's CA.

What a target says is never echoed: an error carries a `ControlErrorCode` that callers act on and
a detail that is either a parsed Control API error (bounded, escaped, one line) or words of ours.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal, Protocol, TypeVar

T = TypeVar("T")
UNREGISTERED = "unregistered"
Transport = Literal["grpc", "http"]
MAX_DETAIL = 160  # characters of a server's error detail that are shown
# entries of one answer that are decoded and kept; the rest of the answer is not read (its size
# is bounded by the transports, its entries are not: 8 MiB of empty NodeInfos are 4 million
# objects). A Flower NodeInfo with its key is about 350 bytes: 10,000 fit the transports' limit.
MAX_NODES = 10_000
MAX_RUNS = 10_000
# fields of one answer decoded, its embedded messages' included: 10,000 NodeInfos are 120,000.
# Bounds the CPU an answer costs (4 MiB of 2-byte fields would be 2 million loop turns)
MAX_SCANNED = 250_000


class ControlErrorCode(enum.StrEnum):
    """What went wrong, for callers to act on (never the message text)."""

    KEY_IN_USE = "key-in-use"  # "Public key already in use": registered before (maybe unregistered since)
    KEY_INVALID = "key-invalid"  # the SuperLink does not accept this public key
    NODE_NOT_FOUND = "node-not-found"  # no such node id for this account
    DENIED = "denied"  # the SuperLink wants credentials, or refuses the account
    UNAVAILABLE = "unavailable"  # nothing answers at the address (refused, timed out, name not found over gRPC)
    NOT_RESOLVED = "not-resolved"  # the host name does not resolve (e.g. Service DNS, from outside the cluster)
    TLS = "tls"  # the TLS handshake failed: the server is not verified by the federation's CA
    NOT_CONTROL_API = "not-control-api"  # something answers, but not the Control API of this transport
    SERVER = "server"  # another error of the Control API
    DEADLINE = "deadline-exceeded"  # no whole answer within the call's deadline (silent, slow or endless)
    TOO_LARGE = "answer-too-large"  # the answer is over the size limit (cut while reading, never decoded)
    BAD_ADDRESS = "bad-address"  # not host:port (a scheme, a unix: socket, ...): never dialled


class ControlApiError(Exception):
    """A Control API call failed. `code` says what; `detail` is safe to show (see the module doc).
    `__cause__` is the transport's own exception when there is one (never the server's bytes)."""

    def __init__(self, call: str, address: str, code: ControlErrorCode, detail: str) -> None:
        detail = one_line(detail)
        super().__init__(f"{call} at {one_line(address)}: {detail}")
        self.call, self.address, self.code, self.detail = call, address, code, detail


def one_line(text: str, limit: int = MAX_DETAIL) -> str:
    """`text` bounded to `limit` characters, on one line, with control and non-ASCII characters
    escaped (a target's bytes cannot forge log or status lines)."""
    escaped = text.encode("unicode_escape", "backslashreplace").decode("ascii")
    escaped = "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in escaped)
    return escaped if len(escaped) <= limit else escaped[:limit - 3] + "..."


class Listing(list[T]):
    """The entries of a list answer that were kept; `truncated`: the answer had more than the
    limit (MAX_NODES, MAX_RUNS), which were neither decoded nor kept."""

    truncated: bool = False


@dataclass(frozen=True)
class RegisteredNode:
    """One NodeInfo of ListNodes. Flower 1.26 - 1.42 send fields 1-11; the 1.43 nightly adds
    `location` (12) and `name` (13). A SuperNode without node authentication has a key too: the
    one it made for itself at start (so keys identify nodes only where Git lists them)."""

    node_id: int
    status: str  # registered | online | offline | unregistered
    public_key: bytes  # SubjectPublicKeyInfo PEM
    owner_name: str = ""  # the account that registered it ("" without account authentication)
    last_activated_at: str = ""  # ISO time it last came online
    last_deactivated_at: str = ""  # ISO time it last went offline
    online_until: float = 0.0  # POSIX time its last heartbeat is good until
    heartbeat_interval: float = 0.0  # seconds between its heartbeats
    name: str = ""  # Flower 1.43+
    location: str = ""  # Flower 1.43+


@dataclass(frozen=True)
class RunInfo:
    run_id: int
    fab_id: str
    fab_version: str
    status: str  # pending | starting | running | finished
    sub_status: str  # completed | failed | stopped (finished runs)
    pending_at: str = ""
    running_at: str = ""
    finished_at: str = ""
    details: str = ""  # RunStatus.details: why a run failed (Flower's words: bound before showing)


class ControlApi(Protocol):
    """One SuperLink's Control API, whatever carries it."""

    address: str
    transport: Transport

    def list_nodes(self) -> Listing[RegisteredNode]: ...
    def register(self, public_key: bytes) -> int: ...
    def unregister(self, node_id: int) -> None: ...
    def list_runs(self) -> Listing[RunInfo]: ...
    def close(self) -> None: ...


# (gRPC method, HTTP path) of each call
CALLS: dict[str, tuple[str, str]] = {
    "list_nodes": ("ListNodes", "/v1/control/list-nodes"),
    "register": ("RegisterNode", "/v1/control/register-node"),
    "unregister": ("UnregisterNode", "/v1/control/unregister-node"),
    "list_runs": ("ListRuns", "/v1/control/list-runs"),
}


# -- the messages ------------------------------------------------------------------------------

def encode_register(public_key: bytes) -> bytes:
    """RegisterNodeRequest: bytes public_key = 1."""
    return _bytes_field(1, public_key)


def encode_unregister(node_id: int) -> bytes:
    """UnregisterNodeRequest: uint64 node_id = 1."""
    return _varint_field(1, node_id)


def decode_register(data: bytes) -> int:
    """RegisterNodeResponse: uint64 node_id = 1."""
    try:
        node_id = dict(_Scan(64).fields(data)).get(1, 0)
    except _Spent:
        node_id = 0
    return node_id if isinstance(node_id, int) else 0


def decode_list_nodes(data: bytes, limit: int = MAX_NODES) -> Listing[RegisteredNode]:
    """ListNodesResponse: repeated NodeInfo nodes_info = 1; NodeInfo: node_id = 1, owner_name = 3,
    status = 4, last_activated_at = 6, last_deactivated_at = 7, online_until = 9 (double),
    heartbeat_interval = 10 (double), public_key = 11, location = 12, name = 13 (1.43+). At most
    `limit` nodes: past them the answer is not read on (`truncated`)."""
    nodes: Listing[RegisteredNode] = Listing()
    scan = _Scan()
    try:
        for number, value in scan.fields(data):
            if len(nodes) >= limit:
                nodes.truncated = True
                break
            if number == 1 and isinstance(value, bytes):
                info = dict(scan.fields(value))
                nodes.append(RegisteredNode(_int(info.get(1)), _text(info.get(4)), _bytes(info.get(11)),
                                            _text(info.get(3)), _text(info.get(6)), _text(info.get(7)),
                                            _double(info.get(9)), _double(info.get(10)), _text(info.get(13)),
                                            _text(info.get(12))))
    except _Spent:
        nodes.truncated = True
    return nodes


def decode_list_runs(data: bytes, limit: int = MAX_RUNS) -> Listing[RunInfo]:
    """ListRunsResponse: map<uint64, Run> run_dict = 1 (entries: key = 1, value = 2); Run: run_id = 1,
    fab_id = 2, fab_version = 3, pending_at = 6, running_at = 8, finished_at = 9, status = 10
    (RunStatus: status = 1, sub_status = 2, details = 3). Sorted by run id. At most `limit` runs:
    past them the answer is not read on (`truncated`)."""
    runs: list[RunInfo] = []
    truncated = False
    scan = _Scan()
    try:
        for number, value in scan.fields(data):
            if len(runs) >= limit:
                truncated = True
                break
            if number != 1 or not isinstance(value, bytes):
                continue
            entry = dict(scan.fields(value))
            run = dict(scan.fields(_bytes(entry.get(2))))
            status = dict(scan.fields(_bytes(run.get(10))))
            runs.append(RunInfo(_int(run.get(1)) or _int(entry.get(1)), _text(run.get(2)), _text(run.get(3)),
                                _text(status.get(1)), _text(status.get(2)), _text(run.get(6)), _text(run.get(8)),
                                _text(run.get(9)), _text(status.get(3))))
    except _Spent:
        truncated = True
    out: Listing[RunInfo] = Listing(sorted(runs, key=lambda r: r.run_id))
    out.truncated = truncated
    return out


class _Spent(Exception):
    """An answer used up its MAX_SCANNED fields."""


class _Scan:
    """The fields of one answer, its embedded messages' included, at most MAX_SCANNED in all: what
    decoding an answer may cost is bounded, whatever its shape (millions of tiny fields)."""

    def __init__(self, most: int | None = None) -> None:
        self.left = MAX_SCANNED if most is None else most

    def fields(self, data: bytes) -> Iterator[tuple[int, int | bytes]]:
        for item in _fields(data):
            if self.left <= 0:
                raise _Spent
            self.left -= 1
            yield item


def _int(value: int | bytes | None) -> int:
    return value if isinstance(value, int) else 0


def _bytes(value: int | bytes | None) -> bytes:
    return value if isinstance(value, bytes) else b""


def _text(value: int | bytes | None) -> str:
    return _bytes(value).decode("utf-8", "replace")


def _double(value: int | bytes | None) -> float:
    """A `double` field (fixed 64-bit, little-endian); 0.0 when absent or not 8 bytes."""
    raw = _bytes(value)
    return float(struct.unpack("<d", raw)[0]) if len(raw) == 8 else 0.0


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
    64/32-bit fields are skipped over (as bytes). Malformed data raises ValueError."""
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
            if pos + size > len(data):
                raise ValueError("truncated field")
            yield number, data[pos:pos + size]
            pos += size
        else:
            raise ValueError(f"unsupported wire type {wire}")
