#!/usr/bin/env python3
"""What a hostile SuperLink costs the agent's Control API client (syncer.cluster.control_transports):
for each kind of server, the client's peak memory (Python allocations by tracemalloc, and the
growth of the process's peak RSS) and the time until it gives up, against a normal server.

Each kind runs in a process of its own (the peak RSS is the process's), the server on 127.0.0.1 in
a thread of that process (its own allocations are not traced: tracemalloc starts in the client's
thread only after the server is up, but the RSS column includes both):

- `normal`: an empty ListNodes answer;
- `tiny-nodes`: the largest answer the client reads (MAX_RESPONSE), all empty NodeInfos (2 bytes
  each: 2 million objects if decoded whole; the issue's agent went from 64 to 1,544 MiB on them);
- `endless`: an answer with no end, as fast as the loopback carries it;
- `trickle-tls`: over TLS, one byte every 0.1 s for ever (each read is quick, the call is not);
- `redirect`: a 307 to another address (never followed);
- `invalid`: 200 with bytes that are not protobuf;
- `huge-chain`: a TLS server whose certificate chain is about 2 MB.

The gRPC transport (Flower before 1.37) is measured with `normal`, `tiny-nodes`, `endless` and
`trickle-tls` too. Each call has the health probe's timeout (3 s).

`--probe`: the health probe itself (syncer.agent.flower_probe, 16 workers) for `--seconds` (60)
with 20 normal SuperLinks in namespaces of their own and 17 hostile ones in one namespace (the
issue's "17 slow servers held all 16 health workers"; trickling, endless, tiny-nodes, silent in
turn), checks due every `--interval` seconds (5, instead of 30, to see many rounds): how many
times each normal SuperLink was checked against how many intervals passed, the longest gap
between two checks of one, and the probe process's peak RSS (the servers run in a child).

    python3 bench/hostile_superlink.py
    python3 bench/hostile_superlink.py --probe
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import ipaddress
import itertools
import json
import resource
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

KINDS = [("http", "normal"), ("http", "tiny-nodes"), ("http", "endless"), ("http", "trickle-tls"),
         ("http", "redirect"), ("http", "invalid"), ("http", "huge-chain"),
         ("grpc", "normal"), ("grpc", "tiny-nodes"), ("grpc", "endless"), ("grpc", "trickle-tls")]
TIMEOUT = 3.0  # the health probe's (syncer.agent.flower_probe.TIMEOUT)
HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: application/protobuf\r\n"


def _pki(folder: Path, chain_copies: int = 0) -> tuple[bytes, ssl.SSLContext, ssl.SSLContext]:
    """(CA PEM, an HTTP/1.1 server context, an h2 server context) for 127.0.0.1."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "bench CA")])
    ca = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now).not_valid_after(now + datetime.timedelta(1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True).sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "sl")]))
            .issuer_name(name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now).not_valid_after(now + datetime.timedelta(1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False).sign(ca_key, hashes.SHA256()))
    ca_pem = ca.public_bytes(serialization.Encoding.PEM)
    (folder / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM) + ca_pem * chain_copies)
    (folder / "key.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                       serialization.NoEncryption()))
    contexts = []
    for alpn in ("http/1.1", "h2"):
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(folder / "cert.pem", folder / "key.pem")
        context.set_alpn_protocols([alpn])
        contexts.append(context)
    return ca_pem, contexts[0], contexts[1]


def _serve(handle: Callable[[socket.socket], None], tls: ssl.SSLContext | None) -> str:
    listener = socket.create_server(("127.0.0.1", 0))

    def one(conn: socket.socket) -> None:
        with contextlib.suppress(Exception):
            if tls is not None:
                conn = tls.wrap_socket(conn, server_side=True)
            handle(conn)
        with contextlib.suppress(OSError):
            conn.close()

    def accept() -> None:
        while True:
            conn, _ = listener.accept()
            threading.Thread(target=one, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return f"127.0.0.1:{listener.getsockname()[1]}"


def _request(conn: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            raise OSError("closed")
        data += chunk
    return data


def _http(kind: str, max_response: int) -> Callable[[socket.socket], None]:
    def handle(conn: socket.socket) -> None:
        _request(conn)
        if kind == "normal":
            conn.sendall(HEAD + b"content-length: 0\r\n\r\n")
        elif kind == "tiny-nodes":
            body = b"\x0a\x00" * (max_response // 2)
            conn.sendall(HEAD + f"content-length: {len(body)}\r\n\r\n".encode() + body)
        elif kind == "endless":
            conn.sendall(HEAD + b"\r\n")
            chunk = b"\x0a\x00" * 32768
            while True:
                conn.sendall(chunk)
        elif kind == "trickle-tls":
            while True:
                time.sleep(0.1)
                conn.sendall(b"H")
        elif kind == "redirect":
            conn.sendall(b"HTTP/1.1 307 Temporary Redirect\r\nlocation: http://127.0.0.1:1/\r\n"
                         b"content-length: 0\r\n\r\n")
        elif kind == "invalid":
            conn.sendall(HEAD + b"content-length: 64\r\n\r\n" + b"\xff" * 64)
        elif kind == "huge-chain":
            time.sleep(5)
        time.sleep(1)
    return handle


def _grpc(kind: str, max_response: int) -> Callable[[socket.socket], None]:
    import h2.config
    import h2.connection
    import h2.events

    def send(conn: socket.socket, h2c: h2.connection.H2Connection, sid: int, data: bytes, delay: float) -> None:
        view = memoryview(data)
        while view:
            conn.sendall(h2c.data_to_send())
            size = min(len(view), h2c.local_flow_control_window(sid), h2c.max_outbound_frame_size)
            if size <= 0:
                h2c.receive_data(conn.recv(65536) or b"")
                continue
            if delay:
                time.sleep(delay)
            h2c.send_data(sid, bytes(view[:size]))
            view = view[size:]
        conn.sendall(h2c.data_to_send())

    def handle(conn: socket.socket) -> None:
        h2c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
        h2c.initiate_connection()
        conn.sendall(h2c.data_to_send())
        while True:
            data = conn.recv(65536)
            if not data:
                return
            for event in h2c.receive_data(data):
                if not isinstance(event, h2.events.StreamEnded):
                    continue
                sid = event.stream_id
                h2c.send_headers(sid, [(":status", "200"), ("content-type", "application/grpc")])
                if kind in ("normal", "tiny-nodes"):
                    message = b"" if kind == "normal" else b"\x0a\x00" * (max_response // 2 - 8)
                    send(conn, h2c, sid, b"\x00" + len(message).to_bytes(4, "big") + message, 0)
                    h2c.send_headers(sid, [("grpc-status", "0")], end_stream=True)
                else:
                    send(conn, h2c, sid, b"\x00" + (1 << 31).to_bytes(4, "big"), 0)
                    while True:
                        send(conn, h2c, sid, b"\x0a" if kind == "trickle-tls" else b"\x0a\x00" * 8192,
                             0.1 if kind == "trickle-tls" else 0)
            conn.sendall(h2c.data_to_send())
    return handle


def one(transport: str, kind: str) -> dict[str, object]:
    """Run the client against one server kind in this process; its figures."""
    from syncer.cluster.control_transports import MAX_RESPONSE, connect
    from syncer.cluster.flower_control import ControlApiError, Transport

    wire: Transport = "grpc" if transport == "grpc" else "http"

    with tempfile.TemporaryDirectory() as tmp:
        ca, http_tls, h2_tls = _pki(Path(tmp), chain_copies=3000 if kind == "huge-chain" else 0)
        tls = kind in ("trickle-tls", "huge-chain")
        handler = _http(kind, MAX_RESPONSE) if transport == "http" else _grpc(kind, MAX_RESPONSE)
        address = _serve(handler, (http_tls if transport == "http" else h2_tls) if tls else None)
        rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        tracemalloc.start()
        started = time.monotonic()
        outcome = "ok"
        try:
            nodes = connect(address, wire, ca if tls else None, timeout=TIMEOUT).list_nodes()
            outcome = f"ok: {len(nodes)} nodes kept" + (" (truncated)" if nodes.truncated else "")
        except ControlApiError as exc:
            outcome = exc.code.value
        seconds = time.monotonic() - started
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"transport": transport, "kind": kind, "outcome": outcome, "seconds": round(seconds, 2),
            "peak_mib": round(peak / 2**20, 1), "rss_growth_mib": round((rss_after - rss_before) / 1024, 1),
            "rss_mib": round(rss_after / 1024, 1)}


def serve_many() -> None:
    """`--serve`: 20 normal and 17 hostile HTTP servers in this process (not the probe's): prints
    their addresses as a JSON line, then, once a line comes on stdin, how many ListNodes each
    normal one was asked and when."""
    from syncer.cluster.control_transports import MAX_RESPONSE

    checked: dict[str, list[float]] = {}

    def counted(name: str) -> Callable[[socket.socket], None]:
        def handle(conn: socket.socket) -> None:
            if b"list-nodes" in _request(conn):
                checked.setdefault(name, []).append(time.monotonic())
            conn.sendall(HEAD + b"content-length: 0\r\nconnection: close\r\n\r\n")
        return handle

    kinds = ["trickle", "endless", "tiny-nodes", "silent"]
    normal = {f"other-{i}": _serve(counted(f"other-{i}"), None) for i in range(20)}
    hostile = {}
    for i in range(17):
        kind = kinds[i % len(kinds)]
        handler = (_http("trickle-tls", MAX_RESPONSE) if kind == "trickle"
                   else (lambda conn: time.sleep(60)) if kind == "silent" else _http(kind, MAX_RESPONSE))
        hostile[f"fed-{i}-{kind}"] = _serve(handler, None)
    print(json.dumps({"normal": normal, "hostile": hostile}), flush=True)
    sys.stdin.readline()
    print(json.dumps(checked), flush=True)


def probe_run(seconds: float, interval: float) -> None:
    """The health probe against the servers of a `--serve` child (see the module doc)."""
    from syncer.agent.flower_probe import FlowerProbe
    from syncer.identity import Unit
    from syncer.plan import FlowerTarget

    child = subprocess.Popen([sys.executable, __file__, "--serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)
    assert child.stdin is not None and child.stdout is not None
    addresses = json.loads(child.stdout.readline())
    targets = {Unit("federation", ns, "fed"): FlowerTarget(address, "http", "")
               for ns, address in addresses["normal"].items()}
    targets.update({Unit("federation", "hostile", name): FlowerTarget(address, "http", "")
                    for name, address in addresses["hostile"].items()})
    probe = FlowerProbe(None, interval=interval, cluster_dns=True)
    started = time.monotonic()
    try:
        while time.monotonic() - started < seconds:
            probe.round(targets)
            time.sleep(1.0)
    finally:
        probe.close()
        child.stdin.write("done\n")
        child.stdin.flush()
        checked: dict[str, list[float]] = json.loads(child.stdout.readline())
        child.terminate()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    counts = [len(checked.get(ns, [])) for ns in addresses["normal"]]
    gaps = [b - a for times in checked.values() for a, b in itertools.pairwise(times)]
    print(f"{seconds:.0f} s, checks due every {interval:g} s (at most {seconds / (interval * 0.9):.0f} per SuperLink)")
    print(f"normal SuperLinks (20, a namespace each): checked {min(counts)} to {max(counts)} times each; "
          f"longest gap between two checks of one: {max(gaps or [0]):.1f} s")
    print(f"hostile SuperLinks (17, one namespace): {probe.checks - sum(counts)} checks in all")
    print(f"peak RSS of the probe's process (the servers run in another): {rss:.0f} MiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--one", nargs=2, metavar=("TRANSPORT", "KIND"), help=argparse.SUPPRESS)
    parser.add_argument("--probe", action="store_true", help="the health probe with 20 normal and 17 hostile "
                        "SuperLinks")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--interval", type=float, default=5.0)
    args = parser.parse_args()
    if args.serve:
        serve_many()
        return
    if args.probe:
        probe_run(args.seconds, args.interval)
        return
    if args.one:
        print(json.dumps(one(*args.one)))
        return
    print(f"{'transport':<9} {'server':<12} {'outcome':<38} {'seconds':>7} {'traced MiB':>10} "
          f"{'RSS +MiB':>8} {'RSS MiB':>8}")
    for transport, kind in KINDS:
        done = subprocess.run([sys.executable, __file__, "--one", transport, kind], capture_output=True, text=True,
                              timeout=120, check=False)
        if done.returncode != 0:
            print(f"{transport:<9} {kind:<12} failed: {done.stderr.strip().splitlines()[-1:]}")
            continue
        row = json.loads(done.stdout)
        print(f"{transport:<9} {kind:<12} {row['outcome']:<38} {row['seconds']:>7} {row['peak_mib']:>10} "
              f"{row['rss_growth_mib']:>8} {row['rss_mib']:>8}")


if __name__ == "__main__":
    main()
