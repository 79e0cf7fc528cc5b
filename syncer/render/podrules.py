"""What a GitOps tool must refuse in a rendered pod although the Pod Security Standards allow it:
the ways a commit reaches credentials or nodes that are not its unit's own.

- `serviceAccountName` (and the old `serviceAccount`): only the ServiceAccounts the unit renders,
  `default`, or names in `guardrails.allowedServiceAccounts`; never the agent's own, whatever the
  guardrails say (its token can write everything the agent writes).
- no Secret of type `kubernetes.io/service-account-token` rendered from Git: the token controller
  fills it with a non-expiring token of any ServiceAccount it names.
- no `nodeName`: it bypasses the scheduler (taints, quotas, admission of the node choice).
- no toleration of the control-plane taints (`node-role.kubernetes.io/control-plane`, `master`) and
  no tolerate-everything (`operator: Exists` without a key): tenant pods stay off control-plane nodes.
- no `system-node-critical` / `system-cluster-critical` (or any `system-`) priority class: they
  preempt the cluster's own pods and are reserved for them.
- projected ServiceAccount tokens only for the audiences in `guardrails.allowedTokenAudiences`
  (no audience: the API server's, the same token the pod's ServiceAccount gets anyway).
- Secret volumes, projected Secrets, `env[].valueFrom.secretKeyRef` and `envFrom[].secretRef`
  only of the unit's own Secrets (syncer.ours: those it renders, or a Certificate it renders
  writes; never widened by an annotation), or names in `guardrails.allowedSecrets`. A Secret volume that
  projects only the key `ca.crt` reads a CA certificate, which is public, and is allowed.
- `imagePullSecrets` only of the unit's own Secrets or `guardrails.allowedSecrets`, as above (another
  application's pull Secret holds its registry credentials).
- `persistentVolumeClaim` volumes only of claims the unit renders or `guardrails.allowedClaims`
  names: another application's volume holds its data.
- `runtimeClassName` only of `guardrails.allowedRuntimeClasses` (default: `nvidia`, what a GPU
  pool with `mountAll` gets): a RuntimeClass picks the sandbox (or its absence) and the nodes.
- `hostAliases` and `dnsConfig` (or `dnsPolicy: None`) need `allowPodFeatures`: they change what
  the pod's names resolve to without changing the addresses a reviewer reads in the diff (the
  SuperLink, registry or Control API address could silently point elsewhere).

`nodeName`, the tolerations, the priority classes, hostAliases and dnsConfig can be allowed by
name in `guardrails.allowPodFeatures` (`nodeName`, `controlPlaneTolerations`,
`systemPriorityClass`, `hostAliases`, `dnsConfig`). Pure: no I/O.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from syncer.identity import Manifest

CONTROL_PLANE_TAINTS = frozenset({"node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master"})
SYSTEM_PRIORITY_CLASSES = frozenset({"system-node-critical", "system-cluster-critical"})
SA_TOKEN_TYPE = "kubernetes.io/service-account-token"
PUBLIC_KEYS = frozenset({"ca.crt"})
DEFAULT_AGENT_NAME = "flower-syncer"  # the chart's ServiceAccount, when the agent's own is not known

REASONS: dict[str, str] = {
    "serviceAccount": "a pod runs with the rights of its ServiceAccount; a commit may pick only its unit's own",
    "agentServiceAccount": "the agent's own ServiceAccount can write everything flower-syncer writes: a pod "
                           "running as it would take over the cluster",
    "tokenSecret": "the token controller fills such a Secret with a non-expiring token of the ServiceAccount "
                   "it names",
    "nodeName": "nodeName bypasses the scheduler, so taints and node restrictions no longer hold",
    "controlPlaneTolerations": "tenant pods must not run on control-plane nodes (their credentials and etcd)",
    "systemPriorityClass": "system priority classes are reserved for the cluster's own pods and preempt them",
    "tokenAudience": "a projected token for another audience lets the pod log in elsewhere as its ServiceAccount",
    "foreignSecret": "a pod may read only its unit's own Secrets, not those of other applications",
    "foreignClaim": "a pod may mount only its unit's own volumes, not another application's data",
    "runtimeClass": "a RuntimeClass decides the pod's sandbox and nodes; only the ones the guardrails list",
    "hostAliases": "hostAliases redirect names the pod resolves without changing the addresses in the diff",
    "dnsConfig": "a custom DNS configuration redirects names the pod resolves without changing the "
                 "addresses in the diff",
}


@dataclass(frozen=True)
class AgentAccount:
    """The agent's own ServiceAccount; namespace None matches the name in every namespace."""

    name: str = DEFAULT_AGENT_NAME
    namespace: str | None = None

    def matches(self, namespace: str, name: str) -> bool:
        return name == self.name and self.namespace in (None, namespace)


@dataclass(frozen=True)
class Rule:
    """One finding: the rule (a REASONS key), the object and field, and what is wrong."""

    rule: str
    path: str
    detail: str

    @property
    def reason(self) -> str:
        return REASONS[self.rule]


@dataclass(frozen=True)
class Allowances:
    service_accounts: Sequence[str] = ()
    token_audiences: Sequence[str] = ()
    secrets: Sequence[str] = ()
    features: frozenset[str] = frozenset()
    claims: Sequence[str] = ()  # PersistentVolumeClaims (shell patterns) besides the unit's own
    runtime_classes: Sequence[str] = ("nvidia",)  # shell patterns


def _d(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _l(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _matches(name: str, patterns: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def own_claims(manifests: Sequence[Manifest]) -> set[str]:
    """PersistentVolumeClaims the unit renders."""
    return {str(m["metadata"]["name"]) for m in manifests if m.get("kind") == "PersistentVolumeClaim"}


def check_object(m: Manifest) -> Iterator[Rule]:
    """Rules on objects that are not pods (a Secret that asks for a ServiceAccount token)."""
    if m.get("kind") == "Secret" and m.get("type") == SA_TOKEN_TYPE:
        account = _d(_d(m.get("metadata")).get("annotations")).get("kubernetes.io/service-account.name", "?")
        yield Rule("tokenSecret", "type", f"type {SA_TOKEN_TYPE} (for the ServiceAccount {account!r})")


def check_pod_spec(spec: Mapping[str, Any], namespace: str, *, own_accounts: set[str], secrets: set[str],
                   agent: AgentAccount, allow: Allowances, claims: Collection[str] = ()) -> Iterator[Rule]:
    """Every rule the pod spec breaks (paths relative to the pod: `spec.nodeName`)."""
    for key in ("serviceAccountName", "serviceAccount"):
        account = spec.get(key)
        if not account:
            continue
        account = str(account)
        if agent.matches(namespace, account):
            yield Rule("agentServiceAccount", f"spec.{key}",
                       f"runs the pod as {account!r}, the agent's own ServiceAccount")
        elif account != "default" and account not in own_accounts and not _matches(account, allow.service_accounts):
            yield Rule("serviceAccount", f"spec.{key}", f"runs the pod as {account!r}, which the unit does not render")
    features = allow.features
    if spec.get("nodeName") and "nodeName" not in features:
        yield Rule("nodeName", "spec.nodeName", f"is set ({spec['nodeName']})")
    if "controlPlaneTolerations" not in features:
        for i, t in enumerate(_l(spec.get("tolerations"))):
            if not isinstance(t, dict):
                continue
            if isinstance(t.get("key"), str) and t["key"] in CONTROL_PLANE_TAINTS:
                yield Rule("controlPlaneTolerations", f"spec.tolerations[{i}]", f"tolerates {t['key']}")
            elif not t.get("key") and t.get("operator") == "Exists":
                yield Rule("controlPlaneTolerations", f"spec.tolerations[{i}]",
                           "tolerates every taint (operator: Exists without a key)")
    priority = str(spec.get("priorityClassName") or "")
    if "systemPriorityClass" not in features and (priority in SYSTEM_PRIORITY_CLASSES
                                                  or priority.startswith("system-")):
        yield Rule("systemPriorityClass", "spec.priorityClassName", f"names {priority}")
    if spec.get("hostAliases") and "hostAliases" not in features:
        yield Rule("hostAliases", "spec.hostAliases", "is set")
    if (spec.get("dnsConfig") or spec.get("dnsPolicy") == "None") and "dnsConfig" not in features:
        yield Rule("dnsConfig", "spec.dnsConfig", "sets a custom DNS configuration")
    runtime = spec.get("runtimeClassName")
    if runtime and not _matches(str(runtime), allow.runtime_classes):
        yield Rule("runtimeClass", "spec.runtimeClassName", f"names the RuntimeClass {runtime!r}, which the guardrails "
                   f"do not list (allowed: {', '.join(allow.runtime_classes) or 'none'})")
    for i, ref in enumerate(_l(spec.get("imagePullSecrets"))):
        if isinstance(ref, dict) and not _secret_ok(ref.get("name"), secrets, allow):
            yield Rule("foreignSecret", f"spec.imagePullSecrets[{i}]",
                       f"pulls with the Secret {ref.get('name')!r}, which is not the unit's own")
    for i, vol in enumerate(_l(spec.get("volumes"))):
        claim = _d(_d(vol).get("persistentVolumeClaim")).get("claimName")
        if claim is not None and not (str(claim) in claims or _matches(str(claim), allow.claims)):
            yield Rule("foreignClaim", f"spec.volumes[{i}].persistentVolumeClaim",
                       f"mounts the PersistentVolumeClaim {claim!r}, which the unit does not render")
    yield from _volumes(spec, secrets, allow)
    yield from _env(spec, secrets, allow)


def _secret_ok(name: Any, secrets: set[str], allow: Allowances) -> bool:
    return isinstance(name, str) and (name in secrets or _matches(name, allow.secrets))


def _public_only(items: Any) -> bool:
    return bool(items) and isinstance(items, list) and all(
        isinstance(i, dict) and str(i.get("key")) in PUBLIC_KEYS for i in items)


def _volumes(spec: Mapping[str, Any], secrets: set[str], allow: Allowances) -> Iterator[Rule]:
    for i, vol in enumerate(_l(spec.get("volumes"))):
        if not isinstance(vol, dict):
            continue
        secret = vol.get("secret")
        if isinstance(secret, dict) and not _secret_ok(secret.get("secretName"), secrets, allow) \
                and not _public_only(secret.get("items")):
            yield Rule("foreignSecret", f"spec.volumes[{i}].secret",
                       f"mounts the Secret {secret.get('secretName')!r}, which is not the unit's own")
        for j, src in enumerate(_l(_d(vol.get("projected")).get("sources"))):
            if not isinstance(src, dict):
                continue
            where = f"spec.volumes[{i}].projected.sources[{j}]"
            s = src.get("secret")
            if isinstance(s, dict) and not _secret_ok(s.get("name"), secrets, allow) \
                    and not _public_only(s.get("items")):
                yield Rule("foreignSecret", f"{where}.secret",
                           f"projects the Secret {s.get('name')!r}, which is not the unit's own")
            token = src.get("serviceAccountToken")
            if isinstance(token, dict) and token.get("audience") \
                    and not _matches(str(token["audience"]), allow.token_audiences):
                yield Rule("tokenAudience", f"{where}.serviceAccountToken.audience",
                           f"makes a ServiceAccount token for the audience {token['audience']!r}")


def _env(spec: Mapping[str, Any], secrets: set[str], allow: Allowances) -> Iterator[Rule]:
    for key in ("initContainers", "containers", "ephemeralContainers"):
        for i, c in enumerate(_l(spec.get(key))):
            if not isinstance(c, dict):
                continue
            for j, env in enumerate(_l(c.get("env"))):
                ref = _d(_d(env).get("valueFrom")).get("secretKeyRef")
                if isinstance(ref, dict) and not _secret_ok(ref.get("name"), secrets, allow):
                    yield Rule("foreignSecret", f"spec.{key}[{i}].env[{j}].valueFrom.secretKeyRef",
                               f"reads the Secret {ref.get('name')!r}, which is not the unit's own")
            for j, src in enumerate(_l(c.get("envFrom"))):
                ref = _d(src).get("secretRef")
                if isinstance(ref, dict) and not _secret_ok(ref.get("name"), secrets, allow):
                    yield Rule("foreignSecret", f"spec.{key}[{i}].envFrom[{j}].secretRef",
                               f"reads the Secret {ref.get('name')!r}, which is not the unit's own")
