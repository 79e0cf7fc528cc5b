"""A canary pool's StatefulSet (syncer.models.canary): its count and times as annotations, which
the engine reads (syncer.engine.canary), the digest of its pod template as Git renders it (the
engine tells a new change from a rollout in progress by it, without a request), and
`updateStrategy.rollingUpdate.partition` rendered as 0, so flower-syncer owns the field
(server-side apply) that the engine raises to stop a rollout at the canary. Pure."""

from __future__ import annotations

import hashlib
import json

from syncer.identity import ANN_CANARY, ANN_CANARY_DEADLINE, ANN_CANARY_GATE, ANN_CANARY_TEMPLATE, Manifest
from syncer.models.canary import CanarySettings


def with_canary(workload: Manifest, settings: CanarySettings | None, pool: str) -> Manifest:
    """`workload` (a pool's StatefulSet) with its canary, when the Federation asks for one."""
    count = settings.count(pool) if settings is not None else 0
    if not count or workload.get("kind") != "StatefulSet" or settings is None:
        return workload
    template = json.dumps(workload["spec"].get("template"), sort_keys=True, separators=(",", ":"))
    meta = dict(workload["metadata"])
    meta["annotations"] = {**(meta.get("annotations") or {}), ANN_CANARY: str(count),
                           ANN_CANARY_GATE: format(settings.gate, ".15g"),
                           ANN_CANARY_DEADLINE: format(settings.deadline, ".15g"),
                           ANN_CANARY_TEMPLATE: hashlib.sha256(template.encode()).hexdigest()[:16]}
    spec = {**workload["spec"], "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}}
    return {**workload, "metadata": meta, "spec": spec}
