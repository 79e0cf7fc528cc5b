#!/usr/bin/env python3
"""What a hostile SuperLink costs the agent's Control API client (syncer.cluster.control_transports):
for each kind of server, the client's peak memory (Python allocations by tracemalloc, and the
growth of the process's peak RSS) and the time until it gives up, against a normal server.

Each kind runs in a process of its own (the peak RSS is the process's), the server on 127.0.0.1 in
a thread of that process (the servers of tests/hostile_servers.py, shared with tests/reliability; their
allocations are not traced: tracemalloc starts in the client's thread only after the server is up,
but the RSS column includes both):

- `normal`: an empty ListNodes answer;
- `huge-answer`: the largest answer the client reads (MAX_RESPONSE), all empty NodeInfos (2 bytes
  each: 2 million objects if decoded whole; the issue's agent went from 64 to 1,544 MiB on them);
- `endless`: an answer with no end, as fast as the loopback carries it;
- `trickle-tls`: over TLS, one byte every 0.1 s for ever (each read is quick, the call is not);
- `redirect`: a 307 to another address (never followed);
- `invalid`: 200 with bytes that are not protobuf;
- `huge-chain`: a TLS server whose certificate chain is about 2 MB.

The gRPC transport (Flower before 1.37) is measured with `normal`, `huge-answer`, `endless` and
`trickle-tls` too. Each call has the health probe's timeout (3 s).

`--probe`: the health probe itself (syncer.agent.flower_probe, 16 workers) for `--seconds` (60)
with 20 normal SuperLinks in namespaces of their own and 17 hostile ones in one namespace (the
issue's "17 slow servers held all 16 health workers"; trickling, endless, huge answers, silent in
turn), checks due every `--interval` seconds (5, instead of 30, to see many rounds): how many
times each normal SuperLink was checked against how many intervals passed, the longest gap
between two checks of one, and the probe process's peak RSS (the servers run in a child).

    python3 bench/hostile_superlink.py
    python3 bench/hostile_superlink.py --probe
"""

from __future__ import annotations

import argparse
import itertools
import json
import resource
import socket
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.hostile_servers import (  # noqa: E402  (the servers, shared with tests/reliability)
    PROTOBUF_HEAD,
    Hostile,
    Pki,
    grpc_kind,
    http_kind,
    kind_tls,
    read_request,
    silent,
)

KINDS = [("http", "normal"), ("http", "huge-answer"), ("http", "endless"), ("http", "trickle-tls"),
         ("http", "redirect"), ("http", "invalid"), ("http", "huge-chain"),
         ("grpc", "normal"), ("grpc", "huge-answer"), ("grpc", "endless"), ("grpc", "trickle-tls")]
TIMEOUT = 3.0  # the health probe's (syncer.agent.flower_probe.TIMEOUT)


def one(transport: str, kind: str) -> dict[str, object]:
    """Run the client against one server kind in this process; its figures."""
    from syncer.cluster.control_transports import connect
    from syncer.cluster.flower_control import ControlApiError, Transport

    wire: Transport = "grpc" if transport == "grpc" else "http"

    with tempfile.TemporaryDirectory() as tmp:
        pki = Pki.make(Path(tmp))
        tls = kind in ("trickle-tls", "huge-chain")
        handler = http_kind(kind) if transport == "http" else grpc_kind(kind)
        server = Hostile(handler, kind_tls(kind, pki, "http/1.1" if transport == "http" else "h2") if tls else None)
        address = server.address
        rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        tracemalloc.start()
        started = time.monotonic()
        outcome = "ok"
        try:
            nodes = connect(address, wire, pki.ca if tls else None, timeout=TIMEOUT).list_nodes()
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
    checked: dict[str, list[float]] = {}

    def counted(name: str) -> Callable[[socket.socket], None]:
        def handle(conn: socket.socket) -> None:
            if b"list-nodes" in read_request(conn):
                checked.setdefault(name, []).append(time.monotonic())
            conn.sendall(PROTOBUF_HEAD + b"content-length: 0\r\nconnection: close\r\n\r\n")
        return handle

    kinds = ["trickle-tls", "endless", "huge-answer", "silent"]
    normal = {f"other-{i}": Hostile(counted(f"other-{i}")).address for i in range(20)}
    hostile = {}
    for i in range(17):
        name = kinds[i % len(kinds)]
        hostile[f"fed-{i}-{name}"] = Hostile(silent if name == "silent" else http_kind(name)).address
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
