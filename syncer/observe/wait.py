"""`flower-syncer sync --wait`: poll the status of units until they are ready, a problem that will
not fix itself persists, or the time is up."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import NamedTuple

from syncer.cluster.client import ApiError, ClusterUnreachable, Kube
from syncer.observe.status import StatusReport, Target, UnitsArg, UnitStatus, collect_status, resolve_targets

# Pod problems that do not go away by waiting; `wait_healthy` gives up when one persists.
TERMINAL_REASONS = frozenset({
    "ImagePullBackOff", "ErrImagePull", "InvalidImageName", "CreateContainerConfigError",
    "CreateContainerError", "RunContainerError", "CrashLoopBackOff", "OOMKilled", "Unschedulable",
})


class WaitResult(NamedTuple):
    healthy: bool
    statuses: list[UnitStatus]
    reason: str  # why it stopped when not healthy: a persisting problem, the timeout, an error


def _blocking(report: StatusReport) -> dict[tuple[str, str, str], str]:
    """Problems that will not fix themselves, by (unit, pool, reason), with a description."""
    out: dict[tuple[str, str, str], str] = {}
    for u in report.units:
        for p in u.pools:
            if p.healthy:
                continue
            if p.stalled:
                out[(u.unit, p.pool, "stalled")] = f"{u.unit} {p.pool}: {p.reason}"
            if p.problem is None or p.problem.reason not in TERMINAL_REASONS:
                continue
            # a pod being deleted may free the node resources an unschedulable pod waits for
            if p.problem.reason == "Unschedulable" and p.terminating:
                continue
            out[(u.unit, p.pool, p.problem.reason)] = f"{u.unit} {p.pool}: {p.problem}"
    return out


def _progress_line(report: StatusReport, elapsed: float) -> str:
    waiting = [u for u in report.units if not u.ready]
    parts = []
    for u in waiting:
        pools = [f"{p.pool} {p.ready}/{p.desired}" + (f" ({p.problem.reason})" if p.problem else "")
                 for p in u.pools if not p.healthy]
        parts.append(f"{u.unit} " + (", ".join(pools) if pools else "(not found)"))
    shown = "; ".join(parts[:3]) + (f"; +{len(parts) - 3} more" if len(parts) > 3 else "")
    return f"waiting for {len(waiting)}/{len(report.units)} unit(s) [{elapsed:.0f}s]: {shown}"


def wait_healthy(kube: Kube, units: UnitsArg, timeout: float, progress: Callable[[str], None] | None = None,
                 *, interval: float = 1.0, persist: float = 10.0,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> WaitResult:
    """Poll every `interval` seconds until every unit is ready (healthy=True), a terminal problem
    (image pull, crash loop, OOM kill, unschedulable; see TERMINAL_REASONS) has persisted for more
    than `persist` seconds or a Deployment exceeded its progress deadline, or `timeout` passed.
    Returns the last statuses either way. A cluster that stops answering is retried until the
    timeout; a request the server refuses ends the wait."""
    say = progress or (lambda _msg: None)
    start = clock()
    deadline = start + timeout
    first_seen: dict[tuple[str, str, str], float] = {}
    statuses: list[UnitStatus] = []
    targets: list[Target] | None = None
    last_error = ""
    while True:
        now = clock()
        try:
            if targets is None:
                targets = resolve_targets(kube, units)
            report = collect_status(kube, targets, nodes=False)
        except ClusterUnreachable as exc:
            last_error = str(exc)
            report = None
        except ApiError as exc:
            if exc.status != 429 and exc.status < 500:
                return WaitResult(False, statuses, f"cannot read the status: {exc}")
            last_error = str(exc)
            report = None
        if report is not None:
            statuses = report.units
            last_error = ""
            if report.ready:
                return WaitResult(True, statuses, "")
            blocking = _blocking(report)
            first_seen = {k: first_seen.get(k, now) for k in blocking}
            stuck = [blocking[k] for k, t in sorted(first_seen.items())
                     if k[2] == "stalled" or now - t > persist]
            if stuck:
                return WaitResult(False, statuses, "; ".join(stuck))
            say(_progress_line(report, now - start))
        if clock() >= deadline:
            reason = f"timed out after {timeout:g}s"
            if last_error:
                reason += f" (last error: {last_error})"
            elif statuses:
                pending = [f"{u.unit} {p.pool} {p.ready}/{p.desired}"
                           + (f": {p.summary}" if p.summary else "")
                           for u in statuses for p in u.pools if not p.healthy]
                pending += [f"{u.unit}: not found" for u in statuses if not u.found]
                reason += ": " + "; ".join(pending)
            return WaitResult(False, statuses, reason)
        sleep(max(0.0, min(interval, deadline - clock())))
