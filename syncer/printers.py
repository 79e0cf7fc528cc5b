"""How the CLI prints: diagnostics, sync reports, resync outcomes, JSON/YAML payloads and progress
on a terminal. Printers only; `syncer.cli` maps arguments to actions and picks one of these."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any, TextIO

import yaml

from syncer.actions.resync import ResyncResult
from syncer.diagnostics import Diagnostic
from syncer.engine.sync import SyncReport
from syncer.identity import Manifest
from syncer.observe.status import WaitResult
from syncer.render.common import to_json

REDACTED = "**redacted**"


def emit(payload: Any, fmt: str) -> None:
    """`payload` as JSON or YAML on stdout (keys sorted: stable for scripts and diffs)."""
    if fmt == "yaml":
        sys.stdout.write(yaml.safe_dump(payload, sort_keys=True, default_flow_style=False, allow_unicode=True))
    else:
        sys.stdout.write(to_json(payload))


def print_diagnostics(diags: Sequence[Diagnostic], out: TextIO) -> None:
    for d in diags:
        print(d.render(), file=out)


def redact_secrets(manifests: list[Manifest]) -> list[Manifest]:
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


def progress(enabled: bool) -> Callable[[str], None]:
    if not enabled or not sys.stderr.isatty():
        return lambda _msg: None
    return lambda msg: print(f"\r\033[K{msg}", end="", file=sys.stderr, flush=True)


def print_report(report: SyncReport) -> None:
    totals: dict[str, int] = {}
    for unit in report.units:
        shown = [c for c in unit.changes if c.action.is_change]
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


def print_not_ready(result: WaitResult) -> None:
    print(f"not ready: {result.reason}", file=sys.stderr)
    for st in result.statuses:
        for pool in st.pools:
            if not pool.healthy:
                print(f"  {st.unit} {pool.pool}: {pool.ready}/{pool.desired}"
                      + (f" ({pool.summary})" if pool.summary else ""), file=sys.stderr)


def print_resync(result: ResyncResult) -> None:
    if result.error:
        print(f"error: {result.error}")
    for unit in result.units:
        changed = [c for c in unit.changes if c.get("action") != "unchanged"]
        state = "ok" if unit.ok else "FAILED"
        if unit.skipped:
            state = f"skipped: {unit.skipped}"
        print(f"{unit.unit}: {state} at {result.revision[:12]} ({len(changed)} changed, "
              f"{len(unit.changes) - len(changed)} unchanged)")
        for c in changed:
            print(f"  {c['action']:<11} {c['object']}" + (f"  ({c['message']})" if c.get("message") else ""))
        for err in unit.errors:
            print(f"  error: {err}")
