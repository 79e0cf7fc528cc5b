"""The repository's guardrails (flower-syncer.yaml `guardrails`), checked on what a unit renders:
the namespace it lives in; every pod against the Pod Security Standards at `podSecurity`
(syncer.render.podsecurity); and what PSS allows but a GitOps tool must refuse (ServiceAccounts,
other Secrets, nodes, priorities: syncer.render.podrules). A unit that crosses one fails like a unit
with a config error: nothing of it is applied, nothing is pruned. Each diagnostic says why the rule
exists and what to do."""

from __future__ import annotations

from collections.abc import Collection, Iterator
from typing import Any

from syncer.diagnostics import Diagnostic
from syncer.identity import Manifest, ObjectRef, Unit
from syncer.models.settings import PROTECTED_NAMESPACES, Guardrails
from syncer.ours import own_secrets
from syncer.render.podrules import AgentAccount, Allowances, check_object, check_pod_spec, own_claims
from syncer.render.podsecurity import check_pod

WORKLOAD_KINDS = frozenset({"Deployment", "StatefulSet", "DaemonSet", "Job", "Pod"})


def exposure_problems(manifests: list[Manifest], rails: Guardrails) -> Iterator[tuple[str, str]]:
    """(problem, hint) for each way the unit is reachable beyond what the guardrails allow: a
    Service type they leave out, pods without NetworkPolicies when they are required, a SuperLink
    in plain text (`--insecure`) on a NodePort or LoadBalancer Service."""
    outside: list[str] = []
    pods = policies = 0
    insecure = False
    for m in manifests:
        kind = m.get("kind")
        if kind == "Service":
            kind_of = str((m.get("spec") or {}).get("type") or "ClusterIP")
            if kind_of not in rails.allowedServiceTypes:
                yield (f"{ObjectRef.of(m)} is a {kind_of} Service, which the guardrails do not allow (allowed: "
                       f"{', '.join(rails.allowedServiceTypes) or 'none'})",
                       "use a ClusterIP Service, or ask the cluster's admins to allow the type")
            if kind_of in ("NodePort", "LoadBalancer"):
                outside.append(f"{ObjectRef.of(m)} ({kind_of})")
        elif kind == "NetworkPolicy":
            policies += 1
        pod = _pod(m)
        if pod is not None:
            pods += 1
            insecure = insecure or any(c.get("name") == "superlink" and "--insecure" in (c.get("args") or [])
                                       for c in pod[2].get("containers") or [] if isinstance(c, dict))
    if rails.networkPolicies == "required" and pods and not policies:
        yield ("the unit runs pods but renders no NetworkPolicy, and the guardrails require them "
               "(networkPolicies: required)", "turn them on: remove flower-syncer.io/network-policies: disabled "
               "from the Federation, or set networkPolicy.enabled: true in the release's values")
    if not rails.allowInsecureExposure and insecure and outside:
        yield (f"the SuperLink runs in plain text (insecure: true) and {', '.join(outside)} makes its Fleet API and "
               "Control API reachable from outside the cluster, which the guardrails do not allow "
               "(allowInsecureExposure: false)", "set insecure: false with a certificate, or keep the Service "
               "ClusterIP")


def pod_features(pod_spec: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(feature, field path in the pod spec) for each baseline control the pod breaks."""
    for f in check_pod({}, pod_spec, "baseline"):
        yield f.feature, f.path.removeprefix("spec.")


def _pod(m: Manifest) -> tuple[str, dict[str, Any], dict[str, Any]] | None:
    """(field prefix, pod metadata, pod spec) of a workload or Pod."""
    if m.get("kind") == "Pod":
        return "", m.get("metadata") or {}, m.get("spec") or {}
    if m.get("kind") in WORKLOAD_KINDS:
        template = (m.get("spec") or {}).get("template") or {}
        return "spec.template.", template.get("metadata") or {}, template.get("spec") or {}
    return None


def check_guardrails(unit: Unit, manifests: list[Manifest], rails: Guardrails, source: str,
                     line: int, *, agent: AgentAccount | None = None,
                     extra_secrets: Collection[str] = ()) -> list[Diagnostic]:
    """Every guardrail the unit's objects cross, as errors at the unit's defining file."""
    diags: list[Diagnostic] = []
    if not rails.namespace_allowed(unit.namespace):
        namespaces = (", ".join(rails.allowedNamespaces) if rails.allowedNamespaces is not None
                      else f"any but {', '.join(PROTECTED_NAMESPACES)}")
        diags.append(Diagnostic(source, line, 1, "", f"{unit.kind} {unit.name!r} would live in the namespace "
                                f"{unit.namespace!r}, which this repository may not use (allowed: {namespaces})",
                                "choose another namespace, or list it in guardrails.allowedNamespaces in "
                                "flower-syncer.yaml", unit=unit.id))
    diags += [Diagnostic(source, line, 1, "", problem, hint, unit=unit.id)
              for problem, hint in exposure_problems(manifests, rails)]
    allowed = frozenset(rails.allowPodFeatures)
    allow = Allowances(rails.allowedServiceAccounts, rails.allowedTokenAudiences, rails.allowedSecrets, allowed,
                       rails.allowedClaims, rails.allowedRuntimeClasses)
    claims = own_claims(manifests)
    accounts = {str(m["metadata"]["name"]) for m in manifests if m.get("kind") == "ServiceAccount"}
    secrets = own_secrets(manifests) | set(extra_secrets)
    agent = agent or AgentAccount()
    for m in manifests:
        ref = ObjectRef.of(m)
        for rule in check_object(m):
            diags.append(Diagnostic(source, line, 1, "", f"{ref} has {rule.detail}: {rule.reason}",
                                    "remove it; a pod that needs its ServiceAccount's token gets one projected "
                                    "(automountServiceAccountToken or a serviceAccountToken volume)", unit=unit.id))
        pod = _pod(m)
        if pod is None:
            continue
        prefix, meta, spec = pod
        for f in check_pod(meta, spec, rails.podSecurity, allowed):
            diags.append(Diagnostic(source, line, 1, "", f"{ref} uses {f.feature} ({f.path.removeprefix('spec.')}), "
                                    f"{f.detail}: the Pod Security Standard {rails.podSecurity!r} forbids it "
                                    f"(a {f.level} control, at {prefix}{f.path}) because {f.reason}",
                                    f"remove it, or add {f.feature} to guardrails.allowPodFeatures in "
                                    "flower-syncer.yaml", unit=unit.id))
        for rule in check_pod_spec(spec, unit.namespace, own_accounts=accounts, secrets=secrets, agent=agent,
                                   allow=allow, claims=claims):
            diags.append(Diagnostic(source, line, 1, "", f"{ref} {prefix}{rule.path} {rule.detail}: refused, "
                                    f"because {rule.reason}", _HINTS[rule.rule], unit=unit.id))
    return diags


_HINTS = {
    "serviceAccount": "use a ServiceAccount the unit renders, or list it in guardrails.allowedServiceAccounts",
    "agentServiceAccount": "use a ServiceAccount of the unit's own (this one is never allowed)",
    "tokenSecret": "remove it",
    "nodeName": "use nodeSelector or affinity (or add nodeName to guardrails.allowPodFeatures)",
    "controlPlaneTolerations": "tolerate only the taints of the nodes meant for this workload (or add "
                               "controlPlaneTolerations to guardrails.allowPodFeatures)",
    "systemPriorityClass": "use a priority class of your own (or add systemPriorityClass to "
                           "guardrails.allowPodFeatures)",
    "tokenAudience": "list the audience in guardrails.allowedTokenAudiences, or drop the token",
    "foreignSecret": "keep the Secret in the unit (e.g. a SOPS-encrypted secrets.yaml), or list its name in "
                     "guardrails.allowedSecrets",
    "foreignClaim": "use a volumeClaimTemplate or an ephemeral volume, or list the claim in guardrails.allowedClaims",
    "runtimeClass": "remove runtimeClassName, or ask the cluster's admins to list it in "
                    "guardrails.allowedRuntimeClasses",
    "hostAliases": "use real DNS names (or add hostAliases to guardrails.allowPodFeatures)",
    "dnsConfig": "use the cluster's DNS (or add dnsConfig to guardrails.allowPodFeatures)",
}
