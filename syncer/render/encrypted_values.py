"""Encrypted values reach pods only through a Secret, never as plain values in a workload spec.

A unit whose own file (values.yaml, or the Federation's file) is SOPS-encrypted hands the renderer
the decrypted values (`LoadedUnit.sealed`, as text, of any type). After rendering, every container
(init and ephemeral ones too) of every workload is looked through:

- an `env[].value` that is one of them (or holds one) becomes `valueFrom.secretKeyRef`;
- an `args` or `command` item that holds one (a `--node-config` pair, `extraArgs`, the node-config
  shell wrapper) becomes `$(FLOWER_SYNCER_SEALED_<n>)`, an environment variable from the Secret,
  which the kubelet expands into exactly the original text (an expanded value is not expanded
  again). Values shorter than three characters (`3`, `no`) are looked for only in node config.

The values go to one Secret per workload, `<workload>-sealed` (keys `<container>.<field>.<i>`),
rendered as an object of the unit. So that the pods roll when a value changes, the pod template
carries `flower-syncer.io/sealed-hmac`: an HMAC of the Secret's data under the file's seal key
(derived from its SOPS data key), never a plain digest that could be tested against guesses. The
node-auth digest annotation of the SuperNode chart is keyed the same way when its file is encrypted.

Pure and deterministic (same values, same Secret, same names).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from collections.abc import Sequence
from typing import Any

from syncer.identity import Manifest
from syncer.render.common import RenderContext, metadata

ANN_SEALED = "flower-syncer.io/sealed-hmac"
ANN_NODE_AUTH_SHA = "flower-syncer.io/node-auth-sha256"  # the SuperNode renderer's (syncer.render.supernode)
ENV_PREFIX = "FLOWER_SYNCER_SEALED_"
WORKLOADS = frozenset({"Deployment", "StatefulSet", "DaemonSet"})
_KEY_CHARS = re.compile(r"[^-._a-zA-Z0-9]")
MIN_ANYWHERE = 3  # shorter values are looked for only in node config (they would match ordinary text)


def sealed_name(workload: str) -> str:
    return f"{workload[:245]}-sealed"


def seal(manifests: Sequence[Manifest], sealed: frozenset[str], seal_key: bytes,
         ctx: RenderContext) -> list[Manifest]:
    """`manifests` with every encrypted value of their workloads moved into a Secret (added)."""
    if not sealed:
        return list(manifests)
    long_values = sorted((v for v in sealed if len(v) >= MIN_ANYWHERE), key=len, reverse=True)
    out: list[Manifest] = []
    for m in manifests:
        out.append(m)
        if m.get("kind") not in WORKLOADS:
            continue
        template = m["spec"]["template"]
        data: dict[str, str] = {}
        for key in ("initContainers", "containers", "ephemeralContainers"):
            for c in template["spec"].get(key) or []:
                if isinstance(c, dict):
                    _seal_container(c, sealed, long_values, sealed_name(m["metadata"]["name"]), data)
        annotations = template["metadata"].get("annotations") or {}
        if ANN_NODE_AUTH_SHA in annotations and seal_key:
            annotations[ANN_NODE_AUTH_SHA] = _hmac(seal_key, annotations[ANN_NODE_AUTH_SHA])
        if not data:
            continue
        template["metadata"]["annotations"] = {**annotations, ANN_SEALED: _hmac(
            seal_key or b"flower-syncer", "\0".join(f"{k}={v}" for k, v in sorted(data.items())))}
        out.append({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                    "metadata": metadata(ctx, sealed_name(m["metadata"]["name"]), m["metadata"].get("labels")),
                    "data": {k: base64.b64encode(v.encode()).decode("ascii") for k, v in sorted(data.items())}})
    return out


def _hmac(key: bytes, text: str) -> str:
    return hmac.new(key, text.encode(), hashlib.sha256).hexdigest()


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _holds(text: str, sealed: frozenset[str], long_values: list[str]) -> bool:
    if any(v in text for v in long_values):
        return True
    return "node-config" in text and any(v in text for v in sealed)


def _seal_container(c: dict[str, Any], sealed: frozenset[str], long_values: list[str], secret: str,
                    data: dict[str, str]) -> None:
    name = _KEY_CHARS.sub("_", str(c.get("name", "")))
    env = _list(c.get("env"))
    for item in env:
        value = item.get("value") if isinstance(item, dict) else None
        if value is None or "valueFrom" in item:
            continue
        text = value if isinstance(value, str) else str(value).lower() if isinstance(value, bool) else str(value)
        if text in sealed or any(v in text for v in long_values):
            key = f"{name}.env.{_KEY_CHARS.sub('_', str(item.get('name', '')))}"
            data[key] = text
            item.pop("value")
            item["valueFrom"] = {"secretKeyRef": {"name": secret, "key": key}}
    added: list[dict[str, Any]] = []
    for field in ("command", "args"):
        items = _list(c.get(field))
        for i, text in enumerate(items):
            if not isinstance(text, str) or not _holds(text, sealed, long_values):
                continue
            key = f"{name}.{field}.{i}"
            var = f"{ENV_PREFIX}{field.upper()}_{i}"
            data[key] = text
            items[i] = f"$({var})"
            added.append({"name": var, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}})
    if added:
        c["env"] = [*env, *added]
