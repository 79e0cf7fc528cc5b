"""The verbs of `flower-syncer` that talk to the running agent over its HTTP API (`resync`), and
where that agent is (`--agent`, else the agent's own listen setting) with its API token."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from syncer import printers
from syncer.agent.envnames import env_name, namespace_list
from syncer.cli_repo import EXIT_FAILED, EXIT_OK, EXIT_RUNTIME, EXIT_USAGE


def agent_url(args: argparse.Namespace) -> str:
    """--agent, else the address the agent listens on by the agent's own setting ($FLOWER_SYNCER_LISTEN)."""
    if args.agent:
        return str(args.agent)
    from syncer.agent.config import AgentConfig

    listen = os.environ.get(env_name("listen")) or str(AgentConfig.model_fields["listen"].default)
    host, _, port = listen.rpartition(":")
    if host in ("", "0.0.0.0", "::", "[::]"):
        host = "127.0.0.1"
    return f"http://{host}:{port}"


def api_token(args: argparse.Namespace) -> str | None:
    path = args.token_file or os.environ.get(env_name("api_token_file"))
    return Path(path).read_text().strip() if path else None


def cmd_resync(args: argparse.Namespace) -> int:
    from syncer.actions.resync import AgentRefused, AgentUnreachable, resync

    if len(args.unit) > 1:
        print("error: resync takes at most one --unit", file=sys.stderr)
        return EXIT_USAGE
    if args.release_hold:
        return _release_hold(args)
    try:
        result = resync(agent_url(args), api_token(args), args.unit[0] if args.unit else None,
                        wait=args.wait, timeout=args.timeout)
    except OSError as exc:
        print(f"error: cannot read the API token: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except AgentRefused as exc:
        print(f"error: {exc}", file=sys.stderr)
        if exc.status == 401:
            print(f"hint: pass the agent's API token with --token-file, or set ${env_name('api_token_file')} to "
                  "the file the agent reads (its --api-token-file)", file=sys.stderr)
        return EXIT_USAGE if exc.status in (401, 403, 404) else EXIT_RUNTIME
    except AgentUnreachable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_RUNTIME
    if args.output != "text":
        printers.emit(result.raw, args.output)
    elif not args.wait:
        print("resync requested")
    else:
        printers.print_resync(result)
    return EXIT_OK if result.done and result.ok else EXIT_FAILED


def _release_hold(args: argparse.Namespace) -> int:
    """`resync --unit UNIT --release-hold`: through the Kubernetes API, not the agent's HTTP API
    (the FlowerUnit's annotations reach whichever agent leads, and record who released it)."""
    from syncer.actions.holds import release_hold
    from syncer.cluster.client import ApiError, ClusterUnreachable, Kube
    from syncer.identity import UnknownUnit

    if len(args.unit) != 1:
        print("error: --release-hold needs the one --unit whose hold to release", file=sys.stderr)
        return EXIT_USAGE
    try:
        kube = Kube.from_kubeconfig(args.kubeconfig, args.context)
        unit, at = release_hold(kube, args.unit[0], namespace_list(args.namespaces or
                                                                   os.environ.get(env_name("namespaces"), "")))
    except UnknownUnit as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (ApiError, ClusterUnreachable) as exc:
        hint = (" (no FlowerUnit for it: is the agent running, with the chart's CRDs installed?)"
                if isinstance(exc, ApiError) and exc.not_found else "")
        print(f"error: cannot annotate the unit's FlowerUnit: {exc}{hint}", file=sys.stderr)
        return EXIT_RUNTIME
    print(f"{unit.id}: holds begun by {at} released; the agent syncs it now "
          f"(kubectl get flowerunit -n {unit.namespace} {unit.kind}.{unit.name})")
    return EXIT_OK
