"""How the CLI prints: diagnostics, sync reports, resync outcomes, JSON/YAML payloads and progress
on a terminal. Printers only; `syncer.cli` maps arguments to actions and picks one of these."""

from __future__ import annotations

import dataclasses
import re
import shutil
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TextIO

import yaml

from syncer.diagnostics import Diagnostic
from syncer.engine.changeset import Action
from syncer.identity import Manifest
from syncer.render.common import to_json
from syncer.secrets.sops import REDACTED, redact_text, scalar_text, scrubbable

if TYPE_CHECKING:  # the results of cluster and agent verbs: `validate` and `render` never load those
    from syncer.actions.history import HistoryResult
    from syncer.actions.resync import ResyncResult
    from syncer.engine.sync import SyncReport
    from syncer.observe.status import StatusReport
    from syncer.observe.wait import WaitResult


# C0 and C1 controls, DEL, line and paragraph separators, and the bidirectional controls that
# reorder what a terminal shows (Trojan Source): none may reach a table row from Git
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def escape(text: object) -> str:
    """`text` as one printable line: every control character shown as an escape (``\\n``,
    ``\\x1b``, ``\\u202e``), so a string from Git (a unit name, an annotation, a message, a
    recorded revision) can never forge a line or a colour in text output. JSON and YAML output
    is already safe (they quote), and does not use this."""
    value = str(text)
    if not _UNPRINTABLE.search(value):
        return value
    return _UNPRINTABLE.sub(lambda m: _NAMED.get(m[0]) or (f"\\x{ord(m[0]):02x}" if ord(m[0]) < 0x100
                                                          else f"\\u{ord(m[0]):04x}"), value)


def escape_fields(value: Any) -> Any:
    """A copy of `value` (dataclasses, lists, tuples, dicts, nested) with `escape` applied to every
    plain string in it: for printing a whole report through a formatter that knows nothing of it."""
    if type(value) is str:
        return escape(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {f.name: escape_fields(getattr(value, f.name)) for f in dataclasses.fields(value) if f.init}
        return dataclasses.replace(value, **changes)
    if isinstance(value, list):
        return [escape_fields(v) for v in value]
    if type(value) is tuple:
        return tuple(escape_fields(v) for v in value)
    if isinstance(value, dict):
        return {escape_fields(k): escape_fields(v) for k, v in value.items()}
    return value


def format_status(report: StatusReport, *, headers: bool = True) -> str:
    """`status`'s table, every string from the cluster or Git escaped."""
    from syncer.observe.status_tables import format_report

    return format_report(escape_fields(report), headers=headers)


def scrub(text: str, secrets: frozenset[str]) -> str:
    """`text` with every plaintext value of a SOPS-encrypted file replaced by REDACTED."""
    return redact_text(text, secrets)


def scrub_data(value: Any, secrets: frozenset[str]) -> Any:
    """`scrub` on every string inside JSON-like data (before it is serialized, so the output stays
    valid YAML and JSON)."""
    if not secrets:
        return value
    if isinstance(value, dict):
        return {k: scrub_data(v, secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [scrub_data(v, secrets) for v in value]
    if isinstance(value, (int, float)) and not isinstance(value, bool) and scalar_text(value) in secrets \
            and scrubbable(scalar_text(value)):
        return REDACTED  # an encrypted number, e.g. replicas
    return scrub(value, secrets) if isinstance(value, str) else value


def emit(payload: Any, fmt: str, secrets: frozenset[str] = frozenset()) -> None:
    """`payload` as JSON or YAML on stdout (keys sorted: stable for scripts and diffs), with the
    plaintext of encrypted files scrubbed."""
    payload = scrub_data(payload, secrets)
    if fmt == "yaml":
        sys.stdout.write(yaml.safe_dump(payload, sort_keys=True, default_flow_style=False, allow_unicode=True))
    else:
        sys.stdout.write(to_json(payload))


def print_diagnostics(diags: Sequence[Diagnostic], out: TextIO) -> None:
    for d in diags:
        print(escape_fields(d).render(), file=out)


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
    """One line on a terminal, rewritten in place and cut to its width (a wrapped line would leave
    debris that `\r` cannot reach); nothing when stderr is not a terminal."""
    if not enabled or not sys.stderr.isatty():
        return lambda _msg: None
    return lambda msg: print(f"\r\033[K{fit(msg, shutil.get_terminal_size().columns - 1)}", end="",
                             file=sys.stderr, flush=True)


def fit(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(width - 3, 0)] + "..."


LISTED_CHANGES = 20  # per unit, unless -v: a first sync of a big unit would bury the summary


def disruption_lines(unit: Any, runs: dict[str, dict[str, Any]] | None = None) -> list[str]:
    """What a unit's changes do to running pods, one line each: `restarts the SuperLink (pod
    template: ...): 2 runs running`, `held: ...`, `Secret x changed; mounted by ...`."""
    at_stake = (runs or {}).get(unit.unit.id, {}).get("runs", "")
    lines = []
    for d in unit.disruptions:
        text = d.describe()
        if d.stops_pods() and at_stake:
            text += f": {at_stake}"
        lines.append(("held, " if d in unit.held else "") + text)
    return lines


def print_report(report: SyncReport, *, verbose: bool = False, runs: dict[str, dict[str, Any]] | None = None) -> None:
    totals: dict[str, int] = {}
    for unit in report.units:
        changed = [c for c in unit.changes if c.action.is_change]
        state = "ok" if unit.ok else "FAILED"
        if unit.skipped is not None:
            state = f"skipped: {unit.skipped}"
        unchanged = len(unit.changes) - len(changed)
        print(f"{escape(unit.unit.id)}: {escape(state)}" + (f" ({unchanged} unchanged)" if unchanged else ""))
        # failures first, so that a summary never hides one
        changed.sort(key=lambda c: c.action is not Action.FAILED)
        shown = changed if verbose or len(changed) <= LISTED_CHANGES else [
            c for i, c in enumerate(changed) if i < LISTED_CHANGES or c.action is Action.FAILED]
        for c in shown:
            line = f"  {c.action.value:<11} {escape(c.ref)}"
            if c.drift:
                line += "  [drift]"
            if c.cause is not None:
                line += f"  [{c.cause}]"
            if c.message:
                line += f"  ({escape(c.message)})"
            print(line)
        if len(shown) < len(changed):
            print(f"  ... and {len(changed) - len(shown)} more (-v lists them all)")
        for line in disruption_lines(unit, runs):
            print(f"  ! {escape(line)}")
        for err in unit.errors:
            print(f"  error: {escape(err)}")
        for c in unit.changes:
            totals[c.action.value] = totals.get(c.action.value, 0) + 1
    summary = ", ".join(f"{n} {a}" for a, n in sorted(totals.items())) or "nothing to do"
    print(f"{summary}; {report.writes} write(s), {report.requests} request(s) in {report.seconds:.2f}s")


def print_not_ready(result: WaitResult) -> None:
    print(f"not ready: {escape(result.reason)}", file=sys.stderr)
    for st in result.statuses:
        for pool in st.pools:
            if not pool.healthy:
                print(f"  {escape(st.unit)} {escape(pool.pool)}: {pool.ready}/{pool.desired}"
                      + (f" ({escape(pool.summary)})" if pool.summary else ""), file=sys.stderr)


def print_resync(result: ResyncResult) -> None:
    if result.error:
        print(f"error: {escape(result.error)}")
    for unit in result.units:
        changed = [c for c in unit.changes if c.get("action") != "unchanged"]
        state = "ok" if unit.ok else "FAILED"
        if unit.skipped:
            state = f"skipped: {unit.skipped}"
        print(f"{escape(unit.unit)}: {escape(state)} at {escape(result.revision[:12])} ({len(changed)} changed, "
              f"{len(unit.changes) - len(changed)} unchanged)")
        for c in changed:
            print(f"  {escape(c['action']):<11} {escape(c['object'])}"
                  + (f"  ({escape(c['message'])})" if c.get("message") else ""))
        for err in unit.errors:
            print(f"  error: {escape(err)}")


def print_history(result: HistoryResult, *, headers: bool = True) -> None:
    rows = [["REVISION", "APPLIED", "BY", "CHANGES"]] if headers else []
    for e in result.entries:
        rows.append([escape(e.revision[:12]) or "-", escape(e.at) or "-", escape(e.by) or "-",
                     escape(", ".join(f"{n} {action}" for action, n in e.counts)) or "-"])
    if not result.entries:
        print(f"{escape(result.unit.id)}: no revision recorded yet", file=sys.stderr)
        return
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for r in rows:
        print("   ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())


def print_diff(report: SyncReport, secrets: frozenset[str], runs: dict[str, dict[str, Any]] | None = None) -> None:
    """`diff`'s text: a unified diff per changed object (plaintext of encrypted files scrubbed),
    errors on stderr, a word on suspended units, whose drift is shown but not healed, and at the
    end, as `#` lines, what applying it does to running pods (engine.disruption)."""
    print_diff_objects(report, secrets)
    disrupted = [(u, disruption_lines(u, runs)) for u in report.units if u.disruptions]
    if any(u.changed for u in report.units):
        if not disrupted:
            print("# disruption: no change restarts pods")
        else:
            print("# disruption: what applying this does to running pods")
            for unit, lines in disrupted:
                for line in lines:
                    print(f"#   {escape(unit.unit.id)}: {escape(line)}")


def print_diff_objects(report: SyncReport, secrets: frozenset[str]) -> None:
    for unit in report.units:
        if unit.suspended is not None and unit.changed:
            print(f"# {unit.unit.id} is {unit.suspended}: this drift is not healed until it is resumed",
                  file=sys.stderr)
        for c in unit.changes:
            if not c.action.is_change:
                continue
            if c.diff:
                diff = scrub(c.diff, secrets)
                sys.stdout.write(diff if diff.endswith("\n") else diff + "\n")
            else:
                print(f"{c.action.value}: {escape(c.ref)}" + (f" ({escape(c.message)})" if c.message else ""))
        for err in unit.errors:
            print(f"error: {escape(unit.unit.id)}: {escape(err)}", file=sys.stderr)
