"""A commit that would restart pods waits for the run training on them (issue 40, item 3;
docs/rollouts.md), on a real node with Flower 1.42: a Federation whose Control API the agent reads
(through a port-forward named in it, as tests/e2e/test_flower_health.py does) trains a run of many
rounds, each taking a few seconds. While it runs, a commit gives the SuperLink a new flag and
changes the node config of the pool. The agent holds both: `/api/v1/status` shows the hold with the
run's id and `flower-syncer status -o json` the unit Held; neither pod template moves and the run
completes all its rounds; then the changes apply (the new pods are made after the run ended).

A second case: a hold of 30 s (`hold-for-runs: 30s`) with a run that lasts longer: the deadline
passes, the change goes ahead (the SuperLink restarts under the run), and the Events say when the
hold began (`RolloutHeld`, naming the run) and why it ended (`RolloutResumed`: the deadline). The
run does not survive the restart: its ServerApp process died with the pod, and the new SuperLink
(same database) fails the run once that process's heartbeats stay away (docs/rollouts.md)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from syncer.cluster.flower_control import RunInfo
from tests import builders
from tests.conftest import pod_ready, wait_until
from tests.e2e.apps import APP, FLWR
from tests.e2e.conftest import (
    Agent,
    ConfigRepo,
    RealCluster,
    control_api,
    flwr_command,
    pod,
    syncer_status,
    task_token_refusals,
    wait_ready,
)
from tests.integration.agents import free_port

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
NEW_FLAG = "--disable-runtime-dependency-installation"
POOL = ('        nodeConfig:\n          partition-id: "0"\n          num-partitions: "2"\n'
        '          revision: "{revision}"\n')


def federation(control: str, hold: str, revision: int, superlink: str = "") -> str:
    annotations = f'"flower-syncer.io/control-api-address": "{control}", "flower-syncer.io/hold-for-runs": "{hold}"'
    return builders.federation("long", builders.pool("p", 2, extra=POOL.format(revision=revision)),
                               annotations, version=FLWR, superlink=superlink)


def _template(cluster: RealCluster, namespace: str, name: str) -> tuple[str, list[str]]:
    """A StatefulSet's update revision (its pod template's) and its first container's args."""
    sts = cluster.json("-n", namespace, "get", "statefulset", name)
    return str(sts["status"].get("updateRevision")), list(sts["spec"]["template"]["spec"]["containers"][0]["args"])


def _events(cluster: RealCluster, namespace: str, reason: str) -> list[str]:
    items = cluster.json("-n", namespace, "get", "events", "--field-selector", f"reason={reason}")["items"]
    return [str(e.get("message") or e.get("note") or "") for e in items]


def _unit(report: Any, unit: str) -> dict[str, Any]:
    return next((dict(u) for u in report.get("units", []) if u["unit"] == unit), {})


def _created(obj: dict[str, Any]) -> float:
    return datetime.fromisoformat(obj["metadata"]["creationTimestamp"].replace("Z", "+00:00")).timestamp()


class Training:
    """A federation `long` applied by the agent, its Control API forwarded to `address`, and a
    `flwr run` of `rounds` rounds of `seconds` each going on in the background."""

    def __init__(self, cluster: RealCluster, namespace: str, repo: ConfigRepo,
                 run_agent: Callable[[ConfigRepo, str], Agent], tmp_path: Path, hold: str) -> None:
        self.cluster, self.ns, self.repo, self.hold = cluster, namespace, repo, hold
        self.unit = f"federation/{namespace}/long"
        # `status` reads what the agent records on the FlowerUnits (cluster-scoped CRD; idempotent)
        cluster.kubectl("apply", "-f", str(ROOT / "charts" / "flower-syncer" / "crds"))
        self.address = f"127.0.0.1:{free_port()}"
        repo.commit({
            "flower-syncer.yaml": f"name: e2e\ndefaultNamespace: {namespace}\n"
                                  "guardrails:\n  allowedControlApiTargets: ['127.0.0.1:*']\n",
            "federations/long.yaml": federation(self.address, hold, 1),
        }, "a federation whose runs the agent reads")
        self.agent = run_agent(repo, namespace)
        wait_ready(cluster, namespace, "statefulset", "long-superlink", 1, self.agent)
        wait_ready(cluster, namespace, "statefulset", "long-supernode-p", 2, self.agent)
        self.home = tmp_path / "flwr"

    def start(self, rounds: int, seconds: int) -> tuple[subprocess.Popen[str], int]:
        """The run started, and its id once the agent has read it running (a commit is held only
        for the runs the agent knows of)."""
        argv, env = flwr_command(APP, self.address, self.home, version=FLWR,
                                 run_config=f"num-server-rounds={rounds} num-nodes=2 round-seconds={seconds}")
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

        def running() -> int | None:
            assert proc.poll() is None, f"flwr run ended early:\n{proc.communicate()[0][-4000:]}"
            got = control_api(self.address)
            return next((r.run_id for r in got[0] if r.status == "running"), None) if got else None

        try:
            run_id = wait_until("the run running", running, timeout=180, interval=1, log=self.agent.log)
        except AssertionError as exc:
            raise AssertionError(f"{exc}{task_token_refusals(self.cluster, self.ns)}") from None
        wait_until("the agent reading the run running", lambda: (self.agent.unit(self.unit).get("flower") or {})
                   .get("runs", {}).get("running"), timeout=90, interval=1, log=self.agent.log)
        return proc, run_id

    def change(self) -> None:
        """A commit: a new flag for the SuperLink, a new node config for the pool."""
        self.repo.commit({"federations/long.yaml": federation(self.address, self.hold, 2,
                                                              superlink=f"    extraArgs: [\"{NEW_FLAG}\"]\n")},
                         "a new SuperLink flag and a new node config")


def test_a_commit_waits_for_the_run_then_applies(real_cluster: RealCluster, e2e_namespace: str,
                                                 config_repo: ConfigRepo,
                                                 run_agent: Callable[[ConfigRepo, str], Agent],
                                                 tmp_path: Path) -> None:
    ns = e2e_namespace
    training = Training(real_cluster, ns, config_repo, run_agent, tmp_path, "10m")
    agent = training.agent
    link_rev, link_args = _template(real_cluster, ns, "long-superlink")
    pool_rev, _ = _template(real_cluster, ns, "long-supernode-p")
    link_pod = pod(real_cluster, ns, "long-superlink-0")["metadata"]["uid"]
    assert NEW_FLAG not in link_args
    rounds, seconds = 4, 20  # 80 s at least, whatever the machine: past the agent's first read of the run (30 s)
    with real_cluster.port_forward(ns, "svc/long-superlink", 9093, local=int(training.address.split(":")[1])):
        proc, run_id = training.start(rounds, seconds)
        committed = time.monotonic()
        training.change()

        def held() -> dict[str, Any]:
            assert proc.poll() is None, "the run ended before the agent held the change"
            hold = agent.unit(training.unit).get("hold") or {}
            return hold if hold.get("held") else {}

        hold = wait_until("the agent holding the change for the run", held, timeout=120, interval=1, log=agent.log)
        assert hold["reason"] == "RunsActive" and hold["runs"] == [run_id], hold
        assert hold["since"] and hold["deadline"], hold
        sys.stderr.write(f"commit -> held for run {run_id} in {time.monotonic() - committed:.1f}s\n")
        unit = wait_until("status -o json: the unit Held", lambda: _unit(syncer_status(real_cluster, ns),
                          training.unit), timeout=60, interval=2, log=agent.log)
        synced = next(c for c in unit["conditions"] if c["type"] == "Synced")
        assert synced["status"] == "False" and synced["reason"] == "Held", synced
        assert str(run_id) in synced["message"], synced

        def run_ended() -> bool:
            """The run's end, with nothing of its pods restarted meanwhile."""
            assert pod(real_cluster, ns, "long-superlink-0")["metadata"]["uid"] == link_pod, "SuperLink restarted"
            assert _template(real_cluster, ns, "long-superlink") == (link_rev, link_args), "SuperLink changed"
            assert _template(real_cluster, ns, "long-supernode-p")[0] == pool_rev, "pool changed during the run"
            return proc.poll() is not None

        wait_until("the run to end", run_ended, timeout=rounds * (seconds + 60) + 120, interval=1, log=agent.log)
        ended = time.time()
        output = proc.communicate()[0]
        assert proc.returncode == 0, output[-4000:]
        assert f"E2E-SERVER rounds={rounds} final=[{rounds}.0, {rounds}.0, {rounds}.0, {rounds}.0]" in output, \
            output[-4000:]

        # then the change applies: new pod templates, pods made after the run ended (the agent must
        # read that the run ended: the port-forward stays until the change goes ahead)
        def applied() -> bool:
            link, pool = _template(real_cluster, ns, "long-superlink"), _template(real_cluster, ns, "long-supernode-p")
            return link[0] != link_rev and NEW_FLAG in link[1] and pool[0] != pool_rev

        wait_until("the held changes applied after the run", applied, timeout=150, interval=1, log=agent.log)
    wait_until("the new SuperLink pod", lambda: pod(real_cluster, ns, "long-superlink-0").get("metadata", {})
               .get("uid", link_pod) != link_pod, timeout=120, interval=1, log=agent.log)
    sys.stderr.write(f"run ended -> held changes applied in {time.time() - ended:.1f}s\n")
    assert _created(pod(real_cluster, ns, "long-superlink-0")) >= int(ended)
    wait_until("RolloutResumed: the runs ended", lambda: any(
        "the runs ended" in e for e in _events(real_cluster, ns, "RolloutResumed")), timeout=60, interval=2)
    assert any(str(run_id) in e for e in _events(real_cluster, ns, "RolloutHeld"))


def test_a_hold_ends_at_its_deadline(real_cluster: RealCluster, e2e_namespace: str, config_repo: ConfigRepo,
                                     run_agent: Callable[[ConfigRepo, str], Agent], tmp_path: Path) -> None:
    ns = e2e_namespace
    training = Training(real_cluster, ns, config_repo, run_agent, tmp_path, "30s")
    agent = training.agent
    link_pod = pod(real_cluster, ns, "long-superlink-0")["metadata"]["uid"]
    with real_cluster.port_forward(ns, "svc/long-superlink", 9093, local=int(training.address.split(":")[1])):
        proc, run_id = training.start(10, 20)  # 200 s at least: well past the deadline
        try:
            committed = time.monotonic()
            training.change()

            def held() -> dict[str, Any]:
                assert proc.poll() is None, "the run ended before the agent held the change"
                hold = agent.unit(training.unit).get("hold") or {}
                return hold if hold.get("held") else {}

            hold = wait_until("the agent holding the change for the run", held, timeout=120, interval=1,
                              log=agent.log)
            began = time.monotonic()
            assert hold["runs"] == [run_id], hold

            def restarted() -> bool:
                """The SuperLink pod going (deleted, or replaced already). `flwr run` streams the
                run's logs from that pod: it may end at its deletion, not before."""
                ended = proc.poll() is not None  # read first: an end caused by the deletion is seen with it
                meta = pod(real_cluster, ns, "long-superlink-0").get("metadata", {})
                going = bool(meta.get("deletionTimestamp")) or meta.get("uid", link_pod) != link_pod
                assert going or not ended, \
                    f"the run ended before the deadline:\n{proc.communicate()[0][-4000:]}"
                return going

            wait_until("the change going ahead at the deadline", restarted, timeout=150, interval=1, log=agent.log)
            gone = time.monotonic()
            sys.stderr.write(f"hold-for-runs 30s: commit -> held in {began - committed:.1f}s, held -> the SuperLink "
                             f"pod replaced in {gone - began:.1f}s (run {run_id} still training)\n")
        finally:
            proc.kill()
            proc.wait()

    # The restart does not resume the run: its ServerApp process died with the pod, and the new
    # SuperLink, on the same database, fails the run (the port-forward went with the old pod).
    def replaced() -> bool:
        new = pod(real_cluster, ns, "long-superlink-0")
        return bool(new) and new["metadata"]["uid"] != link_pod and pod_ready(new)

    wait_until("the new SuperLink pod Ready", replaced, timeout=180, interval=1, log=agent.log)
    ready = time.monotonic()

    def run_after() -> RunInfo | None:
        got = control_api(training.address)
        run = next((r for r in got[0] if r.run_id == run_id), None) if got else None
        return run if run is not None and run.status == "finished" else None

    with real_cluster.port_forward(ns, "svc/long-superlink", 9093, local=int(training.address.split(":")[1])):
        run = wait_until("the restarted SuperLink (same database) ending the run", run_after, timeout=240,
                         interval=2, log=agent.log)
    sys.stderr.write(f"the new SuperLink Ready {ready - gone:.1f}s after the old pod went; the run "
                     f"{run.status}:{run.sub_status} ({run.details!r}) {time.monotonic() - ready:.1f}s after Ready\n")
    assert run.sub_status == "failed", run
    assert NEW_FLAG in _template(real_cluster, ns, "long-superlink")[1]
    assert any(str(run_id) in e for e in _events(real_cluster, ns, "RolloutHeld"))
    resumed = wait_until("RolloutResumed: the deadline passed", lambda: [
        e for e in _events(real_cluster, ns, "RolloutResumed") if "the deadline passed" in e], timeout=60, interval=2)
    assert str(run_id) in resumed[0], resumed
