"""A canary pool on a real node (issue 40; docs/rollouts.md "Canary pools"), with Flower 1.42 and
1.26: both eras of the Control API (HTTP and gRPC). A Federation whose pool of 3 SuperNodes has a
canary of 1, a short gate and deadline, and whose Control API the agent reads (through a
port-forward named in it, as tests/e2e/test_hold_for_runs.py does), so the gate asks the
SuperLink, not only the pods.

1. A broken commit: the pool's image names a tag the node does not have. No registry is reachable
   from a devcluster's real node (tools/realnode.py: images are imported, never pulled), so the
   kubelet fails the pull at once with ErrImagePull and then ImagePullBackOff: what a tag that does
   not exist on a registry gives (the reasons are the kubelet's, whatever the registry said). It is
   the common broken rollout, and it fails in seconds, where a flag Flower refuses costs a crash and
   the kubelet's restart backoff first. Exactly the canary pod (the last ordinal) takes it; the
   other 2 keep their pods (same uid, no restart, the old controller-revision-hash) and stay online
   at the SuperLink; the unit is Synced False, CanaryFailed with the reason, in `/api/v1/status`
   and `flower-syncer status -o json`; a `CanaryFailed` Event names the commit.
2. The fixing commit (the same new node config, the image that exists) goes through the same gate:
   the failed canary pod is replaced, passes (Ready, and the pool's SuperNodes online at the
   SuperLink, each heard from since the canary pod was made), the rest rolls; every pod on the new
   revision, 3 new SuperNodes online. A resync after that writes nothing.
3. Printed: the gate's stages for the good commit, and the machine's load.
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from syncer.models.flower import interface_of_tag
from tests import builders
from tests.conftest import pod_ready, wait_until
from tests.e2e.apps import FLWR, OLD_FLWR
from tests.e2e.conftest import Agent, ConfigRepo, RealCluster, control_api, namespace_state, syncer_status, wait_ready
from tests.integration.agents import free_port

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
FED = "canary"
STS = f"{FED}-supernode-p"
GATE, DEADLINE = "5s", "3m"  # shorter than the SuperNodes' next heartbeats, which the gate waits for too
TOKEN = "e2e-canary-resync-token"
POOL = '        nodeConfig:\n          revision: "{revision}"\n'
# objects the agent applies for the federation (pods, Events, the Lease, EndpointSlices move by themselves)
APPLIED_KINDS = "statefulsets,services,configmaps,secrets,serviceaccounts,roles,rolebindings,networkpolicies"


def federation(control: str, revision: int, flwr: str, tag: str = "") -> str:
    """The Federation of Flower `flwr`, its pool's SuperNodes on the image `tag` (default `flwr`)."""
    annotations = (f'"flower-syncer.io/control-api-address": "{control}", "flower-syncer.io/canary": "1", '
                   f'"flower-syncer.io/canary-gate": "{GATE}", "flower-syncer.io/canary-deadline": "{DEADLINE}"')
    text = builders.federation(FED, builders.pool("p", 3, extra=POOL.format(revision=revision)), annotations,
                               version=flwr)
    return text.replace(f"flwr/supernode:{flwr}\n", f"flwr/supernode:{tag or flwr}\n")


def _pods(cluster: RealCluster, ns: str) -> dict[int, dict[str, Any]]:
    """The pool's pods by ordinal (those not terminating): uid, revision, Ready, restarts, waiting reason."""
    out = {}
    for obj in cluster.json("-n", ns, "get", "pods", "-l", "flower.flwr.ai/pool=p")["items"]:
        meta, status = obj["metadata"], obj.get("status") or {}
        if meta.get("deletionTimestamp"):
            continue
        containers = status.get("containerStatuses") or []
        out[int(meta["name"].rsplit("-", 1)[1])] = {
            "uid": meta["uid"], "revision": meta["labels"].get("controller-revision-hash", ""),
            "ready": pod_ready(obj),
            "restarts": sum(int(c.get("restartCount") or 0) for c in containers),
            "waiting": ",".join(str((c.get("state") or {}).get("waiting", {}).get("reason", "")) for c in containers
                                if (c.get("state") or {}).get("waiting")),
        }
    return out


def _sts(cluster: RealCluster, ns: str) -> tuple[int, str, str]:
    """The pool StatefulSet's partition, current and update revisions."""
    sts = cluster.json("-n", ns, "get", "statefulset", STS)
    partition = (sts["spec"].get("updateStrategy", {}).get("rollingUpdate") or {}).get("partition") or 0
    return int(partition), str(sts["status"].get("currentRevision")), str(sts["status"].get("updateRevision"))


def _online(address: str, flwr: str) -> set[int] | None:
    """The node ids the SuperLink lists online (None while its Control API does not answer)."""
    got = control_api(address, transport=interface_of_tag(flwr).control_transport)
    return {n.node_id for n in got[1] if n.status == "online"} if got else None


def _events(cluster: RealCluster, ns: str, reason: str) -> list[str]:
    items = cluster.json("-n", ns, "get", "events", "--field-selector", f"reason={reason}")["items"]
    return [str(e.get("message") or e.get("note") or "") for e in items]


def _condition(unit: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((dict(c) for c in unit.get("conditions") or [] if c["type"] == kind), {})


def _unit(report: Any, unit: str) -> dict[str, Any]:
    return next((dict(u) for u in report.get("units", []) if u["unit"] == unit), {})


def _versions(cluster: RealCluster, ns: str) -> dict[str, str]:
    items = cluster.json("-n", ns, "get", APPLIED_KINDS)["items"]
    return {f"{o['kind']}/{o['metadata']['name']}": o["metadata"]["resourceVersion"] for o in items}


# tools/images.py imports flwr/supernode:{1.26.0,1.37.0,1.42.0} only: a tag it lacks cannot be pulled
@pytest.mark.parametrize("flwr", [FLWR, OLD_FLWR])
def test_a_broken_pool_change_stops_at_its_canary_and_the_fix_rolls_out(
        flwr: str, real_cluster: RealCluster, e2e_namespace: str, config_repo: ConfigRepo,
        run_agent: Callable[[ConfigRepo, str], Agent], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ns, cluster = e2e_namespace, real_cluster
    unit_id = f"federation/{ns}/{FED}"
    cluster.kubectl("apply", "-f", str(ROOT / "charts" / "flower-syncer" / "crds"))  # `status` reads FlowerUnits
    address = f"127.0.0.1:{free_port()}"
    settings = (f"name: e2e\ndefaultNamespace: {ns}\n"
                "guardrails:\n  allowedControlApiTargets: ['127.0.0.1:*']\n")
    config_repo.commit({"flower-syncer.yaml": settings, f"federations/{FED}.yaml": federation(address, 1, flwr)},
                       "a federation with a canary pool")
    (tmp_path / "token").write_text(TOKEN)
    monkeypatch.setenv("FLOWER_SYNCER_API_TOKEN_FILE", str(tmp_path / "token"))  # run_agent's env: the resync API
    agent = run_agent(config_repo, ns)
    wait_ready(cluster, ns, "statefulset", f"{FED}-superlink", 1, agent)

    def state() -> str:
        return f"\n--- what the namespace shows ---\n{namespace_state(cluster, ns)}"

    with cluster.port_forward(ns, f"svc/{FED}-superlink", 9093, local=int(address.split(":")[1])):
        wait_ready(cluster, ns, "statefulset", STS, 3, agent)
        first = wait_until("3 SuperNodes online at the SuperLink", lambda: (o := _online(address, flwr))
                           and len(o) == 3 and o, timeout=120, interval=1, log=agent.log)
        wait_until("the agent reading the pool online and the unit Synced", lambda: (
            (u := agent.unit(unit_id)) and _condition(u, "Synced").get("status") == "True"
            and (u.get("flower") or {}).get("supernodes", {}).get("online") == 3), timeout=90, interval=1,
            log=agent.log)
        before = _pods(cluster, ns)
        old = before[0]["revision"]
        assert sorted(before) == [0, 1, 2] and {p["revision"] for p in before.values()} == {old}, before

        # 1. a broken change: it reaches the canary (ordinal 2) only
        bad = config_repo.commit({f"federations/{FED}.yaml": federation(address, 2, flwr, f"{flwr}-no-such-tag")},
                                 "new node config, and an image tag that does not exist")
        committed = time.monotonic()

        def failed() -> dict[str, Any]:
            unit = agent.unit(unit_id)
            return unit if _condition(unit, "Synced").get("reason") == "CanaryFailed" else {}

        unit = wait_until("the unit Synced False, CanaryFailed", failed, timeout=150, interval=1, log=agent.log)
        sys.stderr.write(f"broken commit -> CanaryFailed in {time.monotonic() - committed:.1f}s\n")
        synced = _condition(unit, "Synced")
        assert synced["status"] == "False" and "cannot start" in synced["message"], synced
        assert "ErrImagePull" in synced["message"] or "ImagePullBackOff" in synced["message"], synced
        pods = _pods(cluster, ns)
        assert pods[2]["revision"] != old and not pods[2]["ready"], pods[2]
        assert pods[2]["waiting"] in ("ErrImagePull", "ImagePullBackOff"), pods[2]
        assert _sts(cluster, ns)[0] == 2, "the partition moved"
        # the old canary's SuperNode is gone from the SuperLink (its heartbeat lapsed); the other two
        # SuperNodes are the same pods, never restarted, on the old revision, and stay online
        online = wait_until("the SuperLink listing the 2 old SuperNodes online and no other", lambda: (
            o := _online(address, flwr)) is not None and len(o) == 2 and o <= first and o, timeout=120, interval=2,
            log=agent.log)
        for i in (0, 1):
            now = _pods(cluster, ns)[i]
            assert (now["uid"], now["revision"], now["ready"], now["restarts"]) == (
                before[i]["uid"], old, True, 0), (i, before[i], now)
        assert _online(address, flwr) == online, "an old SuperNode went offline"
        report = wait_until("status -o json: the unit CanaryFailed", lambda: (
            u := _unit(syncer_status(cluster, ns), unit_id)) and _condition(u, "Synced").get("reason")
            == "CanaryFailed" and u, timeout=60, interval=2, log=agent.log)
        sys.stderr.write(f"status -o json: {_condition(report, 'Synced')} / {_condition(report, 'Healthy')}\n")
        # the record names the StatefulSet (stable words, engine.outcome); the pods' reason is in Healthy
        assert _condition(report, "Synced")["status"] == "False", report
        assert STS in _condition(report, "Synced")["message"], report
        healthy = _condition(report, "Healthy")
        assert healthy.get("reason") == "Degraded" and "ImagePull" in healthy["message"], healthy
        assert f"{STS}-2" in healthy["message"], healthy
        told = wait_until("a CanaryFailed Event naming the commit", lambda: [
            e for e in _events(cluster, ns, "CanaryFailed") if bad[:12] in e], timeout=60, interval=2)
        assert len(told) == 1 and "ImagePull" in told[0], told
        assert [p["uid"] for i, p in sorted(_pods(cluster, ns).items()) if i < 2] == [before[0]["uid"],
                                                                                     before[1]["uid"]]

        # 2. the fix: the same gate, then the rest of the pool
        load = os.getloadavg()
        good = config_repo.commit({f"federations/{FED}.yaml": federation(address, 2, flwr)}, "the image that exists")
        t0 = time.monotonic()
        marks: dict[str, float] = {}
        new_rev = ""

        def progress() -> bool:
            nonlocal new_rev
            now = time.monotonic() - t0
            # the pods before the StatefulSet: a partition still above 0 read after them means
            # these pods were read before the gate passed (read the other way round, the gate
            # could pass between the reads, and the old pods be seen rolling as if too early)
            pods = _pods(cluster, ns)
            partition, current, update = _sts(cluster, ns)
            online = _online(address, flwr)
            if update not in (old, "") and "canary Ready" not in marks:
                canary = pods.get(2, {})
                if canary.get("revision") == update and canary.get("ready"):
                    marks["canary Ready"], new_rev = now, update
            if "canary Ready" in marks and "canary online" not in marks and online and online - first:
                marks["canary online"] = now
            if "canary Ready" in marks and "canary passed" not in marks and partition == 0:
                marks["canary passed"] = now
            if (new_rev and "pool rolled" not in marks and current == update == new_rev and len(pods) == 3
                    and all(p["revision"] == new_rev and p["ready"] for p in pods.values())):
                marks["pool rolled"] = now
            if "pool rolled" in marks and online is not None and len(online) == 3 and not online & first:
                marks["all online"] = now
            if "canary passed" not in marks:  # until the gate passed, the old two stay as they were
                for i in (0, 1):
                    assert pods[i]["uid"] == before[i]["uid"] and pods[i]["revision"] == old, (i, pods[i])
            return "all online" in marks

        try:
            wait_until("the fixed canary to pass and the pool to roll", progress, timeout=300, interval=1,
                       log=agent.log)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\nmarks: {marks}{state()}") from None
        stages = " -> ".join(f"{k} {v:.1f}s" for k, v in marks.items())
        sys.stderr.write(f"fixing commit {good[:12]}: {stages} (load before {load[0]:.2f}, after "
                         f"{os.getloadavg()[0]:.2f})\n")
        assert marks["canary online"] <= marks["canary passed"], marks
        assert marks["canary Ready"] < marks["canary passed"], marks
        assert any(good[:12] in e for e in _events(cluster, ns, "CanaryPassed")), _events(cluster, ns, "CanaryPassed")
        rolled = _pods(cluster, ns)
        done = wait_until("the unit Synced at the fix", lambda: (u := agent.unit(unit_id)) and _condition(
            u, "Synced").get("status") == "True" and u.get("lastAppliedRevision") == good and u, timeout=60,
            interval=1, log=agent.log)
        assert done["ok"], done

        # then a resync (as `POST /api/v1/resync` asks for it): the next sync writes nothing
        versions = _versions(cluster, ns)
        request = urllib.request.Request(agent.url + "/api/v1/resync", method="POST", headers={
            "Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
            data=json.dumps({"unit": unit_id, "wait": True, "timeout": 60}).encode())
        with urllib.request.urlopen(request, timeout=90) as resp:
            answer = json.loads(resp.read())
        assert answer["done"] and not answer["error"] and answer["revision"] == good, answer
        assert _versions(cluster, ns) == versions, "the sync after the rollout wrote"
        assert _pods(cluster, ns) == rolled and len(_online(address, flwr) or ()) == 3
