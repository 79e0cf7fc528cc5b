"""Writes under the tenant's own identity, on the local control plane with the chart's RBAC (issue
25, item 2): with tenant.create, the agent's ServiceAccount may only read, impersonate the tenant
and hold its Lease; every write of the repository is made as the tenant, whose Roles cover its
namespaces only. With flower-syncer's own namespace check turned off, the API server's 403 still
stops a write outside them, as a per-object error of the unit, never a crash.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from syncer.actions.load import load
from syncer.actions.sync import sync
from syncer.cluster.client import ApiError, Kube
from syncer.engine.sync import SyncOptions
from syncer.models.policy import RepositoryPolicy
from syncer.models.settings import Guardrails
from syncer.plan import Plan
from tests.builders import FED, pool
from tests.conftest import KubeCluster
from tests.integration.charts import cluster_helm, one, sa_kubeconfig, template_text

pytestmark = pytest.mark.cluster


@dataclass
class Tenant:
    namespaces: tuple[str, str]  # the tenant's namespace (also the release's), one it may not write
    user: str  # the tenant ServiceAccount, as the API server names it
    agent: Kube  # the agent's own ServiceAccount token, nothing else
    admin: Kube


@pytest.fixture
def tenant(kube_cluster: KubeCluster, helm: str, namespace: str, second_namespace: str,
           tmp_path: Path) -> Iterator[Tenant]:
    values = {"rbac": {"namespaces": [namespace, second_namespace]},
              "tenant": {"create": True, "namespaces": [namespace]}}
    objs = [d for d in yaml.safe_load_all(template_text(cluster_helm(kube_cluster, helm), namespace, values)) if d]
    rbac = [o for o in objs if o["kind"] in ("ServiceAccount", "Role", "RoleBinding", "ClusterRole",
                                             "ClusterRoleBinding")]
    kube_cluster.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump_all(rbac))
    policy = yaml.safe_load(one(objs, "ConfigMap", name="fs-flower-syncer-policy")["data"]["policy.yaml"])
    tenant_sa = policy["default"]["serviceAccount"]
    assert tenant_sa == f"{namespace}/fs-flower-syncer-tenant"
    agent_sa = one(objs, "ServiceAccount", name="fs-flower-syncer")["metadata"]["name"]
    agent = Kube.from_kubeconfig(str(sa_kubeconfig(kube_cluster, namespace, agent_sa, tmp_path / "agent.kubeconfig")))
    yield Tenant((namespace, second_namespace), f"system:serviceaccount:{namespace}:fs-flower-syncer-tenant", agent,
                 Kube.from_kubeconfig(kube_cluster.kubeconfig))
    kube_cluster.kubectl("delete", "clusterrole,clusterrolebinding", "fs-flower-syncer-" + namespace,
                         "--ignore-not-found", check=False)


def config_repo(root: Path, namespace: str) -> Path:
    (root / "federations").mkdir(parents=True, exist_ok=True)
    (root / "federations" / "fed.yaml").write_text(FED.format(name="fed", pools=pool("a"), annotations=""))
    (root / "flower-syncer.yaml").write_text(f"name: tenant-test\ndefaultNamespace: {namespace}\n")
    return root


def test_the_agent_alone_can_no_longer_write(tenant: Tenant) -> None:
    ns, _ = tenant.namespaces
    with pytest.raises(ApiError) as err:
        tenant.agent.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": ns}})
    assert err.value.status == 403
    # it still reads what it manages
    tenant.agent.list("ConfigMap", ns)


def test_writes_as_the_tenant_inside_its_namespace(tenant: Tenant, tmp_path: Path) -> None:
    ns, _ = tenant.namespaces
    kube = tenant.agent.impersonating(tenant.user)
    report = sync(kube, load(config_repo(tmp_path / "cfg", ns)), SyncOptions(namespaces=list(tenant.namespaces)))
    assert report.ok, report.to_dict()
    assert tenant.admin.get("Service", ns, "fed-superlink") is not None
    again = sync(kube, load(config_repo(tmp_path / "cfg", ns)), SyncOptions(namespaces=list(tenant.namespaces)))
    assert again.ok and again.writes == 0, again.to_dict()


def test_the_api_server_refuses_what_our_own_check_would_miss(tenant: Tenant, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    ns, other = tenant.namespaces
    # our own namespace checks off: any namespace passes the guardrails and the engine
    monkeypatch.setattr(Guardrails, "namespace_allowed", lambda self, namespace: True)
    monkeypatch.setattr(Plan, "namespace_allowed", lambda self, namespace: True)
    kube = tenant.agent.impersonating(tenant.user)
    loaded = load(config_repo(tmp_path / "cfg", other), policy=RepositoryPolicy(
        guardrails=Guardrails(allowedNamespaces=[ns])))
    assert not loaded.errors, loaded.errors  # nothing of ours stops it
    report = sync(kube, loaded, SyncOptions(namespaces=list(tenant.namespaces)))
    assert not report.ok
    failed: dict[str, Any] = {str(c.ref): c.message for u in report.units for c in u.changes
                              if c.action.value == "failed"}
    assert failed, report.to_dict()
    for ref, message in failed.items():
        assert "Forbidden" in message and tenant.user in message and "RBAC refused it" in message, (ref, message)
    assert tenant.admin.get("Service", other, "fed-superlink") is None
    assert tenant.admin.list("ConfigMap", other, labels="flower-syncer.io/inventory=true")[0] == []
