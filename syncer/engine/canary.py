"""Canary pools, the engine's rules (pure: the desired and live StatefulSet, its pods, what Flower
sees and the clock in; what to apply and why out). syncer.models.canary says what Git sets; the
Applier (engine.apply) asks `plan_canary` for every canary pool it applies over a live one.

Kubernetes' own mechanism does the rolling: a StatefulSet's `updateStrategy.rollingUpdate.partition`.
Pods with an ordinal at or above the partition take a new pod template, the others keep the old
revision (and keep training). Rendered, the partition is 0 (flower-syncer owns the field); the
engine raises it:

1. **A new change** (the pod template's digest Git renders, `flower-syncer.io/canary-template`,
   differs from the live one): applied with partition `replicas - canary`: the last `canary`
   SuperNodes take it. A change that stops pods still asks the hold gate first (engine.holds).
   Pods of the canary left on an earlier, failed revision and not Ready are named for deletion:
   a StatefulSet with `OrderedReady` pods waits for a broken pod forever and never replaces it with
   the fix (Kubernetes' documented step after a failed rollout).
2. **A rollout in progress** (the live partition above 0 and the StatefulSet's current and update
   revisions differ, or its controller has not seen the last change yet): `judge` decides.
   - *Passed*: every canary pod is on the update revision and Ready for the gate time, and, when
     Flower-level health is read, the pool's SuperNodes are all online at the SuperLink, each
     heard from (a heartbeat, or its connection) at least `HEARD` seconds after the newest canary
     pod was made (the pods it replaced had stopped by then; a StatefulSet makes a pod again only
     once the old one is gone). Flower lists a SuperNode that stopped without a goodbye (killed,
     its node lost) `online` for up to 2 heartbeat intervals (60 s) after its last heartbeat:
     counting it would pass a canary whose SuperNode never connected. From a SuperLink that gives
     no heartbeat times, an answer counts when it was taken at least `SETTLE` seconds after the
     canary became Ready. Applied with partition 0: the rest rolls (asking the hold gate first, as
     it restarts pods).
   - *Failed*: a canary pod cannot start (crash loop, image pull error, bad configuration), or the
     deadline (from the canary's first new pod) passed before it passed: nothing is written, the
     rest of the pool stays on the old revision, the change fails with `Cause.CANARY_FAILED`.
     Judged again at each retry: a canary that recovers (the image was pushed late) still passes.
   - *Waiting*: anything else; the live partition stays, and the unit is looked at again in
     `retry` seconds.
3. Otherwise (nothing rolling): partition 0, as rendered.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from syncer.identity import ANN_CANARY, ANN_CANARY_DEADLINE, ANN_CANARY_GATE, ANN_CANARY_TEMPLATE, ObjectRef

# seconds after the canary is Ready before a SuperLink's answer without heartbeat times counts (and before
# any answer can fail the canary): Flower's HEARTBEAT_PATIENCE (2) x its heartbeat interval (30 s) + grace
SETTLE = 70.0
HEARD = 5.0  # seconds after the canary pod was made a SuperNode must be heard from to count (clocks differ)
POLL = 10.0  # seconds between looks at a canary in progress
# container states that say a pod will not start by itself (kubelet's waiting reasons)
FATAL = ("CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull", "InvalidImageName", "CreateContainerConfigError",
         "CreateContainerError", "RunContainerError", "ErrImageNeverPull")
CANARY = "Canary"  # the Synced reason of a unit whose pool change waits for its canary (observe.conditions)


class Step(StrEnum):
    STARTED = "Started"  # a new change went to the canary
    WAITING = "Waiting"
    PASSED = "Passed"  # the rest of the pool rolls
    FAILED = "Failed"


@dataclass(frozen=True)
class CanarySpec:
    count: int
    gate: float
    deadline: float

    @classmethod
    def of(cls, workload: Mapping[str, Any]) -> CanarySpec | None:
        """The canary a rendered StatefulSet carries (render.canary), None without one."""
        if workload.get("kind") != "StatefulSet":
            return None
        ann = (workload.get("metadata") or {}).get("annotations") or {}
        try:
            count, gate, deadline = int(ann[ANN_CANARY]), float(ann[ANN_CANARY_GATE]), float(ann[ANN_CANARY_DEADLINE])
        except (KeyError, ValueError):
            return None
        return cls(count, gate, deadline) if count > 0 else None


@dataclass(frozen=True)
class Rollout:
    """What the live StatefulSet says of its rollout."""

    replicas: int
    partition: int
    current: str  # status.currentRevision
    update: str  # status.updateRevision
    seen: bool  # its controller has seen the last change (status.observedGeneration)
    template: str  # the pod template digest last applied (ANN_CANARY_TEMPLATE)

    @classmethod
    def of(cls, live: Mapping[str, Any]) -> Rollout:
        spec, status = live.get("spec") or {}, live.get("status") or {}
        meta = live.get("metadata") or {}
        partition = ((spec.get("updateStrategy") or {}).get("rollingUpdate") or {}).get("partition") or 0
        return cls(int(spec.get("replicas", 1) or 0), int(partition), str(status.get("currentRevision", "")),
                   str(status.get("updateRevision", "")),
                   status.get("observedGeneration", 0) >= meta.get("generation", 0),
                   str((meta.get("annotations") or {}).get(ANN_CANARY_TEMPLATE, "")))

    def rolling(self) -> bool:
        """A canary stage is going on: the partition is raised and pods remain to update."""
        return self.partition > 0 and (not self.seen or self.current != self.update)


@dataclass(frozen=True)
class PodSeen:
    name: str
    ordinal: int
    revision: str
    ready: bool
    ready_since: float | None
    created: float | None
    problem: str = ""  # a FATAL waiting reason, with its container
    terminating: bool = False


@dataclass(frozen=True)
class FlowerSeen:
    """The pool as the federation's SuperLink last listed it (observe.flower_health.PoolHealth)."""

    online: int
    expected: int
    checked_at: float
    heard: tuple[float, ...] | None = None  # when its online nodes were last heard from; None: not said

    def fresh(self, since: float) -> int:
        """The pool's SuperNodes online and heard from at or after `since` (all online ones, when
        the SuperLink gives no heartbeat times)."""
        if self.heard is None:
            return self.online
        return min(self.online, sum(1 for t in self.heard if t >= since))


@dataclass(frozen=True)
class Verdict:
    step: Step
    message: str
    retry: float = POLL  # seconds until the rollout is looked at again (WAITING)
    asks_flower: bool = False  # WAITING for a newer answer of the SuperLink: ask it sooner than its turn


@dataclass(frozen=True)
class CanaryNote:
    """One canary pool's state after a sync (`UnitResult.canaries`)."""

    ref: ObjectRef
    pool: str
    step: Step
    message: str
    retry: float = POLL
    asks_flower: bool = False  # see Verdict

    def to_dict(self) -> dict[str, Any]:
        return {"object": str(self.ref), "pool": self.pool, "step": self.step.value, "message": self.message}


def epoch(stamp: object) -> float | None:
    if not isinstance(stamp, str) or not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def pod_seen(pod: Mapping[str, Any]) -> PodSeen | None:
    """A pool's pod as the canary rules read it; None for a pod without an ordinal."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    ordinal = labels.get("apps.kubernetes.io/pod-index")
    name = str(meta.get("name", ""))
    if ordinal is None:
        ordinal = name.rsplit("-", 1)[-1]
    try:
        index = int(ordinal)
    except ValueError:
        return None
    status = pod.get("status") or {}
    ready: dict[str, Any] = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), {})
    problem = ""
    for c in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
        waiting = (c.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in FATAL:
            problem = f"{c.get('name', '?')}: {waiting['reason']}"
            break
    return PodSeen(name, index, str(labels.get("controller-revision-hash", "")), ready.get("status") == "True",
                   epoch(ready.get("lastTransitionTime")), epoch(meta.get("creationTimestamp")), problem,
                   bool(meta.get("deletionTimestamp")))


def judge(spec: CanarySpec, rollout: Rollout, pods: Sequence[PodSeen], flower: FlowerSeen | None, *,
          now: float) -> Verdict:
    """Passed, Failed or Waiting for a canary stage in progress (see the module docstring)."""
    first = rollout.partition
    want = rollout.replicas - first
    canary = [p for p in pods if first <= p.ordinal < rollout.replicas]
    new = sorted((p for p in canary if rollout.seen and p.revision == rollout.update and not p.terminating),
                 key=lambda p: p.ordinal)
    broken = [p for p in new if p.problem]
    if broken:
        return Verdict(Step.FAILED, f"canary pod {broken[0].name} cannot start ({broken[0].problem.split(': ')[-1]})")
    started = min((p.created for p in new if p.created is not None), default=None)
    late = started is not None and now >= started + spec.deadline
    ready = [p for p in new if p.ready]
    if len(ready) < want:
        if late:
            return Verdict(Step.FAILED, f"the canary was not Ready within its deadline ({spec.deadline:g}s): "
                           f"{len(ready)} of {want} Ready on the new revision")
        return Verdict(Step.WAITING, f"{len(ready)} of {want} canary SuperNode{'s' if want > 1 else ''} Ready on the "
                       "new revision")
    since = max((p.ready_since or now for p in ready), default=now)  # none: the pool shrank below the partition
    if flower is not None:
        # the canary's pods were made after the SuperNodes they replace had stopped: one heard from
        # since is alive (the canary's own as soon as it connected, before its pod is Ready)
        made = max((p.created for p in ready if p.created is not None), default=since)
        fresh = flower.fresh(min(made, since) + HEARD)
        counted = flower.checked_at >= since + SETTLE  # every live SuperNode had a heartbeat since
        if fresh < flower.expected or not (counted or flower.heard is not None):
            if late and counted:
                return Verdict(Step.FAILED, f"the canary's SuperNodes are not online at the SuperLink within its "
                               f"deadline ({spec.deadline:g}s): {fresh} of {flower.expected} of the pool online")
            return Verdict(Step.WAITING, "the canary is Ready; waiting for the SuperLink to list the pool's "
                           f"SuperNodes online ({fresh} of {flower.expected} at its last answer)"
                           if counted or flower.heard is not None else
                           "the canary is Ready; waiting for the SuperLink's next answer", asks_flower=True)
    left = since + spec.gate - now
    if left > 0:
        return Verdict(Step.WAITING, f"the canary is healthy; the rest of the pool rolls after {spec.gate:g}s of it",
                       min(left + 0.5, POLL))
    online = ", its SuperNodes online at the SuperLink" if flower is not None else ""
    return Verdict(Step.PASSED, f"the canary was healthy for {spec.gate:g}s (Ready{online})")


def canary_partition(spec: CanarySpec, desired: Mapping[str, Any]) -> int:
    replicas = (desired.get("spec") or {}).get("replicas", 1)
    return max(int(replicas) - spec.count, 0) if isinstance(replicas, int) else 0


def with_partition(desired: Mapping[str, Any], partition: int) -> dict[str, Any]:
    """A copy of a canary StatefulSet with its partition set (the rest shares `desired`'s parts)."""
    spec = dict(desired["spec"])
    spec["updateStrategy"] = {"type": "RollingUpdate", "rollingUpdate": {"partition": partition}}
    return {**desired, "spec": spec}


def stuck_pods(rollout: Rollout, pods: Sequence[PodSeen], partition: int) -> list[str]:
    """Pods of the canary that a new change must replace but an `OrderedReady` StatefulSet never
    will: on the earlier (failed) update revision, not Ready."""
    if not rollout.update or rollout.update == rollout.current:
        return []
    return [p.name for p in pods if p.ordinal >= partition and p.revision == rollout.update and not p.ready
            and not p.terminating]

