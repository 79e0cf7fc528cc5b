"""`flower-syncer status` as tables: the units' pools and the cluster's GPUs (what the CLI prints
of a StatusReport)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from syncer.observe.health import GPUCount
from syncer.observe.status import ClusterGPUs, StatusReport


def natural_key(text: str) -> list[Any]:
    """Sort key that puts `fed-2` before `fed-11`."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]


def _table(rows: Sequence[Sequence[str]], headers: bool = True) -> str:
    if not headers:
        rows = rows[1:]
        if not rows:
            return ""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for r in rows:
        cells = [c.ljust(w) for c, w in zip(r[:-1], widths[:-1], strict=True)] + [r[-1]]
        lines.append("   ".join(cells).rstrip())
    return "\n".join(lines) + "\n"


def _gpu_cell(gpus: Mapping[str, GPUCount]) -> str:
    return ", ".join(f"{n} {c.allocated}/{c.requested}" for n, c in gpus.items()) or "-"


def format_units(report: StatusReport, *, revision_width: int = 12, headers: bool = True) -> str:
    """UNIT SYNCED HEALTH POOL KIND READY CONNECTED GPUS DRIFT SUSPENDED REVISION MESSAGE, one row
    per pool, units in natural order. SYNCED and HEALTH: the unit's two conditions (their reasons);
    CONNECTED: a federation's SuperNodes online at its SuperLink of those Git expects (`-`: not a
    federation, or not checked); MESSAGE: the pool's problem; on a unit's first row, why it is not
    Synced (or, for a federation, why its SuperLink says it is not healthy) first."""
    rows: list[list[str]] = [["UNIT", "SYNCED", "HEALTH", "POOL", "KIND", "READY", "CONNECTED", "GPUS", "DRIFT",
                              "SUSPENDED", "REVISION", "MESSAGE"]]
    for u in sorted(report.units, key=lambda u: natural_key(u.unit)):
        state = u.state
        drift = "-" if u.drift is None else str(u.drift)
        if u.errors:
            drift += "!"
        checked = u.checked or u.revision
        revision = (checked[:revision_width] if checked else "-")
        suspended = "yes" if u.suspended else "no"
        cells = [u.unit, str(state.synced.reason), str(state.healthy.reason)]
        failing = "" if state.synced.status else f"{state.synced.reason}: {state.synced.message}"
        if not failing and not state.healthy.status and (u.flower or {}).get("condition"):
            failing = f"{state.healthy.reason}: {state.healthy.message}"  # what the SuperLink says
        connected = u.connected
        if not u.pools:
            rows.append([*cells, "-", "-", "-", connected, "-", drift, suspended, revision,
                         failing or ("no workloads found in the cluster" if not u.found else "-")])
        for i, p in enumerate(u.pools):
            message = "; ".join(m for m in ((failing if i == 0 else ""), p.summary) if m) or "-"
            rows.append([*cells, p.pool, p.kind, f"{p.ready}/{p.desired}", connected, _gpu_cell(p.gpus), drift,
                         suspended, revision, message])
    return _table(rows, headers)


def format_gpus(gpus: ClusterGPUs, *, headers: bool = True) -> str:
    """NODE RESOURCE ALLOCATABLE USED FREE, one row per node and GPU resource."""
    if gpus.error:
        return f"GPUs: {gpus.error}\n"
    if not gpus.nodes:
        return "no node has GPUs\n"
    rows = [["NODE", "RESOURCE", "ALLOCATABLE", "USED", "FREE"]]
    rows.extend([n.node, n.resource, str(n.allocatable), str(n.used), str(n.free)] for n in gpus.nodes)
    return _table(rows, headers)


def format_report(report: StatusReport, *, headers: bool = True) -> str:
    """The units' table, their errors and the GPU table; without `headers` (`--no-headers`), the
    units' rows only, for scripts."""
    if not headers:
        return format_units(report, headers=False) if report.units else ""
    out = format_units(report) if report.units else "no units\n"
    errors = [f"{u.unit}: {e}" for u in report.units for e in u.errors]
    if errors:
        out += "".join(f"error: {e}\n" for e in errors)
    if report.gpus is not None:
        out += "\n" + format_gpus(report.gpus, headers=headers)
    return out
