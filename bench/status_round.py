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
- `answering`: a tiny HTTP server that answers ListNodes and ListRuns with nothing at once (in a
  process of its own: its CPU is not counted).

Each federation has an address of its own (127.1.x.y), as each has its own SuperLink.
- `off`: --flower-health off; `none`: no Flower-level health at all (the round before it existed).

    python3 bench/status_round.py                                   # 200 federations + 1 release
    python3 bench/status_round.py --federations 1000 --releases 1000 --rounds 30
"""

from __future__ import annotations

import argparse
import multiprocessing
import socket
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.repogen import make_repo  # noqa: E402
from syncer.agent.flower_probe import FlowerProbe  # noqa: E402
from syncer.agent.flower_watch import FlowerWatch  # noqa: E402
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


class EmptyControl(BaseHTTPRequestHandler):
    """A Control API with no SuperNodes and no runs (an empty protobuf answer); HTTP/1.1 with
    keep-alive, as uvicorn serves it."""

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.send_response(200)
        self.send_header("content-type", "application/protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


cpu_ms: list[float] = []


def measure(mode: str, targets: dict[Unit, FlowerTarget], units: list[UnitStatus],
            rounds: int) -> tuple[list[float], int]:
    metrics = Metrics()
    clock = Clock()
    watch = None
    if mode != "none":
        probe = FlowerProbe(None, enabled=mode != "off", clock=clock, cluster_dns=True)
        watch = FlowerWatch(probe, lambda unit, event: None, clock)
    times = []
    answered = 0
    cpu = time.process_time()
    try:
        for _ in range(rounds):
            started = time.perf_counter()
            metrics.observe_status(units)
            checks: list[HealthCheck] = []
            if watch is not None:
                healths = watch.round(targets, units)
                metrics.observe_flower(healths)
                checks.append(watch.check)
                answered = sum(1 for h in healths.values() if h.reachable)
            {u.unit: healthy_condition(u.pools, found=u.found, checks=checks, subject=u) for u in units}
            times.append(time.perf_counter() - started)
            clock.now += 10.0
            time.sleep(0.2)  # the workers get the interpreter between rounds, as in the agent
    finally:
        if watch is not None:
            watch.probe.close()
    cpu_ms.append((time.process_time() - cpu) / rounds * 1000)  # every thread's CPU, per round
    return times, answered


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--federations", type=int, default=200)
    ap.add_argument("--pools", type=int, default=1)
    ap.add_argument("--releases", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--modes", default="none,off,answering,refused,silent")
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
    answering = ThreadingHTTPServer(("127.0.0.1", 0), EmptyControl)
    # the SuperLinks' side runs in a process of its own: the CPU figure is the agent's alone
    server = multiprocessing.get_context("fork").Process(target=answering.serve_forever, daemon=True)
    server.start()
    print(f"{len(plan.units)} units ({len(plan.flower)} federations), {args.rounds} rounds")
    print(f"{'mode':10} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8} {'CPU ms':>8}  checks answered")
    for mode in args.modes.split(","):
        addresses = {"refused": [f"{h}:{port + 1}" for h in hosts], "silent": [f"{h}:{port}" for h in hosts],
                     "answering": [f"127.0.0.1:{answering.server_address[1]}" for _ in hosts]}.get(mode, [])
        targets = {u: replace(t, address=addresses[i] if addresses else t.address, ca_secret="", transport="http")
                   for i, (u, t) in enumerate(plan.flower.items())}
        times, answered = measure(mode, targets, units, args.rounds)
        times.sort()
        p95 = times[min(len(times) - 1, int(len(times) * 0.95))]
        print(f"{mode:10} {statistics.median(times) * 1000:8.2f} {p95 * 1000:8.2f} {times[-1] * 1000:8.2f} "
              f"{cpu_ms[-1]:8.2f}  {answered}")
    for sock in silent:
        sock.close()
    server.terminate()
    server.join(10)
    answering.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
