"""Canary pools, the engine's rules (pure: the desired and live StatefulSet or DaemonSet, its pods,
what Flower sees and the clock in; what to apply and why out). syncer.models.canary says what Git
sets; the Applier (engine.apply) asks engine.rollout for every canary pool it applies over a live
one. DaemonSet pools: see the section at the end (`OnDelete`, the same `judge_stage`).

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
from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum
from typing import Any

from syncer.identity import (
    ANN_CANARY,
    ANN_CANARY_DEADLINE,
    ANN_CANARY_FROM,
    ANN_CANARY_GATE,
    ANN_CANARY_NODES,
    ANN_CANARY_TEMPLATE,
    ObjectRef,
)

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
        """The canary a rendered StatefulSet, DaemonSet or Deployment carries (render.canary), None without one."""
        if workload.get("kind") not in ("StatefulSet", "DaemonSet", "Deployment"):
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
    node: str = ""  # a DaemonSet's pod: the node it runs on (or is bound to run on)


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
    return _seen(pod, index, str(labels.get("controller-revision-hash", "")))


def _seen(pod: Mapping[str, Any], index: int, revision: str, node: str = "") -> PodSeen:
    meta = pod.get("metadata") or {}
    name = str(meta.get("name", ""))
    status = pod.get("status") or {}
    ready: dict[str, Any] = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), {})
    problem = ""
    for c in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
        waiting = (c.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in FATAL:
            problem = f"{c.get('name', '?')}: {waiting['reason']}"
            break
    return PodSeen(name, index, revision, ready.get("status") == "True", epoch(ready.get("lastTransitionTime")),
                   epoch(meta.get("creationTimestamp")), problem, bool(meta.get("deletionTimestamp")), node)


@dataclass(frozen=True)
class Stage:
    """A canary stage in progress, whichever the workload: how many canary SuperNodes, the revision
    they must be on, whether the controller has seen it, and the canary's pods (any revision)."""

    want: int
    update: str
    seen: bool
    pods: tuple[PodSeen, ...]


def judge(spec: CanarySpec, rollout: Rollout, pods: Sequence[PodSeen], flower: FlowerSeen | None, *,
          now: float) -> Verdict:
    """Passed, Failed or Waiting for a StatefulSet's canary stage in progress (see the module docstring)."""
    canary = tuple(p for p in pods if rollout.partition <= p.ordinal < rollout.replicas)
    return judge_stage(spec, Stage(rollout.replicas - rollout.partition, rollout.update, rollout.seen, canary),
                       flower, now=now)


def judge_stage(spec: CanarySpec, stage: Stage, flower: FlowerSeen | None, *, now: float) -> Verdict:
    """Passed, Failed or Waiting for a canary stage (a StatefulSet's or a DaemonSet's): the same gate."""
    want = stage.want
    new = sorted((p for p in stage.pods if stage.seen and p.revision == stage.update and not p.terminating),
                 key=lambda p: (p.ordinal, p.node, p.name))
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



# -- DaemonSet pools ---------------------------------------------------------------------------------
#
# A DaemonSet has no partition. Kubernetes' own way to stop its rollout where one wants is
# `updateStrategy: OnDelete`: its controller puts a pod on the new template only when that pod is
# deleted. A canary stage applies the new template with `OnDelete` and the canary nodes' names in
# `flower-syncer.io/canary-nodes` (the first `count` nodes of the pool by name, fewer than all), and
# deletes the canary nodes' pods; the controller creates them on the new template. The revision a
# pod is on is its `pod-template-generation` label, which the controller sets from the DaemonSet's
# `deprecated.daemonset.template.generation` (the API server raises it at each template change; the
# controller's own test of an updated pod, with the pod's `controller-revision-hash`). The same
# `judge_stage` decides; on a pass the rendered `RollingUpdate` is applied and the controller rolls
# the rest (`maxUnavailable` at a time); on a failure nothing is written and the rest stays on the
# old template. Everything is read from the cluster at each look: an agent restart loses nothing.

DS_GENERATION = "deprecated.daemonset.template.generation"  # on a DaemonSet, raised at each template change
POD_GENERATION = "pod-template-generation"  # on its pods: the generation they were created from


@dataclass(frozen=True)
class DaemonRollout:
    """What the live DaemonSet says of its rollout."""

    on_delete: bool  # updateStrategy OnDelete: a canary stage holds the rest (the rendered form never is)
    generation: str  # deprecated.daemonset.template.generation: its pods on the template carry it
    seen: bool  # its controller has seen the last change (status.observedGeneration)
    desired: int  # status.desiredNumberScheduled
    updated: int  # status.updatedNumberScheduled
    template: str  # the pod template digest last applied (ANN_CANARY_TEMPLATE)
    nodes: tuple[str, ...]  # the canary's nodes (ANN_CANARY_NODES)

    @classmethod
    def of(cls, live: Mapping[str, Any]) -> DaemonRollout:
        spec, status = live.get("spec") or {}, live.get("status") or {}
        meta = live.get("metadata") or {}
        ann = meta.get("annotations") or {}
        return cls((spec.get("updateStrategy") or {}).get("type") == "OnDelete", str(ann.get(DS_GENERATION, "")),
                   status.get("observedGeneration", 0) >= meta.get("generation", 0),
                   int(status.get("desiredNumberScheduled", 0) or 0), int(status.get("updatedNumberScheduled", 0) or 0),
                   str(ann.get(ANN_CANARY_TEMPLATE, "")),
                   tuple(n for n in str(ann.get(ANN_CANARY_NODES, "")).split(",") if n))

    def rolling(self) -> bool:
        """A canary stage is going on: `OnDelete` and pods remain on an earlier template."""
        return self.on_delete and (not self.seen or self.updated < self.desired)


def pod_node(pod: Mapping[str, Any]) -> str:
    """The node a DaemonSet's pod runs on; before it is bound, the one its node affinity names."""
    spec = pod.get("spec") or {}
    if spec.get("nodeName"):
        return str(spec["nodeName"])
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    for term in required.get("nodeSelectorTerms") or []:
        for match in term.get("matchFields") or []:
            if match.get("key") == "metadata.name" and match.get("values"):
                return str(match["values"][0])
    return ""


def daemon_pod_seen(pod: Mapping[str, Any]) -> PodSeen:
    """A DaemonSet pool's pod as the canary rules read it: its revision is its template generation."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return _seen(pod, 0, str(labels.get(POD_GENERATION, "")), pod_node(pod))


def canary_nodes(pods: Sequence[PodSeen], count: int) -> tuple[str, ...]:
    """The nodes whose pods take a change first: the first `count` of the pool's nodes by name,
    always fewer than all of them (a canary as large as the pool would restart it all at once)."""
    nodes = sorted({p.node for p in pods if p.node})
    return tuple(nodes[:max(min(count, len(nodes) - 1), 0)])


def daemon_stage(rollout: DaemonRollout, pods: Sequence[PodSeen]) -> Stage:
    """The canary stage of a DaemonSet: the pods on its canary nodes."""
    return Stage(len(rollout.nodes), rollout.generation, rollout.seen,
                 tuple(p for p in pods if p.node in rollout.nodes))


def stale_canary(nodes: Sequence[str], generation: str, pods: Sequence[PodSeen]) -> list[str]:
    """Pods of the canary nodes on an earlier template, to delete: with `OnDelete`, the controller
    puts a node's pod on the new template only when it is deleted."""
    return sorted(p.name for p in pods if p.node in nodes and generation and p.revision != generation
                  and not p.terminating)


def with_on_delete(desired: Mapping[str, Any], nodes: Sequence[str]) -> dict[str, Any]:
    """A copy of a canary DaemonSet as a canary stage applies it: `OnDelete`, and its canary nodes."""
    meta = dict(desired["metadata"])
    meta["annotations"] = {**(meta.get("annotations") or {}), ANN_CANARY_NODES: ",".join(nodes)}
    return {**desired, "metadata": meta, "spec": {**desired["spec"], "updateStrategy": {"type": "OnDelete"}}}


# -- SuperNode releases (a Deployment) ------------------------------------------------------------
#
# A Deployment has no partition, and `spec.paused` creates no new ReplicaSet at all. What stops its
# controller where wanted is its own availability rule: applied with `strategy: RollingUpdate`
# (`maxSurge: 0, maxUnavailable: N`), `minReadySeconds` of 68 years and no progress deadline, it
# scales the old ReplicaSet down by `N`, the new one up to `N`, and stops: the new pods never count
# as available, so nothing more may become unavailable (docs/rollouts.md, checked on the local
# control plane). The stage records the `pod-template-hash` of the pods it started over
# (`flower-syncer.io/canary-from`): a pod with any other hash is the canary's (the Deployment's
# status does not name its new ReplicaSet). The same `judge_stage` decides; on a pass the rendered
# strategy is applied (no `minReadySeconds`) and the controller rolls the rest; on a failure nothing
# is written. A fix during the stage records the failed canary's hash too: the controller scales
# that ReplicaSet down (its pods are unhealthy) and the new one up to `N`.

BRAKE = 2147483646  # minReadySeconds while a canary stage holds the rest (about 68 years)
NO_DEADLINE = 2147483647  # progressDeadlineSeconds: none (it must exceed minReadySeconds)
POD_HASH = "pod-template-hash"  # on a Deployment's pods: their ReplicaSet's template hash


@dataclass(frozen=True)
class DeployRollout:
    """What the live Deployment says of its rollout."""

    braked: bool  # minReadySeconds is the brake: a canary stage holds the rest
    want: int  # the canary's SuperNodes (the brake's maxUnavailable)
    seen: bool  # its controller has seen the last change (status.observedGeneration)
    replicas: int
    updated: int  # status.updatedReplicas
    template: str  # the pod template digest last applied (ANN_CANARY_TEMPLATE)
    before: tuple[str, ...]  # the pod-template-hash of the pods the stage started over (ANN_CANARY_FROM)

    @classmethod
    def of(cls, live: Mapping[str, Any]) -> DeployRollout:
        spec, status = live.get("spec") or {}, live.get("status") or {}
        meta = live.get("metadata") or {}
        ann = meta.get("annotations") or {}
        unavailable = ((spec.get("strategy") or {}).get("rollingUpdate") or {}).get("maxUnavailable")
        return cls(spec.get("minReadySeconds") == BRAKE, unavailable if isinstance(unavailable, int) else 0,
                   status.get("observedGeneration", 0) >= meta.get("generation", 0),
                   int(spec.get("replicas", 1) or 0), int(status.get("updatedReplicas", 0) or 0),
                   str(ann.get(ANN_CANARY_TEMPLATE, "")),
                   tuple(h for h in str(ann.get(ANN_CANARY_FROM, "")).split(",") if h))

    def rolling(self) -> bool:
        """A canary stage is going on: the brake is on and pods remain on an earlier template."""
        return self.braked and (not self.seen or self.updated < self.replicas)


def deploy_pod_seen(pod: Mapping[str, Any]) -> PodSeen:
    """A release's pod as the canary rules read it: its revision is its pod-template-hash."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return _seen(pod, 0, str(labels.get(POD_HASH, "")))


def deploy_canary(count: int, replicas: object) -> int:
    """The canary of a Deployment of `replicas`: `count`, always fewer than all of them."""
    return max(min(count, replicas - 1), 0) if isinstance(replicas, int) else 0


def deploy_stage(rollout: DeployRollout, pods: Sequence[PodSeen]) -> Stage:
    """The canary stage of a Deployment: its pods on a template the stage did not start over."""
    new = "(new)"
    marked = tuple(p if p.revision in rollout.before else replace(p, revision=new) for p in pods)
    return Stage(rollout.want, new, rollout.seen, marked)


def with_brake(desired: Mapping[str, Any], want: int, before: Sequence[str]) -> dict[str, Any]:
    """A copy of a release's Deployment as a canary stage applies it (see above)."""
    meta = dict(desired["metadata"])
    meta["annotations"] = {**(meta.get("annotations") or {}), ANN_CANARY_FROM: ",".join(sorted(before))}
    spec = {**desired["spec"], "strategy": {"type": "RollingUpdate",
                                            "rollingUpdate": {"maxSurge": 0, "maxUnavailable": want}},
            "minReadySeconds": BRAKE, "progressDeadlineSeconds": NO_DEADLINE}
    return {**desired, "metadata": meta, "spec": spec}
