#!/usr/bin/env python3
"""The newcomer's first run (run through `tools/demo`, which puts the project's virtualenv first):
build and start the local control plane, make a local Git config repo from config/examples, run
the flower-syncer agent against it, and show `flower-syncer status`.

  tools/demo [--name NAME] [--port PORT]     set up and start (first run: ~12 min to build
                                             Kubernetes, then ~20 s)
  tools/demo --real                          the same on a real node (containers; root): the pods
                                             run real Flower, then `flwr run` trains the example
                                             federation for 2 rounds (first run: ~3-9 min more to
                                             build the images, then ~1.5 min)
  tools/demo --real --in-cluster             the agent runs in the cluster from the Helm chart
                                             (image built by tools/images.py agent) and pulls from
                                             a Git server on the node that the pods reach
  tools/demo --with cert-manager             also the real cert-manager controller, and a Federation
                                             whose SuperLink certificate a cert-manager Issuer issues
  tools/demo --with prometheus               also Prometheus (Debian's package), scraping the agent
                                             with the project's alert rules (dashboards/alerts.yaml)
  tools/demo --real --in-cluster --with node-auth
                                             also a Federation with SuperNode authentication: the
                                             agent registers its pool's key with the SuperLink
                                             (needs cert-manager, which it adds)
  tools/demo --decryption-key FILE           the agent decrypts the repo's SOPS files with this age
                                             identity (make one: flower-syncer keygen -o FILE)
  tools/demo --sites [--name NAME] [down [--purge]]
                                             two clusters, each with a real node, linked: the
                                             hub's SuperLink and a site's SuperNodes from one
                                             repository (clusters/hub, clusters/site-a), one agent
                                             per cluster, then `flwr run` over both
                                             (tools/demo_sites.py; root; ~2 min with images cached)
  tools/demo [--name NAME] env               the exports that put flower-syncer, kubectl and sops
                                             on this demo: eval "$(tools/demo env)"
  tools/demo [--name NAME] logs              follow the agent's log
  tools/demo [--name NAME] down [--purge]    stop everything the demo started; --purge also
                                             deletes what it made (cluster state, a real node's
                                             images, the config repo, logs, Prometheus data)

--name (default demo) keeps several demos apart: each has its own cluster, directory and ports.
The agent's port is derived from the name (demo: 9190, not Prometheus's 9090; others 9200-9990)
and recorded on the first run; --port wins. Everything listens on 127.0.0.1 only (with --real
the API server listens on the host end of the real node's veth, 10.201.<n>.1).
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import socket
import subprocess
import sys
import time
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import demoextras
import demoparts
from demoparts import Demo, step

REPO = Path(__file__).resolve().parents[1]
WITH = ("cert-manager", "node-auth", "prometheus")


def cache_root() -> Path:
    return Path(os.environ.get("FLOWER_SYNCER_CACHE", Path.home() / ".cache" / "flower-syncer"))


def demo_dir(name: str) -> Path:
    given = os.environ.get("FLOWER_SYNCER_DEMO_DIR")
    return Path(given) if given else cache_root() / ("demo" if name == "demo" else f"demo-{name}")


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def derived_port(name: str, own: Path) -> int:
    """The port recorded for this demo, else one derived from its name: 9190 for `demo`, else
    9200 + 10 * (crc32(name) mod 80); stepped by 10 past any port another demo recorded or that is
    in use. Each demo uses PORT (the agent), PORT+1 (Prometheus) and PORT+2 (cert-manager's
    metrics), so two demos never collide."""
    recorded = own / "port"
    if recorded.exists():
        return int(recorded.read_text().strip())
    taken = set()
    for other in cache_root().glob("demo*/port"):
        if other.parent != own:
            try:
                taken.add(int(other.read_text().strip()) // 10 * 10)
            except ValueError:
                continue
    port = 9190 if name == "demo" else 9200 + 10 * (zlib.crc32(name.encode()) % 80)
    for _ in range(100):
        if port // 10 * 10 not in taken and all(_free(port + i) for i in range(3)):
            return port
        port = 9200 + (port - 9200 + 10) % 800
    raise SystemExit("error: no free port for the demo; give one with --port")


def parse(argv: list[str]) -> argparse.Namespace:
    doc = (__doc__ or "").split("\n\n", 1)
    p = argparse.ArgumentParser(prog="tools/demo", description=doc[0], epilog=doc[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                usage="tools/demo [options] [up|env|logs|down [--purge]]")
    p.add_argument("command", nargs="?", default="up", choices=["up", "env", "logs", "down"])
    p.add_argument("--name", default="demo", help="this demo's name (default demo)")
    p.add_argument("--port", type=int, default=int(os.environ.get("FLOWER_SYNCER_DEMO_PORT", "0")) or None,
                   help="the agent's port (default: derived from the name, recorded on the first run)")
    p.add_argument("--real", action="store_true", help="a real node (containers; root)")
    p.add_argument("--in-cluster", action="store_true", help="the agent runs in the cluster from the chart (--real)")
    p.add_argument("--with", dest="parts", action="append", default=[], metavar="PART",
                   help="also run PART: cert-manager, prometheus, node-auth (repeatable, or comma-separated)")
    p.add_argument("--decryption-key", type=Path, default=None, metavar="FILE",
                   help="an age identity file: the agent decrypts the repo's SOPS files with it")
    p.add_argument("--purge", action="store_true", help="with down: also delete everything the demo made")
    p.add_argument("--train-timeout", type=float, default=1200, metavar="SECONDS",
                   help="with --real: stop `flwr run` after this long, saying so (default 1200)")
    args = p.parse_args(argv)
    if not re.fullmatch(r"[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?", args.name):
        p.error("--name must be lowercase letters, digits and '-' (at most 32)")
    args.parts = sorted({part.strip() for given in args.parts for part in given.split(",") if part.strip()})
    unknown = [part for part in args.parts if part not in WITH]
    if unknown:
        p.error(f"--with {', '.join(unknown)}: not one of {', '.join(WITH)}")
    if args.in_cluster and not args.real:
        p.error("--in-cluster needs --real: the agent's pod runs on the real node")
    if "node-auth" in args.parts:
        if not args.in_cluster:
            p.error("--with node-auth needs --real --in-cluster: the agent reaches the SuperLink's Control API by "
                    "its Service name, which resolves only in the cluster")
        args.parts = sorted({*args.parts, "cert-manager"})  # the SuperLink's TLS certificate
    if args.purge and args.command != "down":
        p.error("--purge goes with down")
    if args.decryption_key is not None:
        args.decryption_key = args.decryption_key.resolve()
        if not args.decryption_key.is_file():
            p.error(f"--decryption-key {args.decryption_key}: no such file (make one: flower-syncer keygen -o FILE)")
    return args


def main(argv: list[str]) -> int:
    if "--sites" in argv:  # two linked clusters: a demo of its own (tools/demo_sites.py)
        import demo_sites

        return demo_sites.main([a for a in argv if a != "--sites"])
    args = parse(argv)
    demo = Demo(args.name, demo_dir(args.name), REPO)
    if args.command == "env":
        return env(demo)
    if args.command == "logs":
        if not (demo.dir / "agent.log").exists() and not (demo.dir / "in-cluster").exists():
            print(f"error: there is no demo named {args.name} (nothing in {demo.dir}); start it with "
                  f"`{demo.cmd()}`", file=sys.stderr)
            return 1
        return demoparts.follow_logs(demo)
    if args.command == "down":
        return demoextras.down(demo, purge=args.purge)
    try:
        return up(demo, args)
    except KeyboardInterrupt:  # Ctrl-C: no traceback; what runs keeps running until `down`
        print(f"\ninterrupted; what was started keeps running: `{demo.cmd()} down` stops it", file=sys.stderr)
        return 130


def env(demo: Demo) -> int:
    """No set-up, no output but the exports (the demo need not run)."""
    listed = subprocess.run(demo.devcluster_args("env"), capture_output=True, text=True, check=False)
    sys.stdout.write(listed.stdout)
    print(f"export PATH={shlex.quote(str(REPO / '.venv' / 'bin'))}:\"$PATH\"")
    port = (demo.dir / "port").read_text().strip() if (demo.dir / "port").exists() else str(derived_port(
        demo.name, demo.dir))
    print(f"export FLOWER_SYNCER_LISTEN=127.0.0.1:{port} "
          f"FLOWER_SYNCER_API_TOKEN_FILE={shlex.quote(str(demo.dir / 'api-token'))}")
    key = demo.decryption_key()
    if key is not None:  # the CLI (diff, sync, status DIR) and the sops CLI decrypt with the agent's key
        print(f"export FLOWER_SYNCER_DECRYPTION_KEY_FILES={shlex.quote(str(key))} "
              f"SOPS_AGE_KEY_FILE={shlex.quote(str(key))}")
    sops = demoextras.sops_binary()
    if sops is not None:
        print(f"export PATH={shlex.quote(str(sops.parent))}:\"$PATH\"  # sops")
    return 0


def up(demo: Demo, args: argparse.Namespace) -> int:
    demo.dir.mkdir(parents=True, exist_ok=True)
    port = args.port or derived_port(demo.name, demo.dir)
    (demo.dir / "port").write_text(f"{port}\n")
    if args.decryption_key is not None:
        (demo.dir / "decryption-key").write_text(f"{args.decryption_key}\n")
    timings: list[tuple[str, float]] = []
    start = time.monotonic()

    def timed(what: str, since: float) -> None:
        timings.append((what, time.monotonic() - since))

    t = time.monotonic()
    step("building the local control plane (cached after the first run; cold: ~12 min on 2 cores)")
    demo.devcluster("build")
    if args.real:
        step("starting the local control plane with a real node (first run: ~3 min to build the images)")
        demo.devcluster("up", "--real-nodes", "1", "--timeout", "300")
    else:
        step("starting the local control plane")
        demo.devcluster("up")
    timed("control plane", t)
    if not args.in_cluster:  # the chart installs it: `kubectl get flowerunits`, reconcile by annotation
        demo.kubectl("apply", "-f", str(REPO / "charts" / "flower-syncer" / "crds"))
    demoparts.config_repo(demo, with_cert_manager="cert-manager" in args.parts)
    if "node-auth" in args.parts:
        demoextras.node_auth_federation(demo)
    demoparts.edge_tls_secret(demo)
    if "cert-manager" in args.parts:
        t = time.monotonic()
        demoextras.start_cert_manager(demo, port + 2)
        timed("--with cert-manager", t)
    t = time.monotonic()
    if args.in_cluster:
        demoextras.start_in_cluster(demo, args.decryption_key, (demoextras.HUB_KEY_SECRET,)
                                    if "node-auth" in args.parts else ())
        timed("--in-cluster (image, Git server, helm install)", t)
    else:
        demoparts.start_agent(demo, port, args.decryption_key)
        timed("agent", t)
    if "prometheus" in args.parts:
        t = time.monotonic()
        demoextras.start_prometheus(demo, port, port + 1)
        timed("--with prometheus", t)
    demoparts.wait_ready(demo, 600 if args.real else 90)  # real containers start slowly on a busy machine
    if "cert-manager" in args.parts:
        t = time.monotonic()
        demoextras.wait_certificate(demo)
        timed("certificate issued", t)
    step("flower-syncer status")
    demo.run(["flower-syncer", "status"], check=False)
    if "node-auth" in args.parts:
        demoextras.show_node_auth(demo)
    if args.real:
        t = time.monotonic()
        demoextras.train(demo, args.train_timeout)
        timed("training", t)
    print(f"\ndemo ready in {time.monotonic() - start:.0f}s ("
          + ", ".join(f"{what} {secs:.0f}s" for what, secs in timings) + "); it keeps running. Try:")
    hints(demo, args)
    return 0


def hints(demo: Demo, args: argparse.Namespace) -> None:
    config = demo.dir / "config"
    env_cmd = demo.cmd("env")
    port = (demo.dir / "port").read_text().strip() if (demo.dir / "port").exists() else ""
    if port:
        print(f"  web view: http://127.0.0.1:{port}/ui/   (read-only; resync and suspend take the token in "
              f"{demo.dir / 'api-token'})")
    print(f"  eval \"$({env_cmd})\"    # flower-syncer, kubectl and sops on PATH, against this demo")
    print("  flower-syncer status; kubectl get flowerunits -A; flower-syncer history federation-statefulset; "
          "kubectl events -n flower")
    applied = "pushed to the node's Git server, applied within 5 s" if args.in_cluster else "applied in < 1 s"
    print(f"  cd {config} && $EDITOR federations/statefulset.yaml && git commit -am change   # {applied}")
    print("  kubectl -n flower scale statefulset federation-statefulset-supernode-default --replicas=9   # healed")
    print("  kubectl -n flower annotate flowerunit federation.federation-statefulset "
          "flower-syncer.io/requestedAt=\"$(date +%s)\" --overwrite   # a sync now")
    if not args.in_cluster:
        print("  curl -s \"http://$FLOWER_SYNCER_LISTEN/metrics\" | grep ^flower_syncer_pool_ready")
    if (demo.dir / "prometheus-url").exists():
        print(f"  Prometheus: {(demo.dir / 'prometheus-url').read_text().strip()}   (alerts: /alerts, rules: /rules)")
    if "cert-manager" in args.parts:
        print("  kubectl -n flower get certificates,issuers   # the SuperLink certificate cert-manager issued")
    if args.decryption_key is None:
        print(f"  flower-syncer keygen -o {demo.dir}/age.key && {demo.cmd()} --decryption-key {demo.dir}/age.key"
              "   # SOPS: the agent restarts with the key")
    print(f"  {demo.cmd('logs')}      {demo.cmd('down')}      {demo.cmd('down')} --purge")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
