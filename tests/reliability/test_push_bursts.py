"""Push bursts (issue 9, reliability suite): 200 pushes in a row to a real Git repository that an
agent syncs (its local-repository watch sees every one; the remote's main moves one commit at a
time, as fast as git updates a ref, so they arrive faster than a sync takes). The cluster ends at the last revision,
the syncs coalesce (far fewer syncs than pushes), and nothing crashes or fails on the way."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from syncer.cluster.client import Kube
from tests.builders import federation
from tests.conftest import KubeCluster, wait_until
from tests.integration.agents import AgentProc, Repos, git

pytestmark = pytest.mark.cluster

PUSHES = 200


def commits(work: Path, n: int) -> list[str]:
    """`n` commits in the working clone, each with its number in the SuperLink's env; not pushed."""
    shas = []
    for i in range(n):
        push = f'    env:\n      - name: PUSH\n        value: "{i}"\n'  # a change of the SuperLink's spec
        (work / "federations" / "fed.yaml").write_text(federation(superlink=push))
        git(work, "commit", "-qam", f"push {i}")
        shas.append(git(work, "rev-parse", "HEAD"))
    return shas


def superlink_push(kube: Kube, namespace: str) -> str | None:
    sts = kube.get("StatefulSet", namespace, "fed-superlink") or {}
    containers = sts.get("spec", {}).get("template", {}).get("spec", {}).get("containers", [])
    for c in containers:
        for env in c.get("env", []):
            if env.get("name") == "PUSH":
                return str(env.get("value"))
    return None


def test_two_hundred_pushes_converge_to_the_last_and_coalesce(repos: Repos, start_agent: Callable[..., AgentProc],
                                                              kube_cluster: KubeCluster, namespace: str) -> None:
    kube = Kube.from_kubeconfig(kube_cluster.kubeconfig)
    agent = start_agent(str(repos.bare))
    unit = f"federation/{namespace}/fed"
    wait_until("first sync", lambda: (agent.metric("flower_syncer_sync_total", unit=unit, result="success") or 0) >= 1,
               log=agent.log)
    before = agent.metric("flower_syncer_sync_total", unit=unit, result="success") or 0
    shas = commits(repos.work, PUSHES)
    git(repos.work, "push", "-q", "origin", f"{shas[-1]}:refs/heads/incoming")  # the objects, not yet main
    started = time.monotonic()
    for sha in shas:  # 200 pushes as the server sees them: main moves one commit at a time, fast
        git(repos.bare, "update-ref", "refs/heads/main", sha)
    pushed_in = time.monotonic() - started

    wait_until("the last push applied", lambda: superlink_push(kube, namespace) == str(PUSHES - 1), timeout=60,
               log=agent.log)
    status = wait_until("the last revision reported as applied", lambda: (
        s := json.loads(agent.get("/api/v1/status")[1]),
        s if any(u["unit"] == unit and u["lastAppliedRevision"] == shas[-1] and u["ok"] for u in s["units"]) else None,
    )[1], timeout=30, log=agent.log)
    assert status["source"]["revision"] == shas[-1]
    syncs = (agent.metric("flower_syncer_sync_total", unit=unit, result="success") or 0) - before
    failed = agent.metric("flower_syncer_sync_total", unit=unit, result="failed") or 0
    print(f"\n{PUSHES} pushes in {pushed_in:.1f}s -> {syncs:.0f} syncs, {failed:.0f} failed")
    assert 1 <= syncs < PUSHES / 2, syncs  # coalesced
    assert failed == 0
    assert agent.proc.poll() is None
    text = agent.log.read_text()
    assert "Traceback" not in text and "sync crashed" not in text and "event handling failed" not in text
