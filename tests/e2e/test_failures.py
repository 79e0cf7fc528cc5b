"""Failures as a real kubelet reports them, not as a test writes them into a pod status: an image tag
that does not exist, and a SuperNode that exits on a bad argument. Both must reach the metric
`flower_syncer_pool_problem_pods` and `flower-syncer status` with their reason."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.conftest import wait_until
from tests.e2e.conftest import Agent, ConfigRepo, RealCluster, syncer_status, wait_ready

pytestmark = pytest.mark.e2e

FEDERATION = """\
apiVersion: flwr.exalsius.ai/v1
kind: Federation
metadata:
  name: broken
spec:
  mode: StatefulSet
  isolationMode: subprocess
  superlink:
    image: flwr/superlink:1.26.0
  supernodes:
    image: flwr/supernode:1.26.0
    pools:
      - name: missing
        replicas: 1
        images:
          supernode: flwr/supernode:0.0.404
      - name: crash
        replicas: 1
        images: {}
        extraArgs: ["--no-such-flag"]
"""
PULL_REASONS = {"ErrImagePull", "ImagePullBackOff"}


def _pool(report: Any, unit: str, pool: str) -> dict[str, Any]:
    for u in report.get("units", []):
        if u["unit"] == unit:
            for p in u["pools"]:
                if p["pool"] == pool:
                    return dict(p)
    return {}


def test_image_pull_and_crash_loop_are_reported(real_cluster: RealCluster, e2e_namespace: str,
                                                config_repo: ConfigRepo,
                                                run_agent: Callable[[ConfigRepo, str], Agent]) -> None:
    ns = e2e_namespace
    unit = f"federation/{ns}/broken"
    config_repo.commit({"flower-syncer.yaml": f"name: e2e\ndefaultNamespace: {ns}\n",
                        "federations/broken.yaml": FEDERATION}, "two broken pools")
    agent = run_agent(config_repo, ns)
    wait_ready(real_cluster, ns, "statefulset", "broken-superlink", 1, agent)

    def problem(pool: str) -> str:
        reason = _pool(syncer_status(real_cluster, ns), unit, pool).get("problem", {}).get("reason", "")
        return str(reason)

    # The kubelet's own reasons, seen by `flower-syncer status` ...
    wait_until("image pull problem in status", lambda: problem("missing") in PULL_REASONS, timeout=120,
               interval=1, log=agent.log)
    wait_until("crash loop in status", lambda: problem("crash") == "CrashLoopBackOff", timeout=180, interval=1,
               log=agent.log)
    crash = _pool(syncer_status(real_cluster, ns), unit, "crash")
    assert crash["ready"] == 0 and crash["desired"] == 1 and not crash["healthy"], crash
    assert "no-such-flag" in real_cluster.logs(ns, "broken-supernode-crash-0", "supernode")

    # ... and in the metric, with the same reasons.
    def metric_reasons(pool: str) -> set[str]:
        return {r for r in (*PULL_REASONS, "CrashLoopBackOff")
                if (agent.metric("flower_syncer_pool_problem_pods", unit=unit, pool=pool, reason=r) or 0) >= 1}

    wait_until("image pull reason in the metric", lambda: metric_reasons("missing") & PULL_REASONS, timeout=120,
               interval=1, log=agent.log)
    wait_until("crash loop in the metric", lambda: metric_reasons("crash") == {"CrashLoopBackOff"}, timeout=120,
               interval=1, log=agent.log)
