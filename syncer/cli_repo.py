"""The verbs that read a config repository and nothing else (`validate`, `render`), and loading
the repository for every verb that reads one. Split from syncer/cli.py along the line that matters
at start-up: these verbs, run by pre-commit hooks and CI steps, import the models and nothing of
the cluster, the agent, the HTTP server or the metrics (tests/unit/test_cli_imports.py); the models
themselves only when a verb loads a repository, not for `--help`.

The exit codes are the CLI's, documented in syncer/cli.py.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from syncer import printers
from syncer.agent.envnames import env_name
from syncer.identity import UnknownUnit
from syncer.render.common import to_json, to_yaml

if TYPE_CHECKING:
    from syncer.actions.load import Loaded

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_RUNTIME = 3


def load_selected(args: argparse.Namespace) -> Loaded | int:
    """The repository of `args.dir` with `args.unit` selected, or the exit code after an error."""
    from syncer.actions.load import RepoNotFound, load  # the models: not for --help or the agent
    from syncer.secrets.keys import Decryption, load_identities
    from syncer.secrets.sops import SopsError

    namespace = None if getattr(args, "all_namespaces", False) else getattr(args, "namespace", None)
    files = list(args.decryption_key_file) or [Path(f) for f in os.environ.get(
        env_name("decryption_key_files"), "").split(",") if f.strip()]
    policy_file = getattr(args, "policy", None) or os.environ.get(env_name("policy")) or None
    try:
        admin = None
        if policy_file:
            from syncer.agent.config import load_policy  # the agent's settings: only with a policy

            admin = load_policy(Path(policy_file))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        # validate checks an encrypted file without a key (its values left opaque); the others need one
        decryption = Decryption(load_identities(files), required=args.command != "validate")
        cluster = getattr(args, "cluster", None)
        if cluster is None and args.command not in ("validate", "render"):
            cluster = ""  # as an agent without --cluster: a repository of several clusters applies nothing
        ref = synced_ref(args)
        if isinstance(ref, int):
            return ref
        return load(args.dir, getattr(args, "unit", ()) or (), namespace, decryption, admin=admin, cluster=cluster,
                    ref=ref)
    except SopsError as exc:
        print(f"error: {exc.detail}" + (f"\nhint: {exc.hint}" if exc.hint else ""), file=sys.stderr)
        return EXIT_USAGE
    except RepoNotFound as exc:
        print(f"error: {exc.detail}", file=sys.stderr)
        return EXIT_USAGE
    except UnknownUnit as exc:
        print(f"error: --unit {exc}; see 'flower-syncer validate' for the units of the repository",
              file=sys.stderr)
        return EXIT_USAGE


def synced_ref(args: argparse.Namespace) -> str | int:
    """The ref `args.dir` is synced as (`--ref`; "" for the remote's default branch), part of the
    repository's identity as it is of an agent's; or the exit code after an error. Without --ref, a
    clone on a branch other than its origin's default is refused: synced under the default
    branch's identity, it would prune that branch's units, and the default branch its."""
    if not hasattr(args, "ref"):  # validate, render: no identity needed
        return ""
    from syncer.source.location import branch_off_default
    from syncer.source.refs import SourceError, validate_ref

    if args.ref is not None:
        try:
            return validate_ref(args.ref) or ""
        except SourceError as exc:
            print(f"error: --ref: {exc}", file=sys.stderr)
            return EXIT_USAGE
    off = branch_off_default(str(args.dir))
    if off is not None:
        branch, default = off
        print(f"error: {args.dir} is a clone on the branch {branch!r}, not on its origin's default branch "
              f"{default!r}: say which ref it is synced as, for the repository's identity: --ref {branch} "
              f"(as an agent with --ref {branch}), or --ref HEAD (as an agent of the default branch)",
              file=sys.stderr)
        return EXIT_USAGE
    return ""


def cmd_validate(args: argparse.Namespace) -> int:
    from syncer.actions.load import ValidateResult

    loaded = load_selected(args)
    if isinstance(loaded, int):
        return loaded
    result = ValidateResult(loaded, args.strict)
    if args.output != "text":
        printers.emit(result.to_dict(), args.output)
    else:
        printers.print_diagnostics(loaded.diagnostics, sys.stdout)
        objects = sum(len(ms) for ms in loaded.units.values())
        print(f"{'valid' if result.valid else 'invalid'}: {len(loaded.errors)} error(s), "
              f"{len(loaded.warnings)} warning(s) in {loaded.state.files} file(s); "
              f"{len(loaded.units)} unit(s) render {objects} object(s)")
    return EXIT_OK if result.valid else EXIT_FAILED


def cmd_render(args: argparse.Namespace) -> int:
    loaded = load_selected(args)
    if isinstance(loaded, int):
        return loaded
    diags = loaded.selected_diagnostics()
    printers.print_diagnostics(diags, sys.stderr)
    manifests = loaded.manifests()
    if not args.show_secrets:
        manifests = printers.scrub_data(printers.redact_secrets(manifests), loaded.state.secrets)
    if args.output == "json":
        sys.stdout.write(to_json({"apiVersion": "v1", "kind": "List", "items": manifests}))
    else:
        sys.stdout.write(to_yaml(manifests))
    return EXIT_FAILED if any(d.severity == "error" for d in diags) else EXIT_OK
