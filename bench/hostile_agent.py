#!/usr/bin/env python3
"""A hostile SuperLink against the agent itself (issue 39, "Done means"): `flower-syncer run` as a
process, on a local control plane, syncing 20 ordinary federations and one whose Control API is
a hostile server on 127.0.0.1, one agent per hostile kind (tests/hostile_servers.py KINDS: huge
answer, endless answer, trickle over TLS, redirect, invalid protobuf, huge certificate chain).

The repository's guardrails allow `127.0.0.1:*` as a Control API target (`control-api-address`),
as an admin's policy would. The ordinary federations (insecure, Flower 1.42, in 4 namespaces)
name a normal server each, which counts when it is asked ListNodes. The hostile one (TLS, SuperNode
authentication on, its own namespace) is dialled by the health probe and by key registration, on
a sync worker (its key check runs every status round too). For `--seconds` (80) of attack, each
run measures:

- `peak RSS`: the agent's VmHWM (must stay under 300 MiB);
- `commit`: the longest commit-to-applied of `--commits` (4) commits of an ordinary federation
  made meanwhile (git push to its StatefulSet changed, seen through a watch; under 2 s);
- `checks`: every ordinary federation's health checked on schedule: the longest gap between two
  checks of one, the window's start and end counting as checks (at most the probe's interval and
  a status round, 40 s), and the fewest checks of one;
- `/healthz`: polled every 0.5 s; it tells the truth when it answered 200 each time within 1 s
  while the agent made progress (every commit applied, every federation checked), and `stuck` in
  /api/v1/status is "";
- `SIGTERM`: seconds from SIGTERM to the process's exit (under 10 s), and its exit code.

    python3 bench/hostile_agent.py                      # starts a dedicated devcluster, stops it after
    python3 bench/hostile_agent.py --kubeconfig FILE    # a running (loopback) cluster
    python3 bench/hostile_agent.py --kinds normal trickle-tls --seconds 40

`normal` (not in the default list) runs the same with a SuperLink that answers: the figures of the
machine without an attack, to compare with (commit-to-applied depends on the machine's load).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import itertools
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.benchcluster import bench_cluster  # noqa: E402
from bench.latency import Watcher, free_port, git, install_flowerunits  # noqa: E402
from syncer.cluster.client import Kube  # noqa: E402
from tests.hostile_servers import (  # noqa: E402  (the servers, shared with tests/reliability)
    KINDS,
    PROTOBUF_HEAD,
    Hostile,
    Pki,
    Serve,
    http_kind,
    kind_tls,
    read_request,
)
from tests.nodeauth import auth_federation  # noqa: E402

RSS_LIMIT = 300.0  # MiB
COMMIT_LIMIT = 2.0  # seconds
STOP_LIMIT = 10.0  # seconds
CHECK_GAP = 30.0 + 10.0  # the probe's interval and a status round (flower_probe.INTERVAL, runner.STATUS_INTERVAL)
NAMESPACES = 4  # the ordinary federations' namespaces
ORDINARY = """\
apiVersion: flwr.exalsius.ai/v1
kind: Federation
metadata:
  name: {name}
  namespace: {namespace}
  annotations:
    flower-syncer.io/control-api-address: {address}
spec:
  mode: StatefulSet
  isolationMode: subprocess
  insecure: true
  superlink:
    image: flwr/superlink:1.42.0
  supernodes:
    image: flwr/supernode:1.42.0
    pools:
      - name: a
        replicas: 1
        images: {{}}
        env:
          - name: BENCH_ROUND
            value: "{round}"
"""


class Counted:
    """Normal SuperLinks (an empty answer) that note when each was asked ListNodes."""

    def __init__(self, names: list[str]) -> None:
        self.asked: dict[str, list[float]] = {n: [] for n in names}
        self.servers = {n: Hostile(self._serve(n)) for n in names}

    def _serve(self, name: str) -> Serve:
        def serve(conn: socket.socket) -> None:
            while True:
                if b"list-nodes" in read_request(conn):
                    self.asked[name].append(time.monotonic())
                conn.sendall(PROTOBUF_HEAD + b"content-length: 0\r\n\r\n")
        return serve

    def longest_gap(self, start: float, end: float) -> tuple[float, int]:
        """(the longest gap between two checks of one, the window's ends counting as checks; the
        fewest checks of one in the window)."""
        gap, fewest = 0.0, 1 << 30
        for times in self.asked.values():
            inside = [t for t in times if start <= t <= end]
            points = [start, *inside, end]
            gap = max(gap, *(b - a for a, b in itertools.pairwise(points)))
            fewest = min(fewest, len(inside))
        return gap, fewest


@dataclass
class Polls:
    """What the agent looked like while attacked: /healthz answers and its RSS, every 0.5 s."""

    healthz: list[tuple[int, float]] = field(default_factory=list)  # (status, seconds to answer)
    rss: list[float] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self, url: str, pid: int) -> None:
        while not self.stop.wait(0.5):
            started = time.monotonic()
            try:
                with urllib.request.urlopen(url + "/healthz", timeout=5) as resp:
                    status = resp.status
            except urllib.error.HTTPError as exc:
                status = exc.code
            except OSError:
                status = 0
            self.healthz.append((status, time.monotonic() - started))
            self.rss.append(memory(pid)[0])


def memory(pid: int) -> tuple[float, float]:
    """(RSS, peak RSS) of `pid` in MiB."""
    fields = {}
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            fields[key] = value
    return (int(fields.get("VmRSS", "0 kB").split()[0]) / 1024, int(fields.get("VmHWM", "0 kB").split()[0]) / 1024)


def get_json(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=10) as resp:
        out: dict[str, Any] = json.loads(resp.read())
        return out


@dataclass
class Row:
    kind: str
    rss: float = 0.0
    commit: float = 0.0
    commit_median: float = 0.0
    gap: float = 0.0
    fewest: int = 0
    healthz: str = ""
    healthz_ok: bool = False
    stop: float = 0.0
    code: int | None = None
    hostile: str = ""

    def passed(self) -> bool:
        return (self.rss < RSS_LIMIT and self.commit < COMMIT_LIMIT and self.gap <= CHECK_GAP and self.fewest >= 1
                and self.healthz_ok and self.stop < STOP_LIMIT and self.code == 0)


class Setup:
    """The namespaces, servers and repository every run shares."""

    def __init__(self, kube: Kube, tmp: Path, others: int) -> None:
        self.kube = kube
        run = uuid.uuid4().hex[:6]
        self.namespaces = [f"hostile-agent-{run}-{i}" for i in range(NAMESPACES)]
        self.hostile_ns = f"hostile-agent-{run}-x"
        for ns in [*self.namespaces, self.hostile_ns]:
            kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        self.pki = Pki.make(tmp)
        cert = self.pki.cert.read_bytes()
        kube.create({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                     "metadata": {"name": "superlink-tls", "namespace": self.hostile_ns},
                     "data": {k: base64.b64encode(v).decode() for k, v in
                              {"tls.crt": cert, "tls.key": self.pki.key.read_bytes(), "ca.crt": self.pki.ca}.items()}})
        self.names = [f"ok-{i}" for i in range(others)]
        self.counted = Counted(self.names)
        self.hostile = {k: Hostile(http_kind(k), kind_tls(k, self.pki)) for k in [*KINDS, "normal"]}
        self.bare, self.work = tmp / "config.git", tmp / "work"
        git(tmp, "init", "-q", "--bare", "-b", "main", str(self.bare))
        git(tmp, "clone", "-q", str(self.bare), str(self.work))
        git(self.work, "checkout", "-q", "-b", "main")
        (self.work / "federations").mkdir()
        (self.work / "flower-syncer.yaml").write_text(
            f"name: hostile-agent-{run}\ndefaultNamespace: {self.namespaces[0]}\n"
            "guardrails:\n  allowedControlApiTargets: ['127.0.0.1:*']\n  allowedSecrets: [superlink-tls]\n")
        for i, name in enumerate(self.names):
            self.ordinary(name, i, 0)
        self.round = 0

    def ordinary(self, name: str, i: int, round_: int) -> None:
        text = ORDINARY.format(name=name, namespace=self.namespaces[i % NAMESPACES],
                               address=self.counted.servers[name].address, round=round_)
        (self.work / "federations" / f"{name}.yaml").write_text(text)

    def push(self, message: str) -> None:
        git(self.work, "add", "-A")
        git(self.work, "commit", "-qm", message)
        git(self.work, "push", "-q", "origin", "HEAD:main")

    def aim(self, kind: str) -> None:
        """The hostile federation's Control API: the server of `kind`."""
        fed = auth_federation("hostile", self.hostile[kind].address)
        fed = fed.replace("  name: hostile\n", f"  name: hostile\n  namespace: {self.hostile_ns}\n", 1)
        (self.work / "federations" / "hostile.yaml").write_text(fed)
        self.push(f"the hostile federation dials a {kind} server")


def run_kind(setup: Setup, kubeconfig: str, tmp: Path, kind: str, seconds: float, commits: int,
             log_level: str = "warning", keep_log: Path | None = None) -> Row:
    setup.aim(kind)
    port = free_port()
    (tmp / "token").write_text(uuid.uuid4().hex)
    log_path = tmp / f"agent-{kind}.log"
    namespaces = ",".join([*setup.namespaces, setup.hostile_ns])
    with log_path.open("w") as log:
        agent = subprocess.Popen(
            [sys.executable, "-m", "syncer", "run", "--repo", str(setup.bare), "--kubeconfig", kubeconfig,
             "--listen", f"127.0.0.1:{port}", "--namespaces", namespaces, "--lease-namespace", setup.namespaces[0],
             "--cache-dir", str(tmp / f"cache-{kind}"), "--api-token-file", str(tmp / "token"),
             "--log-format", "json", "--log-level", log_level], stderr=log, env={**os.environ})
    url = f"http://127.0.0.1:{port}"
    row = Row(kind)
    polls = Polls()
    try:
        ready_by = time.monotonic() + 120
        while True:
            if agent.poll() is not None or time.monotonic() > ready_by:
                raise RuntimeError(f"the agent did not get ready; its log:\n{log_path.read_text()[-3000:]}")
            with contextlib.suppress(OSError, ValueError):
                status = get_json(url + "/api/v1/status")
                units = status.get("units") or []
                synced = [u for u in units if u.get("lastSync")]
                if status.get("ready") and len(synced) >= len(setup.names) + 1:
                    break
            time.sleep(0.5)
        threading.Thread(target=polls.run, args=(url, agent.pid), daemon=True).start()
        start = time.monotonic()
        watcher = Watcher(setup.kube, setup.namespaces[0], "ok-0-supernode-a")
        latencies = []
        for n in range(commits):
            time.sleep(max(0.0, start + seconds * (n + 0.5) / commits - time.monotonic()))
            setup.round += 1
            setup.ordinary("ok-0", 0, setup.round)
            t0 = time.perf_counter()
            setup.push(f"round {setup.round}")
            seen = watcher.until(lambda value, _r, r=setup.round: value == str(r), since=t0, timeout=30)
            latencies.append(seen - t0)
            if keep_log is not None:  # to find the commit in the agent's log
                print(f"  commit {n + 1} pushed at {time.time() - (time.perf_counter() - t0):.3f} (epoch), "
                      f"applied after {seen - t0:.2f} s", flush=True)
        time.sleep(max(0.0, start + seconds - time.monotonic()))
        end = time.monotonic()
        watcher.stop.set()
        polls.stop.set()
        status = get_json(url + "/api/v1/status")
        hostile: dict[str, Any] = next((u for u in status.get("units") or []
                        if str(u.get("unit", "")).startswith("federation/" + setup.hostile_ns)), {})
        flower = hostile.get("flower") or {}
        keys = hostile.get("nodeKeys") or {}
        errors = sorted({str(e).split(":")[0][:40] for e in keys.get("errors", [])})
        row.hostile = f"health: {flower.get('code') or 'answers'}; keys: {', '.join(errors) or keys.get('outcome')}"
        row.commit, row.commit_median = max(latencies), statistics.median(latencies)
        row.gap, row.fewest = setup.counted.longest_gap(start, end)
        row.rss = max(memory(agent.pid)[1], *polls.rss)
        bad = [(s, t) for s, t in polls.healthz if s != 200 or t > 1.0]
        progress = len(latencies) == commits and row.fewest >= 1  # every commit applied, every federation checked
        row.healthz_ok = not bad and progress and status.get("stuck") == ""
        row.healthz = f"{len(polls.healthz) - len(bad)}/{len(polls.healthz)} 200"
        t0 = time.monotonic()
        agent.send_signal(signal.SIGTERM)
        try:
            row.code = agent.wait(60)
        except subprocess.TimeoutExpired:
            row.code = None
        row.stop = time.monotonic() - t0
        return row
    finally:
        polls.stop.set()
        if keep_log is not None:
            keep_log.mkdir(parents=True, exist_ok=True)
            (keep_log / log_path.name).write_text(log_path.read_text())
        if agent.poll() is None:
            agent.kill()
            agent.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kubeconfig", help="a running cluster (default: start a dedicated local one)")
    parser.add_argument("--kinds", nargs="+", choices=[*KINDS, "normal"], default=list(KINDS),
                        help="hostile kinds (`normal`: a SuperLink that answers, for comparison)")
    parser.add_argument("--seconds", type=float, default=80.0, help="seconds of attack per kind")
    parser.add_argument("--commits", type=int, default=4, help="commits of an ordinary federation during each attack")
    parser.add_argument("--others", type=int, default=20, help="ordinary federations")
    parser.add_argument("--log-level", default="warning", help="the agent's log level (its logs: --keep-logs)")
    parser.add_argument("--keep-logs", type=Path, help="a folder to copy each agent's log to")
    args = parser.parse_args()
    rows = []
    with bench_cluster(args.kubeconfig, name="hostile-agent") as kubeconfig, tempfile.TemporaryDirectory() as tmp:
        kube = Kube.from_kubeconfig(kubeconfig)
        install_flowerunits(kube)
        setup = Setup(kube, Path(tmp), args.others)
        print(f"{args.others} ordinary federations in {NAMESPACES} namespaces, 1 hostile; {args.seconds:g} s of "
              f"attack per kind, {args.commits} commits of an ordinary federation meanwhile", flush=True)
        print(f"{'hostile kind':<12} {'peak RSS':>9} {'commit med/max':>14} {'check gap':>9} {'fewest':>6} "
              f"{'/healthz':>10} {'truth':>5} {'SIGTERM':>8} {'exit':>4}  hostile unit", flush=True)
        for kind in args.kinds:
            row = run_kind(setup, kubeconfig, Path(tmp), kind, args.seconds, args.commits,
                           args.log_level, args.keep_logs)
            rows.append(row)
            print(f"{row.kind:<12} {row.rss:>5.0f} MiB {row.commit_median:>5.2f}/{row.commit:.2f} s "
                  f"{row.gap:>7.1f} s {row.fewest:>6} "
                  f"{row.healthz:>10} {'yes' if row.healthz_ok else 'NO':>5} {row.stop:>6.2f} s {row.code!s:>4}  "
                  f"{row.hostile}", flush=True)
    failed = [r.kind for r in rows if not r.passed()]
    print(f"criteria: peak RSS < {RSS_LIMIT:g} MiB, commit < {COMMIT_LIMIT:g} s, every federation checked, gap <= "
          f"{CHECK_GAP:g} s, /healthz truthful, SIGTERM < {STOP_LIMIT:g} s and exit 0: "
          + ("all met" if not failed else f"NOT met for {', '.join(failed)}"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
