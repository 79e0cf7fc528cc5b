"""Hostile SuperLinks on 127.0.0.1, shared by the reliability tests (tests/reliability/
test_hostile_superlinks.py, test_hostile_agent.py) and the benchmarks (bench/hostile_superlink.py,
bench/hostile_agent.py): servers that answer the Control API as an attacker would (huge, endless,
trickling over TLS, redirecting, not protobuf, a huge certificate chain), over HTTP (Flower 1.37+)
or gRPC (before). A helper module, not a test module: tests and benchmarks import from here.

`Hostile(serve, tls)` is the server; `serve` functions (`answer`, `trickle`, `grpc`, ...) say what
each connection gets; `http_kind(name)` is the server of one named hostile kind (`KINDS`)."""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import h2.config
import h2.connection
import h2.events

from syncer.cluster.control_transports import MAX_RESPONSE
from tests.nodeauth import certificates

Serve = Callable[[socket.socket], None]
TINY = b"\x0a\x00"  # an empty NodeInfo: 2 bytes, one object each when decoded
PROTOBUF_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: application/protobuf\r\n"
# the hostile kinds of issue 39's "Done means", by name (`http_kind`); `normal` answers as an empty SuperLink
KINDS = ("huge-answer", "endless", "trickle-tls", "redirect", "invalid", "huge-chain")
CHAIN_COPIES = 3000  # copies of the CA after the server certificate: a chain of about 2 MB


class Hostile:
    """A TCP server on 127.0.0.1: each connection (TLS first when `tls` is given) is handed to
    `serve` on a thread of its own; `connections` counts them."""

    def __init__(self, serve: Serve, tls: ssl.SSLContext | None = None) -> None:
        self.serve, self.tls = serve, tls
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.connections = 0
        self.open: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:  # shut down by close()
                self.listener.close()
                return
            self.connections += 1
            self.open.append(conn)
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        with contextlib.suppress(OSError, ssl.SSLError):
            if self.tls is not None:
                conn = self.tls.wrap_socket(conn, server_side=True)
                self.open.append(conn)
            self.serve(conn)
        with contextlib.suppress(OSError):
            conn.close()

    def close(self) -> None:
        # Shut down, never close, a socket another thread may be using: a thread inside a write
        # when its descriptor is closed and handed out again (a pipe of the next test's subprocess)
        # writes its TLS record there (seen: a CLI's JSON output began with 19 bytes of one). Each
        # thread closes its own socket once its calls fail. socket.socket's shutdown, not
        # SSLSocket's: that one drops the TLS object under the thread that is using it.
        for sock in (self.listener, *self.open):
            with contextlib.suppress(OSError):
                socket.socket.shutdown(sock, socket.SHUT_RDWR)


@dataclass(frozen=True)
class Pki:
    """A CA and a server certificate for 127.0.0.1 and localhost (files, for ssl contexts)."""

    ca: bytes
    cert: Path
    key: Path

    @classmethod
    def make(cls, folder: Path) -> Pki:
        ca, cert, key = certificates()
        (folder / "cert.pem").write_bytes(cert)
        (folder / "key.pem").write_bytes(key)
        return cls(ca, folder / "cert.pem", folder / "key.pem")

    def server_tls(self, alpn: str, chain: bytes = b"") -> ssl.SSLContext:
        """A server context offering `alpn` ("http/1.1", "h2"); `chain`: more certificates sent
        after the server's (the huge chain)."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        cert = self.cert
        if chain:
            cert = self.cert.with_name("chain.pem")
            cert.write_bytes(self.cert.read_bytes() + chain)
        context.load_cert_chain(cert, self.key)
        context.set_alpn_protocols([alpn])
        return context


def read_request(conn: socket.socket) -> bytes:
    """An HTTP request's head (what came until the blank line)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            raise OSError("closed")
        data += chunk
    return data


def answer(head: bytes, body: bytes | Iterator[bytes], *, delay: float = 0.0) -> Serve:
    """An HTTP answer: `head` (status line and headers, without the blank line), then `body`
    (bytes, or chunks sent until the client goes away), each chunk after `delay` seconds."""
    def serve(conn: socket.socket) -> None:
        while True:
            read_request(conn)
            if isinstance(body, bytes):
                conn.sendall(head + f"content-length: {len(body)}\r\n\r\n".encode() + body)
                continue
            conn.sendall(head + b"\r\n")
            for chunk in body:
                if delay:
                    time.sleep(delay)
                conn.sendall(chunk)
            return
    return serve


def endless(chunk: bytes) -> Iterator[bytes]:
    while True:
        yield chunk


def trickle(conn: socket.socket) -> None:
    """Reads the request, then answers one byte every 0.1 s, for ever."""
    read_request(conn)
    for byte in endless(b"H"):
        time.sleep(0.1)
        conn.sendall(byte)


def silent(conn: socket.socket) -> None:
    """Accepts and never says a word (nor finishes a TLS handshake)."""
    time.sleep(60)


def http_kind(name: str, max_response: int = MAX_RESPONSE) -> Serve:
    """The HTTP server of one hostile kind (`KINDS`, or `normal`):

    - `huge-answer`: the largest answer the client reads, all empty NodeInfos (2 million objects
      if decoded whole; the issue's agent went from 64 to 1,544 MiB on them);
    - `endless`: an answer with no end, as fast as the loopback carries it;
    - `trickle-tls`: one byte every 0.1 s for ever (each read is quick, the call is not; serve it
      over TLS);
    - `redirect`: a 307 to another address (never followed);
    - `invalid`: 200 with bytes that are not protobuf;
    - `huge-chain`: silent once connected (serve it over TLS with a huge chain: `CHAIN_COPIES`)."""
    if name == "normal":
        return answer(PROTOBUF_HEAD, b"")
    if name == "huge-answer":
        return answer(PROTOBUF_HEAD, TINY * (max_response // 2))
    if name == "endless":
        return answer(PROTOBUF_HEAD, endless(TINY * 32768))
    if name == "trickle-tls":
        return trickle
    if name == "redirect":
        return answer(b"HTTP/1.1 307 Temporary Redirect\r\nlocation: http://127.0.0.1:1/v1/control/list-nodes\r\n",
                      b"")
    if name == "invalid":
        return answer(PROTOBUF_HEAD, b"\xff" * 64)
    if name == "huge-chain":
        return silent
    raise ValueError(f"no hostile kind {name!r}")


def kind_tls(name: str, pki: Pki, alpn: str = "http/1.1") -> ssl.SSLContext:
    """The server context of a kind served over TLS (every kind can be; `huge-chain` sends its chain)."""
    return pki.server_tls(alpn, pki.ca * CHAIN_COPIES if name == "huge-chain" else b"")


# -- gRPC (Flower before 1.37) -------------------------------------------------------------------

def grpc(message: bytes | None = None, *, stream: bytes = b"", delay: float = 0.0) -> Serve:
    """A gRPC server over h2 that answers every call with `message` (framed), or with `stream`
    sent for ever (as far as the client's window lets it), each DATA frame after `delay`."""
    def serve(conn: socket.socket) -> None:
        h2c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
        h2c.initiate_connection()
        conn.sendall(h2c.data_to_send())
        while True:
            data = conn.recv(65536)
            if not data:
                return
            for event in h2c.receive_data(data):
                if isinstance(event, h2.events.StreamEnded):
                    _answer(conn, h2c, event.stream_id, message, stream, delay)
            conn.sendall(h2c.data_to_send())
    return serve


def _answer(conn: socket.socket, h2c: h2.connection.H2Connection, sid: int, message: bytes | None, stream: bytes,
            delay: float) -> None:
    h2c.send_headers(sid, [(":status", "200"), ("content-type", "application/grpc")])
    if message is not None:
        _send(conn, h2c, sid, b"\x00" + len(message).to_bytes(4, "big") + message, delay)
        h2c.send_headers(sid, [("grpc-status", "0")], end_stream=True)
        return
    _send(conn, h2c, sid, b"\x00" + (1 << 31).to_bytes(4, "big"), delay)  # a message of 2 GiB, announced
    while True:
        _send(conn, h2c, sid, stream, delay)


def _send(conn: socket.socket, h2c: h2.connection.H2Connection, sid: int, data: bytes, delay: float) -> None:
    """`data` on `sid` as the client's flow-control window lets it through."""
    view = memoryview(data)
    while view:
        conn.sendall(h2c.data_to_send())
        size = min(len(view), h2c.local_flow_control_window(sid), h2c.max_outbound_frame_size)
        if size <= 0:
            h2c.receive_data(conn.recv(65536) or b"")  # until a WINDOW_UPDATE
            continue
        if delay:
            time.sleep(delay)
        h2c.send_data(sid, bytes(view[:size]))
        view = view[size:]
    conn.sendall(h2c.data_to_send())


def grpc_kind(name: str, max_response: int = MAX_RESPONSE) -> Serve:
    """The gRPC server of `normal`, `huge-answer`, `endless` or `trickle-tls`."""
    if name == "normal":
        return grpc(b"")
    if name == "huge-answer":
        return grpc(TINY * (max_response // 2 - 8))
    if name == "endless":
        return grpc(stream=TINY * 8192)
    if name == "trickle-tls":
        return grpc(stream=b"\x0a", delay=0.1)
    raise ValueError(f"no gRPC hostile kind {name!r}")


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)
