"""Settings that live in the config repo next to the Flower documents.

- `flower-syncer.yaml` at the repo root: repo-wide defaults.
- `supernodes/<release>/release.yaml`: per-release settings (target namespace, sync policy).
- Federations carry the same per-unit policy as `flower-syncer.io/*` annotations, so a Federation
  file stays a valid flower-operator document.
"""

from __future__ import annotations

import fnmatch
from typing import Annotated, ClassVar, Literal

from pydantic import Field, field_validator

from syncer.diagnostics import FieldPath
from syncer.models.base import StrictModel
from syncer.models.canary import DEFAULT_DEADLINE, DEFAULT_GATE
from syncer.models.durations import duration_problem, parse_duration
from syncer.models.k8s import Issue
from syncer.models.names import name_problem

ANN_SUSPEND = "flower-syncer.io/suspend"
ANN_PRUNE_POLICY = "flower-syncer.io/prune-policy"
ANN_FORCE_CONFLICTS = "flower-syncer.io/force-conflicts"
ANN_RECREATE = "flower-syncer.io/allow-recreate"
ANN_HOLD_FOR_RUNS = "flower-syncer.io/hold-for-runs"  # how long a restart waits for runs to end (docs/rollouts.md)
ANN_HOLD_STRICT = "flower-syncer.io/hold-strict"  # "true": hold also when the SuperLink cannot be asked


class SyncPolicy(StrictModel):
    """How the sync engine treats one unit."""

    suspend: bool = False
    """Do not apply or heal this unit (its objects stay as they are)."""
    prune: bool = True
    """Delete objects of this unit that left Git."""
    forceConflicts: bool = False
    """Take ownership of fields another field manager owns."""
    allowRecreate: bool = False
    """Delete and recreate a workload when an immutable field changes (e.g. a StatefulSet selector)."""
    holdForRuns: str | None = None
    """How long a change that restarts the SuperLink or SuperNodes waits for the federation's runs
    to end (a duration such as 2h, or "off"); unset: the admin's default (docs/rollouts.md)."""
    holdStrict: bool = False
    """Hold such a change also while the SuperLink's runs cannot be read (else it goes ahead)."""

    @field_validator("holdForRuns")
    @classmethod
    def _hold_duration(cls, value: str | None) -> str | None:
        problem = "" if value is None else duration_problem(value, allow_off=True)
        if problem:
            raise ValueError(problem)
        return value

    def with_annotations(self, annotations: dict[str, str]) -> tuple[SyncPolicy, list[tuple[str, str]]]:
        """This policy overridden by the `flower-syncer.io/*` annotations that are set; also returns
        (annotation key, problem) pairs for values that are not understood."""
        values: dict[str, bool | str] = {}
        problems: list[tuple[str, str]] = []
        if ANN_HOLD_FOR_RUNS in annotations:
            problem = duration_problem(annotations[ANN_HOLD_FOR_RUNS], allow_off=True)
            if problem:
                problems.append((ANN_HOLD_FOR_RUNS, f"{ANN_HOLD_FOR_RUNS}: {problem}"))
            else:
                values["holdForRuns"] = annotations[ANN_HOLD_FOR_RUNS].strip()
        for key, field in ((ANN_SUSPEND, "suspend"), (ANN_FORCE_CONFLICTS, "forceConflicts"),
                           (ANN_RECREATE, "allowRecreate"), (ANN_HOLD_STRICT, "holdStrict")):
            if key in annotations:
                text = annotations[key].strip().lower()
                if text not in ("true", "false"):
                    problems.append((key, f'{key} must be "true" or "false", got {annotations[key]!r}'))
                else:
                    values[field] = text == "true"
        if ANN_PRUNE_POLICY in annotations:
            text = annotations[ANN_PRUNE_POLICY].strip().lower()
            if text not in ("enabled", "disabled"):
                problems.append((ANN_PRUNE_POLICY, f'{ANN_PRUNE_POLICY} must be "enabled" or "disabled"'))
            else:
                values["prune"] = text == "enabled"
        return self.model_copy(update=values), problems


PodFeature = Literal["privileged", "hostPath", "hostNetwork", "hostPID", "hostIPC", "hostPort", "capabilities",
                     # the other Pod Security Standards controls (syncer.render.podsecurity)
                     "hostProcess", "appArmor", "seLinux", "procMount", "seccomp", "sysctls", "hostProbes",
                     "volumeTypes", "privilegeEscalation", "runAsRoot",
                     # what PSS allows and a GitOps tool refuses (syncer.render.podrules)
                     "nodeName", "controlPlaneTolerations", "systemPriorityClass", "hostAliases", "dnsConfig"]
PodSecurityLevel = Literal["privileged", "baseline", "restricted"]
ServiceType = Literal["ClusterIP", "NodePort", "LoadBalancer"]
SERVICE_TYPES: list[ServiceType] = ["ClusterIP", "NodePort", "LoadBalancer"]
PROTECTED_NAMESPACES = ("kube-system", "kube-public", "kube-node-lease")


class Guardrails(StrictModel):
    """What a commit to this repository may ask of the cluster. The defaults keep a Git writer out
    of the cluster's own namespaces and away from the node: no privileged containers, host
    namespaces, host paths or ports, or added capabilities unless listed here."""

    allowedNamespaces: list[str] | None = None
    """Namespaces the repository's units may live in (shell patterns such as `flower-*`). Unset:
    any namespace but kube-system, kube-public and kube-node-lease."""
    allowPodFeatures: list[PodFeature] = []
    """Pod features the repository may use: privileged, hostPath, hostNetwork, hostPID, hostIPC,
    hostPort, capabilities, and the other Pod Security Standards controls (hostProcess, appArmor,
    seLinux, procMount, seccomp, sysctls, hostProbes, volumeTypes, privilegeEscalation, runAsRoot),
    plus nodeName, controlPlaneTolerations, systemPriorityClass, hostAliases, dnsConfig. Each
    exempts exactly that control. The GPU device paths of an AMD `gpu.mountAll` (/dev/kfd,
    /dev/dri) are not counted as hostPath in a pod with a privileged container."""
    podSecurity: PodSecurityLevel = "baseline"
    """The Pod Security Standard every rendered pod must meet: baseline (the default), restricted,
    or privileged (no PSS control; the GitOps rules of allowedServiceAccounts and the like stay)."""
    allowedServiceAccounts: list[str] = []
    """ServiceAccounts (shell patterns) pods may run as besides those their unit renders and
    `default`. The agent's own ServiceAccount is refused whatever this says."""
    allowedTokenAudiences: list[str] = []
    """Audiences (shell patterns) a projected ServiceAccount token may be made for."""
    allowedSecrets: list[str] = []
    """Secrets (shell patterns) pods may read (volumes, env, imagePullSecrets) besides those their unit
    renders (syncer.ours), the one a federation's `flower-syncer.io/superlink-tls-secret` names included."""
    allowedClaims: list[str] = []
    """PersistentVolumeClaims (shell patterns) pods may mount besides those their unit renders."""
    allowedRuntimeClasses: list[str] = ["nvidia"]
    """RuntimeClasses (shell patterns) pods may name; by default the NVIDIA runtime a GPU pool with
    `gpu.mountAll` gets."""
    allowedControlApiTargets: list[str] | None = None
    """Control API addresses (`host:port`, shell patterns) a federation may register SuperNode keys
    with. Unset: no list (the federation's own SuperLink Service only)."""
    allowedServiceTypes: list[ServiceType] = SERVICE_TYPES
    """Service types the units may render; leave out NodePort and LoadBalancer and nothing of the
    repository is reachable from outside the cluster through a Service."""
    networkPolicies: Literal["optional", "required"] = "optional"
    """required: every unit that runs pods renders its NetworkPolicies (a federation's
    `flower-syncer.io/network-policies: disabled`, a release's `networkPolicy.enabled: false` are refused)."""
    allowInsecureExposure: bool = True
    """false: a SuperLink with `insecure: true` may not be on a NodePort or LoadBalancer Service
    (its Fleet API and Control API would be reachable from outside the cluster in plain text)."""

    def namespace_allowed(self, namespace: str) -> bool:
        if self.allowedNamespaces is None:
            return namespace not in PROTECTED_NAMESPACES
        return any(fnmatch.fnmatchcase(namespace, pattern) for pattern in self.allowedNamespaces)


class RepoSettings(StrictModel):
    """`flower-syncer.yaml`."""

    apiVersion: Literal["flower-syncer.io/v1"] = "flower-syncer.io/v1"
    kind: Literal["Settings"] = "Settings"
    name: str | None = None
    """Identifies this repository in the cluster: a unit is applied and pruned only by the
    repository that applied it first, so several repositories can share a cluster. Without a
    name, one is derived from where the repository comes from (its remote URL, or its local path,
    plus the sub-path): two repositories never share one by accident."""
    renamedFrom: list[str] = []
    """Earlier names of this repository: units recorded under them are taken over (and relabelled)
    instead of refused. The explicit step for renaming a repository, or for giving a name to one
    that had none (its units were recorded under the derived name, or under `default` before
    flower-syncer derived names)."""
    defaultNamespace: str = "default"
    """The namespace of a Federation or SuperNode release that names none."""
    policy: SyncPolicy = SyncPolicy()
    """How every unit of the repository is synced; a release's `release.yaml` and a Federation's
    annotations override it for that unit."""
    guardrails: Guardrails = Guardrails()
    """What the repository's commits may ask of the cluster; within the admin's policy, which they
    can only narrow."""
    requireEncryption: bool = False
    """Secret manifests and node-auth private keys must come from SOPS-encrypted files."""

    field_hints: ClassVar[dict[str, str]] = {"defaultNamespace": "a namespace name such as flower",
                                             "name": "a short name for this repository, e.g. platform-flower",
                                             "renamedFrom": "a list of earlier repository names"}

    def semantic_issues(self) -> list[Issue]:
        issues = []
        problem = name_problem(self.defaultNamespace, "namespace")
        if problem:
            issues.append(Issue(("defaultNamespace",), problem, "use a valid namespace name"))
        if self.name is not None:
            problem = name_problem(self.name, "repository name")
            if problem:
                issues.append(Issue(("name",), problem, "use a short DNS-style name"))
        for i, old in enumerate(self.renamedFrom):
            problem = name_problem(old, "repository name")
            if problem:
                issues.append(Issue(("renamedFrom", i), problem, "list the names exactly as the cluster records them"))
        return issues


class ReleaseSettings(StrictModel):
    """`supernodes/<release>/release.yaml`."""

    apiVersion: Literal["flower-syncer.io/v1"] = "flower-syncer.io/v1"
    kind: Literal["Release"] = "Release"
    namespace: Annotated[str, Field(min_length=1)] | None = None
    """The release's namespace. Unset: `defaultNamespace` of `flower-syncer.yaml`."""
    policy: SyncPolicy | None = None
    """How this release is synced, instead of the repository's `policy`."""
    canary: int | None = None
    """SuperNodes of the release that take a change of their pod template first; the rest only once
    those are healthy (docs/rollouts.md). At most `supernode.replicas - 1` of them; unset: no canary."""
    canaryGate: str | None = None
    """How long the canary stays healthy before the rest rolls (a duration; default 60s)."""
    canaryDeadline: str | None = None
    """By when, from its start, the canary must have passed its gate, or it failed (default 10m)."""

    def canary_settings(self) -> tuple[int, float, float] | None:
        """(count, gate, deadline) of a well-formed release's canary; None without one."""
        if self.canary is None or self.canary < 1:
            return None
        gate = parse_duration(self.canaryGate) if self.canaryGate is not None else None
        deadline = parse_duration(self.canaryDeadline) if self.canaryDeadline is not None else None
        return (self.canary, DEFAULT_GATE if gate is None else gate,
                DEFAULT_DEADLINE if deadline is None else deadline)

    def semantic_issues(self) -> list[Issue]:
        issues = []
        if self.canary is not None and self.canary < 1:
            issues.append(Issue(("canary",), f"{self.canary}: a canary needs at least 1 SuperNode",
                                "write a number of SuperNodes (e.g. 1), or remove it"))
        for key, value in (("canaryGate", self.canaryGate), ("canaryDeadline", self.canaryDeadline)):
            if value is not None and (bad := duration_problem(value)):
                issues.append(Issue((key,), bad, "write e.g. 60s or 10m"))
        settings = self.canary_settings()
        if settings is not None and not issues and settings[1] >= settings[2]:
            issues.append(Issue(("canaryGate",), f"the gate ({settings[1]:g}s) is not shorter than the deadline "
                                f"({settings[2]:g}s): the canary could never pass",
                                "shorten canaryGate or lengthen canaryDeadline"))
        if self.namespace is None:
            return issues
        problem = name_problem(self.namespace, "namespace")
        path: FieldPath = ("namespace",)
        return [*issues, Issue(path, problem, "use a valid namespace name")] if problem else issues
