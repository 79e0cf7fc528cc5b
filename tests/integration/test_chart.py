"""The Helm chart (charts/flower-syncer): lint, render, schema; the API server accepts what it
renders; and the agent's one-shot sync works with nothing but the chart's ServiceAccount and RBAC.

Helm is the pinned one the devcluster build makes (tools/devcluster.py, the same binary as
``kube_cluster.bin_dir / "helm"``), else one on PATH; without any, these tests skip (fail with CI=true).
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from syncer import __version__
from syncer.cluster.client import ApiError, Kube
from syncer.identity import MANAGED_SELECTOR
from tests.conftest import KubeCluster, wait_until
from tests.integration.charts import cluster_helm, one, run_helm, sa_kubeconfig, template_text

if TYPE_CHECKING:
    from syncer.agent.config import AgentConfig

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "flower-syncer"
EXAMPLES = REPO / "config" / "examples"
DEVCLUSTER = REPO / "tools" / "devcluster.py"

MANAGED_VERBS = ["get", "list", "watch", "create", "patch", "delete"]
# (apiGroup, resource) -> verbs, exactly what the agent does (see templates/rbac.yaml)
NAMESPACED_RULES = {
    **{("", r): MANAGED_VERBS for r in ("serviceaccounts", "secrets", "configmaps", "services")},
    ("networking.k8s.io", "networkpolicies"): MANAGED_VERBS,
    **{("apps", r): MANAGED_VERBS for r in ("deployments", "statefulsets", "daemonsets")},
    ("cert-manager.io", "certificates"): ["get", "create", "patch", "delete"],  # read one by one, never listed
    ("", "pods"): ["list", "watch", "delete"],  # delete: a failed canary's pods (docs/rollouts.md)
    ("events.k8s.io", "events"): ["create", "patch", "list"],  # Kubernetes Events about the units; read by the web view
    ("flower-syncer.io", "flowerunits"): MANAGED_VERBS,  # `kubectl get flowerunits`, the agent's own objects
    ("flower-syncer.io", "flowerunits/status"): ["patch"],
}
AGENT_OWN_WRITES = {("events.k8s.io", "events"), ("flower-syncer.io", "flowerunits"),
                    ("flower-syncer.io", "flowerunits/status")}  # never impersonated
DIGEST = "sha256:" + "ab" * 32
SSH_URL = "git@git.example.com:flower/flower-config.git"


# ---------------------------------------------------------------------------------------------
# helpers


def render(helm: str, values: dict[str, Any] | None = None, *, chart: Path = CHART, namespace: str = "flower-system",
           release: str = "fs", extra: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    args = ["template", release, str(chart), "--namespace", namespace, *extra]
    if values is not None:
        args += ["--values", "-"]
    proc = subprocess.run([helm, *args], input=yaml.safe_dump(values) if values is not None else None,
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def kinds(objs: list[dict[str, Any]]) -> list[str]:
    return sorted(o["kind"] for o in objs)


def rules_of(role: dict[str, Any]) -> dict[tuple[str, str], list[str]]:
    """(apiGroup, resource) -> verbs, for rules without resourceNames."""
    out: dict[tuple[str, str], list[str]] = {}
    for rule in role["rules"]:
        if rule.get("resourceNames"):
            continue
        for group in rule["apiGroups"]:
            for res in rule["resources"]:
                assert (group, res) not in out, f"{res} in two rules of {role['metadata']['name']}"
                out[(group, res)] = rule["verbs"]
    return out


def container(objs: list[dict[str, Any]]) -> dict[str, Any]:
    containers = one(objs, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return dict(containers[0])


def env_of(c: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in c["env"]}


def agent_settings(c: dict[str, Any], pod: str = "fs-flower-syncer-abc-123") -> AgentConfig:
    """What the agent makes of the container's environment (the downward API filled in)."""
    from syncer.agent.config import load_config

    environ = {}
    for e in c["env"]:
        if "value" in e:
            environ[e["name"]] = e["value"]
        elif e["valueFrom"].get("fieldRef", {}).get("fieldPath") == "metadata.name":
            environ[e["name"]] = pod
    return load_config({}, environ)


def mounts_of(objs: list[dict[str, Any]]) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """mount path -> (volumeMount, volume)."""
    pod = one(objs, "Deployment")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    return {m["mountPath"]: (m, volumes[m["name"]]) for m in container(objs)["volumeMounts"]}


# ---------------------------------------------------------------------------------------------
# lint and render (no cluster)


def test_chart_metadata_matches_the_package() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2"
    assert chart["appVersion"] == __version__
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert schema["$schema"] == "http://json-schema.org/draft-07/schema#"

    def closed(node: dict[str, Any], path: str) -> None:  # additionalProperties: false wherever we list properties
        if "properties" in node:
            assert node.get("additionalProperties") is False, f"{path or '/'} accepts unknown keys"
            for key, sub in node["properties"].items():
                closed(sub, f"{path}/{key}")
        if isinstance(node.get("items"), dict):
            closed(node["items"], f"{path}[]")

    closed(schema, "")


def test_lint(helm: str, tmp_path: Path) -> None:
    custom = tmp_path / "values.yaml"
    custom.write_text(yaml.safe_dump(CUSTOM))
    for args in ([], ["--strict"], ["--strict", "--values", str(custom)]):
        proc = run_helm(helm, "lint", str(CHART), *args)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "1 chart(s) linted, 0 chart(s) failed" in proc.stdout
        assert "[ERROR]" not in proc.stdout and "[WARNING]" not in proc.stdout, proc.stdout


def test_default_values(helm: str) -> None:
    objs = render(helm)
    dashboards = sorted((CHART / "files").glob("*.json"))
    expected = ["ClusterRole", "ClusterRoleBinding", "Deployment", "NetworkPolicy", "Role", "Role", "RoleBinding",
                "RoleBinding", "Service", "Service", "ServiceAccount"]
    # the admin's policy (policy.enabled) is a ConfigMap; the dashboards another
    assert kinds(objs) == sorted(expected + ["ConfigMap"] + (["ConfigMap"] if dashboards else []))
    labels = one(objs, "Deployment")["metadata"]["labels"]
    assert labels["app.kubernetes.io/name"] == "flower-syncer"
    assert labels["app.kubernetes.io/instance"] == "fs"
    assert labels["app.kubernetes.io/version"] == __version__
    assert labels["app.kubernetes.io/managed-by"] == "Helm"
    assert labels["helm.sh/chart"] == "flower-syncer-" + yaml.safe_load((CHART / "Chart.yaml").read_text())["version"]

    # RBAC: cluster-wide, exactly what the agent does
    cluster_role = one(objs, "ClusterRole")
    assert rules_of(cluster_role) == {**NAMESPACED_RULES, ("", "namespaces"): ["get", "create"],
                                      ("", "nodes"): ["list", "watch"]}
    binding = one(objs, "ClusterRoleBinding")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": cluster_role["metadata"]["name"]}
    sa = one(objs, "ServiceAccount")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa["metadata"]["name"],
                                    "namespace": "flower-system"}]
    lease_role = one(objs, "Role", name="fs-flower-syncer-leader-election", namespace="flower-system")
    assert lease_role["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": ["fs-flower-syncer"],
         "verbs": ["get", "update"]},
    ]
    assert one(objs, "RoleBinding", name="fs-flower-syncer-leader-election")["roleRef"]["name"] == \
        lease_role["metadata"]["name"]
    label_role = one(objs, "Role", name="fs-flower-syncer-pod-label", namespace="flower-system")
    assert label_role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["patch"]}]
    assert one(objs, "RoleBinding", name="fs-flower-syncer-pod-label")["roleRef"]["name"] == \
        label_role["metadata"]["name"]

    deploy = one(objs, "Deployment")
    pod = deploy["spec"]["template"]["spec"]
    assert deploy["spec"]["replicas"] == 1
    assert pod["serviceAccountName"] == sa["metadata"]["name"]
    assert pod["automountServiceAccountToken"] is True
    assert pod["enableServiceLinks"] is False
    assert pod["securityContext"] == {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532,
                                      "fsGroup": 65532, "seccompProfile": {"type": "RuntimeDefault"}}
    c = container(objs)
    assert c["image"] == f"ghcr.io/flower-syncer/flower-syncer:{__version__}"
    assert c["args"] == ["run"]
    assert c["securityContext"] == {
        "runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532, "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}
    assert c["ports"] == [{"name": "http", "containerPort": 9090, "protocol": "TCP"}]
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert c["resources"]["requests"] and c["resources"]["limits"]["memory"]
    env = env_of(c)
    assert env["FLOWER_SYNCER_LEASE_NAMESPACE"] == "flower-system"
    assert env["FLOWER_SYNCER_IDENTITY"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["HOME"] == "/tmp"
    assert not [k for k in env if k.endswith("_FILE") or k in ("FLOWER_SYNCER_NAMESPACES", "FLOWER_SYNCER_REF")]
    from syncer.agent.config import AgentConfig, env_name

    fields = {env_name(f) for f in AgentConfig.model_fields}
    assert {k for k in env if k.startswith("FLOWER_SYNCER_")} <= fields
    settings = agent_settings(c)
    assert settings.repo == "https://git.example.com/flower/flower-config.git"
    assert settings.listen_address() == ("0.0.0.0", 9090)
    assert settings.interval == 60
    assert settings.cluster == "" and "FLOWER_SYNCER_CLUSTER" not in env  # no cluster layout by default
    assert settings.leader_elect is True
    assert (settings.lease_namespace, settings.lease_name) == ("flower-system", "fs-flower-syncer")
    assert settings.identity == "fs-flower-syncer-abc-123"
    assert settings.namespaces is None
    assert str(settings.cache_dir) == "/var/cache/flower-syncer"
    assert (settings.log_format, settings.log_level, settings.workers) == ("json", "info", 4)
    assert settings.api_token_file is settings.webhook_secret_file is settings.git_token_file is None
    mounts = mounts_of(objs)
    assert set(mounts) == {"/var/cache/flower-syncer", "/tmp", "/etc/flower-syncer/policy"}
    # the admin's policy, from a ConfigMap of the release: the safe default entry
    assert mounts["/etc/flower-syncer/policy"][1]["configMap"]["name"] == "fs-flower-syncer-policy"
    assert str(settings.policy) == "/etc/flower-syncer/policy/policy.yaml"
    policy = yaml.safe_load(one(objs, "ConfigMap", name="fs-flower-syncer-policy")["data"]["policy.yaml"])
    assert policy == {"apiVersion": "flower-syncer.io/v1", "kind": "Policy", "default": {"guardrails": {}},
                      "repositories": []}
    assert all("emptyDir" in v for path, (_, v) in mounts.items() if path != "/etc/flower-syncer/policy")

    # the API/webhook Service reaches only the leader; the metrics Service every replica
    svc = one(objs, "Service", name="fs-flower-syncer")
    assert svc["spec"]["ports"] == [{"name": "http", "port": 9090, "targetPort": "http", "protocol": "TCP"}]
    assert svc["spec"]["selector"] == {**deploy["spec"]["selector"]["matchLabels"], "flower-syncer.io/leader": "true"}
    metrics_svc = one(objs, "Service", name="fs-flower-syncer-metrics")
    assert metrics_svc["spec"]["clusterIP"] == "None"
    assert metrics_svc["spec"]["selector"] == deploy["spec"]["selector"]["matchLabels"]
    assert metrics_svc["spec"]["selector"].items() <= deploy["spec"]["template"]["metadata"]["labels"].items()
    assert env["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["POD_NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}

    # the HTTP port only from the release namespace (the kubelet's probes are never subject to it)
    policy = one(objs, "NetworkPolicy")
    assert policy["metadata"]["namespace"] == "flower-system"
    assert policy["spec"] == {"podSelector": {"matchLabels": deploy["spec"]["selector"]["matchLabels"]},
                              "policyTypes": ["Ingress"],
                              "ingress": [{"ports": [{"port": "http", "protocol": "TCP"}],
                                           "from": [{"podSelector": {}}]}]}
    assert settings.protect_reads is False


CUSTOM: dict[str, Any] = {
    "replicaCount": 2,
    "image": {"repository": "registry.example.com/flower-syncer", "digest": DIGEST, "pullPolicy": "Always"},
    "imagePullSecrets": [{"name": "regcred"}],
    "git": {"repo": SSH_URL, "ref": "release", "path": "clusters/prod", "interval": 30,
            "existingSecret": "flower-git-ssh", "cluster": "site-a"},
    "webhook": {"existingSecret": "hooks", "existingSecretKey": "github"},
    "api": {"token": "s3cret-api-token"},
    "agent": {"workers": 8, "logLevel": "debug", "leaderElection": {"leaseName": "syncer-leader"}},
    "rbac": {"namespaces": ["team-a", "team-b"]},
    "serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}},
    "prometheusRule": {"enabled": True, "labels": {"release": "prometheus"}},
    "extraEnv": [{"name": "HTTPS_PROXY", "value": "http://proxy:3128"}],
    "podAnnotations": {"example.com/team": "platform"},
    "nodeSelector": {"kubernetes.io/os": "linux"},
    "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "platform", "effect": "NoSchedule"}],
    "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
        "weight": 100, "podAffinityTerm": {
            "topologyKey": "kubernetes.io/hostname",
            "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "flower-syncer"}}}}]}},
    "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}},
}


def test_custom_values(helm: str) -> None:
    objs = render(helm, CUSTOM)

    # namespaced RBAC: a Role and RoleBinding per listed namespace, nothing cluster-wide but a
    # `get` on exactly those namespaces (and nodes for the GPU table)
    sa = one(objs, "ServiceAccount")["metadata"]["name"]
    for ns in ("team-a", "team-b"):
        role = one(objs, "Role", namespace=ns)
        assert rules_of(role) == NAMESPACED_RULES
        binding = one(objs, "RoleBinding", namespace=ns)
        assert binding["roleRef"]["kind"] == "Role" and binding["roleRef"]["name"] == role["metadata"]["name"]
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa, "namespace": "flower-system"}]
    cluster_role = one(objs, "ClusterRole")
    assert cluster_role["rules"] == [
        {"apiGroups": [""], "resources": ["namespaces"], "resourceNames": ["team-a", "team-b"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list", "watch"]},
    ]
    assert one(objs, "ClusterRoleBinding")["roleRef"]["name"] == cluster_role["metadata"]["name"]
    lease_role = one(objs, "Role", name="fs-flower-syncer-leader-election", namespace="flower-system")
    assert lease_role["rules"][1]["resourceNames"] == ["syncer-leader"]
    roles = [o for o in objs if o["kind"] in ("Role", "ClusterRole")]
    assert len(roles) == 5  # a Role per listed namespace, the Lease Role, the pod-label Role, the ClusterRole
    assert not any("create" in r["verbs"] for o in roles for r in o["rules"] if "namespaces" in r["resources"])

    deploy = one(objs, "Deployment")
    pod = deploy["spec"]["template"]["spec"]
    assert deploy["spec"]["replicas"] == 2
    c = container(objs)
    assert c["image"] == f"registry.example.com/flower-syncer@{DIGEST}"
    assert c["imagePullPolicy"] == "Always"
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert pod["nodeSelector"] == CUSTOM["nodeSelector"]
    assert pod["tolerations"] == CUSTOM["tolerations"]
    assert pod["affinity"] == CUSTOM["affinity"]
    assert c["resources"] == CUSTOM["resources"]
    annotations = deploy["spec"]["template"]["metadata"]["annotations"]
    assert annotations["example.com/team"] == "platform"
    assert re.fullmatch(r"[0-9a-f]{64}", annotations["checksum/secrets"])
    env = env_of(c)
    assert env["HTTPS_PROXY"] == "http://proxy:3128"
    assert list(env)[-1] == "HTTPS_PROXY"  # extra env comes last, so it wins
    assert "FLOWER_SYNCER_GIT_TOKEN_FILE" not in env
    settings = agent_settings(c, pod="fs-flower-syncer-x-1")
    assert (settings.repo, settings.ref, settings.path, settings.interval) == (SSH_URL, "release", "clusters/prod", 30)
    assert settings.cluster == "site-a"  # this cluster's part of a repository of several (git.cluster)
    assert settings.namespaces == ["team-a", "team-b"]
    assert settings.leader_elect is True
    assert (settings.lease_namespace, settings.lease_name, settings.identity) == (
        "flower-system", "syncer-leader", "fs-flower-syncer-x-1")
    assert (settings.workers, settings.log_level) == (8, "debug")
    assert str(settings.ssh_key_file) == "/etc/flower-syncer/git/identity"
    assert str(settings.known_hosts_file) == "/etc/flower-syncer/git/known_hosts"
    assert str(settings.webhook_secret_file) == "/etc/flower-syncer/webhook/secret"
    assert str(settings.api_token_file) == "/etc/flower-syncer/api/token"

    mounts = mounts_of(objs)
    git_mount, git_volume = mounts["/etc/flower-syncer/git"]
    assert git_mount["readOnly"] is True
    assert git_volume["secret"]["secretName"] == "flower-git-ssh"
    assert git_volume["secret"]["items"] == [{"key": "identity", "path": "identity"},
                                             {"key": "known_hosts", "path": "known_hosts"}]
    hook_mount, hook_volume = mounts["/etc/flower-syncer/webhook"]
    assert hook_mount["readOnly"] is True
    assert hook_volume["secret"] == {"secretName": "hooks", "defaultMode": 0o440,
                                     "items": [{"key": "github", "path": "secret"}]}
    api_mount, api_volume = mounts["/etc/flower-syncer/api"]
    assert api_mount["readOnly"] is True
    api_secret = one(objs, "Secret")  # the only Secret created: the API token
    assert api_volume["secret"]["secretName"] == api_secret["metadata"]["name"] == "fs-flower-syncer-api"
    assert base64.b64decode(api_secret["data"]["token"]).decode() == "s3cret-api-token"

    monitor = one(objs, "ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    services = [o for o in objs if o["kind"] == "Service"]
    selected = [o for o in services
                if monitor["spec"]["selector"]["matchLabels"].items() <= o["metadata"]["labels"].items()]
    assert [o["metadata"]["labels"]["flower-syncer.io/service"] for o in selected] == ["metrics"]  # not both
    assert monitor["spec"]["endpoints"][0]["port"] == "http"
    assert monitor["spec"]["endpoints"][0]["path"] == "/metrics"
    alerts = yaml.safe_load((CHART / "files" / "alerts.yaml").read_text()) or {}
    rules = [o for o in objs if o["kind"] == "PrometheusRule"]
    if alerts.get("groups"):  # the real alerts; the placeholder has none and renders nothing
        assert len(rules) == 1 and rules[0]["spec"]["groups"] == alerts["groups"]
    else:
        assert rules == []


def test_optional_rbac(helm: str) -> None:
    """rbac.nodes=false drops the node list; no leader election: no Lease Role; rbac.create=false: no RBAC,
    but the agent is still told its namespaces."""
    for namespaces in ([], ["team-a"]):
        objs = render(helm, {"rbac": {"namespaces": namespaces, "nodes": False},
                             "agent": {"leaderElection": {"enabled": False}}})
        rules = [r for o in objs if o["kind"] in ("Role", "ClusterRole") for r in o["rules"]]
        assert not [r for r in rules if {"nodes", "leases"} & set(r["resources"])]
        assert not [o for o in objs if o["kind"] == "Role" and o["metadata"]["namespace"] == "flower-system"
                    and o["metadata"]["name"].endswith("-leader-election")]
        assert agent_settings(container(objs)).leader_elect is False
    objs = render(helm, {"rbac": {"create": False, "namespaces": ["team-a"]}, "serviceAccount": {"create": False}})
    assert kinds(objs) in (["ConfigMap", "Deployment", "NetworkPolicy", "Service", "Service"],
                           ["ConfigMap", "ConfigMap", "Deployment", "NetworkPolicy", "Service", "Service"])
    assert one(objs, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"] == "default"
    assert agent_settings(container(objs)).namespaces == ["team-a"]


def test_tenant_mode_shrinks_the_agents_rights(helm: str) -> None:
    """tenant.create: the agent only reads what it manages (Events and FlowerUnits aside), may impersonate exactly the
    tenant, and the tenant may write only in its namespaces; the policy names the tenant."""
    for namespaces in ([], ["team-a", "team-b"]):
        objs = render(helm, {"rbac": {"namespaces": namespaces}, "tenant": {"create": True, "namespaces": ["team-a"]}})
        agent_roles = [o for o in objs if o["kind"] in ("Role", "ClusterRole")
                       and o["metadata"]["name"] in ("fs-flower-syncer-flower-system",)]
        assert agent_roles
        for role in agent_roles:
            for (group, resource), verbs in rules_of(role).items():
                writes = set(verbs) - {"get", "list", "watch"}
                assert not writes or (group, resource) in AGENT_OWN_WRITES, (resource, verbs)
        impersonate = one(objs, "Role", name="fs-flower-syncer-impersonate-fs-flower-syncer-tenant")
        assert impersonate["metadata"]["namespace"] == "flower-system"
        assert impersonate["rules"] == [{"apiGroups": [""], "resources": ["serviceaccounts"],
                                         "resourceNames": ["fs-flower-syncer-tenant"], "verbs": ["impersonate"]}]
        tenant_role = one(objs, "Role", name="fs-flower-syncer-tenant")
        assert tenant_role["metadata"]["namespace"] == "team-a"
        assert rules_of(tenant_role)[("apps", "statefulsets")] == MANAGED_VERBS
        tenant = one(objs, "ServiceAccount", name="fs-flower-syncer-tenant")
        assert tenant["automountServiceAccountToken"] is False
        policy = yaml.safe_load(one(objs, "ConfigMap", name="fs-flower-syncer-policy")["data"]["policy.yaml"])
        assert policy["default"]["serviceAccount"] == "flower-system/fs-flower-syncer-tenant"


PROMETHEUS = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
              "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}}
INGRESS = {"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]}}


@pytest.mark.parametrize(("network_policy", "peers"), [
    ({"from": [PROMETHEUS, INGRESS]}, [{"podSelector": {}}, PROMETHEUS, INGRESS]),
    ({"allowSameNamespace": False, "from": [PROMETHEUS]}, [PROMETHEUS]),
    ({"allowSameNamespace": False}, None),  # nothing but the kubelet and port-forward
    ({"enabled": False}, "none"),
])
def test_network_policy(helm: str, network_policy: dict[str, Any], peers: Any) -> None:
    objs = render(helm, {"networkPolicy": network_policy})
    policies = [o for o in objs if o["kind"] == "NetworkPolicy"]
    if peers == "none":
        assert policies == []
        return
    (policy,) = policies
    assert policy["spec"]["podSelector"]["matchLabels"] == one(objs, "Deployment")["spec"]["selector"]["matchLabels"]
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    if peers is None:
        assert policy["spec"]["ingress"] == []  # isolated
    else:
        assert policy["spec"]["ingress"] == [{"ports": [{"port": "http", "protocol": "TCP"}], "from": peers}]
    # the named port is the container's
    assert [p["name"] for p in container(objs)["ports"]] == ["http"]


@pytest.mark.parametrize("api", [{"token": "t0ken"}, {"existingSecret": "agent-api", "existingSecretKey": "bearer"}])
def test_protect_reads(helm: str, api: dict[str, Any]) -> None:
    """api.protectReads: the agent wants the token on /metrics and /api/v1/status, and the
    ServiceMonitor sends it from the same Secret and key the agent reads."""
    objs = render(helm, {"api": {**api, "protectReads": True}, "serviceMonitor": {"enabled": True}})
    settings = agent_settings(container(objs))
    assert settings.protect_reads is True
    assert str(settings.api_token_file) == "/etc/flower-syncer/api/token"
    _, volume = mounts_of(objs)["/etc/flower-syncer/api"]
    (endpoint,) = one(objs, "ServiceMonitor")["spec"]["endpoints"]
    assert endpoint["authorization"] == {"type": "Bearer", "credentials": {
        "name": volume["secret"]["secretName"], "key": volume["secret"]["items"][0]["key"]}}
    assert endpoint["authorization"]["credentials"]["key"] == api.get("existingSecretKey", "token")
    # off (the default): no token on the scrape
    (endpoint,) = one(render(helm, {"serviceMonitor": {"enabled": True}}), "ServiceMonitor")["spec"]["endpoints"]
    assert "authorization" not in endpoint


def notes(helm: str, values: dict[str, Any]) -> str:
    proc = subprocess.run([helm, "install", "fs", str(CHART), "--namespace", "flower-system", "--dry-run=client",
                           "--values", "-"], input=yaml.safe_dump(values), capture_output=True, text=True,
                          timeout=60, check=False, env={k: v for k, v in os.environ.items() if k != "KUBECONFIG"})
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split("NOTES:", 1)[1]


def test_notes_say_who_can_reach_the_agent(helm: str) -> None:
    text = notes(helm, {})
    assert "reachable only from pods in flower-system." in text and "WARNING: networkPolicy" not in text
    text = notes(helm, {"serviceMonitor": {"enabled": True}, "webhook": {"secret": "s"}})
    assert "allow your Prometheus's namespace" in text and "allow the ingress controller" in text
    text = notes(helm, {"networkPolicy": {"enabled": False}})
    assert "WARNING: networkPolicy.enabled=false and api.protectReads=false" in text
    text = notes(helm, {"networkPolicy": {"enabled": False}, "api": {"token": "t", "protectReads": True}})
    assert "WARNING" not in text.replace("WARNING: git.repo", "")
    assert 'curl -s -H "Authorization: Bearer $TOKEN"' in text and "t" not in re.findall(r"Bearer (\S+)", text)


def test_optional_ingress_to_the_web_view(helm: str) -> None:
    assert "Ingress" not in kinds(render(helm))
    objs = render(helm, {"ingress": {"enabled": True, "className": "nginx", "host": "fs.example.com",
                                     "tls": [{"hosts": ["fs.example.com"], "secretName": "fs-tls"}]}})
    ingress = one(objs, "Ingress")
    assert ingress["spec"]["ingressClassName"] == "nginx"
    assert ingress["spec"]["tls"] == [{"hosts": ["fs.example.com"], "secretName": "fs-tls"}]
    rule = ingress["spec"]["rules"][0]
    assert rule["host"] == "fs.example.com"
    service = next(o for o in objs if o["kind"] == "Service" and o["metadata"]["labels"].get("flower-syncer.io/service")
               == "api")
    assert rule["http"]["paths"] == [{"path": "/", "pathType": "Prefix", "backend": {"service": {
        "name": service["metadata"]["name"], "port": {"name": "http"}}}}]
    everywhere = one(render(helm, {"ingress": {"enabled": True}}), "Ingress")
    assert "host" not in everywhere["spec"]["rules"][0] and "ingressClassName" not in everywhere["spec"]


@pytest.mark.parametrize(("git", "url_kind"), [
    ({"token": "ghp_x", "username": "bot"}, "token"),
    ({"ssh": {"identity": "-----BEGIN OPENSSH PRIVATE KEY-----\nk\n", "knownHosts": "h ssh-ed25519 AAA"}}, "ssh"),
    ({"existingSecret": "creds"}, "token"),  # https URL: token
    ({"existingSecret": "creds", "repo": "ssh://git@git.example.com/flower.git"}, "ssh"),
    ({"existingSecret": "creds", "repo": "https://git.example.com/flower.git", "auth": "ssh"}, "ssh"),
])
def test_git_credentials(helm: str, git: dict[str, Any], url_kind: str) -> None:
    objs = render(helm, {"git": git})
    settings = agent_settings(container(objs))
    _, volume = mounts_of(objs)["/etc/flower-syncer/git"]
    created = [o for o in objs if o["kind"] == "Secret"]
    if url_kind == "token":
        assert str(settings.git_token_file) == "/etc/flower-syncer/git/token"
        assert settings.git_username == git.get("username", "git")
        assert settings.ssh_key_file is None
        assert volume["secret"]["items"] == [{"key": "token", "path": "token"}]
    else:
        assert str(settings.ssh_key_file) == "/etc/flower-syncer/git/identity"
        assert str(settings.known_hosts_file) == "/etc/flower-syncer/git/known_hosts"
        assert settings.git_token_file is None
        assert [i["key"] for i in volume["secret"]["items"]] == ["identity", "known_hosts"]
    if "existingSecret" in git:
        assert created == [] and volume["secret"]["secretName"] == "creds"
    else:
        assert [s["metadata"]["name"] for s in created] == [volume["secret"]["secretName"]] == ["fs-flower-syncer-git"]
        data = {k: base64.b64decode(v).decode() for k, v in created[0]["data"].items()}
        expected = ({"token": git["token"]} if url_kind == "token"
                    else {"identity": git["ssh"]["identity"], "known_hosts": git["ssh"]["knownHosts"]})
        assert data == expected


def test_alerts_and_dashboards_from_chart_files(helm: str, tmp_path: Path) -> None:
    chart = tmp_path / "flower-syncer"
    shutil.copytree(CHART, chart)  # files/, a symlink to dashboards/, becomes a real folder here
    for f in (chart / "files").glob("*.json"):
        f.unlink()
    (chart / "files" / "alerts.yaml").write_text("# placeholder\ngroups: []\n")
    on = {"prometheusRule": {"enabled": True}, "serviceMonitor": {"enabled": True}}
    objs = render(helm, on, chart=chart)
    assert not [o for o in objs if o["kind"] == "PrometheusRule"]
    assert [o["metadata"]["name"] for o in objs if o["kind"] == "ConfigMap"] == ["fs-flower-syncer-policy"]

    groups = [{"name": "flower-syncer", "rules": [{
        "alert": "FlowerSyncerSyncFailing", "expr": "increase(flower_syncer_sync_errors_total[15m]) > 0",
        "for": "15m", "labels": {"severity": "warning"},
        "annotations": {"summary": "{{ $labels.unit }} fails to sync"}}]}]
    (chart / "files" / "alerts.yaml").write_text(yaml.safe_dump({"groups": groups}))
    boards = {"flower-syncer.json": {"title": "flower-syncer", "panels": []},
              "flower-gpus.json": {"title": "GPUs", "panels": [{"type": "stat"}]}}
    for name, board in boards.items():
        (chart / "files" / name).write_text(json.dumps(board))
    objs = render(helm, {**on, "grafanaDashboards": {"annotations": {"grafana_folder": "Flower"}}}, chart=chart)
    rule = one(objs, "PrometheusRule")
    assert rule["spec"]["groups"] == groups  # Prometheus templates ({{ $labels }}) untouched
    cm = one(objs, "ConfigMap", name="fs-flower-syncer-dashboards")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["annotations"] == {"grafana_folder": "Flower"}
    assert {k: json.loads(v) for k, v in cm["data"].items()} == boards
    objs = render(helm, {**on, "grafanaDashboards": {"enabled": False}, "policy": {"enabled": False}}, chart=chart)
    assert not [o for o in objs if o["kind"] == "ConfigMap"]


def test_runbook_urls(helm: str) -> None:
    alerts = yaml.safe_load((CHART / "files" / "alerts.yaml").read_text())
    names = {r["alert"] for g in alerts["groups"] for r in g["rules"]}
    for name in names:  # every alert has its page
        assert (CHART.parent.parent / "dashboards" / "runbooks" / f"{name}.md").read_text().startswith(f"# {name}")
    on = {"prometheusRule": {"enabled": True}}
    rules = [r for g in one(render(helm, on), "PrometheusRule")["spec"]["groups"] for r in g["rules"]]
    assert {r["annotations"]["runbook_url"] for r in rules} == {f"dashboards/runbooks/{n}.md" for n in names}
    on["prometheusRule"]["runbookBaseURL"] = "https://docs.example.com/flower-syncer/runbooks/"
    rules = [r for g in one(render(helm, on), "PrometheusRule")["spec"]["groups"] for r in g["rules"]]
    assert {r["annotations"]["runbook_url"] for r in rules} == {
        f"https://docs.example.com/flower-syncer/runbooks/{n}.md" for n in names}


@pytest.mark.parametrize(("values", "message"), [
    ({"replicaCount": "two"}, "/replicaCount"),
    ({"replicaCount": 0}, "/replicaCount"),
    ({"replicas": 2}, "'replicas' not allowed"),
    ({"git": {"repo": "https://x.example.com/r.git", "branch": "main"}}, "'branch' not allowed"),
    ({"rbac": {"namespaces": ["Team_A"]}}, "/rbac/namespaces/0"),
    ({"rbac": {"namespaces": "team-a"}}, "/rbac/namespaces"),
    ({"agent": {"logLevel": "verbose"}}, "/agent/logLevel"),
    ({"image": {"digest": "sha256:abc"}}, "/image/digest"),
    ({"git": {"repo": ""}}, "/git/repo"),
    ({"extraEnv": [{"value": "x"}]}, "/extraEnv/0"),
    ({"replicaCount": 2, "agent": {"leaderElection": {"enabled": False}}}, "needs agent.leaderElection.enabled"),
    ({"git": {"ssh": {"identity": "key"}}}, "needs git.ssh.knownHosts"),
    ({"git": {"auth": "ssh"}}, "git.auth=ssh needs"),
    ({"api": {"protectReads": True}}, "api.protectReads=true needs an API token"),
    ({"networkPolicy": {"from": [{"namespaceSelectr": {}}]}}, "/networkPolicy/from/0"),
    ({"networkPolicy": {"from": [{}]}}, "/networkPolicy/from/0"),
    ({"networkPolicy": {"from": [{"ipBlock": {"except": ["10.0.0.0/8"]}}]}}, "/networkPolicy/from/0/ipBlock"),
    ({"networkPolicy": {"enabled": "yes"}}, "/networkPolicy/enabled"),
    ({"prometheusRule": {"runbookBaseURL": "docs/runbooks"}}, "/prometheusRule/runbookBaseURL"),
    ({"ingress": {"enabled": True, "path": "ui"}}, "/ingress/path"),
])
def test_bad_values_fail(helm: str, values: dict[str, Any], message: str) -> None:
    proc = subprocess.run([helm, "template", "fs", str(CHART), "--values", "-"], input=yaml.safe_dump(values),
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode != 0, proc.stdout[:500]
    assert message in proc.stderr, proc.stderr


# ---------------------------------------------------------------------------------------------
# against the local control plane


@pytest.mark.cluster
def test_api_server_accepts_the_chart(kube_cluster: KubeCluster, helm: str, namespace: str,
                                      second_namespace: str) -> None:
    helm = cluster_helm(kube_cluster, helm)
    namespaces = [namespace, second_namespace]
    full = {**CUSTOM, "rbac": {"namespaces": namespaces}, "serviceMonitor": {"enabled": False},
            "prometheusRule": {"enabled": False},  # no monitoring.coreos.com CRDs on the devcluster
            "git": {"repo": SSH_URL, "ssh": {"identity": "key", "knownHosts": "host ssh-ed25519 AAAA"}},
            "webhook": {"secret": "hook"}, "api": {"token": "t", "protectReads": True},
            "networkPolicy": {"from": [PROMETHEUS, INGRESS]}}
    for values in ({"rbac": {"namespaces": namespaces}}, full):
        manifest = template_text(helm, namespace, values)
        expected = [d for d in yaml.safe_load_all(manifest) if d]
        proc = kube_cluster.kubectl("apply", "--server-side", "--dry-run=server", "--field-manager=helm-test",
                                    "-f", "-", input=manifest, check=False)
        assert proc.returncode == 0, proc.stderr
        applied = [line for line in proc.stdout.splitlines() if line.endswith("serverside-applied (server dry run)")]
        assert len(applied) == len(expected), proc.stdout
    proc = run_helm(helm, "install", "fs", str(CHART), "--namespace", namespace, "--dry-run=server",
                    "--set", f"rbac.namespaces={{{namespace},{second_namespace}}}", kubeconfig=kube_cluster.kubeconfig)
    assert proc.returncode == 0, proc.stderr
    assert "STATUS: pending-install" in proc.stdout


@dataclass
class ChartIdentity:
    """The chart applied in namespaced mode (ServiceAccount + RBAC only) and a config repo for it."""

    namespaces: tuple[str, str]  # release namespace (also a target), second target namespace
    objects: list[dict[str, Any]]  # the whole rendered chart
    kubeconfig: Path  # the ServiceAccount's token, nothing else
    repo: Path  # config/examples, its units in the two namespaces
    admin: Kube


@pytest.fixture
def chart_identity(kube_cluster: KubeCluster, helm: str, namespace: str, second_namespace: str,
                   tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[ChartIdentity]:
    helm = cluster_helm(kube_cluster, helm)
    values: dict[str, Any] = {"rbac": {"namespaces": [namespace, second_namespace]}}
    if getattr(request, "param", "") == "tenant":  # writes as the chart's tenant ServiceAccount
        values["tenant"] = {"create": True, "namespaces": [namespace, second_namespace]}
    objs = [d for d in yaml.safe_load_all(template_text(helm, namespace, values)) if d]
    rbac = [o for o in objs if o["kind"] in ("ServiceAccount", "Role", "RoleBinding", "ClusterRole",
                                             "ClusterRoleBinding")]
    kube_cluster.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump_all(rbac))
    kube_cluster.kubectl("apply", "--server-side", "-f", str(CHART / "crds"))  # as `helm install` does first
    kube_cluster.kubectl("wait", "--for=condition=Established", "crd/flowerunits.flower-syncer.io", "--timeout=60s")
    repo = tmp_path / "config"
    shutil.copytree(EXAMPLES, repo)
    (repo / "flower-syncer.yaml").write_text(f"name: {namespace}\ndefaultNamespace: {namespace}\n")
    release = repo / "supernodes" / "secure-edge" / "release.yaml"
    assert "namespace: flower-edge" in release.read_text()
    release.write_text(release.read_text().replace("namespace: flower-edge", f"namespace: {second_namespace}"))
    admin = Kube.from_kubeconfig(kube_cluster.kubeconfig)
    tls = {"tls.crt": "cert", "tls.key": "key", "ca.crt": "ca"}
    admin.apply({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                 "metadata": {"name": "superlink-tls", "namespace": second_namespace},
                 "data": {k: base64.b64encode(v.encode()).decode() for k, v in tls.items()}}, manager="cert-manager")
    agent_sa = one(objs, "ServiceAccount", "fs-flower-syncer")["metadata"]["name"]
    kubeconfig = sa_kubeconfig(kube_cluster, namespace, agent_sa, tmp_path / "sa.kubeconfig")
    yield ChartIdentity((namespace, second_namespace), objs, kubeconfig, repo, admin)
    # the namespaced objects go with the namespaces
    kube_cluster.kubectl("delete", "clusterrole,clusterrolebinding", "fs-flower-syncer-" + namespace,
                         "--ignore-not-found", check=False)


def _units(ns: str, ns2: str) -> set[str]:
    return {f"federation/{ns}/federation-gpu", f"federation/{ns}/federation-statefulset", f"supernode/{ns}/pytorch",
            f"supernode/{ns}/tensorflow", f"supernode/{ns2}/secure-edge"}


@pytest.mark.cluster
def test_sync_with_the_chart_service_account(chart_identity: ChartIdentity, tmp_path: Path) -> None:
    """Namespaced mode: the chart's ServiceAccount and RBAC, not admin, sync config/examples into
    two namespaces and report their status; everything else is refused."""
    ns, ns2 = chart_identity.namespaces
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}  # no KUBECONFIG: only the ServiceAccount's token

    def syncer(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "syncer", *args, "--kubeconfig", str(chart_identity.kubeconfig)],
                              capture_output=True, text=True, env=env, timeout=timeout, check=False, cwd=REPO)

    repo = str(chart_identity.repo)
    out = syncer("sync", repo, "--wait", "--timeout", "90s", "-o", "json", timeout=120)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    report = json.loads(out.stdout)
    assert report["ok"] and report["healthy"] and report["writes"] > 0
    assert {u["unit"] for u in report["units"]} == _units(ns, ns2)
    ca = chart_identity.admin.get("Secret", ns2, "secure-edge-superlink-ca")
    assert ca is not None and base64.b64decode(ca["data"]["ca.crt"]) == b"ca"

    status = syncer("status", repo, "-o", "json")
    assert status.returncode == 0, status.stdout[-3000:] + status.stderr[-3000:]
    st = json.loads(status.stdout)
    assert len(st["units"]) == 5 and all(u["ready"] and u["drift"] == 0 for u in st["units"]), st["units"]
    # the GPU table needs pods cluster-wide, which namespaced RBAC does not grant: reported, not fatal
    assert "forbidden" in st["gpus"].get("error", "")
    again = syncer("sync", repo, "-o", "json")
    assert again.returncode == 0 and json.loads(again.stdout)["writes"] == 0, again.stdout[-2000:] + again.stderr

    # everything outside the list is refused
    kube = Kube.from_kubeconfig(str(chart_identity.kubeconfig))
    for call in (
        lambda: kube.list("Secret", "default"),
        lambda: kube.list("Secret", None),
        lambda: kube.list("Secret", None, labels=MANAGED_SELECTOR),
        lambda: kube.get("Secret", "kube-system", "bootstrap-token-abcdef"),
        lambda: kube.get("Secret", "default", "superlink-tls"),
        lambda: kube.list("ConfigMap", None),
        lambda: kube.get("Namespace", None, "default"),
        lambda: kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": f"{ns}-c"}}),
        lambda: kube.create({"apiVersion": "apps/v1", "kind": "Deployment",
                             "metadata": {"name": "intruder", "namespace": "default"},
                             "spec": {"selector": {"matchLabels": {"a": "b"}}, "template": {
                                 "metadata": {"labels": {"a": "b"}},
                                 "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}}),
        lambda: kube.list("Lease", ns),
        lambda: kube.get("Lease", ns, "another-lease"),
    ):
        with pytest.raises(ApiError) as err:
            call()
        assert err.value.status == 403, err.value


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _get(url: str, token: str | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except (urllib.error.URLError, OSError):
        return 0, b""


@pytest.mark.cluster
@pytest.mark.parametrize("chart_identity", ["agent", "tenant"], indirect=True)
def test_agent_runs_with_the_chart_environment(chart_identity: ChartIdentity, tmp_path: Path) -> None:
    """`flower-syncer run` with the environment the chart's Deployment sets (only the listen
    address, cache dir, repository and kubeconfig changed for a process outside a pod) and the
    ServiceAccount's token: it leads through its Lease, syncs every unit, and releases the Lease
    on SIGTERM. In tenant mode the agent's own token only reads: every write is the tenant's."""
    ns, ns2 = chart_identity.namespaces
    repo = chart_identity.repo
    git_env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@localhost", "GIT_COMMITTER_NAME": "t",
               "GIT_COMMITTER_EMAIL": "t@localhost", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-qm", "config"]):
        subprocess.run(["git", *args], cwd=repo, env=git_env, check=True, capture_output=True, timeout=30)

    pod = "fs-flower-syncer-5d9c7b-x2x7q"
    # the agent's own pod (the downward API's metadata.name and .namespace): the leader labels it
    chart_identity.admin.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod, "namespace": ns},
                                "spec": {"containers": [{"name": "agent", "image": "flower-syncer"}]}},
                               manager="kubelet-stand-in")
    fields = {"metadata.name": pod, "metadata.namespace": ns}
    env = {"PATH": "/usr/bin:/bin"}
    for e in container(chart_identity.objects)["env"]:
        env[e["name"]] = e["value"] if "value" in e else fields[e["valueFrom"]["fieldRef"]["fieldPath"]]
    assert env["FLOWER_SYNCER_IDENTITY"] == env["POD_NAME"] == pod
    assert env["POD_NAMESPACE"] == ns
    assert env["FLOWER_SYNCER_NAMESPACES"] == f"{ns},{ns2}"
    assert env["FLOWER_SYNCER_LEASE_NAMESPACE"] == ns
    port = _free_port()
    token = "agent-api-token"
    (tmp_path / "api-token").write_text(token + "\n")
    env.update({"FLOWER_SYNCER_PROTECT_READS": "true",  # as with api.protectReads: /metrics and status need the token
                "FLOWER_SYNCER_API_TOKEN_FILE": str(tmp_path / "api-token")})
    policy = tmp_path / "policy.yaml"  # the chart's ConfigMap, as the pod would mount it
    policy.write_text(one(chart_identity.objects, "ConfigMap", name="fs-flower-syncer-policy")["data"]["policy.yaml"])
    env.update({"FLOWER_SYNCER_POLICY": str(policy)})
    env.update({"FLOWER_SYNCER_REPO": str(repo), "FLOWER_SYNCER_LISTEN": f"127.0.0.1:{port}",
                "FLOWER_SYNCER_CACHE_DIR": str(tmp_path / "cache"), "HOME": str(tmp_path),
                "FLOWER_SYNCER_KUBECONFIG": str(chart_identity.kubeconfig)})
    log = tmp_path / "agent.log"
    with log.open("w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "syncer", "run"], env=env, cwd=REPO, stdout=subprocess.DEVNULL,
                                stderr=err)
    url = f"http://127.0.0.1:{port}"
    lease_name = env["FLOWER_SYNCER_LEASE_NAME"]
    try:
        deadline = time.monotonic() + 45
        status: dict[str, Any] = {}
        while time.monotonic() < deadline and proc.poll() is None:
            code, body = _get(url + "/api/v1/status", token)
            status = json.loads(body) if code == 200 else {}
            units = {u["unit"]: u for u in status.get("units", [])}
            if status.get("leader") and set(units) == _units(ns, ns2) and all(u["ok"] for u in units.values()):
                break
            time.sleep(0.2)
        else:
            pytest.fail(f"agent did not sync every unit: {status}\n--- log ---\n{log.read_text()[-4000:]}")
        assert _get(url + "/readyz")[0] == 200
        assert _get(url + "/healthz")[0] == 200
        lease = chart_identity.admin.get("Lease", ns, lease_name)
        assert lease is not None and lease["spec"]["holderIdentity"] == pod
        labels = (chart_identity.admin.get("Pod", ns, pod) or {})["metadata"].get("labels", {})
        assert labels.get("flower-syncer.io/leader") == "true"  # the API Service now selects it
        deploy = chart_identity.admin.get("Deployment", ns2, "secure-edge-flower-client-supernode")
        assert deploy is not None
        if any(o["kind"] == "ServiceAccount" and o["metadata"]["name"].endswith("-tenant")
               for o in chart_identity.objects):
            assert status["tenancy"]["serviceAccount"] == f"{ns}/fs-flower-syncer-tenant"
        metrics = _get(url + "/metrics", token)
        assert metrics[0] == 200 and b"flower_syncer_" in metrics[1]
        # the agent's own rights (not the tenant's) write a FlowerUnit per unit: `kubectl get flowerunits`
        wait_until("a Synced FlowerUnit per unit", lambda: {
            f"{u['metadata']['labels']['flower-syncer.io/unit-kind']}/{n}/{u['metadata']['labels']['flower-syncer.io/unit']}"
            for n in (ns, ns2) for u in chart_identity.admin.list("FlowerUnit", n)[0]
            if any(c["type"] == "Synced" and c["status"] == "True" for c in u.get("status", {}).get("conditions", []))
        } == _units(ns, ns2), timeout=15, log=log)
        lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
        problems = [line for line in lines if line.get("level") in ("warning", "error")]
        assert not problems, problems  # e.g. a watch refused by RBAC
        assert _get(url + "/metrics")[0] == _get(url + "/api/v1/status")[0] == 401  # no token: no reads
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(30)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert code == 0, log.read_text()[-4000:]
    assert token not in log.read_text()
    lease = chart_identity.admin.get("Lease", ns, lease_name)
    assert lease is not None and lease["spec"].get("holderIdentity", "") == ""
    labels = (chart_identity.admin.get("Pod", ns, pod) or {})["metadata"].get("labels", {})
    assert "flower-syncer.io/leader" not in labels
