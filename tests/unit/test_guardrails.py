"""Guardrails in flower-syncer.yaml (issue 9, "Also"): by default a commit cannot put a unit into
the cluster's own namespaces or ask for node-level pod features; a repository opts in explicitly."""

from __future__ import annotations

from pathlib import Path

import pytest

from syncer.render.repo import plan_repo, render_repo
from syncer.repo.loader import load_repo
from tests.builders import FED, pool

HOSTPATH_POOL = pool("a") + (
    "        volumes: [{name: root, hostPath: {path: /}}]\n"
    "        volumeMounts: [{name: root, mountPath: /host}]\n")
HOST_NAMESPACES_POOL = pool("a") + "        podTemplate: {spec: {hostNetwork: true, hostPID: true}}\n"
PRIVILEGED_VALUES = ("tls:\n  enabled: false\nsupernode:\n  podSecurityContext:\n    privileged: true\n"
                     "    allowPrivilegeEscalation: true\n    capabilities: {add: [SYS_ADMIN], drop: [ALL]}\n")


def repo(path: Path, namespace: str, pools: str, guardrails: str = "") -> Path:
    (path / "federations").mkdir(parents=True, exist_ok=True)
    (path / "flower-syncer.yaml").write_text(f"name: rails\ndefaultNamespace: {namespace}\n{guardrails}")
    (path / "federations" / "fed.yaml").write_text(FED.format(name="fed", pools=pools, annotations=""))
    return path


def errors(path: Path) -> list[str]:
    state = load_repo(path)
    rendered = render_repo(state)
    return [d.message for d in state.diagnostics + rendered.diagnostics if d.severity == "error"]


@pytest.mark.parametrize("namespace", ["kube-system", "kube-public", "kube-node-lease"])
def test_the_clusters_own_namespaces_are_off_limits_by_default(namespace: str, tmp_path: Path) -> None:
    found = errors(repo(tmp_path, namespace, pool("a")))
    assert any(f"namespace {namespace!r}, which this repository may not use" in m for m in found), found


def test_allowed_namespaces_are_patterns(tmp_path: Path) -> None:
    rails = "guardrails:\n  allowedNamespaces: [flower-*]\n"
    assert errors(repo(tmp_path / "a", "flower-prod", pool("a"), rails)) == []
    assert errors(repo(tmp_path / "b", "default", pool("a"), rails))
    explicit = "guardrails:\n  allowedNamespaces: [kube-system]\n"
    assert errors(repo(tmp_path / "c", "kube-system", pool("a"), explicit)) == []


def test_node_level_pod_features_need_an_opt_in(tmp_path: Path) -> None:
    found = errors(repo(tmp_path / "a", "flower", HOSTPATH_POOL))
    assert any("uses hostPath (volumes[0].hostPath)" in m for m in found), found
    found = errors(repo(tmp_path / "b", "flower", HOST_NAMESPACES_POOL))
    assert any("uses hostNetwork" in m for m in found) and any("uses hostPID" in m for m in found), found
    release = repo(tmp_path / "d", "flower", pool("a")) / "supernodes" / "edge"
    release.mkdir(parents=True)
    (release / "values.yaml").write_text(PRIVILEGED_VALUES)
    found = errors(release.parent.parent)
    assert any("uses privileged" in m for m in found) and any("uses capabilities" in m for m in found), found
    opt_in = "guardrails:\n  allowPodFeatures: [hostPath]\n"
    assert errors(repo(tmp_path / "c", "flower", HOSTPATH_POOL, opt_in)) == []


def test_a_unit_over_a_guardrail_is_neither_applied_nor_pruned(tmp_path: Path) -> None:
    state = load_repo(repo(tmp_path, "flower", HOSTPATH_POOL))
    plan = plan_repo(state, render_repo(state))
    assert plan.units == {} and len(plan.failed) == 1 and not plan.prune_allowed


def test_gpu_mount_all_needs_privileged_but_its_device_paths_are_not_host_paths(tmp_path: Path) -> None:
    amd = pool("a") + "        gpu: {enabled: true, vendor: amd, mountAll: true}\n"
    found = errors(repo(tmp_path / "a", "flower", amd))
    assert len(found) == 1 and "uses privileged" in found[0], found
    assert errors(repo(tmp_path / "b", "flower", amd, "guardrails:\n  allowPodFeatures: [privileged]\n")) == []
