"""Canary pools: a change of a pool's pod template reaches a few SuperNodes first, and the rest of
the pool only once those are healthy (docs/rollouts.md; the engine's side is syncer.engine.canary).
Set on the Federation with annotations, so the document stays a valid flower-operator document:

    flower-syncer.io/canary: "1"                 (every pool: 1 SuperNode first)
    flower-syncer.io/canary: "gpu=1, cpu=2"      (per pool; a pool not named rolls as usual)
    flower-syncer.io/canary-gate: 60s            (how long the canary stays healthy; the default)
    flower-syncer.io/canary-deadline: 10m        (by when it must be healthy, from its start; the default)

A StatefulSet pool stops its rollout at a partition, a DaemonSet pool (mode: DaemonSet) with
`OnDelete` while the canary's nodes take the change (syncer.engine.canary). A canary as large as a
StatefulSet pool would be the whole pool: an error. A DaemonSet pool's size is its nodes', known
only in the cluster: its canary is always fewer than all of them (a pool on one node has none).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from syncer.diagnostics import FieldPath
from syncer.identity import ANN_CANARY, ANN_CANARY_DEADLINE, ANN_CANARY_GATE
from syncer.models.durations import duration_problem, parse_duration
from syncer.models.k8s import Issue

DEFAULT_GATE = 60.0  # seconds the canary's SuperNodes stay Ready (and online) before the rest rolls
DEFAULT_DEADLINE = 600.0  # seconds from the canary's start by which it must have passed its gate
_PAIR = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?)\s*=\s*(\S+)$")
COUNT_HINT = 'write a number of SuperNodes (e.g. "1") or pool=count pairs (e.g. "gpu=1, cpu=2")'


@dataclass(frozen=True)
class CanarySettings:
    every: int | None = None  # the count of every pool ("1")
    pools: dict[str, int] = field(default_factory=dict)  # per pool ("gpu=1")
    gate: float = DEFAULT_GATE
    deadline: float = DEFAULT_DEADLINE

    def count(self, pool: str) -> int:
        """SuperNodes of `pool` that take a change first; 0: no canary."""
        return self.pools.get(pool, self.every or 0)


def _at(key: str) -> FieldPath:
    return ("metadata", "annotations", key)


def parse_counts(text: str) -> tuple[int | None, dict[str, int], str]:
    """(every pool's count, per-pool counts, problem) of a canary annotation's value."""
    value = text.strip()
    if value.isdigit():
        n = int(value)
        return (n, {}, "") if n >= 1 else (None, {}, f"{text!r}: a canary needs at least 1 SuperNode")
    pools: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in value.split(","))):
        match = _PAIR.match(part)
        if match is None or not match.group(3).isdigit():
            return None, {}, f"{text!r} is not a canary count"
        name, n = match.group(1), int(match.group(3))
        if n < 1:
            return None, {}, f"{part!r}: a canary needs at least 1 SuperNode"
        if name in pools:
            return None, {}, f"pool {name!r} is named twice"
        pools[name] = n
    if not pools:
        return None, {}, f"{text!r} is not a canary count"
    return None, pools, ""


def canary_settings(annotations: dict[str, str]) -> CanarySettings | None:
    """The settings of a well-formed document (canary_issues reports the rest); None without a canary."""
    if ANN_CANARY not in annotations:
        return None
    every, pools, problem = parse_counts(annotations[ANN_CANARY])
    if problem:
        return None
    gate = parse_duration(annotations.get(ANN_CANARY_GATE, "")) if ANN_CANARY_GATE in annotations else None
    deadline = (parse_duration(annotations.get(ANN_CANARY_DEADLINE, ""))
                if ANN_CANARY_DEADLINE in annotations else None)
    return CanarySettings(every, pools, DEFAULT_GATE if gate is None else gate,
                          DEFAULT_DEADLINE if deadline is None else deadline)


def canary_issues(annotations: dict[str, str], pools: Sequence[tuple[str, int | None]]) -> list[Issue]:
    """What is wrong with a Federation's canary annotations, each naming its annotation. `pools`:
    (name, replicas) of each pool; replicas None: a DaemonSet pool, as large as its nodes."""
    issues: list[Issue] = []
    for key in (ANN_CANARY_GATE, ANN_CANARY_DEADLINE):
        if key in annotations and (problem := duration_problem(annotations[key])):
            issues.append(Issue(_at(key), problem, "write e.g. 60s or 10m"))
    if ANN_CANARY not in annotations:
        return issues
    every, counts, problem = parse_counts(annotations[ANN_CANARY])
    if problem:
        return [*issues, Issue(_at(ANN_CANARY), problem, COUNT_HINT)]
    known = dict(pools)
    for name in counts:
        if name not in known:
            issues.append(Issue(_at(ANN_CANARY), f"there is no pool {name!r} (pools: {', '.join(known) or 'none'})",
                                "name a pool of spec.supernodes.pools"))
    for name, replicas in pools:
        n = counts.get(name, every or 0)
        if n and replicas is not None and n >= replicas:
            issues.append(Issue(_at(ANN_CANARY), f"a canary of {n} in pool {name!r} of {replicas} SuperNode"
                                f"{'' if replicas == 1 else 's'} is the whole pool: nothing would wait for it",
                                f"use a canary smaller than the pool (at most {replicas - 1}), name only larger "
                                "pools (gpu=1), or add replicas"))
    settings = canary_settings(annotations)
    if settings is not None and not issues and settings.gate >= settings.deadline:
        issues.append(Issue(_at(ANN_CANARY_GATE), f"the gate ({settings.gate:g}s) is not shorter than the deadline "
                            f"({settings.deadline:g}s): the canary could never pass",
                            f"shorten {ANN_CANARY_GATE} or lengthen {ANN_CANARY_DEADLINE}"))
    return issues
