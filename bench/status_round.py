#!/usr/bin/env python3
"""The agent's status round, in process and without a cluster: what one round costs for N
federations x P pools plus R SuperNode releases (bench/repogen.py), with Flower-level health off
and on, the SuperLinks answering or not.

Wall time of the round itself (p50, p95, max), and CPU ms: the CPU of every thread of the process
(the round and the probe's workers) per round. A round here is what
`syncer.agent.runner._status_round` does after the status cache's report:
the metrics (`observe_status`, `observe_flower`), the Flower-level health round (the probe hands
out due checks and returns the last answers; agent.flower_watch) and every unit's Healthy
condition with its checks. The pods' figures are made up (every pool ready), as the status cache
would give them; the Control APIs are on 127.0.0.1:

- `refused`: a closed port (connection refused at once);
- `silent`: a socket that accepts and never answers (each check waits its 3 s timeout: the
  worst case, "most federations have no reachable SuperLink");
- `answering`: a tiny HTTP/1.1 server that answers ListNodes and ListRuns with nothing at once
  and keeps connections alive for 5 s, as uvicorn does (in a process of its own: its CPU is not
  counted);
- `answering-tls`: the same over TLS (a CA and a certificate made for the run; the agent reads
  the CA from the federation's Secret, here a stand-in for the cluster).

Each federation has an address of its own (127.1.x.y for `refused` and `silent`, a port of its
own on 127.0.0.1 for the answering modes), as each has its own SuperLink: the probe checks each
address on its own. The `checks` column counts the checks made per round: an answering SuperLink
is due every 30 s (every third round), and the checks a round starts may cost what the round
itself costs (syncer.agent.flower_probe), so at 1,000 federations fewer than that are made.
- `off`: --flower-health off; `none`: no Flower-level health at all (the round before it existed).

The clock moves 10 s a round while the rounds are `--gap` real seconds apart (1 s): time enough
for the checks a round starts, which the agent spreads over 10 s. The process runs with the
agent's GC thresholds (the defaults made the checks' allocations set off full collections of the
2,000 units' heap, up to 0.3 s each).

    python3 bench/status_round.py                                   # 200 federations + 1 release
    python3 bench/status_round.py --federations 1000 --releases 1000 --rounds 30
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import gc
import multiprocessing
import socket
import ssl
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from multiprocessing.connection import Connection
from pathlib import Path
from typing import cast

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.repogen import make_repo  # noqa: E402
from syncer.agent.flower_probe import FlowerProbe  # noqa: E402
from syncer.agent.flower_watch import FlowerWatch  # noqa: E402
from syncer.cluster.client import Kube  # noqa: E402
from syncer.identity import Unit  # noqa: E402
from syncer.observe.conditions import HealthCheck, healthy_condition  # noqa: E402
from syncer.observe.metrics import Metrics  # noqa: E402
from syncer.observe.status import PoolStatus, UnitStatus  # noqa: E402
from syncer.plan import FlowerTarget  # noqa: E402
from syncer.render.repo import plan_repo, render_repo  # noqa: E402
from syncer.repo.loader import load_repo  # noqa: E402


class Clock:
    """The agent's monotonic clock, moved one status interval (10 s) per round."""

    def __init__(self) -> None:
        self.now = time.monotonic()

    def __call__(self) -> float:
        return self.now


def statuses(plan_units: list[Unit], pools: int) -> list[UnitStatus]:
    out = []
    for unit in plan_units:
        names = ["superlink", *(f"pool-{p}" for p in range(pools))] if unit.kind == "federation" else ["supernode"]
        out.append(UnitStatus(unit.id, pools=[PoolStatus(n, "StatefulSet", f"{unit.name}-{n}", 1, 1, healthy=True)
                                              for n in names]))
    return out


EMPTY_ANSWER = b"HTTP/1.1 200 OK\r\ncontent-type: application/protobuf\r\ncontent-length: 0\r\n\r\n"
KEEP_ALIVE = 5.0  # seconds an idle connection stays open (uvicorn's default)


async def _answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """One connection to a Control API with no SuperNodes and no runs: every POST gets an empty
    protobuf answer; the connection stays open between requests unless the client asks to close."""
    try:
        while True:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), KEEP_ALIVE)
            headers = head.decode("latin-1").lower()
            length = next((int(line.split(":", 1)[1]) for line in headers.split("\r\n")
                           if line.startswith("content-length:")), 0)
            await reader.readexactly(length)
            writer.write(EMPTY_ANSWER)
            await writer.drain()
            if "connection: close" in headers:
                break
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ConnectionError):
        pass
    finally:
        writer.close()


def serve_control_apis(count: int, tls: tuple[Path, Path] | None, ports: Connection) -> None:
    """The answering SuperLinks: one listener per federation (a process of its own); sends their ports."""
    context = None
    if tls is not None:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(*tls)

    async def main() -> None:
        servers = [await asyncio.start_server(_answer, "127.0.0.1", 0, ssl=context, backlog=64) for _ in range(count)]
        ports.send([server.sockets[0].getsockname()[1] for server in servers])
        await asyncio.Event().wait()

    asyncio.run(main())


def tls_files(directory: Path) -> tuple[Path, Path, bytes]:
    """A CA and a server certificate for 127.0.0.1 (ECDSA P-256, as cert-manager issues by
    default in this project's examples): (certificate file, key file, CA PEM)."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    start, end = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=1)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "bench CA")])
    ca = (x509.CertificateBuilder(subject_name=ca_name, issuer_name=ca_name, public_key=ca_key.public_key(),
                                  serial_number=x509.random_serial_number(), not_valid_before=start,
                                  not_valid_after=end)
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True).sign(ca_key, hashes.SHA256()))
    cert = (x509.CertificateBuilder(subject_name=x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "superlink")]),
                                    issuer_name=ca_name, public_key=key.public_key(),
                                    serial_number=x509.random_serial_number(), not_valid_before=start,
                                  not_valid_after=end)
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False).sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    (directory / "tls.crt").write_bytes(cert.public_bytes(pem))
    (directory / "tls.key").write_bytes(key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                                          serialization.NoEncryption()))
    return directory / "tls.crt", directory / "tls.key", ca.public_bytes(pem)


class Secrets:
    """The cluster, as far as the probe asks it: every federation's CA Secret."""

    def __init__(self, ca: bytes) -> None:
        self.secret: dict[str, object] = {"data": {"ca.crt": base64.b64encode(ca).decode()}}

    def get(self, kind: str, namespace: str, name: str) -> dict[str, object]:
        return self.secret


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


cpu_ms: list[float] = []


def measure(mode: str, targets: dict[Unit, FlowerTarget], units: list[UnitStatus],
            rounds: int, kube: Kube | None, gap: float) -> tuple[list[float], int, float]:
    metrics = Metrics()
    clock = Clock()
    watch = None
    if mode != "none":
        probe = FlowerProbe(kube, enabled=mode != "off", clock=clock, cluster_dns=True)
        watch = FlowerWatch(probe, lambda unit, event: None, clock)
    times = []
    answered = 0
    cpu = time.process_time()
    try:
        for _ in range(rounds):  # as syncer.agent.runner._status_round does
            started, cpu_round = time.perf_counter(), time.thread_time()
            metrics.observe_status(units)
            checks: list[HealthCheck] = []
            flower = 0.0
            if watch is not None:
                flower = time.thread_time()
                healths = watch.round(targets, units)
                metrics.observe_flower(healths, waiting=watch.probe.waiting)
                flower = time.thread_time() - flower
                checks.append(watch.check)
                answered = sum(1 for h in healths.values() if h.reachable)
            {u.unit: healthy_condition(u.pools, found=u.found, checks=checks, subject=u) for u in units}
            if watch is not None:
                watch.finish_round(own=time.thread_time() - cpu_round - flower, flower=flower)
            times.append(time.perf_counter() - started)
            clock.now += 10.0
            time.sleep(gap)  # the workers get the interpreter between rounds, as in the agent
    finally:
        if watch is not None:
            watch.probe.close()
    cpu_ms.append((time.process_time() - cpu) / rounds * 1000)  # every thread's CPU, per round
    return times, answered, (watch.probe.checks / rounds if watch is not None else 0.0)


def main() -> int:
    gc.set_threshold(50_000, 20, 100)  # as the CLI and the agent run (syncer/cli.py main)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--federations", type=int, default=200)
    ap.add_argument("--pools", type=int, default=1)
    ap.add_argument("--releases", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--gap", type=float, default=1.0, help="real seconds between rounds (the clock moves 10 s a "
                    "round); the agent's are 10 s apart, so the checks a round starts are done long before the next")
    ap.add_argument("--modes", default="none,off,answering,answering-tls,refused,silent")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="status-round-") as tmp:
        repo = Path(tmp) / "repo"
        make_repo(repo, "bench", args.federations, args.pools, args.releases)
        state = load_repo(repo)
        plan = plan_repo(state, render_repo(state))
    units = statuses(sorted(plan.units), args.pools)
    hosts = [f"127.1.{i // 250}.{i % 250 + 1}" for i in range(len(plan.flower))]
    port = free_port()
    silent = []
    for host in hosts:  # accept (the kernel does) and never answer
        sock = socket.socket()
        sock.bind((host, port))
        sock.listen(64)
        silent.append(sock)
    modes = args.modes.split(",")
    with tempfile.TemporaryDirectory(prefix="status-round-tls-") as tmp:
        cert, key, ca = tls_files(Path(tmp))
        servers, ports = {}, {}
        # the SuperLinks' side runs in processes of their own: the CPU figure is the agent's alone
        for mode, tls in (("answering", None), ("answering-tls", (cert, key))):
            if mode in modes:
                receiver, sender = multiprocessing.Pipe(duplex=False)
                servers[mode] = multiprocessing.get_context("fork").Process(
                    target=serve_control_apis, args=(len(hosts), tls, sender), daemon=True)
                servers[mode].start()
                if not receiver.poll(60):
                    raise SystemExit(f"the {mode} Control APIs did not start")
                ports[mode] = receiver.recv()
        print(f"{len(plan.units)} units ({len(plan.flower)} federations), {args.rounds} rounds")
        print(f"{'mode':13} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8} {'CPU ms':>8} {'checks':>7}  answered")
        for mode in modes:
            addresses = {"refused": [f"{h}:{port + 1}" for h in hosts], "silent": [f"{h}:{port}" for h in hosts],
                         **{m: [f"127.0.0.1:{p}" for p in mode_ports] for m, mode_ports in ports.items()}}.get(mode, [])
            secret = "ca" if mode == "answering-tls" else ""
            targets = {u: replace(t, address=addresses[i] if addresses else t.address, ca_secret=secret,
                                  transport="http") for i, (u, t) in enumerate(plan.flower.items())}
            times, answered, checks = measure(mode, targets, units, args.rounds, cast(Kube, Secrets(ca)), args.gap)
            times.sort()
            p95 = times[min(len(times) - 1, int(len(times) * 0.95))]
            print(f"{mode:13} {statistics.median(times) * 1000:8.2f} {p95 * 1000:8.2f} {times[-1] * 1000:8.2f} "
                  f"{cpu_ms[-1]:8.2f} {checks:7.1f}  {answered}")
        for server in servers.values():
            server.terminate()
            server.join(10)
    for sock in silent:
        sock.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
