#!/usr/bin/env python3
"""A real, local Kubernetes control plane for flower-syncer's tests and demo.

It runs etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok as plain
processes bound to 127.0.0.1 (no containers, no kubelet), and registers fake CPU and GPU
nodes that kwok keeps Ready. `up --real-nodes 1` adds a real worker as well (containerd,
kubelet, kube-proxy, CoreDNS; see realnode.py).  Pods are really created by controllers, bound by the
scheduler and turned Running/Ready by kwok, so readiness and GPU placement are observable.

Subcommands::

    devcluster.py build        # build the pinned binaries into ~/.cache/flower-syncer/bin/<k8s version>/
    devcluster.py up           # start the cluster (idempotent), print how long it took
    devcluster.py status       # processes, RSS, readiness, nodes
    devcluster.py env          # `eval "$(devcluster.py env)"` sets KUBECONFIG and PATH
    devcluster.py kubeconfig   # print the admin kubeconfig path
    devcluster.py down         # stop the processes this tool started; --purge also drops certs/logs

Only the Python standard library and the `openssl` command are used, so it runs before the
project's own dependencies are installed.  See tools/README.md.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

TOOLS_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(TOOLS_DIR))

import devlink  # noqa: E402
import realnode  # noqa: E402
from devbuild import binaries_ready, build, default_bin_dir  # noqa: E402
from devlifecycle import Cluster, default_state_dir  # noqa: E402
from devnodes import NodeSpec, default_nodes, node_manifest, real_node_layout  # noqa: E402
from devprocs import free_port, http_ok, is_our_process, rss_kib, tail_file, wait_for  # noqa: E402
from devutil import DevclusterError, log  # noqa: E402

# The importable API (tests and bench import from here): the seams live in devbuild.py (binaries),
# devnodes.py (fake nodes), devpki.py (certificates), devprocs.py (processes) and devlifecycle.py
# (one cluster's up/down/status); this module is the command line.
__all__ = ["Cluster", "NodeSpec", "binaries_ready", "build", "default_bin_dir", "default_nodes", "default_state_dir",
           "free_port", "http_ok", "is_our_process", "main", "node_manifest", "real_node_layout", "rss_kib",
           "tail_file", "wait_for"]

# --------------------------------------------------------------------------------------------
# command line


def print_status(info: dict[str, Any], out: IO[str]) -> None:
    w = out.write
    w(f"state dir:  {info['state_dir']}\n")
    if not info["processes"]:
        w("devcluster is not running\n")
        return
    w(f"running:    {'yes' if info['running'] else 'NO'}\n")
    if "server" in info:
        w(f"server:     {info['server']}  (readyz: {'ok' if info.get('readyz') else 'failing'})\n")
    w(f"kubeconfig: {info['kubeconfig']}\n")
    if info.get("versions"):
        w("versions:   " + ", ".join(f"{k} {v}" for k, v in info["versions"].items()) + "\n")
    if info.get("startup_seconds") is not None:
        w(f"startup:    {info['startup_seconds']}s (started {info['started_at']})\n")
    if "nodes" in info:
        w(f"nodes:      {info['nodes']['ready']}/{info['nodes']['total']} Ready\n")
    w(f"{'component':<26}{'pid':>8}  {'state':<8}{'RSS MiB':>9}\n")
    for name, proc in info["processes"].items():
        w(f"{name:<26}{proc['pid']:>8}  {'running' if proc['alive'] else 'dead':<8}{proc['rss_mib']:>9.1f}\n")
    w(f"{'total RSS':<42}{info['rss_total_mib']:>9.1f}\n")


def main(argv: Sequence[str] | None = None) -> int:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--name", default="default", help="cluster name (state dir ~/.cache/flower-syncer/devcluster/NAME)"
    )
    common.add_argument(
        "--state-dir",
        type=Path,
        help="state directory (default: $FLOWER_SYNCER_DEVCLUSTER_DIR or ~/.cache/flower-syncer/devcluster/NAME)",
    )
    common.add_argument(
        "--bin-dir",
        type=Path,
        help="binaries (default: $FLOWER_SYNCER_BIN_DIR or ~/.cache/flower-syncer/bin/<kubernetes version>)",
    )
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    sub = parser.add_subparsers(dest="command", required=True)
    p_build = sub.add_parser("build", parents=[common], help="build the pinned binaries (idempotent)")
    p_build.add_argument("--force", action="store_true", help="rebuild even if up to date")
    p_up = sub.add_parser("up", parents=[common], help="start the cluster (idempotent)")
    p_up.add_argument("--cpu-nodes", type=int, default=4)
    p_up.add_argument("--nvidia-nodes", type=int, default=2, help="nodes with nvidia.com/gpu: 4")
    p_up.add_argument("--amd-nodes", type=int, default=1, help="nodes with amd.com/gpu: 2")
    p_up.add_argument("--timeout", type=float, default=90, help="seconds to wait for readiness")
    p_up.add_argument("--build", action="store_true", help="build missing binaries first")
    p_up.add_argument("--audit", action="store_true",
                      help="write an apiserver audit log of every write (logs/audit.log in the state dir)")
    p_up.add_argument("--real-nodes", type=int, default=0, choices=(0, 1), metavar="N",
                      help="real workers: containerd, kubelet, kube-proxy, CoreDNS in network/mount namespaces "
                           "of their own (needs root; images from tools/images.py). The fake GPU nodes stay, "
                           "tainted <vendor>/gpu=present:NoSchedule; there are no fake CPU nodes")
    p_up.add_argument("--controller-qps", type=float, default=None, metavar="QPS",
                      help="the controller-manager's API rate limit (its default: 20/s); raise it for "
                           "benchmarks that wait for many pods")
    p_down = sub.add_parser("down", parents=[common], help="stop the processes started by `up`")
    p_down.add_argument("--purge", action="store_true", help="also delete certificates, kubeconfigs and logs")
    p_status = sub.add_parser("status", parents=[common], help="processes, RSS, readiness (exit 1 if not up)")
    p_status.add_argument("--json", action="store_true")
    p_load = sub.add_parser("load-image", parents=[common],
                            help="import image archives (OCI or docker-archive) into the real node's containerd")
    p_load.add_argument("archives", nargs="+", type=Path, metavar="ARCHIVE")
    p_link = sub.add_parser("link", parents=[common],
                            help="a veth link between this cluster's real node and another's (--peer NAME), "
                                 "inside their network namespaces; `down` of either removes it")
    p_link.add_argument("--peer", required=True, metavar="NAME", help="the other cluster's name")
    p_link.add_argument("--peer-state-dir", type=Path, default=None, help="the other cluster's state directory")
    sub.add_parser("unlink", parents=[common], help="remove every link of this cluster's real node")
    sub.add_parser("env", parents=[common], help="print export lines for KUBECONFIG and PATH")
    sub.add_parser("kubeconfig", parents=[common], help="print the kubeconfig path")
    args = parser.parse_args(argv)

    try:
        bin_dir = (args.bin_dir or default_bin_dir()).expanduser().resolve()
        state_dir = (args.state_dir or default_state_dir(args.name)).expanduser().resolve()
        cluster = Cluster(state_dir, bin_dir)
        if args.command == "build":
            build(bin_dir, force=args.force)
        elif args.command == "up":
            if args.build:
                build(bin_dir)
            nodes = default_nodes(args.cpu_nodes, args.nvidia_nodes, args.amd_nodes)
            if args.real_nodes:
                nodes = real_node_layout(nodes)
            cluster.up(nodes, timeout=args.timeout, audit=args.audit, controller_qps=args.controller_qps,
                       real_nodes=args.real_nodes)
        elif args.command == "down":
            cluster.down(purge=args.purge)
        elif args.command == "status":
            info = cluster.status()
            if args.json:
                print(json.dumps(info, indent=2))
            else:
                print_status(info, sys.stdout)
            return 0 if info["running"] else 1
        elif args.command == "load-image":
            state = cluster.load_state() or {}
            if not state.get("real_nodes") or not cluster.is_up():
                raise DevclusterError("no running cluster with a real node (up --real-nodes 1)")
            for record in state["real_nodes"]:
                realnode.import_images(realnode.node_from_record(record), args.archives)
            log(f"imported {', '.join(str(a) for a in args.archives)}")
        elif args.command == "link":
            peer_dir = (args.peer_state_dir or default_state_dir(args.peer)).expanduser().resolve()
            if not cluster.is_up() or not Cluster(peer_dir, bin_dir).is_up():
                raise DevclusterError("both clusters must be running (up --real-nodes 1)")
            print(json.dumps(devlink.link(state_dir, peer_dir)))
        elif args.command == "unlink":
            for record in (cluster.load_state() or {}).get("real_nodes", []):
                for problem in devlink.unlink_all(state_dir, record["netns"]):
                    log(f"warning: could not remove {problem}")
        elif args.command == "env":
            print(f"export KUBECONFIG={cluster.kubeconfig}")
            print(f"export PATH={bin_dir}:$PATH")
        elif args.command == "kubeconfig":
            print(cluster.kubeconfig)
    except DevclusterError as err:
        print(f"devcluster {args.command}: error: {err}", file=sys.stderr)
        return 1
    except subprocess.CalledProcessError as err:
        print(f"devcluster {args.command}: error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
