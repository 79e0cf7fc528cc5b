"""A Flower upgrade in Git (1.26 -> 1.42, across every transport change) is a clean apply: the
SuperLink Service is updated in place (same object, same port names and numbers, new target
ports), the workloads roll, and a resync writes nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from syncer.cluster.client import Kube
from tests.builders import federation, pool, sync

pytestmark = pytest.mark.cluster


def test_upgrading_flower_updates_the_superlink_service_in_place(kube: Kube, tmp_path: Path, namespace: str) -> None:
    repo = tmp_path / "repo"
    (repo / "federations").mkdir(parents=True)
    (repo / "flower-syncer.yaml").write_text(f"name: {namespace}\ndefaultNamespace: {namespace}\n")

    def write(version: str) -> None:
        (repo / "federations" / "fed.yaml").write_text(federation(pools=pool("a", 1), version=version))

    write("1.26.0")
    assert sync(kube, repo).ok
    before = kube.get("Service", namespace, "fed-superlink")
    assert before is not None
    assert [(p["name"], p["port"], p["targetPort"]) for p in before["spec"]["ports"]] == [
        ("fleet", 9092, 9092), ("control", 9093, 9093)]
    write("1.42.0")
    report = sync(kube, repo)
    assert report.ok, report.to_dict()
    after = kube.get("Service", namespace, "fed-superlink")
    assert after is not None and after["metadata"]["uid"] == before["metadata"]["uid"]
    assert after["spec"]["clusterIP"] == before["spec"]["clusterIP"]
    assert [(p["name"], p["port"], p["targetPort"]) for p in after["spec"]["ports"]] == [
        ("fleet", 9092, 8000), ("control", 9093, 8000)]
    sts = kube.get("StatefulSet", namespace, "fed-superlink")
    assert sts is not None
    container = sts["spec"]["template"]["spec"]["containers"][0]
    assert [p["containerPort"] for p in container["ports"]] == [8000]
    assert "grpc" not in container["readinessProbe"] and container["readinessProbe"]["httpGet"]["path"] == "/health"
    assert sync(kube, repo).writes == 0
