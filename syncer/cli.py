"""The `flower-syncer` command line: argument parsing and output formatting only.

Exit codes (stable, for CI pipelines):
    0  success (valid / no drift / synced and healthy)
    1  the config is invalid, drift was found, or the sync did not reach its goal
    2  usage error (bad arguments, missing directory)
    3  could not reach the cluster or another runtime failure
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import re
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

# Only what parsing the arguments and every verb need: each verb imports the rest itself, so that
# `validate` and `render` (pre-commit hooks, CI steps) load no cluster client, agent, HTTP server
# or metrics (tests/unit/test_cli_imports.py).
from syncer import __version__, printers
from syncer.agent.envnames import env_name, namespace_list
from syncer.cli_agent import agent_url, api_token, cmd_resync
from syncer.cli_env import env_defaults
from syncer.cli_local import cmd_completion, cmd_keygen
from syncer.cli_parser import VerbParser
from syncer.cli_repo import EXIT_FAILED, EXIT_OK, EXIT_RUNTIME, EXIT_USAGE, cmd_render, cmd_validate, load_selected
from syncer.identity import UnknownUnit

if TYPE_CHECKING:
    from syncer.actions.load import Loaded
    from syncer.cluster.client import Kube
    from syncer.observe.status import StatusReport



def _add_repo_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("dir", metavar="DIR", nargs="?", default=".", type=Path,
                   help="config repository (a folder with federations/ and/or supernodes/); default: .")
    p.add_argument("--policy", metavar="FILE", type=Path, default=None,
                   help="the cluster admins' policy file, as the agent reads it: check the repository within it "
                        f"(default: ${env_name('policy')})")
    _add_cluster_name_arg(p)
    _add_decryption_arg(p)


def _add_cluster_name_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cluster", default=None, metavar="NAME",
                   help="in a repository that lays out several clusters (clusters/<name>/): the cluster whose "
                        "units to load, as its agent does; the other clusters' units are only checked against "
                        f"(default: ${env_name('cluster')}; validate and render: every cluster)")


def _add_decryption_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--decryption-key-file", action="append", default=[], metavar="FILE", type=Path,
                   help="age identities (AGE-SECRET-KEY-1...) for SOPS-encrypted files; repeatable, e.g. the old "
                        f"and the new key while rotating (default: ${env_name('decryption_key_files')}, "
                        "comma-separated)")


def _add_unit_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--unit", action="append", default=[], metavar="NAME",
                   help="only this unit: NAME, KIND/NAME or KIND/NAMESPACE/NAME (KIND is federation or "
                        "supernode); repeatable")
    p.add_argument("-n", "--namespace", default=None, metavar="NS", help="only the units in namespace NS")
    p.add_argument("-A", "--all-namespaces", action="store_true",
                   help="units in every namespace (the default; overrides -n)")


def _add_run_options(p: argparse.ArgumentParser) -> None:
    """`run`'s options: --config, then one per setting of the agent (AgentConfig), each also read
    from its environment variable."""
    from syncer.agent.config import AgentConfig

    p.add_argument("--config", default=None, help=f"YAML file with settings (${env_name('config')})")
    for name, info in AgentConfig.model_fields.items():
        flag = "--" + name.replace("_", "-")
        help_text = f"{info.description} (${env_name(name)})"
        if info.annotation is bool:
            p.add_argument(flag, dest=name, default=None, action=argparse.BooleanOptionalAction, help=help_text)
        else:
            p.add_argument(flag, dest=name, default=None, help=help_text,
                           metavar=name.upper().replace("_FILE", "").replace("_", "-"))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="flower-syncer",
        description="GitOps for Flower federated learning on Kubernetes: render, validate, diff and sync "
                    "Federation documents and SuperNode Helm values from a Git repository.",
        epilog="Exit codes: 0 ok, 1 invalid config / drift / sync failed, 2 usage error, 3 cluster or runtime "
               "error. Every option can also be set as FLOWER_SYNCER_<OPTION> (e.g. FLOWER_SYNCER_OUTPUT=json, "
               "FLOWER_SYNCER_UNIT=a,b); the command line wins. Run 'flower-syncer COMMAND --help' for details.",
    )
    parser.add_argument("--version", action="version", version=f"flower-syncer {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=VerbParser)

    p = sub.add_parser("validate", help="check a config repository and report every problem",
                       description="Check every file of a config repository: YAML syntax, schemas, the "
                                   "flower-operator's rules, names, node config, keys. Reports all problems "
                                   "with file, line and field. Needs no cluster.")
    _add_repo_arg(p)
    p.add_argument("-o", "--output", choices=["text", "json", "yaml"], default="text", help="output format")
    p.add_argument("--strict", action="store_true", help="treat warnings as errors")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("render", help="print the Kubernetes objects a config repository stands for",
                       description="Render every unit (federation or SuperNode release) into Kubernetes "
                                   "objects, in apply order. Output is byte-identical from run to run. Needs "
                                   "no cluster. Secret values are redacted unless --show-secrets is given.")
    _add_repo_arg(p)
    _add_unit_arg(p)
    p.add_argument("-o", "--output", choices=["yaml", "json"], default="yaml", help="output format")
    p.add_argument("--show-secrets", action="store_true", help="print Secret data instead of redacting it")
    p.set_defaults(func=cmd_render)

    p = sub.add_parser("diff", help="show how the cluster differs from the config repository",
                       description="Compare every object the repository renders with the live cluster, using "
                                   "a server-side apply dry-run (no noise from defaulted fields), and print a "
                                   "unified diff per changed object. Secret values are masked. Exit codes: "
                                   "0 no drift, 1 drift or an invalid config, 2 usage error, 3 cluster "
                                   "unreachable or another runtime error.")
    _add_repo_arg(p)
    _add_unit_arg(p)
    _add_cluster_args(p)
    _add_ref_arg(p)
    p.add_argument("-o", "--output", choices=["text", "json", "yaml"], default="text", help="output format")
    p.set_defaults(func=cmd_diff)

    p = sub.add_parser("sync", help="apply a config repository to the cluster once",
                       description="Load, render, apply (server-side apply, field manager flower-syncer), "
                                   "prune what left Git, record each unit's inventory, and optionally wait "
                                   "until every pool is ready. Applying an unchanged repository makes no "
                                   "writes.")
    _add_repo_arg(p)
    _add_unit_arg(p)
    _add_cluster_args(p)
    _add_ref_arg(p)
    p.add_argument("--dry-run", action="store_true", help="server-side dry-run: report what would change")
    p.add_argument("--force-conflicts", action="store_true",
                   help="take ownership of fields another applier owns (default: report a conflict)")
    p.add_argument("--no-prune", dest="prune", action="store_false", help="do not delete objects that left Git")
    p.add_argument("--allow-empty", action="store_true",
                   help="allow pruning a unit, or the whole repository, down to nothing")
    p.add_argument("--revision", default=None, help="revision to record (default: the Git HEAD of DIR)")
    p.add_argument("--wait", action="store_true", help="wait until every synced pool is ready")
    p.add_argument("--timeout", type=_duration, default=300.0, metavar="DURATION",
                   help="how long --wait waits, e.g. 90s, 5m (default 5m)")
    p.add_argument("-v", "--verbose", action="store_true", help="list every changed object (default: 20 per unit)")
    p.add_argument("-o", "--output", choices=["text", "json", "yaml"], default="text", help="output format")
    p.set_defaults(func=cmd_sync)

    p = sub.add_parser("status", help="show readiness, pod problems and GPUs of the synced units",
                       description="Show each unit's pools: ready/desired pods, GPUs allocated/requested, the "
                                   "main pod problem (image pull, crash loop, OOM kill, unschedulable), the last "
                                   "applied revision and, when DIR is given, how many objects differ from it "
                                   "(a server-side dry-run, no writes); then the GPUs of every node. Without DIR "
                                   "the units are those flower-syncer has synced into the cluster. Exit codes: "
                                   "0 every unit ready and no drift, 1 not ready or drifted, 3 cluster "
                                   "unreachable.")
    p.add_argument("dir", metavar="DIR", nargs="?", default=None, type=Path,
                   help="config repository to compare with (default: report the units found in the cluster)")
    _add_cluster_name_arg(p)
    _add_decryption_arg(p)
    _add_unit_arg(p)
    _add_cluster_args(p)
    _add_ref_arg(p)
    p.add_argument("-o", "--output", choices=["table", "json", "yaml"], default="table", help="output format")
    p.add_argument("--no-headers", action="store_true", help="print the table without its header line")
    p.add_argument("-w", "--watch", action="store_true", help="redraw every --interval until Ctrl-C")
    p.add_argument("--interval", type=_duration, default=2.0, metavar="SECONDS",
                   help="seconds between redraws with --watch (default 2)")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("run", add_arguments=_add_run_options,
                       help="run the agent: watch a Git repository and keep the cluster in sync",
                       description="Run the long-running agent. A commit to a local repository or a push to a "
                                   "local bare repository reaches the cluster at once; remotes are polled (and "
                                   "a webhook triggers a fetch). Outside changes to managed objects are seen "
                                   "through watches and corrected. Every option can also be set with an "
                                   "environment variable (shown) or in a YAML file given with --config.")
    p.set_defaults(func=cmd_run)  # its options come from the agent's settings, when `run` is parsed or shown

    p = sub.add_parser("resync", help="ask the running agent to fetch and sync now",
                       description="Ask a running agent to fetch the repository and sync (one unit or all), "
                                   "like 'flux reconcile --with-source'. With --wait, print the outcome.")
    p.add_argument("--unit", action="append", default=[], metavar="NAME",
                   help="only this one unit: NAME, KIND/NAME or KIND/NAMESPACE/NAME (default: all)")
    p.add_argument("--agent", default=None, metavar="URL",
                   help=f"agent URL (default: http:// + the agent's listen address, ${env_name('listen')}, "
                        "else http://127.0.0.1:9090)")
    p.add_argument("--token-file", type=Path, default=None,
                   help=f"file with the API bearer token (default: ${env_name('api_token_file')}, the agent's "
                        "own setting)")
    p.add_argument("--wait", action="store_true", help="wait for the sync to finish and print the outcome")
    p.add_argument("--timeout", type=_duration, default=120.0, metavar="DURATION", help="how long --wait waits")
    p.add_argument("-o", "--output", choices=["text", "json", "yaml"], default="text", help="output format")
    p.add_argument("--release-hold", action="store_true", help="let the unit's restarts held for Flower runs go "
                   "ahead now: annotates its FlowerUnit with your cluster credentials (docs/rollouts.md)")
    _add_cluster_args(p)
    p.set_defaults(func=cmd_resync)

    for verb, doc in (("suspend", "stop applying and healing a unit (its objects stay as they are)"),
                      ("resume", "apply and heal a suspended unit again")):
        p = sub.add_parser(verb, help=doc, description=doc.capitalize() + ". Recorded on the unit's inventory in "
                                                                         "the cluster, so it survives restarts.")
        p.add_argument("unit", metavar="UNIT", help="NAME, KIND/NAME or KIND/NAMESPACE/NAME")
        _add_cluster_args(p)
        p.set_defaults(func=cmd_suspend, suspend=verb == "suspend")
    p = sub.add_parser("history", help="show the last revisions applied to a unit",
                       description="The last revisions applied to a unit (newest first): when, by which agent "
                                   "(or the CLI), and how many objects each created, configured or deleted. "
                                   "Kept on the unit's inventory, at most 10. To roll back, `git revert` the "
                                   "commit: Git stays the one source of truth.")
    p.add_argument("unit", metavar="UNIT", help="NAME, KIND/NAME or KIND/NAMESPACE/NAME")
    _add_cluster_args(p)
    p.add_argument("-o", "--output", choices=["table", "json", "yaml"], default="table", help="output format")
    p.add_argument("--no-headers", action="store_true", help="print the table without its header line")
    p.set_defaults(func=cmd_history)

    p = sub.add_parser("keygen", help="make an age key pair for SOPS (what age-keygen makes)",
                       description="Make a new age identity (AGE-SECRET-KEY-1...) and print its public key "
                                   "(age1...), as age-keygen does: give the public key to sops as a recipient "
                                   "(.sops.yaml's creation rules) and the identity file to flower-syncer "
                                   "(--decryption-key-file, the chart's decryption.existingSecret) and to sops "
                                   "(SOPS_AGE_KEY_FILE). Needs no cluster.")
    p.add_argument("-o", "--output-file", dest="key_out", metavar="FILE", type=Path, default=None,
                   help="write the identity to FILE (mode 0600; an existing FILE is never overwritten) and print "
                        "the public key; default: print the identity file to stdout")
    p.set_defaults(func=cmd_keygen)

    p = sub.add_parser("completion", help="print a shell completion script (bash, zsh or fish)",
                       description="Print the completion script for a shell. Load it with, e.g., "
                                   "`source <(flower-syncer completion bash)` or put it into your shell's "
                                   "completion folder.")
    p.add_argument("shell", choices=["bash", "zsh", "fish"], help="the shell to print the completion script for")
    p.set_defaults(func=cmd_completion)

    p = sub.add_parser("version", help="print the versions of flower-syncer, the cluster and the agent",
                       description="Print flower-syncer's version and, when they can be reached, the "
                                   "Kubernetes API server's and the running agent's (found like 'resync' "
                                   "finds it). With --client only flower-syncer's own. Exit code 0 when "
                                   "every part asked for answered, 3 otherwise.")
    p.add_argument("--client", action="store_true", help="only flower-syncer's own version (no connections)")
    _add_cluster_args(p)
    p.add_argument("--agent", default=None, metavar="URL", help="agent URL (default: as for 'resync')")
    p.add_argument("--token-file", type=Path, default=None, help="API token file, if the agent protects reads")
    p.add_argument("-o", "--output", choices=["text", "json", "yaml"], default="text", help="output format")
    p.set_defaults(func=cmd_version)
    return parser


def _add_cluster_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kubeconfig", default=None, help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, "
                                                     "or in-cluster credentials)")
    p.add_argument("--context", default=None, help="kubeconfig context to use")
    p.add_argument("--namespaces", default=None, metavar="NS[,NS...]",
                   help="only read these namespaces, for credentials limited to them (the chart's namespaced "
                        "RBAC); default $FLOWER_SYNCER_NAMESPACES, else cluster-wide")


def _add_ref_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ref", default=None, metavar="REF",
                   help="the branch, tag or commit DIR is synced as, part of the repository's identity as an "
                        "agent's --ref is (HEAD: the remote's default branch, as an agent without --ref); "
                        "required for a clone on a branch other than its origin's default "
                        f"(default: ${env_name('ref')}; see docs/source-identity.md)")


def _namespaces(args: argparse.Namespace) -> list[str] | None:
    return namespace_list(getattr(args, "namespaces", None) or os.environ.get(env_name("namespaces"), ""))


_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ms|h|m|s)")


def _duration(text: str) -> float:
    """Seconds from a Go-style duration (`90s`, `5m`, `1m30s`, `1h`, `250ms`) or a bare number of seconds."""
    units = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    value = text.strip()
    try:
        return float(value)
    except ValueError:
        pass
    parts = _DURATION_PART.findall(value)
    if not parts or "".join(n + u for n, u in parts) != value:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration (e.g. 30s, 5m, 1m30s)")
    return sum(float(n) * units[u] for n, u in parts)




# How long a thread may hold the interpreter while another waits for it (CPython's default is
# 5 ms). The agent's commit path and the applies of `sync` wait on git processes and HTTP answers
# and take the interpreter back after each: while another thread computes (a watch stream, a
# status round, a plan), every return waited up to the whole interval, so a fetch or a sync, made
# of many such waits, paid it many times over. A shorter interval costs threads that all compute a
# little CPU in extra switches, far less than it saves (docs/performance.md, "Figures behind the
# code").
SWITCH_INTERVAL = 0.001


def main(argv: Sequence[str] | None = None) -> int:
    sys.setswitchinterval(SWITCH_INTERVAL)
    # a load makes many container objects per manifest and keeps them: with the default threshold the
    # young collections walked them again and again, a large part of a big repository's load
    gc.set_threshold(50_000, 20, 100)
    parser = build_parser()
    if "_ARGCOMPLETE" in os.environ:  # the shell asks for completions (argcomplete's protocol)
        import argcomplete

        argcomplete.autocomplete(parser)
    problem = env_defaults(parser, os.environ)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return EXIT_USAGE
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return EXIT_OK
    except Exception as exc:  # a bug: one line, and the traceback on request
        if os.environ.get("FLOWER_SYNCER_DEBUG"):
            raise
        print(f"error: internal error: {type(exc).__name__}: {exc} (set FLOWER_SYNCER_DEBUG=1 for the traceback, "
              "and please report it)", file=sys.stderr)
        return EXIT_RUNTIME


# ---------------------------------------------------------------------------------------------
# Commands that talk to a cluster


def _connect(args: argparse.Namespace) -> Kube:
    from syncer.cluster.client import Kube

    return Kube.from_kubeconfig(args.kubeconfig, args.context)


def _cluster_error(exc: Exception) -> int:
    from syncer.cluster.client import ApiError

    if isinstance(exc, ApiError):
        print(f"\nerror: the API server refused a request: {exc}", file=sys.stderr)
        if exc.forbidden:
            print("hint: if your credentials only reach some namespaces, pass --namespaces NS[,NS...] "
                  "(or set FLOWER_SYNCER_NAMESPACES)", file=sys.stderr)
    else:
        print(f"\nerror: {exc}", file=sys.stderr)
    return EXIT_RUNTIME






def cmd_diff(args: argparse.Namespace) -> int:
    from syncer.actions import sync as sync_action
    from syncer.actions.disruption import runs_at_stake, with_runs
    from syncer.cluster.client import ApiError, ClusterUnreachable

    loaded = load_selected(args)
    if isinstance(loaded, int):
        return loaded
    printers.print_diagnostics(loaded.errors, sys.stderr)
    try:
        kube = _connect(args)
        report = sync_action.diff(kube, loaded, _namespaces(args))
        runs = runs_at_stake(kube, report, loaded.plan())
    except (ClusterUnreachable, ApiError) as exc:
        return _cluster_error(exc)
    if args.output != "text":
        printers.emit({"drift": report.changed, **with_runs(report.to_dict(), runs)}, args.output,
                      loaded.state.secrets)
    else:
        printers.print_diff(report, loaded.state.secrets, runs)
    return EXIT_FAILED if loaded.errors or not report.ok or report.changed else EXIT_OK


def cmd_sync(args: argparse.Namespace) -> int:
    from syncer.actions import sync as sync_action
    from syncer.actions.disruption import runs_at_stake, with_runs
    from syncer.cluster.client import ApiError, ClusterUnreachable
    from syncer.engine.sync import SyncOptions
    from syncer.source.git import head_revision

    loaded = load_selected(args)
    if isinstance(loaded, int):
        return loaded
    diags = loaded.diagnostics
    printers.print_diagnostics(diags, sys.stderr)
    revision = args.revision if args.revision is not None else head_revision(args.dir)
    opts = SyncOptions(dry_run=args.dry_run, force_conflicts=args.force_conflicts, prune=args.prune,
                       allow_empty=args.allow_empty, namespaces=_namespaces(args))
    progress = printers.progress(args.output == "text")
    try:
        kube = _connect(args)
        report = sync_action.sync(kube, loaded, opts, revision=revision, progress=progress)
        runs = runs_at_stake(kube, report, loaded.plan(revision)) if args.dry_run else {}
        progress("")
        waited = None
        if args.wait and not args.dry_run:
            waited = sync_action.wait(kube, loaded, args.timeout, printers.progress(args.output == "text"))
    except (ClusterUnreachable, ApiError) as exc:
        return _cluster_error(exc)
    progress("")
    if args.output != "text":
        payload = with_runs(report.to_dict(), runs)
        payload["diagnostics"] = [d.to_dict() for d in diags]
        if waited is not None:
            payload["healthy"] = waited.healthy
            payload["status"] = [s.to_dict() for s in waited.statuses]
        printers.emit(payload, args.output, loaded.state.secrets)
    else:
        printers.print_report(report, verbose=args.verbose, runs=runs)
        if waited is not None and not waited.healthy:
            printers.print_not_ready(waited)
    healthy = waited is None or waited.healthy
    return EXIT_FAILED if not report.ok or loaded.errors or not healthy else EXIT_OK




def cmd_status(args: argparse.Namespace) -> int:
    from syncer.actions import status as status_action
    from syncer.cluster.client import ApiError, ClusterUnreachable

    loaded: Loaded | None = None
    if args.dir is not None:
        result = load_selected(args)
        if isinstance(result, int):
            return result
        loaded = result
        printers.print_diagnostics(loaded.errors, sys.stderr)
    tty = sys.stdout.isatty()
    code = EXIT_OK
    first = True
    kube: Kube | None = None
    try:
        while True:
            error = ""
            report: StatusReport | None = None
            try:
                kube = kube or _connect(args)
                only = [args.namespace] if args.namespace and not args.all_namespaces else _namespaces(args)
                result_ = (status_action.cluster_status(kube, args.unit, only) if loaded is None
                           else status_action.repo_status(kube, loaded.plan(), loaded.errors))
                report = result_.report
                code = EXIT_OK if result_.clean else EXIT_FAILED
                if loaded is None and args.unit and not report.units:
                    if first:
                        print(f"error: no unit in the cluster matches {', '.join(args.unit)}", file=sys.stderr)
                    code = EXIT_FAILED
            except (ClusterUnreachable, ApiError) as exc:
                if not args.watch:
                    return _cluster_error(exc)
                code, error = EXIT_RUNTIME, f"error: {exc}\n"
            if args.output != "table":
                payload: dict[str, Any] = report.to_dict() if report is not None else {"error": error.strip()}
                if args.watch and args.output == "json":  # one object per line, for `jq` on a stream
                    sys.stdout.write(json.dumps(payload, sort_keys=True) + "\n")
                else:
                    printers.emit(payload, args.output)
                    if args.watch:
                        sys.stdout.write("---\n")
            else:
                text = printers.format_status(report, headers=not args.no_headers) if report is not None else error
                if args.no_headers and report is not None:  # rows only on stdout; the units' errors beside
                    for u in report.units:
                        for e in u.errors:
                            print(f"error: {printers.escape(u.unit)}: {printers.escape(e)}", file=sys.stderr)
                if args.watch:
                    header = f"every {args.interval:g}s: flower-syncer status    {time.strftime('%H:%M:%S')}\n\n"
                    text = ("\033[H\033[2J" if tty else "\n") + header + text
                sys.stdout.write(text)
            sys.stdout.flush()
            if not args.watch:
                return code
            first = False
            time.sleep(max(args.interval, 0.1))
    except KeyboardInterrupt:
        return code


# ---------------------------------------------------------------------------------------------
# The agent


def cmd_run(args: argparse.Namespace) -> int:
    # The agent's log is the same whatever else shares its environment: structlog formats the
    # console and tracebacks with rich whenever it can import it (flwr brings rich into a venv;
    # the agent's image has none), which also loaded dozens of modules the agent never uses.
    # Before structlog is first imported; a process that imported rich already keeps it.
    sys.modules.setdefault("rich", None)  # type: ignore[arg-type]
    from syncer.agent.config import load_config
    from syncer.agent.runner import run

    cli = {k: v for k, v in vars(args).items() if k not in ("func", "command")}
    try:
        config = load_config(cli)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return run(config)


def cmd_version(args: argparse.Namespace) -> int:
    from syncer.actions.version import versions
    from syncer.cluster.client import ApiError, ClusterUnreachable

    if args.client:
        result = versions(None, None, None)
    else:
        kube: Kube | None = None
        errors: dict[str, str] = {}
        try:
            kube = _connect(args)
        except (ClusterUnreachable, ApiError) as exc:
            errors["cluster"] = str(exc)
        try:
            token = api_token(args)
        except OSError:
            token = None
        result = versions(kube, agent_url(args), token)
        result.errors.update(errors)
    if args.output != "text":
        printers.emit(result.to_dict(), args.output)
    else:
        print(f"flower-syncer: {result.client}")
        if not args.client:
            print(f"cluster:       {result.cluster or 'unknown (' + result.errors.get('cluster', '') + ')'}")
            print(f"agent:         {result.agent or 'unknown (' + result.errors.get('agent', '') + ')'}")
    return EXIT_RUNTIME if result.errors else EXIT_OK


def cmd_history(args: argparse.Namespace) -> int:
    from syncer.actions.history import history
    from syncer.cluster.client import ApiError, ClusterUnreachable

    try:
        result = history(_connect(args), args.unit, _namespaces(args))
    except UnknownUnit as exc:
        print(f"error: {exc}: it must match exactly one applied unit", file=sys.stderr)
        return EXIT_USAGE
    except (ClusterUnreachable, ApiError) as exc:
        return _cluster_error(exc)
    if args.output != "table":
        printers.emit(result.to_dict(), args.output)
    else:
        printers.print_history(result, headers=not args.no_headers)
    return EXIT_OK


def cmd_suspend(args: argparse.Namespace) -> int:
    from syncer.actions.suspend import set_suspended
    from syncer.cluster.client import ApiError, ClusterUnreachable

    try:
        result = set_suspended(_connect(args), args.unit, args.suspend, _namespaces(args))
    except UnknownUnit as exc:
        print(f"error: {exc}: it must match exactly one applied unit", file=sys.stderr)
        return EXIT_USAGE
    except (ClusterUnreachable, ApiError) as exc:
        return _cluster_error(exc)
    verb = "suspended" if result.suspended else "resumed"
    print(f"{printers.escape(result.unit.id)} {verb}" + ("" if result.changed else f" (it already was {verb})"))
    return EXIT_OK
