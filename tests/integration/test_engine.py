"""The sync engine against a real API server: apply, zero-write resync, drift, conflicts, prune
safety, immutable fields, mode switches and the TLS CA copy."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest

from syncer.cluster.client import Kube
from syncer.engine.changeset import Action, Cause, Change, SkipReason
from syncer.engine.sync import Engine, SyncOptions, SyncReport
from syncer.render.repo import plan_repo, render_repo
from syncer.repo.loader import load_repo
from tests import builders
from tests.conftest import KubeCluster, wait_until

pytestmark = pytest.mark.cluster


def pool(name: str, replicas: int | None = 2, extra: str = "") -> str:
    text = f"      - name: {name}\n        images: {{}}\n"
    if replicas is not None:
        text += f"        replicas: {replicas}\n"
    return text + extra


def write_fed(repo: Path, *, mode: str = "StatefulSet", image: str = "flwr/supernode:1.25.0",
              pools: str | None = None, name: str = "fed") -> None:
    (repo / "federations").mkdir(parents=True, exist_ok=True)
    text = builders.federation(name, pools if pools is not None else pool("a"), mode=mode)
    text = text.replace("  annotations: {}\n", "")  # tests add their own
    (repo / "federations" / f"{name}.yaml").write_text(text.replace("flwr/supernode:1.25.0\n", f"{image}\n", 1))


@pytest.fixture
def repo(tmp_path: Path, namespace: str) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    (root / "flower-syncer.yaml").write_text(f"name: {namespace}\ndefaultNamespace: {namespace}\n")
    return root



def sync(kube: Kube, repo: Path, **opts: Any) -> SyncReport:
    """tests/builders.py's sync with no revision (so no checked revision is recorded)."""
    return builders.sync(kube, repo, revision="", **opts)


def actions(report: SyncReport) -> dict[str, str]:
    return {str(c.ref): c.action.value for u in report.units for c in u.changes}


def sts_change(report: SyncReport, name: str = "fed-supernode-a") -> Change:
    return next(c for u in report.units for c in u.changes if c.ref.kind == "StatefulSet" and c.ref.name == name)



def test_create_then_resync_makes_zero_writes(kube: Kube, repo: Path, namespace: str) -> None:
    write_fed(repo, pools=pool("a") + pool("b", 1))
    first = sync(kube, repo)
    assert first.ok, first.to_dict()
    assert actions(first)[f"StatefulSet/{namespace}/fed-supernode-a"] == "created"
    assert first.writes >= 6
    second = sync(kube, repo)
    assert second.ok
    assert second.writes == 0
    assert set(actions(second).values()) == {"unchanged"}
    sts = kube.get("StatefulSet", namespace, "fed-supernode-a")
    assert sts is not None
    wait_until("pool a ready", lambda: (kube.get("StatefulSet", namespace, "fed-supernode-a") or {})
             .get("status", {}).get("readyReplicas") == 2)


def test_image_bump_rolls_the_pods_and_scale_changes_replicas(kube: Kube, repo: Path, namespace: str) -> None:
    write_fed(repo)
    assert sync(kube, repo).ok
    write_fed(repo, image="flwr/supernode:1.26.0", pools=pool("a", 3))
    report = sync(kube, repo)
    assert actions(report)[f"StatefulSet/{namespace}/fed-supernode-a"] == "configured"

    def rolled() -> bool:
        pods, _ = kube.list("Pod", namespace, labels="flower.flwr.ai/pool=a")
        images = [p["spec"]["containers"][0]["image"] for p in pods]
        return len(images) == 3 and set(images) == {"flwr/supernode:1.26.0"}

    wait_until("pods rolled to the new image", rolled, timeout=60)


def test_pool_removed_is_pruned_and_inventory_follows(kube: Kube, repo: Path, namespace: str) -> None:
    write_fed(repo, pools=pool("a") + pool("b"))
    assert sync(kube, repo).ok
    write_fed(repo, pools=pool("a"))
    report = sync(kube, repo)
    acts = actions(report)
    assert acts[f"StatefulSet/{namespace}/fed-supernode-b"] == "deleted"
    assert acts[f"Service/{namespace}/fed-supernode-b"] == "deleted"
    assert kube.get("StatefulSet", namespace, "fed-supernode-b") is None
    assert sync(kube, repo).writes == 0


def test_mode_switch_replaces_the_old_workloads(kube: Kube, repo: Path, namespace: str) -> None:
    write_fed(repo)
    assert sync(kube, repo).ok
    write_fed(repo, mode="DaemonSet", pools=pool("a", None, "        podTemplate:\n          spec:\n"
                                                          "            nodeSelector: {kubernetes.io/os: linux}\n"))
    report = sync(kube, repo)
    assert report.ok, report.to_dict()
    acts = actions(report)
    assert acts[f"DaemonSet/{namespace}/fed-supernode-a"] == "created"
    assert acts[f"StatefulSet/{namespace}/fed-supernode-a"] == "deleted"
    assert acts[f"Service/{namespace}/fed-supernode-a"] == "deleted"  # the headless Service went too
    assert kube.get("StatefulSet", namespace, "fed-supernode-a") is None


def test_broken_file_deletes_nothing_of_that_unit(kube: Kube, repo: Path, namespace: str) -> None:
    write_fed(repo, pools=pool("a") + pool("b"))
    write_fed(repo, name="other")
    assert sync(kube, repo).ok
    # a typo in fed: the unit fails to load; its objects stay, and nothing vanished is pruned
    (repo / "federations" / "fed.yaml").write_text(
        (repo / "federations" / "fed.yaml").read_text().replace("replicas: 2", "replicaz: 2", 1))
    (repo / "federations" / "other.yaml").unlink()
    report = sync(kube, repo)
    assert not report.ok
    results = {u.unit.id: u for u in report.units}
    assert results[f"federation/{namespace}/fed"].cause is Cause.CONFIG_ERROR
    assert results[f"federation/{namespace}/other"].skipped is SkipReason.NOT_PRUNED_REPO_HAS_ERRORS
    assert kube.get("StatefulSet", namespace, "fed-supernode-b") is not None
    assert kube.get("StatefulSet", namespace, "other-supernode-a") is not None
    assert report.writes == 1  # no object: only fed's inventory, recording why it is not in sync
    assert '"reason": "ConfigError"' in kube.get("ConfigMap", namespace, "flower-syncer.federation.fed")["data"][
        "status.json"]
    assert sync(kube, repo).writes == 0  # the same error again: nothing new to record


def test_vanished_unit_is_pruned_when_the_repo_is_clean(kube: Kube, repo: Path, namespace: str) -> None:
    write_fed(repo)
    write_fed(repo, name="other")
    assert sync(kube, repo).ok
    (repo / "federations" / "other.yaml").unlink()
    report = sync(kube, repo)
    assert actions(report)[f"StatefulSet/{namespace}/other-superlink"] == "deleted"
    assert kube.get("ConfigMap", namespace, "flower-syncer.federation.other") is None


def test_refuses_to_prune_everything_without_allow_empty(kube: Kube, repo: Path, namespace: str) -> None:
    write_fed(repo)
    assert sync(kube, repo).ok
    (repo / "federations" / "fed.yaml").unlink()
    report = sync(kube, repo, selectors=["fed"])
    assert not report.ok
    assert kube.get("StatefulSet", namespace, "fed-superlink") is not None
    report = sync(kube, repo, selectors=["fed"], allow_empty=True)
    assert report.ok
    assert kube.get("StatefulSet", namespace, "fed-superlink") is None


def test_imperative_edit_is_drift_and_is_reverted(kube: Kube, repo: Path, namespace: str,
                                                  kube_cluster: KubeCluster) -> None:
    write_fed(repo)
    assert sync(kube, repo).ok
    kube_cluster.kubectl("-n", namespace, "scale", "statefulset", "fed-supernode-a", "--replicas=5")
    kube_cluster.kubectl("-n", namespace, "set", "image", "statefulset/fed-supernode-a", "supernode=evil:1")
    diff = sync(kube, repo, dry_run=True, with_diff=True)
    change = sts_change(diff)
    assert change.action is Action.CONFIGURED and change.drift
    assert "-  replicas: 5" in change.diff and "+  replicas: 2" in change.diff
    assert "evil:1" in change.diff
    assert diff.writes == 0
    fixed = sync(kube, repo)
    assert fixed.ok
    sts = kube.get("StatefulSet", namespace, "fed-supernode-a")
    assert sts is not None
    assert sts["spec"]["replicas"] == 2
    assert sts["spec"]["template"]["spec"]["containers"][0]["image"] == "flwr/supernode:1.25.0"
    assert sync(kube, repo).writes == 0


def test_field_owned_by_another_applier_is_a_conflict(kube: Kube, repo: Path, namespace: str) -> None:
    write_fed(repo)
    assert sync(kube, repo).ok
    patch = {"apiVersion": "apps/v1", "kind": "StatefulSet",
             "metadata": {"name": "fed-supernode-a", "namespace": namespace}, "spec": {"replicas": 4}}
    kube.apply(patch, manager="other-team", force=True)
    report = sync(kube, repo)
    change = sts_change(report)
    assert change.action is Action.FAILED and change.cause is Cause.CONFLICT
    assert ".spec.replicas" in change.message and "other-team" in change.message
    forced = sync(kube, repo, force_conflicts=True)
    assert forced.ok
    assert (kube.get("StatefulSet", namespace, "fed-supernode-a") or {})["spec"]["replicas"] == 2


VCT = ("        volumeClaimTemplates:\n          - metadata: {name: data}\n            spec:\n"
       "              accessModes: [ReadWriteOnce]\n              resources: {requests: {storage: SIZE}}\n"
       "        volumeMounts:\n          - {name: data, mountPath: /data}\n")


def test_immutable_field_change_is_refused_unless_recreate_is_allowed(kube: Kube, repo: Path,
                                                                      namespace: str) -> None:
    write_fed(repo, pools=pool("a", 1, VCT.replace("SIZE", "1Gi")))
    assert sync(kube, repo).ok
    uid = (kube.get("StatefulSet", namespace, "fed-supernode-a") or {})["metadata"]["uid"]
    write_fed(repo, pools=pool("a", 1, VCT.replace("SIZE", "2Gi")))
    report = sync(kube, repo)
    change = sts_change(report)
    assert change.action is Action.FAILED and change.cause is Cause.IMMUTABLE_FIELD
    assert "immutable" in change.message and "allow-recreate" in change.message
    text = (repo / "federations" / "fed.yaml").read_text().replace(
        "  name: fed\n", '  name: fed\n  annotations:\n    flower-syncer.io/allow-recreate: "true"\n', 1)
    (repo / "federations" / "fed.yaml").write_text(text)
    report = sync(kube, repo)
    assert report.ok, report.to_dict()
    assert actions(report)[f"StatefulSet/{namespace}/fed-supernode-a"] == "recreated"
    assert (kube.get("StatefulSet", namespace, "fed-supernode-a") or {})["metadata"]["uid"] != uid


def test_service_type_change_is_applied_in_place(kube: Kube, repo: Path, namespace: str) -> None:
    write_fed(repo)
    assert sync(kube, repo).ok
    uid = (kube.get("Service", namespace, "fed-superlink") or {})["metadata"]["uid"]
    for svc_type in ("NodePort", "LoadBalancer", "ClusterIP"):
        text = (repo / "federations" / "fed.yaml").read_text()
        if "service:" not in text:
            text = text.replace("    image: flwr/superlink:1.25.0\n",
                                "    image: flwr/superlink:1.25.0\n    service:\n      type: ClusterIP\n", 1)
        text = text.replace("type: ClusterIP", f"type: {svc_type}").replace("type: NodePort", f"type: {svc_type}") \
            .replace("type: LoadBalancer", f"type: {svc_type}")
        (repo / "federations" / "fed.yaml").write_text(text)
        report = sync(kube, repo)
        assert report.ok, report.to_dict()
        live = kube.get("Service", namespace, "fed-superlink") or {}
        assert live["spec"]["type"] == svc_type
        assert live["metadata"]["uid"] == uid


def test_prune_protection_annotation_and_foreign_secret_data(kube: Kube, repo: Path, namespace: str,
                                                             kube_cluster: KubeCluster) -> None:
    write_fed(repo, pools=pool("a") + pool("b"))
    assert sync(kube, repo).ok
    kube_cluster.kubectl("-n", namespace, "annotate", "statefulset", "fed-supernode-b",
                         "flower-syncer.io/prune=disabled")
    write_fed(repo, pools=pool("a"))
    report = sync(kube, repo)
    assert actions(report)[f"StatefulSet/{namespace}/fed-supernode-b"] == "skipped"
    assert kube.get("StatefulSet", namespace, "fed-supernode-b") is not None


def _write_release(repo: Path, name: str, values: str) -> None:
    folder = repo / "supernodes" / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "values.yaml").write_text(values)


def _tls_secret(kube: Kube, namespace: str, name: str, ca: str) -> None:
    data = {"tls.crt": base64.b64encode(b"server-cert").decode(), "tls.key": base64.b64encode(b"key").decode(),
            "ca.crt": base64.b64encode(ca.encode()).decode()}
    kube.apply({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                "metadata": {"name": name, "namespace": namespace}, "data": data}, manager="cert-manager",
               force=True)


COPY_VALUES = """\
tls:
  enabled: true
supernode:
  superlink:
    address: fed-superlink
    certificate:
      existingSecret: superlink-tls
      copyFromExistingSecret:
        enabled: true
"""


def test_tls_ca_is_copied_from_the_superlink_secret_and_follows_rotation(kube: Kube, repo: Path,
                                                                         namespace: str) -> None:
    _write_release(repo, "edge", COPY_VALUES)
    report = sync(kube, repo)
    assert not report.ok
    assert any("superlink-tls" in e and "does not exist" in e for u in report.units for e in u.errors)

    _tls_secret(kube, namespace, "superlink-tls", "CA-ONE")
    assert sync(kube, repo).ok
    copies, _ = kube.list("Secret", namespace, labels="flower-syncer.io/unit=edge")
    assert len(copies) == 1
    assert base64.b64decode(copies[0]["data"]["ca.crt"]) == b"CA-ONE"
    assert sync(kube, repo).writes == 0

    _tls_secret(kube, namespace, "superlink-tls", "CA-TWO")  # rotation
    rotated = sync(kube, repo)
    assert rotated.ok and rotated.writes >= 1
    copies, _ = kube.list("Secret", namespace, labels="flower-syncer.io/unit=edge")
    assert base64.b64decode(copies[0]["data"]["ca.crt"]) == b"CA-TWO"
    # secret values never show in a diff
    _tls_secret(kube, namespace, "superlink-tls", "CA-THREE")
    diff = sync(kube, repo, dry_run=True, with_diff=True)
    text = "".join(c.diff for u in diff.units for c in u.changes)
    assert "***" in text
    for secret in ("CA-TWO", "CA-THREE", base64.b64encode(b"CA-THREE").decode()):
        assert secret not in text


def test_repositories_sharing_a_cluster_never_prune_each_other(kube: Kube, tmp_path: Path, namespace: str) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    for root, name in ((first, "first"), (second, "second")):
        root.mkdir()
        (root / "flower-syncer.yaml").write_text(f"name: {name}\ndefaultNamespace: {namespace}\n")
    write_fed(first, name="alpha")
    write_fed(second, name="beta")
    assert sync(kube, first).ok
    assert sync(kube, second).ok  # alpha is not in this repository, yet it is not pruned
    assert kube.get("StatefulSet", namespace, "alpha-superlink") is not None
    # the same unit claimed by the other repository is refused, not taken over
    write_fed(second, name="alpha")
    report = sync(kube, second)
    errors = [e for u in report.units for e in u.errors]
    assert any("applied by the repository 'first'" in e for e in errors), errors
    inv = kube.get("ConfigMap", namespace, "flower-syncer.federation.alpha") or {}
    assert inv["metadata"]["labels"]["flower-syncer.io/repository"] == "first"


def test_a_namespace_deleted_out_of_band_is_created_again(kube: Kube, kube_cluster: KubeCluster,
                                                          tmp_path: Path) -> None:
    """The engine remembers the namespaces it made sure of; one deleted behind its back must not
    make every later sync into it fail until a restart."""
    ns = f"t-ns-gone-{tmp_path.name[-6:].lower().replace('_', '-')}"
    root = tmp_path / "repo"
    root.mkdir()
    (root / "flower-syncer.yaml").write_text(f"name: {ns}\ndefaultNamespace: {ns}\n")
    write_fed(root)
    engine = Engine(kube)  # one engine for the whole test, as in the agent

    def once() -> SyncReport:
        state = load_repo(root)
        return engine.sync(plan_repo(state, render_repo(state)), SyncOptions())

    try:
        assert once().ok
        kube_cluster.kubectl("delete", "namespace", ns, "--wait=true", "--timeout=60s")
        assert kube.get("Namespace", None, ns) is None
        wait_until("namespace recreated and unit synced", lambda: once().ok, timeout=30)
        assert kube.get("StatefulSet", ns, "fed-supernode-a") is not None
    finally:
        kube_cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)
