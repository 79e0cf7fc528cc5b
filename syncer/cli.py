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
    return parser


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
            m = dict(m)
            for key in ("data", "stringData"):
                if m.get(key):
                    m[key] = dict.fromkeys(m[key], REDACTED)
        out.append(m)
    return out


def cmd_render(args: argparse.Namespace) -> int:
    from syncer.render.common import to_json, to_yaml
    from syncer.render.repo import render_repo, select_units
    from syncer.repo.loader import load_repo

    root = _repo_dir(args.dir)
    if root is None:
        return EXIT_USAGE
    state = load_repo(root)
    _, unmatched = select_units(state.units + [], args.unit)
    known = {u.unit for u in state.units} | state.failed
    from syncer.render.repo import unit_matches

    missing = [s for s in unmatched if not any(unit_matches(u, s) for u in known)]
    if missing:
        print(f"error: no unit matches {', '.join(missing)}; units: "
              f"{', '.join(sorted(u.id for u in known)) or 'none'}", file=sys.stderr)
        return EXIT_USAGE
    rendered = render_repo(state, args.unit)
    diags = [d for d in sorted(state.diagnostics + rendered.diagnostics)
             if not args.unit or not d.unit or any(unit_matches(u, s) for s in args.unit for u in known
                                                   if u.id == d.unit)]
    _print_diagnostics(diags, sys.stderr)
    manifests = rendered.manifests()
    if not args.show_secrets:
        manifests = redact_secrets(manifests)
    if args.output == "json":
        sys.stdout.write(to_json({"apiVersion": "v1", "kind": "List", "items": manifests}))
    else:
        sys.stdout.write(to_yaml(manifests))
    return EXIT_FAILED if any(d.severity == "error" for d in diags) else EXIT_OK
