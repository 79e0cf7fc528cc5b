"""The agent as people run it: `flower-syncer run` in a subprocess, a real Git repository, the
local control plane. Push -> applied; outside edit -> corrected and counted; webhook; unreachable
remote; resync CLI; leader election; metrics after each step; SIGTERM -> exit 0."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from syncer.cluster.client import Kube
from syncer.observe.status import UnitStatus, status
from tests.conftest import KubeCluster, wait_until
from tests.integration.agents import FED, AgentProc, Repos, git, reported, sts
from tests.integration.gitservers import GitHttpServer

pytestmark = pytest.mark.cluster


def test_push_applies_and_outside_edits_are_corrected(repos: Repos, start_agent: Callable[..., AgentProc],
                                                      kube_cluster: KubeCluster, namespace: str) -> None:
    kube = Kube.from_kubeconfig(kube_cluster.kubeconfig)
    agent = start_agent(str(repos.bare))
    wait_until("first sync", lambda: sts(kube, namespace).get("spec", {}).get("replicas") == 2, log=agent.log)
    unit = f"federation/{namespace}/fed"
    wait_until("sync metric", lambda: (agent.metric("flower_syncer_sync_total", unit=unit, result="success") or 0) >= 1,
             log=agent.log)

    # a push reaches the cluster without waiting for the (1 h) poll
    rev = repos.commit({"federations/fed.yaml": FED.format(image="flwr/supernode:1.26.0", replicas=3)})
    t = time.monotonic()
    wait_until("pushed change applied", lambda: sts(kube, namespace).get("spec", {}).get("replicas") == 3,
             timeout=10, log=agent.log)
    assert time.monotonic() - t < 5
    wait_until("revision metric", lambda: agent.metric("flower_syncer_source_revision_info", revision=rev) == 1,
             log=agent.log)
    assert (agent.metric("flower_syncer_commit_to_applied_seconds_count") or 0) >= 1
    assert (agent.metric("flower_syncer_unit_commit_to_applied_seconds", unit=unit) or 0) > 0

    # a commit that leaves the unit alone: its inventory keeps `rev`, status shows it checked at the new one
    other = repos.commit({"README.md": "notes\n"})
    wait_until("checked at the new commit", lambda: status_of(kube, unit).checked == other, log=agent.log)
    assert status_of(kube, unit).revision == rev

    # someone scales the StatefulSet by hand: seen through the watch and corrected
    kube_cluster.kubectl("-n", namespace, "scale", "statefulset", "fed-supernode-a", "--replicas=7")
    wait_until("drift corrected", lambda: sts(kube, namespace).get("spec", {}).get("replicas") == 3, timeout=10,
             log=agent.log)
    wait_until("correction counted", lambda: (agent.metric("flower_syncer_drift_corrections_total", unit=unit,
                                                         kind="StatefulSet") or 0) >= 1, log=agent.log)

    # someone deletes a managed Service: recreated
    kube.delete("Service", namespace, "fed-superlink")
    wait_until("deleted Service recreated", lambda: kube.get("Service", namespace, "fed-superlink") is not None,
             timeout=10, log=agent.log)

    # and says so in `kubectl events`: on the object, and on the unit's inventory
    wait_until("a DriftCorrected event on the StatefulSet", lambda: any(
        e["regarding"]["name"] == "fed-supernode-a" and e["reportingController"] == "flower-syncer"
        for e in reported(kube, namespace, "DriftCorrected")), log=agent.log)
    synced = reported(kube, namespace, "Synced")
    assert any(e["regarding"] == {"apiVersion": "v1", "kind": "ConfigMap", "namespace": namespace,
                                  "name": "flower-syncer.federation.fed"} and rev[:12] in e["note"] for e in synced)

    served = json.loads(agent.get("/api/v1/status")[1])
    assert served["leader"] is True
    assert served["source"]["revision"] == other
    assert any(u["unit"] == unit and u["ok"] and u["lastAppliedRevision"] == rev for u in served["units"])


def status_of(kube: Kube, unit: str) -> UnitStatus:
    return next(u for u in status(kube, None, nodes=False).units if u.unit == unit)


def test_broken_commit_keeps_the_last_good_state(repos: Repos, start_agent: Callable[..., AgentProc],
                                                 kube_cluster: KubeCluster, namespace: str) -> None:
    kube = Kube.from_kubeconfig(kube_cluster.kubeconfig)
    agent = start_agent(str(repos.bare))
    wait_until("first sync", lambda: sts(kube, namespace).get("spec", {}).get("replicas") == 2, log=agent.log)
    repos.commit({"federations/fed.yaml": FED.format(image="x", replicas=2).replace("replicas:", "replicaz:")})
    unit = f"federation/{namespace}/fed"
    wait_until("config error reported", lambda: (agent.metric("flower_syncer_config_errors", unit=unit) or 0) >= 1,
             log=agent.log)
    assert sts(kube, namespace)["spec"]["replicas"] == 2
    assert kube.get("StatefulSet", namespace, "fed-superlink") is not None


def test_sigquit_writes_every_threads_stack_and_the_agent_goes_on(repos: Repos,
                                                                     start_agent: Callable[..., AgentProc]) -> None:
    """`kill -QUIT` (README, "A stuck agent"), 50 times while the agent is busy (resyncs, scrapes):
    each time the stacks of the main thread and the workers in the log, and the agent still healthy
    and stopping cleanly on SIGTERM afterwards (the fixture checks its exit code; the C-level dump
    of every thread this replaced killed it with SIGSEGV, issue 39)."""
    import signal
    import threading

    agent = start_agent(str(repos.bare))
    done = threading.Event()

    def busy() -> None:  # syncs and requests in flight while the signals come
        while not done.is_set():
            agent.post("/api/v1/resync", b"{}", {"Authorization": f"Bearer {agent.token}"})
            agent.get("/metrics")

    load = threading.Thread(target=busy, daemon=True)
    load.start()
    marker = "most recent call first"
    try:
        for _ in range(50):
            before = agent.log.read_text(errors="replace").count(marker)
            agent.proc.send_signal(signal.SIGQUIT)
            wait_until("the next stacks in the log",
                       lambda before=before: (agent.log.read_text(errors="replace").count(marker) > before  # type: ignore[misc]
                                              or agent.proc.poll() is not None), log=agent.log)
            assert agent.proc.poll() is None, f"agent exited with {agent.proc.returncode}"
    finally:
        done.set()
        load.join(70)
    dump = agent.log.read_text(errors="replace")
    assert dump.count(marker) >= 100  # every thread, every time
    assert "Current thread" in dump or "Thread 0x" in dump
    assert "runner.py" in dump  # the main thread, waiting in run()
    assert agent.proc.poll() is None and agent.get("/healthz")[0] == 200


def test_sigterm_taken_by_another_thread_still_stops_the_agent(repos: Repos,
                                                                 start_agent: Callable[..., AgentProc]) -> None:
    """The kernel hands a process-directed SIGTERM to any thread; the agent stops either way (its
    main thread must not sleep unwoken: cpython#85300). Sent with tgkill to a thread that is not
    the main one; the fixture checks the exit code."""
    import ctypes
    import errno
    import signal

    agent = start_agent(str(repos.bare))
    pid = agent.proc.pid
    libc = ctypes.CDLL(None, use_errno=True)

    def tgkill_a_worker() -> int | None:
        """The first worker thread that takes the signal (oldest first: the agent's long-lived
        threads; a short-lived one may be gone by the time it is signalled, ESRCH)."""
        for tid in sorted(int(t.name) for t in Path(f"/proc/{pid}/task").iterdir()):
            if tid == pid:
                continue
            if libc.syscall(234, pid, tid, signal.SIGTERM) == 0:  # SYS_tgkill on x86-64
                return tid
            assert ctypes.get_errno() == errno.ESRCH, os.strerror(ctypes.get_errno())
        return None

    wait_until("a worker thread took SIGTERM", tgkill_a_worker, log=agent.log)
    assert agent.proc.wait(15) == 0
    assert "signal received" in agent.log.read_text(errors="replace")


@pytest.fixture
def http_remote(repos: Repos, tmp_path: Path) -> Iterator[tuple[str, Path, GitHttpServer]]:
    """The config repo served over HTTP with a token: a remote the agent cannot watch locally."""
    root = tmp_path / "served"
    root.mkdir()
    shutil.copytree(repos.bare, root / "config.git")
    server = GitHttpServer(root, "git-token").start()
    (tmp_path / "git.token").write_text("git-token")
    yield f"{server.base_url}/config.git", root / "config.git", server
    server.stop()


def test_webhook_signature_and_resync_cli(repos: Repos, start_agent: Callable[..., AgentProc],
                                          http_remote: tuple[str, Path, GitHttpServer],
                                          kube_cluster: KubeCluster, namespace: str, tmp_path: Path) -> None:
    url, served, _ = http_remote
    kube = Kube.from_kubeconfig(kube_cluster.kubeconfig)
    agent = start_agent(url, "--git-token-file", str(tmp_path / "git.token"))
    wait_until("first sync", lambda: sts(kube, namespace).get("spec", {}).get("replicas") == 2, log=agent.log)
    repos.commit({"federations/fed.yaml": FED.format(image="flwr/supernode:1.25.0", replicas=4)})
    git(repos.work, "push", "-q", str(served), "HEAD:main")

    body = json.dumps({"ref": "refs/heads/main"}).encode()
    bad = agent.post("/hooks/git", body, {"X-Hub-Signature-256": "sha256=" + "0" * 64,
                                          "X-GitHub-Event": "push", "Content-Type": "application/json"})
    assert bad[0] == 401
    missing = agent.post("/hooks/git", body, {"X-GitHub-Event": "push"})
    assert missing[0] == 401  # refused before anything was queued: nothing is fetched
    assert sts(kube, namespace)["spec"]["replicas"] == 2

    sig = "sha256=" + hmac.new(b"hook-secret", body, hashlib.sha256).hexdigest()
    good = agent.post("/hooks/git", body, {"X-Hub-Signature-256": sig, "X-GitHub-Event": "push",
                                           "Content-Type": "application/json"})
    assert good[0] == 202
    wait_until("webhook fetch applied", lambda: sts(kube, namespace).get("spec", {}).get("replicas") == 4,
             timeout=10, log=agent.log)

    # `flower-syncer resync --wait` fetches and syncs, and prints the outcome
    repos.commit({"federations/fed.yaml": FED.format(image="flwr/supernode:1.25.0", replicas=5)})
    git(repos.work, "push", "-q", str(served), "HEAD:main")
    out = subprocess.run([sys.executable, "-m", "syncer", "resync", "--agent", agent.url, "--token-file",
                          str(tmp_path / "agent.token"), "--wait", "--timeout", "30s"],
                         capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"federation/{namespace}/fed: ok" in out.stdout
    assert sts(kube, namespace)["spec"]["replicas"] == 5
    # with the agent's own settings in the environment, no flags are needed; a wrong token is refused
    (tmp_path / "wrong.token").write_text("wrong\n")
    env = {**os.environ, "FLOWER_SYNCER_LISTEN": agent.url.removeprefix("http://"),
           "FLOWER_SYNCER_API_TOKEN_FILE": str(tmp_path / "wrong.token")}
    denied = subprocess.run([sys.executable, "-m", "syncer", "resync"], capture_output=True, text=True,
                            check=False, env=env)
    assert denied.returncode == 2 and "401" in denied.stderr


def test_unreachable_remote_keeps_state_and_reports(start_agent: Callable[..., AgentProc],
                                                    http_remote: tuple[str, Path, GitHttpServer],
                                                    kube_cluster: KubeCluster, namespace: str,
                                                    tmp_path: Path) -> None:
    url, _, server = http_remote
    kube = Kube.from_kubeconfig(kube_cluster.kubeconfig)
    agent = start_agent(url, "--git-token-file", str(tmp_path / "git.token"))
    wait_until("first sync", lambda: sts(kube, namespace).get("spec", {}).get("replicas") == 2, log=agent.log)
    server.stop()
    status, _ = agent.post("/api/v1/resync", b"{}", {"Authorization": f"Bearer {agent.token}"})
    assert status == 200
    wait_until("fetch error counted",
             lambda: (agent.metric("flower_syncer_source_fetch_errors_total", reason="unreachable") or 0) >= 1,
             log=agent.log)
    report = json.loads(agent.get("/api/v1/status")[1])
    assert "cannot" in report["source"]["error"] or report["source"]["error"]
    assert report["source"]["revision"]  # the last good revision is still the one applied
    assert sts(kube, namespace)["spec"]["replicas"] == 2
    assert agent.get("/healthz")[0] == 200
    assert agent.get("/readyz")[0] == 200


def test_two_agents_one_leader_and_failover(repos: Repos, start_agent: Callable[..., AgentProc],
                                            kube_cluster: KubeCluster, namespace: str) -> None:
    kube = Kube.from_kubeconfig(kube_cluster.kubeconfig)
    first = start_agent(str(repos.bare), name="first")
    wait_until("first leads", lambda: first.metric("flower_syncer_leader") == 1, log=first.log)
    second = start_agent(str(repos.bare), name="second")  # returns once it is ready: it has loaded and tried
    lease = kube.get("Lease", namespace, "flower-syncer") or {}
    assert lease.get("spec", {}).get("holderIdentity") == "first"
    assert second.metric("flower_syncer_leader") == 0
    wait_until("synced by the leader", lambda: sts(kube, namespace).get("spec", {}).get("replicas") == 2,
             log=first.log)
    first.clean_exit = False
    first.proc.kill()  # dies without releasing the lease
    t = time.monotonic()
    wait_until("second takes over", lambda: second.metric("flower_syncer_leader") == 1, timeout=25, log=second.log)
    assert time.monotonic() - t < 20
    repos.commit({"federations/fed.yaml": FED.format(image="flwr/supernode:1.25.0", replicas=3)})
    wait_until("new leader applies", lambda: sts(kube, namespace).get("spec", {}).get("replicas") == 3,
             timeout=15, log=second.log)
    lease = kube.get("Lease", namespace, "flower-syncer") or {}
    assert lease.get("spec", {}).get("holderIdentity") == "second"
    assert re.match(r"\d", str(lease["spec"].get("leaseDurationSeconds", "")))


def test_suspend_keeps_drift_until_resume(repos: Repos, start_agent: Callable[..., AgentProc],
                                          kube_cluster: KubeCluster, namespace: str) -> None:
    kube = Kube.from_kubeconfig(kube_cluster.kubeconfig)
    agent = start_agent(str(repos.bare))
    wait_until("first sync", lambda: sts(kube, namespace).get("spec", {}).get("replicas") == 2, log=agent.log)
    env = {**os.environ, "KUBECONFIG": kube_cluster.kubeconfig}
    out = subprocess.run([sys.executable, "-m", "syncer", "suspend", f"federation/{namespace}/fed"],
                         capture_output=True, text=True, env=env, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"federation/{namespace}/fed suspended"
    wait_until("the agent saw the suspension", lambda: reported(kube, namespace, "Suspended"), log=agent.log)
    kube_cluster.kubectl("-n", namespace, "scale", "statefulset", "fed-supernode-a", "--replicas=6")
    unit = f"federation/{namespace}/fed"
    wait_until("drift measured", lambda: (agent.metric("flower_syncer_drift_objects", unit=unit, kind="StatefulSet")
                                        or 0) >= 1, timeout=30, log=agent.log)
    assert sts(kube, namespace)["spec"]["replicas"] == 6  # not healed while suspended
    out = subprocess.run([sys.executable, "-m", "syncer", "resume", f"federation/{namespace}/fed"],
                         capture_output=True, text=True, env=env, check=False)
    assert out.returncode == 0, out.stderr
    wait_until("healed after resume", lambda: sts(kube, namespace).get("spec", {}).get("replicas") == 2, timeout=15,
             log=agent.log)
    assert reported(kube, namespace, "Resumed")


def test_repository_prune_policy_keeps_units_removed_from_git(repos: Repos, start_agent: Callable[..., AgentProc],
                                                              kube_cluster: KubeCluster, namespace: str) -> None:
    kube = Kube.from_kubeconfig(kube_cluster.kubeconfig)
    repos.commit({"flower-syncer.yaml": f"name: {namespace}\ndefaultNamespace: {namespace}\npolicy: {{prune: false}}\n",
                  "federations/other.yaml": FED.format(image="flwr/supernode:1.25.0", replicas=1)
                  .replace("name: fed\n", "name: other\n", 1)})
    agent = start_agent(str(repos.bare))
    wait_until("both synced", lambda: kube.get("StatefulSet", namespace, "other-superlink") is not None
             and sts(kube, namespace).get("spec", {}).get("replicas") == 2, log=agent.log)
    git(repos.work, "rm", "-q", "federations/other.yaml")
    rev = repos.commit({}, "remove other")
    wait_until("revision loaded", lambda: agent.metric("flower_syncer_source_revision_info", revision=rev) == 1,
               log=agent.log)
    other = f"federation/{namespace}/other"
    wait_until("the removed unit skipped, not pruned", lambda: (agent.metric(
        "flower_syncer_sync_total", unit=other, result="skipped") or 0) >= 1, log=agent.log)
    assert kube.get("StatefulSet", namespace, "other-superlink") is not None  # pruning is disabled in Git
