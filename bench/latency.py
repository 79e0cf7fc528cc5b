#!/usr/bin/env python3
"""Agent latency benchmark against the local control plane.

1. commit-to-applied: 50 one-file commits pushed to a local bare repository that the agent
   (`flower-syncer run`) syncs; time from the start of `git push` until the change is in the
   cluster (seen through a watch on the object).
2. drift-to-corrected: 50 outside edits (an imperative `scale` of a managed StatefulSet); time
   from the edit until the agent has put the replica count back.

Prints p50/p95/max of both, and how long a full resync through the agent's API takes (every
unit synced again; nothing written when nothing changed). Targets: commit-to-applied p50 < 0.5 s and p95 < 1 s;
drift-to-corrected p50 < 1 s.

At scale (`--idle-federations`, `--idle-releases`): the repository also holds that many generated
units (bench/repogen.py) that sit idle while the commits land. The agent applies them all first;
the run waits for their pods, then prints the agent's resident memory with its watch caches warm
(and its peak), and holds commit-to-applied p95 to 0.5 s and the agent's RSS to 250 MiB.
With `--during-pods` the commits start as soon as the agent has applied every idle unit, while
the controllers are still creating the pods (the moment a platform team pushes its next change);
the resync, the edits and the memory come once the pods exist. With `--agent-log`, a GC pause of
0.1 s or more inside a commit's window (push to seen) fails the run. The FlowerUnit CRD is
installed first, as the Helm chart installs it (`--no-flowerunits` leaves it out), so the agent
keeps and writes one FlowerUnit per unit, as it does in production.

    python3 bench/latency.py                      # starts a dedicated devcluster, stops it after
    python3 bench/latency.py --kubeconfig FILE    # use a running (loopback) cluster
    python3 bench/latency.py --idle-federations 1000 --idle-releases 1000 --commits 20 --edits 20
    python3 bench/latency.py --idle-federations 1000 --idle-releases 1000 --during-pods --agent-log agent.log
"""

from __future__ import annotations

import argparse
import json
import math
import os
import queue
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.agent_log import Commit, read_records, table, timelines  # noqa: E402
from bench.benchcluster import bench_cluster, wait_for_pods  # noqa: E402
from bench.repogen import expected_pods, federation, make_repo, nodes_for  # noqa: E402
from syncer.cluster.client import ApiError, Kube, path_for  # noqa: E402
from syncer.identity import INVENTORY_SELECTOR  # noqa: E402

CRD = ROOT / "charts" / "flower-syncer" / "crds" / "flowerunits.yaml"
# the benchmarked federation; each round changes its env, so that every commit changes the StatefulSet
ROUND_POOL = """\
      - name: a
        replicas: 2
        images: {{}}
        env:
          - name: BENCH_ROUND
            value: "{round}"
"""
GIT_ENV = {**os.environ, "GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@localhost",
           "GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "bench@localhost"}


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, env=GIT_ENV)


def head(cwd: Path) -> str:
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, check=True, capture_output=True, text=True,
                          env=GIT_ENV).stdout.strip()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Watcher:
    """Follows one StatefulSet through a watch and reports (time, env value, replicas)."""

    def __init__(self, kube: Kube, namespace: str, name: str) -> None:
        self.events: queue.Queue[tuple[float, str, int]] = queue.Queue()
        self.kube, self.namespace, self.name = kube, namespace, name
        self.stop = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                for event in self.kube.watch("StatefulSet", self.namespace, fields=f"metadata.name={self.name}",
                                             timeout_seconds=60):
                    obj = event.get("object", {})
                    if obj.get("metadata", {}).get("name") != self.name:
                        continue
                    spec = obj.get("spec", {})
                    env = spec.get("template", {}).get("spec", {}).get("containers", [{}])[0].get("env", [])
                    value = next((e.get("value", "") for e in env if e.get("name") == "BENCH_ROUND"), "")
                    self.events.put((time.perf_counter(), value, int(spec.get("replicas", 0))))
            except Exception:  # a broken stream: watch again
                time.sleep(0.05)

    def until(self, predicate: Any, since: float, timeout: float = 30) -> float:
        """When the StatefulSet first matched `predicate` after `since` (perf_counter): each new
        watch starts with the object as it is, so events from before a change are skipped, not
        taken for it (after a 30-minute wait, dozens of them are queued)."""
        deadline = time.perf_counter() + timeout
        while True:
            left = deadline - time.perf_counter()
            if left <= 0:
                raise TimeoutError("the change did not show up in time")
            try:
                t, value, replicas = self.events.get(timeout=left)
            except queue.Empty:
                continue
            if t >= since and predicate(value, replicas):
                return t


def p95(values: list[float]) -> float:
    """Nearest-rank 95th percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


def percentiles(values: list[float]) -> str:
    return (f"p50 {statistics.median(values) * 1000:7.0f} ms   p95 {p95(values) * 1000:7.0f} ms   "
            f"max {max(values) * 1000:7.0f} ms")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--commits", type=int, default=50)
    ap.add_argument("--edits", type=int, default=50)
    ap.add_argument("--kubeconfig", default=None)
    ap.add_argument("--idle-federations", type=int, default=0, metavar="N",
                    help="also N generated federations that sit idle (e.g. 1000)")
    ap.add_argument("--idle-pools", type=int, default=10, metavar="P", help="pools of each (default 10)")
    ap.add_argument("--idle-releases", type=int, default=0, metavar="R",
                    help="also R generated SuperNode releases that sit idle (e.g. 1000)")
    ap.add_argument("--pods-timeout", type=float, default=1800,
                    help="seconds to wait for the idle units' pods before the commits (default 1800)")
    ap.add_argument("--during-pods", action="store_true",
                    help="push the commits while the controllers create the idle units' pods, not after")
    ap.add_argument("--no-flowerunits", action="store_true",
                    help="leave the FlowerUnit CRD out (by default it is installed, as the Helm chart does, so the "
                         "agent keeps one FlowerUnit per unit and writes their status)")
    ap.add_argument("--allocations", type=int, nargs="?", const=1, default=0, metavar="FRAMES",
                    help="run the agent with PYTHONTRACEMALLOC=FRAMES (default 1) and print where its memory was "
                         "allocated at the end (SIGUSR2; the top 20 source lines, and with FRAMES > 1 the callers "
                         "of each); tracing inflates the agent's memory and time, so the run's figures are not "
                         "comparable")
    ap.add_argument("--agent-log", type=Path, default=None, metavar="FILE",
                    help="keep the agent's log (JSON, info level) in FILE and break commit-to-applied down "
                         "into the agent's load+render and sync times")
    args = ap.parse_args()
    up: list[str] = []
    if args.idle_federations or args.idle_releases:
        pods = expected_pods(args.idle_federations, args.idle_pools, args.idle_releases)
        up = ["--cpu-nodes", str(nodes_for(pods)), "--nvidia-nodes", "0", "--amd-nodes", "0",
              "--controller-qps", "200"]
    with bench_cluster(args.kubeconfig, *up) as kubeconfig:
        return run(args, kubeconfig)


def print_breakdown(log_path: Path, commits: list[Commit]) -> float:
    """The agent's own share of each commit (see bench/agent_log.py): one row per commit, then the
    percentiles of its load+render and of the bench unit's sync. Returns the longest GC pause
    inside a commit's window (0 when none was logged)."""
    records = read_records(log_path)
    lines = timelines(records, commits)
    print(table(lines))
    n = len(commits)
    loads = [r["ms"] / 1000 for r in records if r.get("event") == "revision loaded"][-n:]
    syncs = [r["seconds"] for r in records
             if r.get("event") == "unit synced" and str(r.get("unit", "")).endswith("/bench")][-n:]
    pauses = [r["ms"] / 1000 for r in records if r.get("event") == "garbage collection paused the agent"]
    if loads:
        print(f"  of which load+render          {percentiles(loads)}")
    if syncs:
        print(f"  of which the unit's sync      {percentiles(syncs)}")
    if pauses:
        print(f"  GC pauses >= 0.1 s from the agent's start to the last commit: {len(pauses)}, {percentiles(pauses)}")
    return max((t.gc_longest for t in lines), default=0.0)


def print_allocations(agent: subprocess.Popen[bytes], log_path: Path) -> None:
    """Asks the agent where its memory was allocated (SIGUSR2) and prints its answer."""
    event = "where the agent's memory was allocated"
    agent.send_signal(signal.SIGUSR2)
    deadline = time.monotonic() + 300  # a snapshot of millions of traced blocks takes a while
    while time.monotonic() < deadline:
        rows = [r for r in read_records(log_path) if str(r.get("event", "")).startswith(event)]
        if rows:
            print("allocations (the source lines that hold the most, and what called them):")
            for row in rows[-1].get("allocations", []):
                print(f"  {row['mib']:8.1f} MiB  {row['blocks']:9d} blocks  {row['where']}")
                for caller in row.get("via", [])[:6]:
                    print(f"  {'':36}< {caller}")
            return
        time.sleep(2)
    print("allocations: the agent did not answer SIGUSR2 within 300 s")


def memory_mib(pid: int) -> tuple[float, float]:
    """(resident now, peak resident) of process `pid`, MiB."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def settle_idle_units(kube: Kube, namespace: str, args: argparse.Namespace, agent: subprocess.Popen[bytes]) -> None:
    """Waits until the agent has applied every idle unit (an inventory each) and, without
    --during-pods, the controllers have created their pods (`wait_for_idle_pods`)."""
    units = args.idle_federations + args.idle_releases + 1
    t = time.perf_counter()
    while len(kube.list("ConfigMap", namespace, labels=INVENTORY_SELECTOR, metadata_only=True)[0]) < units:
        if agent.poll() is not None or time.perf_counter() - t > 3600:
            raise RuntimeError("the agent did not apply every idle unit")
        time.sleep(2)
    print(f"agent's first sync   {time.perf_counter() - t:8.1f} s   {units} units", flush=True)
    if not args.during_pods:
        wait_for_idle_pods(kube, namespace, args, agent)


def wait_for_idle_pods(kube: Kube, namespace: str, args: argparse.Namespace, agent: subprocess.Popen[bytes]) -> None:
    """Waits until the controllers have created the pods; prints how long it took and the agent's
    memory then."""
    # the bench federation's own pods too: a SuperLink and 2 SuperNodes
    pods = expected_pods(args.idle_federations, args.idle_pools, args.idle_releases) + 3
    created, waited = wait_for_pods(kube, namespace, pods, args.pods_timeout, interval=5)
    print(f"pods created         {waited:8.1f} s   {created} of {pods} pods"
          f"{'' if created >= pods else ' (the controllers go on creating them during the commits)'}", flush=True)
    rss, peak = memory_mib(agent.pid)
    print(f"agent memory         {rss:8.0f} MiB resident with warm caches (peak {peak:.0f} MiB)", flush=True)


def round_cpu(port: int) -> tuple[float, dict[str, float]]:
    """(now, CPU seconds the agent's status rounds spent so far, by part: round, flower)."""
    # the agent renders thousands of series; traced (--allocations) right after its first sync, that took over 10 s
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=120) as resp:
        text = resp.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("flower_syncer_status_round_cpu_seconds_total{"):
            labels, value = line.rsplit(" ", 1)
            out[labels.split('part="', 1)[1].split('"', 1)[0]] = float(value)
    return time.monotonic(), out


def print_round_cpu(before: tuple[float, dict[str, float]], after: tuple[float, dict[str, float]]) -> None:
    """What a status round (one per 10 s) cost on average between two scrapes, by part."""
    rounds = (after[0] - before[0]) / 10.0
    if rounds < 2:
        print(f"status round CPU     not measured: {rounds * 10:.0f} s between the scrapes, fewer than two rounds")
        return
    parts = {k: (after[1].get(k, 0.0) - before[1].get(k, 0.0)) / rounds * 1000 for k in ("round", "flower")}
    print(f"status round CPU     {parts['round']:8.1f} ms own work, {parts['flower']:.1f} ms Flower-level health, "
          f"per round ({rounds:.0f} rounds)", flush=True)


def resync_all(port: int, token: str) -> tuple[float, int, int]:
    """A full resync through the agent's API, waited for: (seconds, units, objects written)."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}/api/v1/resync", method="POST",
                                 data=json.dumps({"wait": True, "timeout": 600}).encode(),
                                 headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    t = time.perf_counter()
    with urllib.request.urlopen(req, timeout=660) as resp:
        body = json.load(resp)
    seconds = time.perf_counter() - t
    if not body.get("done"):
        raise RuntimeError(f"the resync did not finish: {body.get('error')}")
    units = body.get("units") or {}
    writes = sum(1 for u in units.values() for c in u.get("changes", []) if c["action"] not in ("unchanged", "skipped"))
    return seconds, len(units), writes


def install_flowerunits(kube: Kube) -> None:
    """The FlowerUnit CRD, as the chart installs it (already there: left as it is); waits until
    the API server serves it."""
    crd = yaml.safe_load(CRD.read_text())
    path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    try:
        kube.request("POST", path, body=crd)
    except ApiError as exc:
        if not exc.conflict:
            raise
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        got = kube.request("GET", f"{path}/{crd['metadata']['name']}")
        if any(c.get("type") == "Established" and c.get("status") == "True"
               for c in (got.get("status") or {}).get("conditions") or []):
            return
        time.sleep(0.5)
    raise SystemExit(f"the CRD {crd['metadata']['name']} was not established within 60 s")


def run(args: argparse.Namespace, kubeconfig: str) -> int:
    kube = Kube.from_kubeconfig(kubeconfig)
    if not args.no_flowerunits:
        install_flowerunits(kube)
    namespace = f"latency-{uuid.uuid4().hex[:6]}"
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    agent = None
    with tempfile.TemporaryDirectory() as tmp:  # removed after the agent stopped writing into it
        try:
            bare, work = Path(tmp) / "config.git", Path(tmp) / "work"
            git(Path(tmp), "init", "-q", "--bare", "-b", "main", str(bare))
            git(Path(tmp), "clone", "-q", str(bare), str(work))
            git(work, "checkout", "-q", "-b", "main")
            if args.idle_federations or args.idle_releases:
                make_repo(work, namespace, args.idle_federations, args.idle_pools, args.idle_releases)
            (work / "federations").mkdir(exist_ok=True)
            (work / "flower-syncer.yaml").write_text(f"name: {namespace}\ndefaultNamespace: {namespace}\n")
            (work / "federations" / "bench.yaml").write_text(federation("bench", ROUND_POOL.format(round=0)))
            git(work, "add", "-A")
            git(work, "commit", "-qm", "round 0")
            git(work, "push", "-q", "origin", "HEAD:main")
            port = free_port()
            token = uuid.uuid4().hex
            (Path(tmp) / "token").write_text(token)
            log_path = args.agent_log or Path(tmp) / "agent.log"
            log = log_path.open("w")  # open as long as the agent runs
            agent = subprocess.Popen([sys.executable, "-m", "syncer", "run", "--repo", str(bare), "--kubeconfig",
                                      kubeconfig, "--listen", f"127.0.0.1:{port}", "--namespaces", namespace,
                                      "--lease-namespace", namespace, "--cache-dir", str(Path(tmp) / "cache"),
                                      "--api-token-file", str(Path(tmp) / "token"),
                                      "--log-format", "json",
                                      "--log-level", "info" if args.agent_log or args.allocations else "warning"],
                                     stderr=log,
                                     env={**os.environ, "PYTHONTRACEMALLOC": str(args.allocations)}
                                     if args.allocations else None)
            watcher = Watcher(kube, namespace, "bench-supernode-a")
            idle = args.idle_federations + args.idle_releases
            deadline = time.monotonic() + 60 + idle  # the bench unit may come last of all
            while kube.get("StatefulSet", namespace, "bench-supernode-a") is None:
                if time.monotonic() > deadline or agent.poll() is not None:
                    raise RuntimeError("the agent did not apply the first revision")
                time.sleep(0.1)
            while urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5).status != 200:
                time.sleep(0.1)
            if idle:
                settle_idle_units(kube, namespace, args, agent)
            time.sleep(1)
            cpu_before = round_cpu(port)

            def resync() -> tuple[float, int]:
                resync_s, resync_units, resync_writes = resync_all(port, token)
                print(f"no-op resync         {resync_s:8.2f} s   {resync_units} units, {resync_writes} writes",
                      flush=True)
                return resync_s, resync_writes

            if not args.during_pods:
                resync_s, resync_writes = resync()

            commit_lat = []
            pushed: list[Commit] = []
            for i in range(1, args.commits + 1):
                (work / "federations" / "bench.yaml").write_text(federation("bench", ROUND_POOL.format(round=i)))
                git(work, "commit", "-qam", f"round {i}")
                sha = head(work)
                wall0, t0 = time.time(), time.perf_counter()
                git(work, "push", "-q", "origin", "HEAD:main")
                t1 = watcher.until(lambda value, _r, i=i: value == str(i), since=t0)
                commit_lat.append(t1 - t0)
                pushed.append(Commit(sha, wall0, wall0 + t1 - t0))
            print(f"commit-to-applied   ({args.commits} pushes{', during pod creation' if args.during_pods else ''})"
                  f"  {percentiles(commit_lat)}")
            longest_gc = print_breakdown(log_path, pushed) if args.agent_log else None
            if args.during_pods:
                if idle:
                    wait_for_idle_pods(kube, namespace, args, agent)
                resync_s, resync_writes = resync()

            drift_lat = []
            path = path_for("StatefulSet", namespace, "bench-supernode-a") + "/scale"
            for i in range(args.edits):
                replicas = 3 + i % 3
                t0 = time.perf_counter()
                kube.request("PATCH", path, body={"spec": {"replicas": replicas}},
                             content_type="application/merge-patch+json", query={"fieldManager": "bench-edit"})
                edited = watcher.until(lambda _v, r, n=replicas: r == n, since=t0)  # the edit itself, then
                t1 = watcher.until(lambda _v, r: r == 2, since=edited)  # its correction
                drift_lat.append(t1 - t0)
            print(f"drift-to-corrected  ({args.edits} edits)   {percentiles(drift_lat)}")
            print_round_cpu(cpu_before, round_cpu(port))
            watcher.stop.set()
            c50, c95 = statistics.median(commit_lat), p95(commit_lat)
            d50 = statistics.median(drift_lat)
            checks = [(f"commit-to-applied p50 < 0.5 s ({c50:.3f} s)", c50 < 0.5),
                      (f"commit-to-applied p95 < 1 s ({c95:.3f} s)", c95 < 1.0),
                      (f"drift-to-corrected p50 < 1 s ({d50:.3f} s)", d50 < 1.0)]
            if args.allocations:
                print_allocations(agent, log_path)
            if idle:
                rss, peak = memory_mib(agent.pid)
                print(f"agent memory         {rss:8.0f} MiB resident at the end (peak {peak:.0f} MiB)")
                checks += [(f"commit-to-applied p95 < 0.5 s with {idle} idle units ({c95:.3f} s)", c95 < 0.5),
                           (f"no-op resync < 3 s with 0 writes ({resync_s:.2f} s, {resync_writes})",
                            resync_s < 3 and resync_writes == 0),
                           (f"agent resident memory < 250 MiB ({rss:.0f} MiB)", rss < 250)]
            if longest_gc is not None:
                checks.append((f"no GC pause >= 0.1 s inside a commit's window (longest {longest_gc * 1000:.0f} ms)",
                               longest_gc < 0.1))
            for label, ok in checks:
                print(f"  {'PASS' if ok else 'FAIL'}  {label}")
            return 0 if all(ok for _, ok in checks) else 1
        finally:
            if agent is not None and agent.poll() is None:
                agent.send_signal(signal.SIGTERM)
                agent.wait(30)
            kube.delete("Namespace", None, namespace)


if __name__ == "__main__":
    sys.exit(main())
