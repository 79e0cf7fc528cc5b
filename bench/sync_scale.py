#!/usr/bin/env python3
"""Sync benchmark against the local control plane: N federations x P pools (plus SuperNode
releases) from cold, then a no-op resync.

Prints objects applied per second, the no-op resync time and its write count, and peak RSS.
Targets: >= 100 objects/s; a no-op resync with 0 writes in under 2 s up to 1,000 pools (3 s
beyond, up to 10,000 pools); peak RSS under 200 MiB up to 1,000 pools (400 MiB beyond).

    python3 bench/sync_scale.py                      # starts a dedicated devcluster, stops it after
    python3 bench/sync_scale.py --federations 1000 --releases 1000   # ~26,000 objects, 12,000 pods
    python3 bench/sync_scale.py --kubeconfig FILE    # use a running (loopback) cluster

The no-op resync runs once the controllers have created every pod (at most --pods-timeout
seconds); the dedicated cluster's controller-manager may send 200 requests/s for that.
"""

from __future__ import annotations

import argparse
import gc
import resource
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.benchcluster import bench_cluster, wait_for_pods  # noqa: E402
from bench.repogen import expected_pods, make_repo, nodes_for  # noqa: E402
from syncer.cluster.client import Kube  # noqa: E402
from syncer.engine.sync import Engine, SyncOptions  # noqa: E402
from syncer.render.repo import plan_repo, render_repo  # noqa: E402
from syncer.repo.loader import load_repo  # noqa: E402


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> int:
    gc.set_threshold(50_000, 20, 100)  # as the CLI and the agent run (syncer/cli.py main)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--federations", type=int, default=100)
    ap.add_argument("--pools", type=int, default=10)
    ap.add_argument("--releases", type=int, default=100)
    ap.add_argument("--kubeconfig", default=None, help="use this cluster instead of starting one")
    ap.add_argument("--keep", action="store_true", help="leave the objects and the cluster running")
    ap.add_argument("--pods-timeout", type=float, default=900,
                    help="seconds to wait for the pods before the no-op resync (default 900)")
    args = ap.parse_args()

    namespace = f"bench-{uuid.uuid4().hex[:6]}"
    pools_total = args.federations * args.pools
    print(f"flower-syncer sync benchmark: {args.federations} federations x {args.pools} pools "
          f"({pools_total} pools), {args.releases} SuperNode releases, namespace {namespace}")
    nodes = nodes_for(expected_pods(args.federations, args.pools, args.releases))
    with bench_cluster(args.kubeconfig, "--cpu-nodes", str(nodes), "--controller-qps", "200",
                       keep=args.keep) as kubeconfig, \
            tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "repo"
        make_repo(repo, namespace, args.federations, args.pools, args.releases)
        t = time.perf_counter()
        state = load_repo(repo)
        rendered = render_repo(state)
        assert not state.errors, [d.render() for d in state.errors[:5]]
        objects = sum(len(ms) for ms in rendered.units.values())
        print(f"load + render        {time.perf_counter() - t:8.2f} s   {objects} objects")

        kube = Kube.from_kubeconfig(kubeconfig)
        engine = Engine(kube)
        cold = engine.sync(plan_repo(state, rendered, revision="bench-1"), SyncOptions())
        assert cold.ok, [u.to_dict() for u in cold.units if not u.ok][:3]
        rate = objects / cold.seconds
        print(f"cold sync            {cold.seconds:8.2f} s   {cold.writes} writes, {cold.requests} requests, "
              f"{rate:.0f} objects/s")

        # a steady-state resync: let the controllers finish creating the pods first
        expected = expected_pods(args.federations, args.pools, args.releases)
        count, waited = wait_for_pods(kube, namespace, expected, args.pods_timeout, interval=2)
        print(f"pods created         {waited:8.2f} s   {count} pods (after the sync)")
        noop = Engine(kube).sync(plan_repo(state, rendered, revision="bench-1"), SyncOptions())
        print(f"no-op resync         {noop.seconds:8.2f} s   {noop.writes} writes, {noop.requests} requests")
        t = time.perf_counter()
        state2 = load_repo(repo)
        Engine(kube).sync(plan_repo(state2, render_repo(state2), revision="bench-1"), SyncOptions())
        full = time.perf_counter() - t
        print(f"no-op incl. load     {full:8.2f} s")
        print(f"peak RSS             {rss_mib():8.1f} MiB")
        noop_target, rss_target = (2, 200) if pools_total <= 1000 else (3, 400)
        checks = [
            (f"apply rate >= 100 objects/s ({rate:.0f})", rate >= 100),
            (f"no-op resync of {pools_total} pools < {noop_target} s ({noop.seconds:.2f} s)",
             noop.seconds < noop_target),
            (f"no-op resync makes 0 writes ({noop.writes})", noop.writes == 0),
            (f"peak RSS < {rss_target} MiB ({rss_mib():.0f} MiB)", rss_mib() < rss_target),
        ]
        for label, ok in checks:
            print(f"  {'PASS' if ok else 'FAIL'}  {label}")
        if not args.keep:
            kube.delete("Namespace", None, namespace)
        return 0 if all(ok for _, ok in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
