#!/usr/bin/env python3
"""Generate syncer/models/k8s_schema.json: a compact field map of the Kubernetes types that
Federation documents and SuperNode values embed (pod templates, env, volumes, resources, ...).

Source: the Kubernetes OpenAPI definitions as packaged by `kubernetes-validate` (a dev dependency).
The output keeps only what strict validation needs: property names, their types, required
fields. Run it after bumping the Kubernetes version: `python3 tools/gen_k8s_schema.py`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

K8S_VERSION = "1.34.0"
ROOTS = [
    "io.k8s.api.core.v1.PodTemplateSpec",
    "io.k8s.api.core.v1.EnvVar",
    "io.k8s.api.core.v1.Volume",
    "io.k8s.api.core.v1.VolumeMount",
    "io.k8s.api.core.v1.PersistentVolumeClaim",
    "io.k8s.api.core.v1.ResourceRequirements",
    "io.k8s.api.core.v1.Toleration",
    "io.k8s.api.core.v1.Affinity",
    "io.k8s.api.core.v1.NodeSelectorRequirement",
    "io.k8s.api.core.v1.Lifecycle",
    "io.k8s.api.core.v1.LocalObjectReference",
    "io.k8s.api.core.v1.PodSecurityContext",
    "io.k8s.api.core.v1.SecurityContext",
    "io.k8s.api.apps.v1.DeploymentStrategy",
    "io.k8s.api.networking.v1.NetworkPolicyIngressRule",
    "io.k8s.api.networking.v1.NetworkPolicyEgressRule",
]
PREFIX = "io.k8s."


def short(name: str) -> str:
    return name.removeprefix(PREFIX)


def type_of(prop: dict[str, Any], todo: list[str]) -> Any:
    if "$ref" in prop:
        target = prop["$ref"].split("/")[-1]
        if target.endswith("resource.Quantity"):
            return "quantity"
        if target.endswith("intstr.IntOrString"):
            return "intorstr"
        if target.endswith("meta.v1.Time") or target.endswith("meta.v1.MicroTime"):
            return "string"
        todo.append(target)
        return {"ref": short(target)}
    kinds = prop.get("type", "object")
    if isinstance(kinds, list):
        kinds = next(k for k in kinds if k != "null")
    if kinds == "array":
        return {"list": type_of(prop.get("items", {}), todo)}
    if kinds == "object":
        extra = prop.get("additionalProperties")
        if isinstance(extra, dict):
            return {"map": type_of(extra, todo)}
        return "any"
    if kinds == "integer" and prop.get("format") == "int32":
        return "int32"  # the API server rejects (or wraps) what does not fit
    return kinds


def main() -> int:
    import kubernetes_validate

    base = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema" / f"v{K8S_VERSION}-local-strict"
    defs: dict[str, Any] = json.loads((base / "_definitions.json").read_text())["$defs"]
    out: dict[str, Any] = {}
    todo = list(ROOTS)
    while todo:
        name = todo.pop()
        if short(name) in out:
            continue
        spec = defs[name]
        props = {k: type_of(v, todo) for k, v in sorted(spec.get("properties", {}).items())}
        entry: dict[str, Any] = {"p": props}
        if spec.get("required"):
            entry["r"] = sorted(spec["required"])
        out[short(name)] = entry
    target = Path(__file__).resolve().parent.parent / "syncer" / "models" / "k8s_schema.json"
    doc = {"kubernetesVersion": K8S_VERSION, "types": dict(sorted(out.items()))}
    target.write_text(json.dumps(doc, separators=(",", ":"), sort_keys=False) + "\n")
    print(f"wrote {target} ({len(out)} types, {target.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
