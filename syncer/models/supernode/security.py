"""The security-context layout of the chart, shared by the checks and the renderer: which keys go on
the pod, which on the container, and what a component's values add up to."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from syncer.diagnostics import FieldPath, did_you_mean
from syncer.models.k8s import Issue, K8sType, check_field
from syncer.models.supernode.schema import Component, GlobalValues

# Where each key of a component's `podSecurityContext` goes: Kubernetes accepts some only on the
# pod, some only on the container. Keys accepted on both go to the pod (the container inherits
# them), except runAsNonRoot, which the chart's defaults set on both.
POD_ONLY_SECURITY = frozenset({"fsGroup", "fsGroupChangePolicy", "seLinuxChangePolicy", "supplementalGroups",
                               "supplementalGroupsPolicy", "sysctls"})
CONTAINER_ONLY_SECURITY = frozenset({"allowPrivilegeEscalation", "capabilities", "privileged", "procMount",
                                     "readOnlyRootFilesystem"})
SHARED_SECURITY = frozenset({"appArmorProfile", "runAsGroup", "runAsNonRoot", "runAsUser", "seLinuxOptions",
                             "seccompProfile", "windowsOptions"})
BOTH_SECURITY = frozenset({"runAsNonRoot"})

# ---------------------------------------------------------------------------------------------
# Security contexts


def merge_maps(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """Deep merge like Helm's values: mappings merge key by key, anything else from `over` replaces,
    and a null in `over` removes the key."""
    out = dict(base)
    for key, value in over.items():
        if value is None:
            out.pop(key, None)
            continue
        current = out.get(key)
        if isinstance(current, dict) and isinstance(value, dict):
            out[key] = merge_maps(current, value)
        else:
            out[key] = value
    return out


def security_contexts(global_: GlobalValues, comp: Component) -> tuple[dict[str, Any], dict[str, Any]]:
    """(pod securityContext, container securityContext) for a component: the global defaults with
    the component's `podSecurityContext` merged over, each key where Kubernetes accepts it."""
    ids = global_.securityContext
    sec = global_.podSecurityContext
    seccomp: dict[str, Any] = {"type": sec.seccompProfile.type}
    if sec.seccompProfile.localhostProfile:
        seccomp["localhostProfile"] = sec.seccompProfile.localhostProfile
    pod: dict[str, Any] = {
        "runAsUser": ids.runAsUser,
        "runAsGroup": ids.runAsGroup,
        "fsGroup": ids.fsGroup,
        "runAsNonRoot": sec.runAsNonRoot,
        "seccompProfile": seccomp,
    }
    caps: dict[str, Any] = {}
    if sec.capabilities.add:
        caps["add"] = list(sec.capabilities.add)
    if sec.capabilities.drop:
        caps["drop"] = list(sec.capabilities.drop)
    container: dict[str, Any] = {
        "readOnlyRootFilesystem": sec.readOnlyRootFilesystem,
        "allowPrivilegeEscalation": sec.allowPrivilegeEscalation,
        "runAsNonRoot": sec.runAsNonRoot,
    }
    if caps:
        container["capabilities"] = caps
    pod_over: dict[str, Any] = {}
    container_over: dict[str, Any] = {}
    for key, value in comp.podSecurityContext.items():
        if key in CONTAINER_ONLY_SECURITY:
            container_over[key] = value
        else:
            pod_over[key] = value
            if key in BOTH_SECURITY:
                container_over[key] = value
    if pod_over:
        pod = merge_maps(pod, pod_over)
    if container_over:
        container = merge_maps(container, container_over)
    return pod, container



def security_issues(global_: GlobalValues, comp: Component, key: str) -> list[Issue]:
    """Check a component's podSecurityContext keys against the pod or container type they go to,
    and the combinations Kubernetes refuses."""
    at: FieldPath = (key, "podSecurityContext")
    issues: list[Issue] = []
    pod_part: dict[str, Any] = {}
    container_part: dict[str, Any] = {}
    known = sorted(POD_ONLY_SECURITY | CONTAINER_ONLY_SECURITY | SHARED_SECURITY)
    for k, v in comp.podSecurityContext.items():
        if k in CONTAINER_ONLY_SECURITY:
            container_part[k] = v
        elif k in POD_ONLY_SECURITY or k in SHARED_SECURITY:
            pod_part[k] = v
        else:
            guess = did_you_mean(k, known)
            issues.append(Issue((*at, k), f"unknown field {k!r} in a security context",
                                f"did you mean {guess!r}?" if guess else f"valid fields: {', '.join(known)}"))
    if pod_part:
        issues.extend(check_field(pod_part, K8sType("api.core.v1.PodSecurityContext"), at))
    if container_part:
        issues.extend(check_field(container_part, K8sType("api.core.v1.SecurityContext"), at))
    if issues:
        return issues
    pod, container = security_contexts(global_, comp)
    seccomp = pod.get("seccompProfile")
    localhost = isinstance(seccomp, dict) and seccomp.get("type") == "Localhost"
    if localhost and isinstance(seccomp, dict) and not seccomp.get("localhostProfile"):
        path = (*at, "seccompProfile") if "seccompProfile" in comp.podSecurityContext else (
            "global", "podSecurityContext", "seccompProfile")
        issues.append(Issue(path, "seccompProfile type Localhost needs localhostProfile",
                            "set localhostProfile"))
    if pod.get("runAsNonRoot") is True and pod.get("runAsUser") == 0:
        issues.append(Issue(at, "runAsNonRoot is true but runAsUser is 0 (root); the pod would not start",
                            "use a non-zero runAsUser (the Flower images use 49999) or runAsNonRoot: false"))
    if container.get("allowPrivilegeEscalation") is False:
        caps = container.get("capabilities")
        added = caps.get("add") if isinstance(caps, dict) else None
        if container.get("privileged") is True:
            issues.append(Issue(at, "privileged: true needs allowPrivilegeEscalation: true (Kubernetes "
                                "refuses the combination)",
                                "set allowPrivilegeEscalation: true, or drop privileged"))
        elif isinstance(added, list) and ("SYS_ADMIN" in added or "CAP_SYS_ADMIN" in added):
            issues.append(Issue(at, "adding SYS_ADMIN needs allowPrivilegeEscalation: true (Kubernetes "
                                "refuses the combination)", "set allowPrivilegeEscalation: true"))
    return issues
