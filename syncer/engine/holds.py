"""Rollouts that wait for training: whether a change that stops running pods (engine.disruption)
goes ahead now or is held while the federation's Flower runs are in progress (pure: the changes,
what is known of the runs, the settings and the clock in; a `Decision` out).

The rules, in order:

1. Nothing stops pods (Services, NetworkPolicies, labels, a Secret read at the next start): go.
2. Holding is off for the unit (`hold-for-runs: off`, or the admin's default is off): go.
3. A person released this hold (the FlowerUnit's `flower-syncer.io/release-hold` annotation, set
   by `flower-syncer resync --release-hold`, at or after the time the hold began): go.
4. The runs are not read yet (the agent just started: its first Flower-level health round is
   due): hold until they are. The runs are unknown (the SuperLink does not answer, or
   Flower-level health is off): go and say so; with `hold-strict: "true"` in Git, hold (until the
   deadline) instead.
5. No run is `starting` or `running`: go.
6. The deadline (`since` + the unit's hold duration, which the admin's maximum bounds) passed: go,
   and say which runs were still going.
7. Else hold: the run ids, since when, and until when.

The engine applies a decision through a `Gate` (the agent's, agent.holding): a workload whose
change the decision holds keeps its live spec and its old inventory entry, everything else of the
unit applies at once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum

from syncer.engine.changeset import Action, Change, UnitResult
from syncer.engine.disruption import Disruption
from syncer.engine.inventory import Entry
from syncer.identity import ObjectRef
from syncer.plan import Policy

ACTIVE_STATES = ("starting", "running")
HELD = "Held"  # the Synced reason of a unit whose restarting changes wait (observe.conditions)
MAX_RUN_IDS = 5  # run ids named in a message

Gate = Callable[[Disruption], "str | None"]
"""The engine's question for each workload change that stops pods: None to go ahead, or why it
is held (the message of its change entry)."""


class Why(StrEnum):
    """Why a decision went the way it did: the fixed set (Events, logs, `status -o json`)."""

    NO_RESTART = "NoRestart"
    HOLDS_OFF = "HoldsOff"
    RELEASED = "Released"
    RUNS_UNKNOWN = "RunsUnknown"
    NO_RUNS = "NoActiveRuns"
    DEADLINE = "DeadlinePassed"
    RUNS_ACTIVE = "RunsActive"  # held
    UNKNOWN_STRICT = "RunsUnknownStrict"  # held
    RUNS_PENDING = "RunsNotReadYet"  # held until the first answer (a restarted agent must not lose a hold)


@dataclass(frozen=True)
class ActiveRun:
    run_id: int
    state: str  # starting | running
    since: str = ""  # when it started running (or was created), as the SuperLink says


@dataclass(frozen=True)
class Runs:
    """What the agent knows of a federation's runs now: `known` False when the SuperLink was not
    asked or did not answer (then `why` says so)."""

    known: bool
    active: tuple[ActiveRun, ...] = ()
    why: str = ""
    pending: bool = False  # not known yet, but soon: the SuperLink was not asked yet (the agent just started)


@dataclass(frozen=True)
class HoldSettings:
    timeout: float  # seconds a hold lasts at most; 0: holding is off
    strict: bool = False

    @classmethod
    def of(cls, policy: Policy, default: float, maximum: float) -> HoldSettings:
        """The unit's settings from Git (`policy`) within the admin's default and maximum (a
        maximum of 0, "off", lets nothing be held)."""
        wanted = default if policy.hold_for_runs is None else policy.hold_for_runs
        return cls(min(wanted, maximum), policy.hold_strict)


@dataclass(frozen=True)
class Decision:
    hold: bool
    why: Why
    message: str
    runs: tuple[int, ...] = ()
    since: float | None = None  # when the hold began (epoch seconds)
    deadline: float | None = None  # when it goes ahead at the latest

    def to_dict(self) -> dict[str, object]:
        return {"held": self.hold, "reason": self.why.value, "message": self.message, "runs": list(self.runs),
                "since": stamp(self.since) if self.since is not None else None,
                "deadline": stamp(self.deadline) if self.deadline is not None else None}


def decide(disruptions: Sequence[Disruption], runs: Runs | None, settings: HoldSettings, *, now: float,
           held_since: float | None = None, released_at: float | None = None,
           holding_for: tuple[int, ...] = ()) -> Decision:
    """Hold or go (see the module docstring). `held_since`: when the current hold began, if one
    is going on; `released_at`: when a person last released holds of the unit; `holding_for`: the
    runs seen in progress the hold going on is for (then runs that cannot be read now keep it)."""
    stopping = [d for d in disruptions if d.stops_pods()]
    if not stopping:
        return Decision(False, Why.NO_RESTART, "no change restarts pods")
    what = ", ".join(dict.fromkeys(d.subject() for d in stopping))
    if settings.timeout <= 0:
        return Decision(False, Why.HOLDS_OFF, f"{what}: holding for runs is off")
    since = held_since if held_since is not None else now
    if released_at is not None and released_at >= since:
        return Decision(False, Why.RELEASED, f"{what}: the hold was released by a person at {stamp(released_at)}")
    deadline = since + settings.timeout
    if runs is not None and runs.pending and now < deadline:
        return Decision(True, Why.RUNS_PENDING, f"{what} held until the agent has read the federation's runs "
                        f"({runs.why}); goes ahead at {stamp(deadline)} at the latest", since=since, deadline=deadline)
    if runs is None or not runs.known:
        why = runs.why if runs is not None and runs.why else "Flower-level health did not read them"
        if not settings.strict and not holding_for:  # a hold for runs seen in progress is kept until
            # its deadline: one failed read of a busy SuperLink must not let the restart through mid-run
            return Decision(False, Why.RUNS_UNKNOWN, f"{what}: not held: the federation's runs are unknown ({why}); "
                            "set flower-syncer.io/hold-strict: \"true\" to hold then")
        if now >= deadline:
            return Decision(False, Why.DEADLINE, f"{what}: went ahead at the deadline {stamp(deadline)}; the runs "
                            f"were still unknown ({why})", since=since, deadline=deadline)
        because = "hold-strict is set" if settings.strict else "it was holding for runs in progress"
        return Decision(True, Why.UNKNOWN_STRICT, f"{what} held: the federation's runs are unknown ({why}) and "
                        f"{because}; goes ahead at {stamp(deadline)} at the latest", holding_for, since=since,
                        deadline=deadline)
    ids = tuple(sorted(r.run_id for r in runs.active))
    if not ids:
        return Decision(False, Why.NO_RUNS, f"{what}: no run in progress")
    listed = run_list(runs.active)
    if now >= deadline:
        return Decision(False, Why.DEADLINE, f"{what}: went ahead at the deadline {stamp(deadline)} with {listed} "
                        "still in progress", ids, since, deadline)
    return Decision(True, Why.RUNS_ACTIVE, f"{what} held while {listed} in progress (held since {stamp(since)}; "
                    f"goes ahead when they end, or at {stamp(deadline)})", ids, since, deadline)


def hold_removals(leftovers: Sequence[ObjectRef], removals: Mapping[ObjectRef, Disruption | None],
                  gate: Gate | None, res: UnitResult, entries: dict[ObjectRef, Entry],
                  recorded: Mapping[ObjectRef, Entry]) -> list[ObjectRef]:
    """The leftovers still to prune: a workload whose removal the gate holds (a pool removed from a
    Federation while it trains) stays as it is, with its recorded inventory entry, like a held
    restart; the result says so."""
    if gate is None:
        return list(leftovers)
    out = []
    for ref in leftovers:
        disruption = removals.get(ref)
        why = gate(disruption) if disruption is not None and disruption.stops_pods() else None
        if disruption is None or why is None:
            out.append(ref)
            continue
        res.changes.append(Change(ref, Action.SKIPPED, f"held: {why}"))
        res.note_disruption(disruption, held=True)
        entries[ref] = recorded[ref]
    return out


def run_list(active: Sequence[ActiveRun]) -> str:
    """`run 12 running`, `runs 12, 13 running and 14 starting`."""
    ids = sorted(active, key=lambda r: r.run_id)
    by_state: dict[str, list[int]] = {}
    for r in ids:
        by_state.setdefault(r.state, []).append(r.run_id)
    parts = []
    for state in ("running", "starting"):
        got = by_state.get(state, [])
        if got:
            shown = ", ".join(str(i) for i in got[:MAX_RUN_IDS]) + (f" (+{len(got) - MAX_RUN_IDS})"
                                                                    if len(got) > MAX_RUN_IDS else "")
            parts.append(f"{shown} {state}")
    return f"run{'s' if len(ids) > 1 else ''} " + " and ".join(parts)


def held_condition(held: Sequence[Disruption]) -> str:
    """The stable message an inventory records while a unit is held (no run ids, no times: they
    change, and the record is written only when its message does; its `since` is the hold's)."""
    what = ", ".join(dict.fromkeys(d.subject() for d in held))
    return f"restart of {what} held until the federation's runs end (or its deadline)"


def stamp(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_stamp(text: str) -> float | None:
    """Epoch seconds of an RFC 3339 time (`2026-11-28T18:20:00Z`), None when it is not one."""
    try:
        return datetime.fromisoformat(text.strip().replace("Z", "+00:00")).timestamp()
    except (ValueError, AttributeError):
        return None
