"""`kubectl get flowerunits` and `kubectl annotate` on the local control plane: the CRD from the chart,
the agent as people run it, the pinned kubectl. Every unit shows READY/STATUS/REVISION; an annotation
makes the leader sync that unit (once) within a second; a unit removed from Git loses its FlowerUnit."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from syncer.cluster.client import Kube
from tests.conftest import REPO, KubeCluster, wait_until
from tests.integration.agents import FED, AgentProc, Repos, git

pytestmark = pytest.mark.cluster

CRD = REPO / "charts" / "flower-syncer" / "crds" / "flowerunits.yaml"


def install_crd(kube_cluster: KubeCluster) -> None:
    kube_cluster.kubectl("apply", "-f", str(CRD))
    kube_cluster.kubectl("wait", "--for=condition=Established", "crd/flowerunits.flower-syncer.io", "--timeout=60s")


def rows(kube_cluster: KubeCluster, namespace: str) -> dict[str, dict[str, str]]:
    """`kubectl get flowerunits -A` as {name: {column: value}} for `namespace` (columns are two or
    more spaces apart; a STATUS message has single spaces)."""
    out = kube_cluster.kubectl("get", "flowerunits", "-A").stdout.splitlines()
    if not out:
        return {}
    header = re.split(r"\s{2,}", out[0].strip())
    table = [dict(zip(header, re.split(r"\s{2,}", line.strip()), strict=False)) for line in out[1:]]
    return {r["NAME"]: r for r in table if r.get("NAMESPACE") == namespace}


def test_kubectl_get_shows_each_unit_and_an_annotation_syncs_it_within_a_second(
        repos: Repos, start_agent: Callable[..., AgentProc], kube_cluster: KubeCluster, namespace: str,
        tmp_path: Path) -> None:
    install_crd(kube_cluster)
    kube = Kube.from_kubeconfig(kube_cluster.kubeconfig)
    rev = repos.commit({"federations/fed2.yaml": FED.format(image="flwr/supernode:1.25.0", replicas=1)
                        .replace("name: fed\n", "name: fed2\n")}, "a second unit")
    agent = start_agent(str(repos.bare))

    def both_ready() -> dict[str, dict[str, str]] | None:
        table = rows(kube_cluster, namespace)
        ok = set(table) == {"federation.fed", "federation.fed2"} and all(
            r["READY"] == "True" and r["REVISION"] == rev for r in table.values())
        return table if ok else None

    table = wait_until("kubectl get flowerunits: both units ready at the revision", both_ready, timeout=60,
                       log=agent.log)
    assert list(table["federation.fed"]) == ["NAMESPACE", "NAME", "READY", "STATUS", "REVISION", "AGE"]
    assert table["federation.fed"]["STATUS"].startswith(f"applied revision {rev[:12]}; ")
    print(kube_cluster.kubectl("get", "flowerunits", "-n", namespace, "-o", "wide").stdout)

    unit, other = f"federation/{namespace}/fed", f"federation/{namespace}/fed2"

    def synced(u: str) -> float:
        return agent.metric("flower_syncer_sync_total", unit=u, result="success") or 0

    before, before_other = synced(unit), synced(other)
    value = str(time.time_ns())
    start = time.monotonic()
    kube_cluster.kubectl("-n", namespace, "annotate", "flowerunit", "federation.fed",
                         f"flower-syncer.io/requestedAt={value}", "--overwrite")
    annotated = time.monotonic()

    def handled() -> bool:
        obj = kube.get("FlowerUnit", namespace, "federation.fed") or {}
        return (obj.get("status") or {}).get("lastHandledReconcileAt") == value

    wait_until("the annotation handled", handled, timeout=10, interval=0.01, log=agent.log)
    done = time.monotonic()
    print(f"annotate -> handled: {done - start:.3f}s from kubectl's start, {done - annotated:.3f}s after it returned")
    assert done - start < 1.0
    assert synced(unit) == before + 1  # exactly one sync of the annotated unit
    assert synced(other) == before_other  # and none of the other

    # removed from Git: pruned, and its FlowerUnit with it
    (repos.work / "federations" / "fed2.yaml").unlink()
    git(repos.work, "add", "-A")
    git(repos.work, "commit", "-qm", "remove fed2")
    git(repos.work, "push", "-q", "origin", "HEAD:main")
    wait_until("fed2's FlowerUnit deleted", lambda: kube.get("FlowerUnit", namespace, "federation.fed2") is None,
               timeout=30, log=agent.log)
    assert set(rows(kube_cluster, namespace)) == {"federation.fed"}
