#!/usr/bin/env python3
"""The agent's path of a commit before it talks to the cluster, at scale and without a cluster.

A generated repository (bench/repogen.py: N federations of P pools plus R SuperNode releases, as
`bench/latency.py --idle-...` uses) is pushed to a local bare remote. The script then does what
the agent does for a commit, with the agent's own classes and GC thresholds:

  fetch   GitSource.fetch of the bare remote (each git command it runs is timed)
  load    RevisionLoader.load of the checkout, with the caches of the previous revision
  install Installer.install: the plan (plan_repo against the previous one), what changed, the units'
          state (an agent that is never started: no thread, no request)

once for the first revision, then for each of --commits one-file commits (the pools of one
federation change, as bench/latency.py's commits do). Prints p50/p95/max of each phase, the git
commands of a commit's fetch with their median times, the GC pauses by generation (count, those
of at least 0.1 s, the longest) and the resident memory.

    python3 bench/commit_path.py                            # 1,000 x 10 + 1,000: 2,000 units
    python3 bench/commit_path.py --federations 100 --releases 100 --commits 50
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import pstats
import resource
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.latency import git, p95
from bench.repogen import POOL, federation, make_repo
from syncer.agent.state import AgentOptions
from syncer.agent.wiring import build_agent
from syncer.cluster.client import Kube
from syncer.logs import configure as configure_logs
from syncer.observe.gc_pauses import GCPauses, Pause
from syncer.observe.metrics import Metrics
from syncer.source.git import GitSource, SourceSpec


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class TimedGit:
    """Times every git command a GitSource runs, by its verb (`fetch`, `checkout`, ...)."""

    def __init__(self, source: GitSource) -> None:
        self.calls: list[tuple[str, float]] = []
        run = source._git  # the one place GitSource starts git

        def timed(s: Any, args: list[str], gitdir: Path | None) -> Any:
            start = time.perf_counter()
            try:
                return run(s, args, gitdir)
            finally:
                self.calls.append((args[0], time.perf_counter() - start))

        source._git = timed  # type: ignore[method-assign]

    @contextmanager
    def collect(self) -> Iterator[list[tuple[str, float]]]:
        self.calls = []
        yield self.calls


def percentiles(values: list[float]) -> str:
    """As bench/latency.py's, to a tenth of a millisecond: a commit's parts here are a few ms."""
    return (f"p50 {statistics.median(values) * 1000:7.1f} ms  p95 {p95(values) * 1000:7.1f} ms  "
            f"max {max(values) * 1000:7.1f} ms")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--federations", type=int, default=1000)
    ap.add_argument("--pools", type=int, default=10)
    ap.add_argument("--releases", type=int, default=1000)
    ap.add_argument("--commits", type=int, default=30)
    ap.add_argument("--profile", metavar="FILE", type=Path,
                    help="profile the commits (not the first revision) with cProfile into FILE, and print "
                         "the 25 functions with the most cumulative time")
    args = ap.parse_args()
    profiler = cProfile.Profile() if args.profile else None
    gc.set_threshold(50_000, 20, 100)  # as the CLI and the agent run (syncer/cli.py main)
    configure_logs(level="warning")
    pauses: list[Pause] = []
    with tempfile.TemporaryDirectory() as tmp, GCPauses(slow=0.0) as gcp:
        bare, work = Path(tmp) / "config.git", Path(tmp) / "work"
        git(Path(tmp), "init", "-q", "--bare", "-b", "main", str(bare))
        git(Path(tmp), "init", "-q", "-b", "main", str(work))
        make_repo(work, "bench", args.federations, args.pools, args.releases)
        edited = work / "federations" / "fed-0.yaml"
        git(work, "add", "-A")
        git(work, "commit", "-qm", "round 0")
        git(work, "push", "-q", str(bare), "HEAD:main")
        source = GitSource(SourceSpec(url=str(bare), cache_dir=Path(tmp) / "cache"))
        timed = TimedGit(source)
        agent = build_agent(Kube(None), source, Metrics(), AgentOptions())  # never started
        print(f"commit path: {args.federations} federations x {args.pools} pools + {args.releases} releases, "
              f"{args.commits} one-file commits", flush=True)

        def step() -> tuple[float, float, float, list[tuple[str, float]]]:
            with timed.collect() as calls:
                t0 = time.perf_counter()
                checkout = source.fetch()
                t1 = time.perf_counter()
            loaded = agent.installer.loader.load(checkout.root, checkout.revision, since=checkout.since,
                                                 changed=checkout.changed)
            t2 = time.perf_counter()
            agent.installer.install(loaded.state, loaded.rendered, checkout.revision)
            t3 = time.perf_counter()
            return t1 - t0, t2 - t1, t3 - t2, list(calls)

        fetch0, load0, install0, _ = step()
        print(f"first revision        fetch {fetch0:6.2f} s  load+render {load0:6.2f} s  install {install0:6.2f} s  "
              f"RSS {rss_mib():.0f} MiB", flush=True)
        while (p := gcp.next_slow(0)) is not None:
            pass  # the first revision's pauses are not a commit's
        fetches, loads, installs, totals = [], [], [], []
        by_verb: dict[str, list[float]] = defaultdict(list)
        for i in range(1, args.commits + 1):
            edited.write_text(federation("fed-0", "".join(POOL.format(p=p) for p in range(args.pools + i % 2))))
            git(work, "commit", "-qam", f"round {i}")
            git(work, "push", "-q", str(bare), "HEAD:main")
            if profiler is not None:
                profiler.enable()
            fetch, load, install, calls = step()
            if profiler is not None:
                profiler.disable()
            fetches.append(fetch)
            loads.append(load)
            installs.append(install)
            totals.append(fetch + load + install)
            for verb, seconds in calls:
                by_verb[verb].append(seconds)
            while (p := gcp.next_slow(0)) is not None:
                pauses.append(p)
        print(f"fetch                 {percentiles(fetches)}")
        print(f"load+render           {percentiles(loads)}")
        print(f"install               {percentiles(installs)}")
        print(f"fetch+load+install    {percentiles(totals)}")
        print("git commands of a commit's fetch (runs per commit, median):")
        for verb, times in sorted(by_verb.items(), key=lambda kv: -sum(kv[1])):
            print(f"  git {verb:<10} {len(times) / args.commits:4.1f}  {statistics.median(times) * 1000:7.1f} ms")
        print("GC pauses during the commits, by generation (count, >= 0.1 s, longest):")
        for generation in range(3):
            mine = [p.seconds for p in pauses if p.generation == generation]
            slow = sum(1 for s in mine if s >= 0.1)
            print(f"  gen {generation}  {len(mine):5d}  {slow:3d}  {max(mine, default=0.0) * 1000:7.1f} ms")
        if profiler is not None:
            profiler.dump_stats(args.profile)
            print(f"profile of the commits: {args.profile}")
            pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"RSS now {rss_mib():.0f} MiB, peak {peak:.0f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
