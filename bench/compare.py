#!/usr/bin/env python3
"""Peer benchmark: flower-syncer against Flux's apply engine and `kubectl apply --server-side`,
on the same rendered manifests, each on a fresh local control plane of its own.

For every engine: start a dedicated cluster, apply cold, wait until the controllers have created
every pod, apply again (the no-op pass), stop the cluster. Engines run as child processes, so
their wall time, peak RSS and CPU time are measured the same way (the child's rusage); requests
and writes are counted by each client itself; "server CPU s" is what the control plane's
processes (apiserver, etcd, controller-manager, scheduler, kwok) spent during the cold pass.
The order of the engines alternates over rounds.

  engine          what runs
  flower-syncer   flower-syncer sync DIR (loads, renders and applies the repository)
  flux            bench/peers/fluxapply: fluxcd/pkg/ssa v0.78.0 ApplyAllStaged as kustomize-controller
                  calls it (field manager kustomize-controller, its owner labels and cleanup options,
                  client-side rate limit 50 QPS / burst 300 as the controllers' defaults; --flux-qps)
  kubectl         kubectl apply --server-side -f manifests.yaml (requests counted from -v=6)

    python3 bench/compare.py                              # 100 federations x 10 pools + 100 releases
    python3 bench/compare.py --background-load cpu        # with a busy loop pinned to CPU 0
    python3 bench/compare.py --rounds 3 -o json

Background load (`--background-load`): `cpu` runs --hogs busy loops, each pinned to one core
(0, 1, ...), from before the cold apply until after the no-op pass of every engine.

The default size takes about 15 minutes per round on 2 cores: 3 x 190 s of it is waiting for the
controller-manager, which creates 6 pods a second at its default rate limit (20 requests/s, as
in production); --controller-qps 100 shortens that, --cold-only skips it.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.benchcluster import bench_cluster, devcluster, wait_for_pods  # noqa: E402
from bench.peers.build import build as build_fluxapply  # noqa: E402
from bench.repogen import expected_pods, make_repo, nodes_for  # noqa: E402
from syncer.cluster.client import Kube  # noqa: E402

ENGINES = ("flower-syncer", "flux", "kubectl")
CLUSTER = "compare"
WRITES = ("POST", "PUT", "PATCH", "DELETE")
# kubectl -v=6: `"Response" verb="PATCH" url="..." status="201 Created" milliseconds=3`
KUBECTL_RESPONSE = re.compile(r'verb="(?P<verb>[A-Z]+)" url="(?P<url>[^"]*)" status="(?P<status>\d+)')


@dataclass
class Pass:
    seconds: float
    requests: int
    writes: int
    rss_mib: float
    cpu_seconds: float
    load: float
    server_cpu_seconds: float = 0.0  # the control plane's (apiserver, etcd, controllers, kwok) during the pass


def control_plane_pids() -> list[int]:
    status = json.loads(devcluster("status", "--json", name=CLUSTER))
    return [p["pid"] for p in status["processes"].values() if p["alive"]]


def cpu_seconds(pids: list[int]) -> float:
    """utime + stime of `pids` so far (/proc/PID/stat), in seconds."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
    return total / os.sysconf("SC_CLK_TCK")


def measured(engine: Engine, kubeconfig: str) -> Pass:
    """`engine.apply`, with the control plane's CPU time over the same pass."""
    pids = control_plane_pids()
    before = cpu_seconds(pids)
    result = engine.apply(kubeconfig)
    result.server_cpu_seconds = cpu_seconds(pids) - before
    return result


@dataclass
class Run:
    engine: str
    round: int
    cold: Pass
    noop: Pass
    pods_seconds: float
    detail: dict[str, Any] = field(default_factory=dict)


def run_child(argv: list[str], env: dict[str, str] | None = None) -> tuple[str, str, float, float, float]:
    """Runs `argv` to completion; returns stdout, stderr, wall seconds, peak RSS (MiB), CPU seconds
    of that child alone (os.wait4)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=err, text=True, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:3])} ... failed with exit {proc.returncode}:\n{stderr[-3000:]}")
    return stdout, stderr, wall, usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime


class Engine:
    name = ""

    def apply(self, kubeconfig: str) -> Pass:
        raise NotImplementedError


class FlowerSyncer(Engine):
    name = "flower-syncer"

    def __init__(self, repo: Path, src: Path, name: str = "flower-syncer") -> None:
        self.name = name
        self.repo = repo
        self.env = {**os.environ, "PYTHONPATH": str(src)}  # which checkout's flower-syncer runs

    def apply(self, kubeconfig: str) -> Pass:
        load = os.getloadavg()[0]
        out, _, wall, rss, cpu = run_child([sys.executable, "-m", "syncer", "sync", str(self.repo), "--kubeconfig",
                                            kubeconfig, "--revision", "bench", "-o", "json"], self.env)
        report = json.loads(out)
        return Pass(wall, report["requests"], report["writes"], rss, cpu, load)


class Flux(Engine):
    name = "flux"

    def __init__(self, manifests: Path, qps: float, burst: int) -> None:
        self.manifests = manifests
        self.binary = build_fluxapply()
        self.limits = ["-kube-api-qps", str(qps), "-kube-api-burst", str(burst)]

    def apply(self, kubeconfig: str) -> Pass:
        load = os.getloadavg()[0]
        out, _, wall, rss, cpu = run_child([str(self.binary), "-kubeconfig", kubeconfig, "-f", str(self.manifests),
                                            *self.limits])
        report = json.loads(out)
        return Pass(wall, report["requestsTotal"], report["writes"], rss, cpu, load)


class Kubectl(Engine):
    name = "kubectl"

    def __init__(self, manifests: Path, kubectl: Path) -> None:
        self.manifests = manifests
        self.kubectl = kubectl

    def apply(self, kubeconfig: str) -> Pass:
        load = os.getloadavg()[0]
        _, err, wall, rss, cpu = run_child([str(self.kubectl), "--kubeconfig", kubeconfig, "apply", "--server-side",
                                            "-f", str(self.manifests), "-v=6"])
        requests: Counter[str] = Counter()
        writes = 0
        for m in KUBECTL_RESPONSE.finditer(err):
            requests[f"{m['verb']} {m['status']}"] += 1
            writes += m["verb"] in WRITES and "dryRun=" not in m["url"]
        if not requests:
            raise SystemExit("kubectl -v=6 printed no responses; cannot count its requests")
        return Pass(wall, sum(requests.values()), writes, rss, cpu, load)


def render_manifests(repo: Path, namespace: str, path: Path) -> int:
    """The repository's rendered objects as one multi-document file, its Namespace first (what
    flower-syncer creates itself, Flux and kubectl need in the file). Returns the object count."""
    out, _, _, _, _ = run_child([sys.executable, "-m", "syncer", "render", str(repo)])
    docs = [d.strip("\n") + "\n" for d in re.split(r"(?m)^---[ \t]*$", out) if d.strip()]
    namespace_doc = f"apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {namespace}\n"
    path.write_text("---\n" + "---\n".join([namespace_doc, *docs]))
    return len(docs) + 1


def pods_created(kubeconfig: str, namespace: str, want: int, timeout: float = 900) -> float:
    count, waited = wait_for_pods(Kube.from_kubeconfig(kubeconfig), namespace, want, timeout, interval=1)
    if count < want:
        raise SystemExit(f"only {count} of {want} pods after {timeout:.0f}s")
    return waited


@contextmanager
def background_load(kind: str | None, hogs: int) -> Iterator[None]:
    """`cpu`: `hogs` busy loops, the i-th pinned to core i modulo the core count."""
    procs: list[subprocess.Popen[bytes]] = []
    if kind == "cpu":
        cores = os.cpu_count() or 1
        for i in range(hogs):
            code = f"import os; os.sched_setaffinity(0, {{{i % cores}}})\nwhile True: pass"
            procs.append(subprocess.Popen([sys.executable, "-c", code]))
    try:
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--federations", type=int, default=100)
    ap.add_argument("--pools", type=int, default=10)
    ap.add_argument("--releases", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=1, help="rounds; the engine order alternates (default 1)")
    ap.add_argument("--engines", default=",".join(ENGINES), help=f"comma-separated subset of {','.join(ENGINES)}")
    ap.add_argument("--background-load", choices=["cpu"], default=None, help="run the loaded variant")
    ap.add_argument("--hogs", type=int, default=1, help="busy loops for --background-load cpu (default 1)")
    ap.add_argument("--flux-qps", type=float, default=50,
                    help="the Flux engine's client-side rate limit (default 50, Flux controllers' --kube-api-qps "
                         "default; a negative value turns the limit off)")
    ap.add_argument("--flux-burst", type=int, default=300, help="its burst (default 300, as --kube-api-burst)")
    ap.add_argument("--controller-qps", type=float, default=None,
                    help="the clusters' controller-manager API rate limit (default: its own, 20/s)")
    ap.add_argument("--cpu-nodes", type=int, default=None,
                    help="kwok nodes of each cluster (default: 24, or enough for 100 pods a node)")
    ap.add_argument("--flower-syncer-src", type=Path, default=ROOT, metavar="DIR",
                    help="run flower-syncer from this checkout, e.g. a worktree of an older commit to measure "
                         "a change (default: this one)")
    ap.add_argument("--also", action="append", default=[], metavar="NAME=DIR",
                    help="one more engine NAME: flower-syncer run from checkout DIR (repeatable), to compare "
                         "versions in the same run, e.g. --also before=/tmp/worktree-of-main")
    ap.add_argument("--cold-only", action="store_true",
                    help="measure the cold apply alone (no waiting for pods, no no-op pass): quick A/B runs")
    ap.add_argument("-o", "--output", choices=["table", "json"], default="table")
    args = ap.parse_args()
    variants = dict(a.split("=", 1) for a in args.also if "=" in a)
    if len(variants) != len(args.also) or set(variants) & set(ENGINES):
        ap.error("--also takes NAME=DIR, NAME not one of " + ", ".join(ENGINES))
    engines = [e.strip() for e in args.engines.split(",") if e.strip()] + list(variants)
    unknown = sorted(set(engines) - set(ENGINES) - set(variants))
    if unknown:
        ap.error(f"unknown engine(s): {', '.join(unknown)}")

    namespace = "bench"
    want = expected_pods(args.federations, args.pools, args.releases)
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "repo"
        make_repo(repo, namespace, args.federations, args.pools, args.releases)
        manifests = Path(tmp) / "manifests.yaml"
        objects = render_manifests(repo, namespace, manifests)
        bin_dir = next(line.split("=", 1)[1].split(":", 1)[0] for line in devcluster("env", name=CLUSTER).splitlines()
                       if line.startswith("export PATH="))
        factories: dict[str, Callable[[], Engine]] = {
            "flower-syncer": lambda: FlowerSyncer(repo, args.flower_syncer_src.resolve()),
            "flux": lambda: Flux(manifests, args.flux_qps, args.flux_burst),
            "kubectl": lambda: Kubectl(manifests, Path(bin_dir) / "kubectl"),
        }
        for name, src in variants.items():
            factories[name] = functools.partial(FlowerSyncer, repo, Path(src).resolve(), name)
        made = {name: factories[name]() for name in engines}
        log(f"peer benchmark: {objects} objects ({args.federations} federations x {args.pools} pools, "
            f"{args.releases} releases, 1 namespace), {want} pods, engines {', '.join(engines)}, "
            f"{args.rounds} round(s), background load: {args.background_load or 'none'}, "
            f"flux client limit {args.flux_qps:g} QPS / burst {args.flux_burst}")
        runs: list[Run] = []
        for r in range(args.rounds):
            for name in (engines if r % 2 == 0 else list(reversed(engines))):
                runs.append(one_run(made[name], r, args, namespace, want))
    if args.output == "json":
        print(json.dumps({"objects": objects, "pods": want, "backgroundLoad": args.background_load,
                          "runs": [asdict(run) for run in runs]}, indent=2))
    else:
        print_table(runs, objects, engines)
    return 0


def one_run(engine: Engine, round_: int, args: argparse.Namespace, namespace: str, want: int) -> Run:
    log(f"round {round_ + 1}, {engine.name}: fresh cluster ...")
    nodes = str(args.cpu_nodes or nodes_for(want))
    qps = ["--controller-qps", f"{args.controller_qps:g}"] if args.controller_qps else []
    with bench_cluster(None, "--cpu-nodes", nodes, "--nvidia-nodes", "0", "--amd-nodes", "0", *qps,
                       name=CLUSTER) as kubeconfig, background_load(args.background_load, args.hogs):
        cold = measured(engine, kubeconfig)
        log(f"  cold   {cold.seconds:7.2f} s  {cold.requests} requests, {cold.writes} writes (load {cold.load:.2f}, "
            f"control plane CPU {cold.server_cpu_seconds:.1f} s)")
        if args.cold_only:
            return Run(engine.name, round_, cold, Pass(0, 0, 0, 0, 0, 0), 0)
        pods = pods_created(kubeconfig, namespace, want)
        log(f"  pods   {pods:7.2f} s  {want} pods created")
        noop = measured(engine, kubeconfig)
        log(f"  no-op  {noop.seconds:7.2f} s  {noop.requests} requests, {noop.writes} writes")
    return Run(engine.name, round_, cold, noop, pods)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def print_table(runs: list[Run], objects: int, engines: list[str]) -> None:
    def med(values: list[float]) -> float:
        return statistics.median(values)

    header = (f"{'engine':<14} {'cold s':>8} {'obj/s':>6} {'no-op s':>8} {'requests cold/no-op':>20} "
              f"{'writes cold/no-op':>18} {'peak RSS MiB':>12} {'CPU s cold':>10} {'server CPU s':>12} {'load':>10}")
    print(header)
    print("-" * len(header))
    for name in engines:
        mine = [r for r in runs if r.engine == name]
        if not mine:
            continue
        cold = med([r.cold.seconds for r in mine])
        loads = [r.cold.load for r in mine]
        print(f"{name:<14} {cold:8.2f} {objects / cold:6.0f} {med([r.noop.seconds for r in mine]):8.2f} "
              f"{f'{int(med([r.cold.requests for r in mine]))} / {int(med([r.noop.requests for r in mine]))}':>20} "
              f"{f'{int(med([r.cold.writes for r in mine]))} / {int(med([r.noop.writes for r in mine]))}':>18} "
              f"{max(max(r.cold.rss_mib, r.noop.rss_mib) for r in mine):12.0f} "
              f"{med([r.cold.cpu_seconds for r in mine]):10.1f} {med([r.cold.server_cpu_seconds for r in mine]):12.1f} "
              f"{f'{min(loads):.1f}-{max(loads):.1f}':>10}")
    if len(runs) > len(engines):
        print(f"(medians over {len(runs) // len(engines)} rounds; load = 1-min load average when each cold pass began)")
        for name in engines:
            print(f"  {name}: cold s by round " + ", ".join(f"{r.cold.seconds:.2f}" for r in runs if r.engine == name))


if __name__ == "__main__":
    sys.exit(main())
