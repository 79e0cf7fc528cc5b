"""A canary pool's StatefulSet or DaemonSet (syncer.models.canary), or a SuperNode release's
Deployment (its release.yaml): its count and times as
annotations, which the engine reads (syncer.engine.canary), the digest of its pod template as Git
renders it (the engine tells a new change from a rollout in progress by it, without a request), and
its update strategy, so that flower-syncer owns the field (server-side apply) that the engine sets
to stop a rollout at the canary: a StatefulSet's `rollingUpdate.partition` rendered as 0, a
DaemonSet's `type` rendered as `RollingUpdate` (`OnDelete` while its canary nodes take a change);
a Deployment keeps the release's strategy (the engine brakes it while a canary waits). Pure."""

from __future__ import annotations

import hashlib
import json

from syncer.identity import (
    ANN_CANARY,
    ANN_CANARY_DEADLINE,
    ANN_CANARY_GATE,
    ANN_CANARY_TEMPLATE,
    LABEL_COMPONENT,
    LABEL_POOL,
    Manifest,
)
from syncer.models.canary import CanarySettings

SUPERNODE_COMPONENT = "supernode"  # the component label of a release's SuperNodes (engine.disruption's too)


def with_canary(workload: Manifest, settings: CanarySettings | None, pool: str) -> Manifest:
    """`workload` (a pool's StatefulSet or DaemonSet, a release's Deployment) with its canary, when Git
    asks for one."""
    count = settings.count(pool) if settings is not None else 0
    kind = workload.get("kind")
    if not count or kind not in ("StatefulSet", "DaemonSet", "Deployment") or settings is None:
        return workload
    template = json.dumps(workload["spec"].get("template"), sort_keys=True, separators=(",", ":"))
    meta = dict(workload["metadata"])
    meta["annotations"] = {**(meta.get("annotations") or {}), ANN_CANARY: str(count),
                           ANN_CANARY_GATE: format(settings.gate, ".15g"),
                           ANN_CANARY_DEADLINE: format(settings.deadline, ".15g"),
                           ANN_CANARY_TEMPLATE: hashlib.sha256(template.encode()).hexdigest()[:16]}
    if kind == "Deployment":  # its strategy stays the release's; the engine brakes it (engine.canary)
        return {**workload, "metadata": meta}
    strategy: dict[str, object] = {"type": "RollingUpdate"}
    if kind == "StatefulSet":
        strategy["rollingUpdate"] = {"partition": 0}
    spec = {**workload["spec"], "updateStrategy": strategy}
    return {**workload, "metadata": meta, "spec": spec}


def canary_target(manifest: Manifest) -> str:
    """The pool a workload runs (a Federation pool's StatefulSet or DaemonSet), `supernode` for a
    SuperNode release's Deployment, "" for anything else: what may carry a canary."""
    labels = (manifest.get("metadata") or {}).get("labels") or {}
    kind = manifest.get("kind")
    if kind in ("StatefulSet", "DaemonSet") and labels.get(LABEL_POOL):
        return str(labels[LABEL_POOL])
    if kind == "Deployment" and labels.get(LABEL_COMPONENT) == SUPERNODE_COMPONENT:
        return SUPERNODE_COMPONENT
    return ""
