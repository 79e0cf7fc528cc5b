"""The two forms of a SuperLink's StatefulSet: with its state on a volume (`--database` on the
claim template `superlink-state`, syncer.render.federation) and in memory, and the step from the
first to the second, which the engine takes for a SuperLink that already runs in memory when Git
leaves the choice to flower-syncer (syncer.engine.superlink_state). Pure; imports only the shared
words, so the engine can use it without the models.

`in_memory(render(default)) == render(memory)`: tests/unit/test_superlink_state.py holds it to that.
"""

from __future__ import annotations

import copy
from typing import Any

from syncer.identity import ANN_SUPERLINK_STATE, SUPERLINK_STATE_DIR, SUPERLINK_STATE_VOLUME, Manifest

STATE_GROUP = 49999  # the Flower images' uid and gid
# The pod's securityContext when the state is on a volume: the volume writable by the images' group.
STATE_SECURITY = {"fsGroup": STATE_GROUP, "fsGroupChangePolicy": "OnRootMismatch"}
_DATABASE_ARG = f"--database={SUPERLINK_STATE_DIR}/"


def state_mode(m: Manifest) -> str:
    """What a SuperLink StatefulSet says of its state (persistent | memory | default), "" if nothing."""
    return str(((m.get("metadata") or {}).get("annotations") or {}).get(ANN_SUPERLINK_STATE, ""))


def has_state_claim(obj: Manifest) -> bool:
    """Whether a StatefulSet (desired or live) has the claim template of the SuperLink's state."""
    claims = (obj.get("spec") or {}).get("volumeClaimTemplates") or []
    return any((c.get("metadata") or {}).get("name") == SUPERLINK_STATE_VOLUME for c in claims if isinstance(c, dict))


def state_claim(size: str, storage_class: str | None) -> dict[str, Any]:
    """The claim template of the state: one volume of `size` (ReadWriteOnce), of the class named or
    the cluster's default."""
    spec: dict[str, Any] = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}}
    if storage_class:
        spec["storageClassName"] = storage_class
    return {"metadata": {"name": SUPERLINK_STATE_VOLUME}, "spec": spec}


def in_memory(m: Manifest) -> Manifest:
    """The StatefulSet `m` (state on a volume) with its state in memory: no claim template, mount,
    retention policy or `--database`, and not the securityContext added for the volume."""
    out = copy.deepcopy(m)
    out["metadata"].setdefault("annotations", {})[ANN_SUPERLINK_STATE] = "memory"
    spec = out["spec"]
    spec.pop("persistentVolumeClaimRetentionPolicy", None)
    claims = [c for c in spec.get("volumeClaimTemplates", []) if c["metadata"]["name"] != SUPERLINK_STATE_VOLUME]
    if claims:
        spec["volumeClaimTemplates"] = claims
    else:
        spec.pop("volumeClaimTemplates", None)
    pod = spec["template"]["spec"]
    if pod.get("securityContext") == STATE_SECURITY:
        del pod["securityContext"]
    for container in pod["containers"]:
        _drop_state(container)
    return out


def _drop_state(container: dict[str, Any]) -> None:
    mounts = [v for v in container.get("volumeMounts", []) if v.get("name") != SUPERLINK_STATE_VOLUME]
    if mounts:
        container["volumeMounts"] = mounts
    else:
        container.pop("volumeMounts", None)
    if container.get("name") == "superlink":
        container["args"] = [a for a in container.get("args", []) if not a.startswith(_DATABASE_ARG)]
