"""The revision a repository was last checked at, one small ConfigMap per namespace it uses.

A unit's inventory names the revision that last *changed* it; a commit that leaves the unit as it
is writes nothing there (an unchanged repository makes no writes). `status` still has to say that
the unit was checked against the newest commit, so after a sync has gone over every unit of a
revision the engine notes that revision once per namespace: one write per namespace per new
commit, none while the revision stays the same.

The record is labelled like an inventory, so it arrives in the same LIST (and watch) as the
inventories at no extra request; it has no unit labels, so it is never taken for a unit's
inventory or for an object a unit applied.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

from syncer.identity import (
    LABEL_INVENTORY,
    LABEL_MANAGED_BY,
    LABEL_REPOSITORY,
    LABEL_SOURCE_RECORD,
    MANAGED_BY,
    Manifest,
)

RECORD_KEY = "checked.json"


@dataclass(frozen=True)
class Checked:
    """Repository `repository` was checked at `revision`, first at `at` (RFC 3339)."""

    repository: str
    revision: str
    at: str
    source: str = ""  # where the repository comes from (identity.source_key); "" when unknown

    def manifest(self, namespace: str) -> Manifest:
        return {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": record_name(self.repository), "namespace": namespace,
                         "labels": {LABEL_MANAGED_BY: MANAGED_BY, LABEL_INVENTORY: "true",
                                    LABEL_SOURCE_RECORD: "true", LABEL_REPOSITORY: self.repository}},
            "data": {RECORD_KEY: json.dumps({"repository": self.repository, "revision": self.revision,
                                             "checkedAt": self.at, **({"source": self.source} if self.source else {})},
                                            indent=1, sort_keys=True)},
        }


def record_name(repository: str) -> str:
    """A ConfigMap name for the repository's record (label values allow `_` and capitals; names do
    not, so such names get a short digest to stay unique)."""
    slug = re.sub(r"[^a-z0-9.-]+", "-", repository.lower()).strip("-.") or "repository"
    if slug != repository:
        slug = f"{slug[:200]}-{hashlib.sha256(repository.encode()).hexdigest()[:8]}"
    return f"flower-syncer.checked.{slug}"


def decode(cm: dict[str, Any] | None) -> Checked | None:
    """A record from its ConfigMap; None when it is not one or cannot be read."""
    if not cm or ((cm.get("metadata") or {}).get("labels") or {}).get(LABEL_SOURCE_RECORD) != "true":
        return None
    try:
        data = json.loads((cm.get("data") or {}).get(RECORD_KEY, ""))
        return Checked(str(data["repository"]), str(data["revision"]), str(data.get("checkedAt", "")),
                       str(data.get("source", "")))
    except (ValueError, TypeError, KeyError):
        return None
