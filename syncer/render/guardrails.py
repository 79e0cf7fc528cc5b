"""The repository's guardrails (flower-syncer.yaml `guardrails`), checked on what a unit renders:
the namespace it lives in, and the pod features of every workload (privileged containers, host
namespaces, host paths and ports, added capabilities). A unit that crosses one fails like a unit
with a config error: nothing of it is applied, nothing is pruned."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from syncer.diagnostics import Diagnostic
from syncer.identity import Manifest, ObjectRef, Unit
from syncer.models.settings import PROTECTED_NAMESPACES, Guardrails

GPU_DEVICE_PATHS = frozenset({"/dev/kfd", "/dev/dri"})  # what gpu.mountAll mounts for AMD GPUs
HARMLESS_CAPABILITIES = frozenset({"NET_BIND_SERVICE"})
WORKLOAD_KINDS = frozenset({"Deployment", "StatefulSet", "DaemonSet", "Job", "Pod"})


def pod_features(pod_spec: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(feature, field path in the pod spec) for each node-level feature the pod asks for."""
    for flag in ("hostNetwork", "hostPID", "hostIPC"):
        if pod_spec.get(flag):
            yield flag, flag
    for i, vol in enumerate(pod_spec.get("volumes") or []):
        host = (vol or {}).get("hostPath")
        if host is not None and host.get("path") not in GPU_DEVICE_PATHS:
            yield "hostPath", f"volumes[{i}].hostPath"
    for key in ("initContainers", "containers", "ephemeralContainers"):
        for i, c in enumerate(pod_spec.get(key) or []):
            where = f"{key}[{i}]"
            sc = (c or {}).get("securityContext") or {}
            if sc.get("privileged"):
                yield "privileged", f"{where}.securityContext.privileged"
            added = set((sc.get("capabilities") or {}).get("add") or []) - HARMLESS_CAPABILITIES
            if added:
                yield "capabilities", f"{where}.securityContext.capabilities.add"
            for j, port in enumerate((c or {}).get("ports") or []):
                if (port or {}).get("hostPort"):
                    yield "hostPort", f"{where}.ports[{j}].hostPort"


def _pod_spec(m: Manifest) -> dict[str, Any] | None:
    if m.get("kind") == "Pod":
        return m.get("spec") or {}
    if m.get("kind") in WORKLOAD_KINDS:
        return ((m.get("spec") or {}).get("template") or {}).get("spec") or {}
    return None


def check_guardrails(unit: Unit, manifests: list[Manifest], rails: Guardrails, source: str,
                     line: int) -> list[Diagnostic]:
    """Every guardrail the unit's objects cross, as errors at the unit's defining file."""
    diags: list[Diagnostic] = []
    if not rails.namespace_allowed(unit.namespace):
        allowed = (", ".join(rails.allowedNamespaces) if rails.allowedNamespaces is not None
                   else f"any but {', '.join(PROTECTED_NAMESPACES)}")
        diags.append(Diagnostic(source, line, 1, "", f"{unit.kind} {unit.name!r} would live in the namespace "
                                f"{unit.namespace!r}, which this repository may not use (allowed: {allowed})",
                                "choose another namespace, or list it in guardrails.allowedNamespaces in "
                                "flower-syncer.yaml", unit=unit.id))
    allowed_features = set(rails.allowPodFeatures)
    for m in manifests:
        spec = _pod_spec(m)
        if spec is None:
            continue
        for feature, path in pod_features(spec):
            if feature in allowed_features:
                continue
            diags.append(Diagnostic(source, line, 1, "", f"{ObjectRef.of(m)} uses {feature} ({path}), which "
                                    "this repository may not use", f"remove it, or add {feature} to "
                                    "guardrails.allowPodFeatures in flower-syncer.yaml", unit=unit.id))
    return diags
