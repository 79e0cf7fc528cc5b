"""Failures as a real kubelet reports them, not as a test writes them into a pod status: an image tag
that does not exist, and a SuperNode that exits on a bad argument. Both must reach the metric
`flower_syncer_pool_problem_pods` and `flower-syncer status` with their reason. And probes that
tell the truth: a SuperLink that runs but serves its API on its loopback address only (what a
1.42 SuperLink rendered for 1.26 did, while its gRPC health probe said SERVING) is not Ready."""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from typing import Any

import pytest

from tests.builders import federation, pool
from tests.conftest import wait_until
from tests.e2e.apps import FLWR
from tests.e2e.conftest import Agent, ConfigRepo, RealCluster, ready_replicas, syncer_status, wait_ready

pytestmark = pytest.mark.e2e

FEDERATION = federation("broken", version=FLWR, pools=(
    f"      - name: missing\n        replicas: 1\n        images:\n"
    f"          supernode: flwr/supernode:{FLWR.rsplit('.', 1)[0]}.404\n"
    + pool("crash", extra='        extraArgs: ["--no-such-flag"]\n')))
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
    # between two restarts `kubectl logs` can answer with nothing (a clean-clone CI run saw ''):
    # the crash's own output is waited for, not read once
    wait_until("the crash's output in its log",
               lambda: "no-such-flag" in real_cluster.logs(ns, "broken-supernode-crash-0", "supernode"),
               timeout=60, interval=2, log=agent.log)

    # ... and in the metric, with the same reasons.
    def metric_reasons(pool: str) -> set[str]:
        return {r for r in (*PULL_REASONS, "CrashLoopBackOff")
                if (agent.metric("flower_syncer_pool_problem_pods", unit=unit, pool=pool, reason=r) or 0) >= 1}

    wait_until("image pull reason in the metric", lambda: metric_reasons("missing") & PULL_REASONS, timeout=120,
               interval=1, log=agent.log)
    wait_until("crash loop in the metric", lambda: metric_reasons("crash") == {"CrashLoopBackOff"}, timeout=120,
               interval=1, log=agent.log)

    # The SuperLink is Ready through its probe on Flower's HTTP /health (above). Bound to its
    # loopback address, as a 1.42 SuperLink is without --host, it still runs, but nobody outside
    # the pod reaches its API: the same probe fails and the pod is not Ready. The agent is stopped
    # first, or it would heal the change.
    agent.proc.send_signal(signal.SIGTERM)
    agent.proc.wait(30)
    sts = real_cluster.json("-n", ns, "get", "statefulset", "broken-superlink")
    containers = sts["spec"]["template"]["spec"]["containers"]
    c = next(i for i, container in enumerate(containers) if container["name"] == "superlink")
    a = containers[c]["args"].index("--host=0.0.0.0")
    patch = [{"op": "replace", "path": f"/spec/template/spec/containers/{c}/args/{a}", "value": "--host=127.0.0.1"}]
    real_cluster.kubectl("-n", ns, "patch", "statefulset", "broken-superlink", "--type=json", "-p", json.dumps(patch))

    def replaced_pod() -> dict[str, Any]:
        """The pod of the patched template, once its SuperLink serves on the loopback address."""
        sts = real_cluster.json("-n", ns, "get", "statefulset", "broken-superlink")
        pods = real_cluster.json("-n", ns, "get", "pods", "-l",
                                 f"controller-revision-hash={sts['status'].get('updateRevision', '-')}")["items"]
        serving = pods and "http://127.0.0.1:8000" in real_cluster.logs(ns, pods[0]["metadata"]["name"], "superlink")
        return dict(pods[0]) if serving else {}

    def probe_failures(pod: dict[str, Any]) -> int:
        events = real_cluster.json("-n", ns, "get", "events", "--field-selector",
                                   f"involvedObject.uid={pod['metadata']['uid']},reason=Unhealthy")["items"]
        # the startup probe until the API has answered once, then readiness: both ask /health on the API port
        return sum(int(e.get("count") or 1) for e in events
                   if e["message"].startswith(("Startup probe failed", "Readiness probe failed")))

    # A failed probe during start-up proves nothing: count those after the API is up.
    pod = wait_until("the patched SuperLink serving on 127.0.0.1:8000", replaced_pod, timeout=120, interval=2)
    before = probe_failures(pod)

    def running_unready() -> dict[str, Any]:
        """The pod while its SuperLink runs, unready, with a probe failed since it serves."""
        now = real_cluster.json("-n", ns, "get", "pod", pod["metadata"]["name"])
        running = [s for s in now["status"].get("containerStatuses", [])
                   if s["name"] == "superlink" and "running" in s["state"]]
        unready = running and not running[0]["ready"]
        return dict(now) if unready and now["metadata"]["uid"] == pod["metadata"]["uid"] and probe_failures(
            pod) > before else {}

    now = wait_until("the loopback-only SuperLink running with its readiness probe failing", running_unready,
                     timeout=90, interval=2)
    ready = [cond for cond in now["status"]["conditions"] if cond["type"] == "Ready"]
    assert ready and ready[0]["status"] == "False", now["status"]
    wait_until("the StatefulSet counting no ready SuperLink",
               lambda: ready_replicas(real_cluster, ns, "statefulset", "broken-superlink") == 0, timeout=30)
