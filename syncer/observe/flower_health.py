"""Flower-level health of a federation: are the SuperNodes Git expects connected to its SuperLink,
and how do its runs end (pure: what Git expects and what the Control API answered in, the health
out; syncer.agent.flower_probe asks the Control API).

What identifies a SuperNode (found with real Flower 1.26, 1.42 and the 1.43 nightly): its node
id (new at every registration, and without node authentication at every start) and its public
key. With node authentication (`flower-syncer.io/supernode-auth: enabled`) the key is the one Git
lists (a SuperNode release's `global.nodeAuth` key), so nodes are matched to the release that
provides them key by key (`matchedBy: publicKey`). Without it every SuperNode makes itself a key
at start, so only counts can be compared: the online nodes are credited to the pools in order, up
to each one's expected count (`matchedBy: count`); more are `unmatched`. 1.43 adds a node `name`
and `location`, which Git does not set yet. Statuses: `registered` (a key registered, never
connected), `online`, `offline` (it said goodbye, or its heartbeat stopped: Flower lists a node
online until HEARTBEAT_PATIENCE (2) x its `heartbeat_interval` (30 s) after its last heartbeat, so
a SuperNode killed without a goodbye stays `online` up to 60 s), `unregistered` (ignored here).
Each pool also keeps when its online nodes were last heard from (`PoolHealth.heard`): the canary
gate (engine.canary) counts only SuperNodes heard from after its canary became Ready.

The shape (README, "Flower-level health"; `flower` of each federation in `status -o json` and
`/api/v1/status`) is `FlowerHealth.to_dict()`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from syncer.cluster.flower_control import UNREGISTERED, RegisteredNode, RunInfo, one_line
from syncer.observe.conditions import HealthReason, UnitCondition
from syncer.plan import ExpectedPool, FlowerTarget

RUN_STATES = ("pending", "starting", "running", "completed", "failed", "stopped")
NODE_STATES = ("online", "offline", "registered", "expected")
GRACE = 30.0  # seconds SuperNodes may take to connect once their pods are Ready before it is Degraded
MAX_POOLS = 64  # pools reported (and labelled in metrics) per federation; the rest are summed in counts
MAX_FAILURE = 300  # characters of a run's failure message
# answers' codes that say the SuperLink was not asked: off, not yet, or a Service name an agent outside
# the cluster cannot resolve (agent.flower_probe): no health lowered, no series
UNCHECKED = ("disabled", "pending", "outside-cluster")
HEARTBEAT_PATIENCE = 2  # Flower's (1.26 - 1.42): a node is online until this many heartbeat intervals after the last


def heard_at(node: RegisteredNode) -> float | None:
    """When the SuperLink last heard from `node` (its last heartbeat, or its activation): Flower
    sets `online_until` to that time plus HEARTBEAT_PATIENCE heartbeat intervals. None when the
    answer does not say (no heartbeat times)."""
    if node.online_until <= 0 or node.heartbeat_interval <= 0:
        return None
    return node.online_until - HEARTBEAT_PATIENCE * node.heartbeat_interval


def _heard(nodes: Iterable[RegisteredNode]) -> tuple[float, ...] | None:
    """When each online node of `nodes` was last heard from; None if any of them does not say."""
    times: list[float] = []
    for n in nodes:
        if n.status == "online":
            at = heard_at(n)
            if at is None:
                return None
            times.append(at)
    return tuple(times)


@dataclass(frozen=True)
class ControlAnswer:
    """One round's answer of a SuperLink's Control API: nodes and runs, or the error (then both None)."""

    address: str
    checked_at: str  # ISO 8601 UTC
    nodes: tuple[RegisteredNode, ...] | None = None
    runs: tuple[RunInfo, ...] | None = None
    error: str = ""
    code: str = ""  # ControlErrorCode value, or one of UNCHECKED
    truncated: bool = False  # nodes or runs were cut at their limit (flower_control.MAX_NODES, MAX_RUNS)

    @property
    def reachable(self) -> bool:
        return self.nodes is not None


@dataclass(frozen=True)
class PoolHealth:
    unit: str
    pool: str
    cluster: str
    expected: int
    online: int = 0
    offline: int = 0
    registered: int = 0
    matched_by: str = "count"  # publicKey | count
    # when its online nodes were last heard from (matched by count: every online node
    # of no known key); None: the SuperLink does not say. Not compared: it moves at every heartbeat
    heard: tuple[float, ...] | None = field(default=None, compare=False)

    @property
    def short(self) -> int:
        return max(self.expected - self.online, 0)

    def to_dict(self) -> dict[str, Any]:
        return {"unit": self.unit, "pool": self.pool, "cluster": self.cluster, "expected": self.expected,
                "online": self.online, "offline": self.offline, "registered": self.registered,
                "matchedBy": self.matched_by}


@dataclass(frozen=True)
class FlowerHealth:
    reachable: bool
    address: str
    checked_at: str
    error: str = ""
    code: str = ""
    pools: tuple[PoolHealth, ...] = ()
    online: int = 0
    offline: int = 0
    registered: int = 0
    unmatched: int = 0
    runs: dict[str, int] = field(default_factory=dict)
    last_failure: RunInfo | None = None
    failed: tuple[RunInfo, ...] = ()  # every failed run the SuperLink lists (for news: see new_failures)
    truncated: bool = False  # the answer listed more nodes or runs than are read: counts are of the first ones
    active: tuple[RunInfo, ...] = ()  # the runs starting or running: what a restart would interrupt (engine.holds)

    @property
    def expected(self) -> int:
        return sum(p.expected for p in self.pools)

    @property
    def connected(self) -> str:
        """The CONNECTED cell: online/expected, or - when not checked."""
        return f"{sum(min(p.online, p.expected) for p in self.pools)}/{self.expected}" if self.reachable else "-"

    def short_pools(self) -> list[PoolHealth]:
        return [p for p in self.pools if p.short]

    def to_dict(self) -> dict[str, Any]:
        failure = None
        if self.last_failure is not None:
            failure = {"runId": self.last_failure.run_id, "message": failure_message(self.last_failure),
                       "finishedAt": self.last_failure.finished_at}
        return {
            "reachable": self.reachable, "error": self.error, "code": self.code, "checkedAt": self.checked_at,
            "address": self.address,
            "supernodes": {"expected": self.expected, "registered": self.registered, "online": self.online,
                           "offline": self.offline, "unmatched": self.unmatched,
                           "pools": [p.to_dict() for p in self.pools]},
            "runs": {**{s: self.runs.get(s, 0) for s in RUN_STATES}, "lastFailure": failure},
            **({"truncated": True} if self.truncated else {}),
        }


def failure_message(run: RunInfo) -> str:
    return one_line(run.details or "failed (the SuperLink gives no details)", MAX_FAILURE)


def active_runs(answer: ControlAnswer) -> tuple[RunInfo, ...]:
    """The runs of an answer that are starting or running: what a restart would interrupt."""
    return tuple(r for r in answer.runs or () if run_state(r) in ("starting", "running"))


def run_state(run: RunInfo) -> str:
    """pending | starting | running | completed | failed | stopped ("" for a status Flower may add)."""
    if run.status == "finished":
        return run.sub_status if run.sub_status in ("completed", "failed", "stopped") else "failed"
    return run.status if run.status in ("pending", "starting", "running") else ""


def _pool_expected(pool: ExpectedPool, desired: dict[tuple[str, str], int]) -> int:
    if pool.expected is not None:
        return pool.expected
    return desired.get((pool.unit, pool.pool), 0)


def compute(target: FlowerTarget, answer: ControlAnswer, desired: dict[tuple[str, str], int] | None = None
            ) -> FlowerHealth:
    """The federation's health from what Git expects (`target`) and the Control API's answer.
    `desired`: (unit id, pool) -> pods its workload wants, for pools whose count Git leaves to the
    cluster (DaemonSets)."""
    desired = desired or {}
    pools = target.pools[:MAX_POOLS]
    if answer.nodes is None:
        return FlowerHealth(False, answer.address, answer.checked_at, answer.error, answer.code,
                            tuple(PoolHealth(p.unit, p.pool, p.cluster, _pool_expected(p, desired)) for p in pools))
    nodes = [n for n in answer.nodes if n.status != UNREGISTERED]
    status = Counter(n.status for n in nodes)
    owner: dict[bytes, int] = {}
    for i, p in enumerate(pools):
        for key in p.keys:
            owner.setdefault(key, i)
    by_pool: list[Counter[str]] = [Counter() for _ in pools]
    members: list[list[RegisteredNode]] = [[] for _ in pools]
    rest: list[RegisteredNode] = []
    for n in nodes:
        at = owner.get(n.public_key.strip())
        if at is None:
            rest.append(n)
        else:
            by_pool[at][n.status] += 1
            members[at].append(n)
    # nodes of no known key: credited by count to the pools without keys, in order
    free_online = sum(1 for n in rest if n.status == "online")
    rest_heard = _heard(rest) if any(not p.keys for p in pools) else None
    unmatched = len(rest)
    out = []
    for i, p in enumerate(pools):
        expected = _pool_expected(p, desired)
        if p.keys:
            c = by_pool[i]
            out.append(PoolHealth(p.unit, p.pool, p.cluster, expected, c["online"], c["offline"], c["registered"],
                                  "publicKey", _heard(members[i])))
            continue
        took = min(free_online, expected)
        free_online -= took
        unmatched -= took
        out.append(PoolHealth(p.unit, p.pool, p.cluster, expected, took, heard=rest_heard))
    runs = Counter(run_state(r) for r in answer.runs or ())
    runs.pop("", None)
    failed = [r for r in answer.runs or () if run_state(r) == "failed"]
    last = max(failed, key=lambda r: (r.finished_at, r.run_id)) if failed else None
    return FlowerHealth(True, answer.address, answer.checked_at, pools=tuple(out), online=status["online"],
                        offline=status["offline"], registered=status["registered"], unmatched=max(unmatched, 0),
                        runs=dict(runs), last_failure=last, failed=tuple(failed), truncated=answer.truncated,
                        active=active_runs(answer))


def health_condition(health: FlowerHealth | None, *, short_for: float = 0.0, grace: float = GRACE
                     ) -> UnitCondition | None:
    """The Flower-level part of a federation's Healthy condition (a `HealthCheck`'s answer):
    Unknown with the error when the Control API does not answer; Degraded when a pool has fewer
    SuperNodes online than expected for `grace` seconds or more (`short_for`: how long it has been
    short), Progressing before; None when all is well or nothing was checked."""
    if health is None or health.code in UNCHECKED:
        return None
    if not health.reachable:
        return UnitCondition("Healthy", False, HealthReason.UNKNOWN,
                             f"the SuperLink's Control API at {health.address} does not answer: {health.error}")
    short = health.short_pools()
    if not short:
        return None
    what = "; ".join(f"{p.unit if p.unit else ''}{' pool ' + p.pool}: {p.online}/{p.expected} SuperNodes connected"
                     + (f" ({p.offline} offline)" if p.offline else "") for p in short[:3])
    if short_for < grace:
        return UnitCondition("Healthy", False, HealthReason.PROGRESSING, f"SuperNodes connecting: {what}")
    return UnitCondition("Healthy", False, HealthReason.DEGRADED,
                         f"pods ready but SuperNodes not connected to the SuperLink: {what}")


def forgotten_keys(target: FlowerTarget, answer: ControlAnswer) -> frozenset[bytes]:
    """The keys flower-syncer registers with this SuperLink that it does not know at all (not even
    as unregistered): it lost its state (restarted with its state in memory, or on a new volume),
    and refuses their SuperNodes until they are registered again."""
    if not target.registered or answer.nodes is None:
        return frozenset()
    known = {n.public_key.strip() for n in answer.nodes}
    return frozenset(k for k in target.registered if k not in known)


def new_failures(runs: Iterable[RunInfo], seen: set[int]) -> list[RunInfo]:
    """Failed runs whose id is not in `seen` (each is news once); adds them to `seen`."""
    out = [r for r in runs if run_state(r) == "failed" and r.run_id not in seen]
    seen.update(r.run_id for r in out)
    return sorted(out, key=lambda r: r.run_id)


def lost_pools(before: FlowerHealth | None, now: FlowerHealth) -> list[PoolHealth]:
    """Pools that had their SuperNodes and now have fewer online than expected (each drop once)."""
    if before is None or not before.reachable or not now.reachable:
        return []
    had = {(p.unit, p.pool) for p in before.pools if p.expected and not p.short}
    return [p for p in now.pools if p.short and (p.unit, p.pool) in had]


Series = tuple[list[tuple[str, str, str, int]], list[tuple[str, str, int]]]


def metric_series(unit: str, health: FlowerHealth) -> Series:
    """(unit, pool, state, value) for flower_syncer_federation_supernodes and (unit, status, value)
    for flower_syncer_federation_runs: bounded labels (pools of Git, MAX_POOLS at most; fixed
    states and statuses). Nodes of no pool count under pool "-" (unmatched)."""
    nodes: list[tuple[str, str, str, int]] = []
    if not health.reachable:
        return nodes, []
    for p in health.pools:
        pool = p.pool if p.unit == unit else p.unit
        for state, value in (("online", p.online), ("offline", p.offline), ("registered", p.registered),
                             ("expected", p.expected)):
            nodes.append((unit, pool, state, value))
    nodes.append((unit, "-", "online", health.unmatched))
    runs = [(unit, s, health.runs.get(s, 0)) for s in RUN_STATES]
    return nodes, runs


def connected_cell(flower: Mapping[str, Any] | None) -> str:
    """`online/expected` of a Flower-level health dict (observe.flower_health), online counted per
    pool up to what it expects; `-` when there is none or the SuperLink did not answer."""
    if not flower or not flower.get("reachable"):
        return "-"
    pools = (flower.get("supernodes") or {}).get("pools") or []
    expected = sum(int(p.get("expected") or 0) for p in pools)
    online = sum(min(int(p.get("online") or 0), int(p.get("expected") or 0)) for p in pools)
    return f"{online}/{expected}"


def recorded_flower_check(subject: Any) -> UnitCondition | None:
    """The HealthCheck of a status read from the cluster: the Flower-level condition the agent
    recorded on the unit's FlowerUnit, while its pods are ready (the agent's own rule)."""
    cond = (subject.flower or {}).get("condition")
    if not subject.ready or not isinstance(cond, Mapping) or cond.get("reason") not in _FLOWER_REASONS:
        return None
    return UnitCondition("Healthy", False, str(cond["reason"]), str(cond.get("message") or ""))


_FLOWER_REASONS = {r.value for r in HealthReason} - {HealthReason.HEALTHY.value}


def runs_in_progress(flower: Mapping[str, Any] | None) -> str:
    """`2 runs running`, `1 run running, 1 starting`, `no run in progress`, or why it is unknown:
    what a restart would interrupt, from a Flower-level health dict (as the agent recorded it)."""
    if not flower:
        return "runs unknown: no Flower-level health recorded by the agent"
    if not flower.get("reachable"):
        return "runs unknown: the SuperLink's Control API did not answer the agent"
    runs = flower.get("runs") or {}
    running, starting = int(runs.get("running") or 0), int(runs.get("starting") or 0)
    if not running and not starting:
        return "no run in progress"
    parts = [f"{running} run{'s' if running != 1 else ''} running"] if running else []
    if starting:
        parts.append(f"{starting} starting" if running else f"{starting} run{'s' if starting != 1 else ''} starting")
    return ", ".join(parts)
