"""A SuperLink's state across flower-syncer upgrades and changes in Git, where a StatefulSet's
`volumeClaimTemplates` cannot change in place (syncer.models.superlink_state says what Git sets):

- Git leaves the choice (`default`): a new SuperLink gets the volume; one that already runs in
  memory (its live StatefulSet says `memory`, or nothing: flower-syncer rendered it before it kept
  state) stays in memory, byte for byte as before, so an upgrade of flower-syncer restarts no
  SuperLink and kills no run (`as_running`).
- Git asks for the other form (`persistent` on a SuperLink in memory, `memory` on one with a
  volume): the StatefulSet is recreated once, as if the unit allowed recreating (`switch`).
- The volume's size or class changed in Git: the claim template stays as it is (the existing
  volume is what the pod mounts anyway) and the change says so (`kept_claim`).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from syncer.identity import SUPERLINK_STATE_VOLUME, Manifest
from syncer.render.superlink_state import has_state_claim, in_memory, state_mode

KEPT_CLAIM = ("kept the SuperLink's state volume as it is: a StatefulSet's volumeClaimTemplates cannot change; "
              "to grow it, edit the size of its PersistentVolumeClaim (when its StorageClass allows expansion)")


def as_running(desired: Manifest, live: Mapping[str, Any] | None) -> Manifest:
    """`desired`, or its in-memory form for a SuperLink that runs in memory while Git leaves the choice."""
    if live is None or desired.get("kind") != "StatefulSet" or state_mode(desired) != "default":
        return desired
    if state_mode(dict(live)) in ("default", "persistent"):
        return desired
    return in_memory(desired)


def switch(desired: Manifest, live: Mapping[str, Any]) -> bool:
    """Git asks explicitly for the form the live StatefulSet does not have: recreate it."""
    return state_mode(desired) in ("persistent", "memory") and has_state_claim(desired) != has_state_claim(dict(live))


def kept_claim(desired: Manifest, live: Mapping[str, Any]) -> Manifest | None:
    """`desired` with the live claim template of the state, when both have one and they differ."""
    if not (has_state_claim(desired) and has_state_claim(dict(live))):
        return None
    ours = _claim(live)
    if ours is None or _claim(desired) == ours:
        return None
    out = copy.deepcopy(desired)
    out["spec"]["volumeClaimTemplates"] = [ours if c["metadata"]["name"] == SUPERLINK_STATE_VOLUME else c
                                           for c in out["spec"]["volumeClaimTemplates"]]
    return out


def _claim(obj: Mapping[str, Any]) -> dict[str, Any] | None:
    for c in (obj.get("spec") or {}).get("volumeClaimTemplates") or []:
        if (c.get("metadata") or {}).get("name") == SUPERLINK_STATE_VOLUME:
            return {"metadata": {"name": SUPERLINK_STATE_VOLUME}, "spec": copy.deepcopy(c.get("spec") or {})}
    return None
