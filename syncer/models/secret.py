"""Kubernetes Secret manifests kept in the config repository (usually SOPS-encrypted), applied,
pruned and healed with the unit they belong to."""

from __future__ import annotations

import base64
import binascii
from typing import Literal

from pydantic import Field

from syncer.models.base import StrictModel
from syncer.models.k8s import Issue
from syncer.models.names import DNS1123_SUBDOMAIN, MAX_NAME, label_key_problem, label_value_problem

RESERVED_ANNOTATIONS = frozenset({"flower-syncer.io/copy-from", "flower-syncer.io/copy-keys",
                                  "flower-syncer.io/applied-hash", "flower-syncer.io/source"})


class SecretMetadata(StrictModel):
    name: str
    namespace: str | None = None
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}


class SecretManifest(StrictModel):
    apiVersion: Literal["v1"]
    kind: Literal["Secret"]
    metadata: SecretMetadata
    type: str = "Opaque"
    data: dict[str, str] = {}
    stringData: dict[str, str] = {}
    immutable: bool | None = Field(None)

    def semantic_issues(self) -> list[Issue]:
        issues = []
        if len(self.metadata.name) > 253 or not DNS1123_SUBDOMAIN.match(self.metadata.name):
            issues.append(Issue(("metadata", "name"), f"Secret name {self.metadata.name!r} is not a valid name",
                                "use lowercase letters, digits, '-' and '.'"))
        for key, value in self.data.items():
            try:
                base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError):
                issues.append(Issue(("data", key), "data values must be base64", "put plain text under stringData"))
        for key in (*self.data, *self.stringData):
            if not key or len(key) > MAX_NAME * 4 or not all(c.isalnum() or c in "-._" for c in key):
                issues.append(Issue(("data", key), f"Secret key {key!r} is not a valid key",
                                    "use letters, digits, '-', '_' and '.'"))
        for key in self.metadata.annotations:
            if key in RESERVED_ANNOTATIONS:
                issues.append(Issue(("metadata", "annotations", key), f"{key} is flower-syncer's own annotation, "
                                    "honoured only on the objects it renders itself (a Secret from Git must not "
                                    "copy another Secret's keys)", "remove it; put the value in the Secret itself"))
        for key, value in self.metadata.labels.items():
            problem = label_key_problem(key) or label_value_problem(value)
            if problem:
                issues.append(Issue(("metadata", "labels", key), problem, "fix the label"))
        return issues

    def merged_data(self) -> dict[str, str]:
        """`data` with `stringData` folded in (base64), as the API server would store it."""
        out = dict(self.data)
        out.update({k: base64.b64encode(v.encode()).decode() for k, v in self.stringData.items()})
        return dict(sorted(out.items()))
