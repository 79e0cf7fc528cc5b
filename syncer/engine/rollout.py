"""Canary pools in the Applier: which form of a canary StatefulSet, DaemonSet or release Deployment to apply now
(engine.canary decides; this module reads what the decision needs: the pool's pods, what
Flower-level health last saw of the pool) and the pods to delete by hand: a failed canary's, which an
`OrderedReady` StatefulSet never replaces itself, and a DaemonSet's canary nodes' pods, which its
controller puts on the new template (`OnDelete`) only once they are deleted."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from syncer.cluster.client import ApiError, Kube
from syncer.engine.canary import (
    CanaryNote,
    CanarySpec,
    DaemonRollout,
    DeployRollout,
    FlowerSeen,
    PodSeen,
    Rollout,
    Step,
    canary_nodes,
    canary_partition,
    daemon_pod_seen,
    daemon_stage,
    deploy_canary,
    deploy_pod_seen,
    deploy_stage,
    judge,
    judge_stage,
    pod_seen,
    stale_canary,
    stuck_pods,
    with_brake,
    with_on_delete,
    with_partition,
)
from syncer.engine.disruption import Disruption, Effect, target_of
from syncer.engine.normalize import with_fingerprint
from syncer.identity import ANN_APPLIED_HASH, ANN_CANARY_TEMPLATE, Manifest, ObjectRef

FlowerOf = Callable[[ObjectRef, str], "FlowerSeen | None"]
"""What Flower-level health last saw of a pool (its StatefulSet, its pool name); None when it is
not read (off, not asked yet, the SuperLink does not answer): the canary is judged on its pods."""


@dataclass
class CanaryPlan:
    desired: Manifest  # what to apply (its partition set, fingerprinted anew)
    note: CanaryNote | None = None
    failed: bool = False  # the canary failed: nothing is applied
    promote: Disruption | None = None  # the rest of the pool rolls: ask the hold gate
    stuck: list[str] = field(default_factory=list)  # pods to delete once the new change is applied
    stuck_now: bool = False  # delete `stuck` even when nothing is written (a DaemonSet's canary stage)
    canary: int | None = None  # a new change: the SuperNodes that take it first
    restarts: bool = False  # a new change restarts pods though `OnDelete` (a DaemonSet's canary nodes')
    kick: tuple[str, ...] = ()  # a DaemonSet's canary nodes, whose pods to delete once the change is applied


def refingerprinted(manifest: Manifest) -> Manifest:
    meta = dict(manifest["metadata"])
    meta["annotations"] = {k: v for k, v in (meta.get("annotations") or {}).items() if k != ANN_APPLIED_HASH}
    return with_fingerprint({**manifest, "metadata": meta})


class Rollouts:
    def __init__(self, kube: Kube, flower: FlowerOf | None = None, clock: Callable[[], float] = time.time) -> None:
        self.kube = kube
        self.flower = flower
        self.clock = clock

    def plan(self, ref: ObjectRef, desired: Manifest, live: Mapping[str, Any], spec: CanarySpec) -> CanaryPlan:
        if desired.get("kind") == "DaemonSet":
            return self._plan_daemon(ref, desired, live, spec)
        if desired.get("kind") == "Deployment":
            return self._plan_deploy(ref, desired, live, spec)
        rollout = Rollout.of(live)
        pool, _ = target_of(desired)
        partition = canary_partition(spec, desired)
        wanted = str(desired["metadata"].get("annotations", {}).get(ANN_CANARY_TEMPLATE, ""))
        if wanted != rollout.template:  # a new change (or a new canary): the canary takes it first
            stuck = stuck_pods(rollout, self._pods(desired), partition) if rollout.rolling() else []
            note = CanaryNote(ref, pool, Step.STARTED, f"pool {pool}: a change of the pod template goes to "
                              f"{spec.count} of {partition + spec.count} SuperNodes first")
            return CanaryPlan(refingerprinted(with_partition(desired, partition)), note, stuck=stuck,
                              canary=spec.count)
        if not rollout.rolling():
            return CanaryPlan(desired)
        flower = self.flower(ref, pool) if self.flower is not None else None
        verdict = judge(spec, rollout, self._pods(desired), flower, now=self.clock())
        note = CanaryNote(ref, pool, verdict.step, f"pool {pool}: {verdict.message}", verdict.retry,
                          verdict.asks_flower)
        if verdict.step is Step.PASSED:
            rest = Disruption(ref, Effect.RESTARTS, pool, "pool", rollout.partition)
            return CanaryPlan(desired, note, promote=rest)
        return CanaryPlan(refingerprinted(with_partition(desired, partition)), note,
                          failed=verdict.step is Step.FAILED)

    def _plan_daemon(self, ref: ObjectRef, desired: Manifest, live: Mapping[str, Any], spec: CanarySpec
                     ) -> CanaryPlan:
        rollout = DaemonRollout.of(live)
        pool, _ = target_of(desired)
        wanted = str(desired["metadata"].get("annotations", {}).get(ANN_CANARY_TEMPLATE, ""))
        if wanted != rollout.template:  # a new change: the canary nodes' pods take it first
            pods = self._daemon_pods(desired)
            nodes = canary_nodes(pods, spec.count)
            if not nodes:  # a pool on one node (or none yet): nothing to hold back, it rolls as usual
                return CanaryPlan(desired)
            total = len({p.node for p in pods if p.node})
            note = CanaryNote(ref, pool, Step.STARTED, f"pool {pool}: a change of the pod template goes to "
                              f"{len(nodes)} of {total} SuperNodes first (node{'s' if len(nodes) > 1 else ''} "
                              f"{', '.join(nodes)})")
            return CanaryPlan(refingerprinted(with_on_delete(desired, nodes)), note, canary=len(nodes),
                              restarts=True, kick=nodes)
        if not rollout.rolling():
            return CanaryPlan(desired)
        pods = self._daemon_pods(desired)
        flower = self.flower(ref, pool) if self.flower is not None else None
        verdict = judge_stage(spec, daemon_stage(rollout, pods), flower, now=self.clock())
        note = CanaryNote(ref, pool, verdict.step, f"pool {pool}: {verdict.message}", verdict.retry,
                          verdict.asks_flower)
        if verdict.step is Step.PASSED:
            rest = Disruption(ref, Effect.RESTARTS, pool, "pool", max(rollout.desired - len(rollout.nodes), 0))
            return CanaryPlan(desired, note, promote=rest)
        stale = stale_canary(rollout.nodes, rollout.generation, pods) if rollout.seen else []
        return CanaryPlan(refingerprinted(with_on_delete(desired, rollout.nodes)), note,
                          failed=verdict.step is Step.FAILED, stuck=stale, stuck_now=True)

    def _plan_deploy(self, ref: ObjectRef, desired: Manifest, live: Mapping[str, Any], spec: CanarySpec
                     ) -> CanaryPlan:
        rollout = DeployRollout.of(live)
        target, _ = target_of(desired)
        who = f"release {ref.name}"
        wanted = str(desired["metadata"].get("annotations", {}).get(ANN_CANARY_TEMPLATE, ""))
        if wanted != rollout.template:  # a new change: `want` SuperNodes take it, the brake holds the rest
            replicas = (desired.get("spec") or {}).get("replicas", 1)
            want = deploy_canary(spec.count, replicas)
            if not want:  # one replica: nothing to hold back, it rolls as usual
                return CanaryPlan(desired)
            pods = self._deploy_pods(desired)
            before = {p.revision for p in pods if p.revision} | (set(rollout.before) if rollout.braked else set())
            note = CanaryNote(ref, target, Step.STARTED, f"{who}: a change of the pod template goes to {want} of "
                              f"{replicas} SuperNodes first")
            return CanaryPlan(refingerprinted(with_brake(desired, want, sorted(before))), note, canary=want)
        if not rollout.rolling():
            return CanaryPlan(desired)
        flower = self.flower(ref, target) if self.flower is not None else None
        verdict = judge_stage(spec, deploy_stage(rollout, self._deploy_pods(desired)), flower, now=self.clock())
        note = CanaryNote(ref, target, verdict.step, f"{who}: {verdict.message}", verdict.retry, verdict.asks_flower)
        if verdict.step is Step.PASSED:
            rest = Disruption(ref, Effect.RESTARTS, *target_of(desired), max(rollout.replicas - rollout.want, 0))
            return CanaryPlan(desired, note, promote=rest)
        return CanaryPlan(refingerprinted(with_brake(desired, rollout.want, rollout.before)), note,
                          failed=verdict.step is Step.FAILED)

    def _deploy_pods(self, desired: Manifest) -> list[PodSeen]:
        return [deploy_pod_seen(p) for p in self._selected(desired)]

    def _selected(self, desired: Manifest) -> list[dict[str, Any]]:
        labels = ((desired.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
        selector = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
        items, _ = self.kube.list("Pod", desired["metadata"].get("namespace"), labels=selector)
        return items

    def _pods(self, desired: Manifest) -> list[PodSeen]:
        return [seen for p in self._selected(desired) if (seen := pod_seen(p)) is not None]

    def _daemon_pods(self, desired: Manifest) -> list[PodSeen]:
        return [daemon_pod_seen(p) for p in self._selected(desired)]

    def kick(self, ref: ObjectRef, desired: Manifest, nodes: tuple[str, ...]) -> list[str]:
        """Once a DaemonSet's change is applied (`OnDelete`): delete its canary nodes' pods on an
        earlier template, and its controller creates them on the new one. What could not be deleted."""
        live = self.kube.get(ref.kind, ref.namespace, ref.name)
        if live is None:
            return []
        generation = DaemonRollout.of(live).generation
        return self.replace(ref.namespace or "", stale_canary(nodes, generation, self._daemon_pods(desired)))

    def replace(self, namespace: str, names: list[str]) -> list[str]:
        """Delete a failed canary's pods so that the StatefulSet creates them on the new revision;
        the names of those that could not be deleted, with why."""
        failed = []
        for name in names:
            try:
                self.kube.delete("Pod", namespace, name)
            except ApiError as exc:
                failed.append(f"{name}: {exc.reason}")
        return failed
