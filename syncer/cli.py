"""The `flower-syncer` command line: argument parsing and output formatting only.

Exit codes (stable, for CI pipelines):
    0  success (valid / no drift / synced and healthy)
    1  the config is invalid, drift was found, or the sync did not reach its goal
    2  usage error (bad arguments, missing directory)
    3  could not reach the cluster or another runtime failure
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

from syncer import __version__

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_RUNTIME = 3

REDACTED = "**redacted**"


def _add_repo_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("dir", metavar="DIR", nargs="?", default=".", type=Path,
                   help="config repository (a folder with federations/ and/or supernodes/); default: .")


def _add_unit_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--unit", action="append", default=[], metavar="NAME",
                   help="only this unit: NAME, KIND/NAME or KIND/NAMESPACE/NAME (KIND is federation or "
                        "supernode); repeatable")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="flower-syncer",
        description="GitOps for Flower federated learning on Kubernetes: render, validate, diff and sync "
                    "Federation documents and SuperNode Helm values from a Git repository.",
        epilog="Exit codes: 0 ok, 1 invalid config / drift / sync failed, 2 usage error, 3 cluster or runtime "
               "error. Run 'flower-syncer COMMAND --help' for details.",
    )
    parser.add_argument("--version", action="version", version=f"flower-syncer {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("validate", help="check a config repository and report every problem",
                       description="Check every file of a config repository: YAML syntax, schemas, the "
                                   "flower-operator's rules, names, node config, keys. Reports all problems "
                                   "with file, line and field. Needs no cluster.")
    _add_repo_arg(p)
    p.add_argument("-o", "--output", choices=["text", "json"], default="text", help="output format")
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
                                   "unified diff per changed object. Secret values are masked. Exit codes "
                                   "follow 'flux diff': 0 no drift, 1 drift, 2 error.")
    _add_repo_arg(p)
    _add_unit_arg(p)
    _add_cluster_args(p)
    p.add_argument("-o", "--output", choices=["text", "json"], default="text", help="output format")
    p.set_defaults(func=cmd_diff)

    p = sub.add_parser("sync", help="apply a config repository to the cluster once",
                       description="Load, render, apply (server-side apply, field manager flower-syncer), "
                                   "prune what left Git, record each unit's inventory, and optionally wait "
                                   "until every pool is ready. Applying an unchanged repository makes no "
                                   "writes.")
    _add_repo_arg(p)
    _add_unit_arg(p)
    _add_cluster_args(p)
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
    p.add_argument("-o", "--output", choices=["text", "json"], default="text", help="output format")
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
    _add_unit_arg(p)
    _add_cluster_args(p)
    p.add_argument("-o", "--output", choices=["table", "json"], default="table", help="output format")
    p.add_argument("-w", "--watch", action="store_true", help="redraw every --interval until Ctrl-C")
    p.add_argument("--interval", type=_duration, default=2.0, metavar="SECONDS",
                   help="seconds between redraws with --watch (default 2)")
    p.set_defaults(func=cmd_status)

    from syncer.agent.config import AgentConfig, env_name

    p = sub.add_parser("run", help="run the agent: watch a Git repository and keep the cluster in sync",
                       description="Run the long-running agent. A commit to a local repository or a push to a "
                                   "local bare repository reaches the cluster at once; remotes are polled (and "
                                   "a webhook triggers a fetch). Outside changes to managed objects are seen "
                                   "through watches and corrected. Every option can also be set with an "
                                   "environment variable (shown) or in a YAML file given with --config.")
    p.add_argument("--config", default=None, help=f"YAML file with settings (${env_name('config')})")
    for name, info in AgentConfig.model_fields.items():
        flag = "--" + name.replace("_", "-")
        help_text = f"{info.description} (${env_name(name)})"
        if info.annotation is bool:
            p.add_argument(flag, dest=name, default=None, action=argparse.BooleanOptionalAction, help=help_text)
        else:
            p.add_argument(flag, dest=name, default=None, help=help_text,
                           metavar=name.upper().replace("_FILE", "").replace("_", "-"))
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("resync", help="ask the running agent to fetch and sync now",
                       description="Ask a running agent to fetch the repository and sync (one unit or all), "
                                   "like 'flux reconcile --with-source'. With --wait, print the outcome.")
    _add_unit_arg(p)
    p.add_argument("--agent", default=None, help="agent URL (default $FLOWER_SYNCER_AGENT or "
                                                 "http://127.0.0.1:9090)")
    p.add_argument("--token-file", type=Path, default=None,
                   help="file with the API bearer token (default: $FLOWER_SYNCER_API_TOKEN)")
    p.add_argument("--wait", action="store_true", help="wait for the sync to finish and print the outcome")
    p.add_argument("--timeout", type=_duration, default=120.0, metavar="DURATION", help="how long --wait waits")
    p.add_argument("-o", "--output", choices=["text", "json"], default="text", help="output format")
    p.set_defaults(func=cmd_resync)

    for verb, doc in (("suspend", "stop applying and healing a unit (its objects stay as they are)"),
                      ("resume", "apply and heal a suspended unit again")):
        p = sub.add_parser(verb, help=doc, description=doc.capitalize() + ". Recorded on the unit's inventory in "
                                                                         "the cluster, so it survives restarts.")
        p.add_argument("unit", metavar="UNIT", help="NAME, KIND/NAME or KIND/NAMESPACE/NAME")
        _add_cluster_args(p)
        p.set_defaults(func=cmd_suspend, suspend=verb == "suspend")
    return parser


def _add_cluster_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kubeconfig", default=None, help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, "
                                                     "or in-cluster credentials)")
    p.add_argument("--context", default=None, help="kubeconfig context to use")
    p.add_argument("--namespaces", default=None, metavar="NS[,NS...]",
                   help="only read these namespaces, for credentials limited to them (the chart's namespaced "
                        "RBAC); default $FLOWER_SYNCER_NAMESPACES, else cluster-wide")


def _namespaces(args: argparse.Namespace) -> list[str] | None:
    import os

    from syncer.agent.config import env_name, namespace_list

    return namespace_list(getattr(args, "namespaces", None) or os.environ.get(env_name("namespaces"), ""))


def _duration(text: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600}
    try:
        if text[-1:] in units:
            return float(text[:-1]) * units[text[-1]]
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration (e.g. 30s, 5m)") from None


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
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


# ---------------------------------------------------------------------------------------------


def _repo_dir(path: Path) -> Path | None:
    if not path.is_dir():
        print(f"error: {path} is not a directory", file=sys.stderr)
        return None
    return path


def _print_diagnostics(diags: Sequence[Any], out: TextIO) -> None:
    for d in diags:
        print(d.render(), file=out)


def cmd_validate(args: argparse.Namespace) -> int:
    from syncer.render.common import to_json
    from syncer.render.repo import render_repo
    from syncer.repo.loader import load_repo

    root = _repo_dir(args.dir)
    if root is None:
        return EXIT_USAGE
    state = load_repo(root)
    rendered = render_repo(state)
    diags = sorted(state.diagnostics + rendered.diagnostics)
    errors = [d for d in diags if d.severity == "error"]
    warnings = [d for d in diags if d.severity == "warning"]
    failed = bool(errors) or (args.strict and bool(warnings))
    units = sorted(rendered.units)
    if args.output == "json":
        sys.stdout.write(to_json({
            "valid": not failed,
            "errors": len(errors),
            "warnings": len(warnings),
            "files": state.files,
            "units": [u.id for u in units],
            "failedUnits": sorted(u.id for u in rendered.failed),
            "diagnostics": [d.to_dict() for d in diags],
        }))
    else:
        _print_diagnostics(diags, sys.stdout)
        objects = sum(len(ms) for ms in rendered.units.values())
        verdict = "invalid" if failed else "valid"
        print(f"{verdict}: {len(errors)} error(s), {len(warnings)} warning(s) in {state.files} file(s); "
              f"{len(units)} unit(s) render {objects} object(s)")
    return EXIT_FAILED if failed else EXIT_OK


def redact_secrets(manifests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for m in manifests:
        if m.get("kind") == "Secret" and (m.get("data") or m.get("stringData")):
            masked = dict(m)
            for key in ("data", "stringData"):
                if masked.get(key):
                    masked[key] = dict.fromkeys(masked[key], REDACTED)
            out.append(masked)
        else:
            out.append(m)
    return out


def cmd_render(args: argparse.Namespace) -> int:
    from syncer.render.common import to_json, to_yaml

    loaded = _load_and_render(args)
    if loaded is None:
        return EXIT_USAGE
    state, rendered = loaded
    selected = {u.id for u in rendered.units} | {u.id for u in rendered.failed}
    diags = [d for d in sorted(state.diagnostics + rendered.diagnostics)
             if not args.unit or not d.unit or d.unit in selected]
    _print_diagnostics(diags, sys.stderr)
    manifests = rendered.manifests()
    if not args.show_secrets:
        manifests = redact_secrets(manifests)
    if args.output == "json":
        sys.stdout.write(to_json({"apiVersion": "v1", "kind": "List", "items": manifests}))
    else:
        sys.stdout.write(to_yaml(manifests))
    return EXIT_FAILED if any(d.severity == "error" for d in diags) else EXIT_OK


# ---------------------------------------------------------------------------------------------
# Commands that talk to a cluster


def _git_revision(path: Path) -> str:
    import subprocess

    try:
        out = subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=10, check=False)
    except OSError:
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def _load_and_render(args: argparse.Namespace) -> tuple[Any, Any] | None:
    from syncer.render.repo import render_repo, select_units, unit_matches
    from syncer.repo.loader import load_repo

    root = _repo_dir(args.dir)
    if root is None:
        return None
    state = load_repo(root)
    _, unmatched = select_units(state.units, args.unit)
    known = {u.unit for u in state.units} | state.failed
    missing = [s for s in unmatched if not any(unit_matches(u, s) for u in known)]
    if missing:
        print(f"error: no unit matches {', '.join(missing)}", file=sys.stderr)
        return None
    return state, render_repo(state, args.unit)


def _connect(args: argparse.Namespace) -> Any:
    from syncer.cluster.client import Kube

    return Kube.from_kubeconfig(args.kubeconfig, args.context)


def _progress(enabled: bool) -> Callable[[str], None]:
    if not enabled or not sys.stderr.isatty():
        return lambda _msg: None
    return lambda msg: print(f"\r\033[K{msg}", end="", file=sys.stderr, flush=True)


def _print_report(report: Any) -> None:
    totals: dict[str, int] = {}
    for unit in report.units:
        shown = [c for c in unit.changes if c.action.value != "unchanged"]
        state = "ok" if unit.ok else "FAILED"
        if unit.skipped is not None:
            state = f"skipped: {unit.skipped}"
        unchanged = len(unit.changes) - len(shown)
        print(f"{unit.unit}: {state}" + (f" ({unchanged} unchanged)" if unchanged else ""))
        for c in shown:
            line = f"  {c.action.value:<11} {c.ref}"
            if c.drift:
                line += "  [drift]"
            if c.message:
                line += f"  ({c.message})"
            print(line)
        for err in unit.errors:
            print(f"  error: {err}")
        for c in unit.changes:
            totals[c.action.value] = totals.get(c.action.value, 0) + 1
    summary = ", ".join(f"{n} {a}" for a, n in sorted(totals.items())) or "nothing to do"
    print(f"{summary}; {report.writes} write(s), {report.requests} request(s) in {report.seconds:.2f}s")


def cmd_diff(args: argparse.Namespace) -> int:
    from syncer.cluster.client import ApiError, ClusterUnreachable
    from syncer.engine.sync import Engine, SyncOptions
    from syncer.render.common import to_json
    from syncer.render.repo import plan_repo

    loaded = _load_and_render(args)
    if loaded is None:
        return 2
    state, rendered = loaded
    diags = sorted(state.diagnostics + rendered.diagnostics)
    _print_diagnostics([d for d in diags if d.severity == "error"], sys.stderr)
    try:
        engine = Engine(_connect(args))
        report = engine.sync(plan_repo(state, rendered, selectors=args.unit or ()),
                             SyncOptions(dry_run=True, with_diff=True, namespaces=_namespaces(args)))
    except (ClusterUnreachable, ApiError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    drift = report.changed
    if args.output == "json":
        sys.stdout.write(to_json({"drift": drift, **report.to_dict()}))
    else:
        for unit in report.units:
            for c in unit.changes:
                if not c.action.is_change:
                    continue
                if c.diff:
                    sys.stdout.write(c.diff if c.diff.endswith("\n") else c.diff + "\n")
                else:
                    print(f"{c.action.value}: {c.ref}" + (f" ({c.message})" if c.message else ""))
            for err in unit.errors:
                print(f"error: {unit.unit}: {err}", file=sys.stderr)
    if any(d.severity == "error" for d in diags) or not report.ok:
        return 2
    return 1 if drift else 0


def cmd_sync(args: argparse.Namespace) -> int:
    from syncer.cluster.client import ApiError, ClusterUnreachable
    from syncer.engine.sync import Engine, SyncOptions
    from syncer.render.common import to_json
    from syncer.render.repo import plan_repo

    loaded = _load_and_render(args)
    if loaded is None:
        return EXIT_USAGE
    state, rendered = loaded
    diags = sorted(state.diagnostics + rendered.diagnostics)
    _print_diagnostics(diags, sys.stderr)
    revision = args.revision if args.revision is not None else _git_revision(args.dir)
    opts = SyncOptions(dry_run=args.dry_run, force_conflicts=args.force_conflicts, prune=args.prune,
                       allow_empty=args.allow_empty, namespaces=_namespaces(args))
    plan = plan_repo(state, rendered, selectors=args.unit or (), revision=revision)
    progress = _progress(args.output == "text")
    try:
        engine = Engine(_connect(args), progress=progress)
        report = engine.sync(plan, opts)
    except ClusterUnreachable as exc:
        print(f"\nerror: {exc}", file=sys.stderr)
        return EXIT_RUNTIME
    except ApiError as exc:
        print(f"\nerror: the API server refused a request: {exc}", file=sys.stderr)
        return EXIT_RUNTIME
    progress("")
    healthy = True
    statuses: list[Any] = []
    if args.wait and not args.dry_run:
        healthy, statuses = _wait(engine, rendered, args.timeout, args.output == "text")
    if args.output == "json":
        payload = report.to_dict()
        payload["diagnostics"] = [d.to_dict() for d in diags]
        if args.wait:
            payload["healthy"] = healthy
            payload["status"] = [s.to_dict() for s in statuses]
        sys.stdout.write(to_json(payload))
    else:
        _print_report(report)
    failed = not report.ok or any(d.severity == "error" for d in diags) or not healthy
    return EXIT_FAILED if failed else EXIT_OK


def _wait(engine: Any, rendered: Any, timeout: float, text: bool) -> tuple[bool, list[Any]]:
    from syncer.observe.status import wait_healthy

    progress = _progress(text)
    result = wait_healthy(engine.kube, rendered.units, timeout=timeout, progress=progress)
    progress("")
    if text and not result.healthy:
        print(f"not ready: {result.reason}", file=sys.stderr)
        for st in result.statuses:
            for pool in st.pools:
                if not pool.healthy:
                    print(f"  {st.unit} {pool.pool}: {pool.ready}/{pool.desired}"
                          + (f" ({pool.summary})" if pool.summary else ""), file=sys.stderr)
    return result.healthy, list(result.statuses)


def cmd_status(args: argparse.Namespace) -> int:
    import json
    import time

    from syncer.cluster.client import ApiError, ClusterUnreachable
    from syncer.observe.status import StatusReport, discover_units, drift_counts, format_report, status, unit_from_id
    from syncer.render.common import Manifest, Unit, to_json
    from syncer.render.repo import plan_repo

    def one_round(kube: Any, first: bool) -> tuple[StatusReport | None, int]:
        if args.dir is None:
            scope = _namespaces(args)
            report = status(kube, list(discover_units(kube, scope)) if scope else None, selectors=args.unit)
            if args.unit and not report.units:
                if first:
                    print(f"error: no unit in the cluster matches {', '.join(args.unit)}", file=sys.stderr)
                return report, EXIT_FAILED
            return report, EXIT_OK if report.ready else EXIT_FAILED
        from syncer.engine.sync import Engine, SyncOptions

        loaded = _load_and_render(args)
        if loaded is None:
            return None, EXIT_USAGE
        state, rendered = loaded
        diags = [d for d in sorted(state.diagnostics + rendered.diagnostics) if d.severity == "error"]
        if first:
            _print_diagnostics(diags, sys.stderr)
        dry = Engine(kube).sync(plan_repo(state, rendered, selectors=args.unit or ()), SyncOptions(dry_run=True))
        counts, errors = drift_counts(dry)
        # rendered units, and those the dry-run reported on too (failed to render, or left Git)
        units: dict[Unit, list[Manifest] | None] = dict.fromkeys(unit_from_id(u.unit) for u in dry.units)
        units.update(rendered.units)
        report = status(kube, units, drift=counts, errors=errors)
        clean = report.ready and not report.drifted and not diags and not errors
        return report, EXIT_OK if clean else EXIT_FAILED

    tty = sys.stdout.isatty()
    code = EXIT_OK
    first = True
    error = ""
    kube = None
    try:
        while True:
            try:
                kube = kube or _connect(args)
                report, code = one_round(kube, first)
            except (ClusterUnreachable, ApiError) as exc:
                if not args.watch:
                    print(f"error: {exc}", file=sys.stderr)
                    return EXIT_RUNTIME
                report, code = None, EXIT_RUNTIME
                error = f"error: {exc}\n"
            if report is None and code == EXIT_USAGE:
                return code
            if args.output == "json":
                payload: dict[str, Any] = report.to_dict() if report is not None else {"error": error.strip()}
                sys.stdout.write(json.dumps(payload, sort_keys=True) + "\n" if args.watch else to_json(payload))
            else:
                text = format_report(report) if report is not None else error
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
    from syncer.agent.config import load_config
    from syncer.agent.runner import run

    cli = {k: v for k, v in vars(args).items() if k not in ("func", "command")}
    try:
        config = load_config(cli)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return run(config)


def cmd_resync(args: argparse.Namespace) -> int:
    import json
    import os
    import urllib.error
    import urllib.request

    base = (args.agent or os.environ.get("FLOWER_SYNCER_AGENT") or "http://127.0.0.1:9090").rstrip("/")
    token = args.token_file.read_text().strip() if args.token_file else os.environ.get("FLOWER_SYNCER_API_TOKEN")
    if len(args.unit) > 1:
        print("error: resync takes at most one --unit", file=sys.stderr)
        return EXIT_USAGE
    body = json.dumps({"unit": args.unit[0] if args.unit else None, "wait": args.wait,
                       "timeout": args.timeout}).encode()
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(base + "/api/v1/resync", data=body, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=args.timeout + 10) as resp:
            result = json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode("utf-8", "replace")[:300]
        print(f"error: the agent answered {exc.code}: {detail}", file=sys.stderr)
        return EXIT_USAGE if exc.code in (401, 404) else EXIT_RUNTIME
    except (urllib.error.URLError, OSError) as exc:
        print(f"error: cannot reach the agent at {base}: {exc}", file=sys.stderr)
        return EXIT_RUNTIME
    if args.output == "json":
        print(json.dumps(result, indent=2, sort_keys=True))
    elif not args.wait:
        print("resync requested")
    else:
        _print_resync(result)
    if not result.get("done", True) or result.get("error"):
        return EXIT_FAILED
    return EXIT_OK if all(r.get("ok") for r in result.get("units", {}).values()) else EXIT_FAILED


def _print_resync(result: dict[str, Any]) -> None:
    if result.get("error"):
        print(f"error: {result['error']}")
    rev = str(result.get("revision", ""))
    for unit, res in sorted(result.get("units", {}).items()):
        changes = res.get("changes", [])
        changed = [c for c in changes if c["action"] != "unchanged"]
        state = "ok" if res.get("ok") else "FAILED"
        if res.get("skipped"):
            state = f"skipped: {res['skipped']}"
        print(f"{unit}: {state} at {rev[:12]} ({len(changed)} changed, {len(changes) - len(changed)} unchanged)")
        for c in changed:
            print(f"  {c['action']:<11} {c['object']}" + (f"  ({c['message']})" if c.get("message") else ""))
        for err in res.get("errors", []):
            print(f"  error: {err}")


def cmd_suspend(args: argparse.Namespace) -> int:
    from syncer.cluster.client import ApiError, ClusterUnreachable, path_for
    from syncer.engine.inventory import ANN_SUSPENDED, INVENTORY_SELECTOR, decode
    from syncer.render.repo import unit_matches

    try:
        kube = _connect(args)
        limited = _namespaces(args)
        scopes: list[str | None] = list(limited) if limited else [None]
        cms = [cm for ns in scopes for cm in kube.list("ConfigMap", ns, labels=INVENTORY_SELECTOR)[0]]
        matches = [(cm, inv) for cm in cms if (inv := decode(cm)) is not None and unit_matches(inv.unit, args.unit)]
        if len(matches) != 1:
            found = ", ".join(sorted(inv.unit.id for _, inv in matches)) or "none"
            print(f"error: {args.unit!r} must match exactly one applied unit (matches: {found})", file=sys.stderr)
            return EXIT_USAGE
        cm, inv = matches[0]
        patch = {"metadata": {"annotations": {ANN_SUSPENDED: "true" if args.suspend else None}}}
        kube.request("PATCH", path_for("ConfigMap", cm["metadata"]["namespace"], cm["metadata"]["name"]),
                     body=patch, content_type="application/merge-patch+json",
                     query={"fieldManager": "flower-syncer-cli"})
    except (ClusterUnreachable, ApiError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_RUNTIME
    print(f"{inv.unit.id} {'suspended' if args.suspend else 'resumed'}")
    return EXIT_OK
