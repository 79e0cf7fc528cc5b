"""Pod security and secret digests with the agent on the local control plane (issue 25, items 3
and 6): a commit that runs a pod as the agent's ServiceAccount (or another cross of the rules) is
a config error for its unit, which keeps its last applied state; a Secret from Git is recorded
under a keyed digest, with the key in a Secret of its namespace, and a resync writes nothing."""

from __future__ import annotations

import base64
from collections.abc import Callable

import pytest

from syncer.cluster.client import Kube
from syncer.engine.digestkey import KEY_SECRET
from syncer.engine.inventory import Inventory, decode
from syncer.identity import ANN_APPLIED_HASH
from tests.conftest import KubeCluster, wait_until
from tests.integration.agents import FED, AgentProc, Repos, sts

pytestmark = pytest.mark.cluster

SECRET = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: creds\nstringData:\n  password: sunshine\n"


def test_a_pod_as_the_agent_is_refused_and_secret_digests_are_keyed(
        repos: Repos, start_agent: Callable[..., AgentProc], kube_cluster: KubeCluster, namespace: str) -> None:
    kube = Kube.from_kubeconfig(kube_cluster.kubeconfig)
    repos.commit({"supernodes/edge/values.yaml": "tls:\n  enabled: false\n",
                  "supernodes/edge/secrets.yaml": SECRET})
    agent = start_agent(str(repos.bare))
    wait_until("first sync", lambda: sts(kube, namespace).get("spec", {}).get("replicas") == 2
               and kube.get("Secret", namespace, "creds") is not None, log=agent.log)

    # the Secret's digest is keyed: the plain hash of the object is nowhere
    key = wait_until("the digest key", lambda: kube.get("Secret", namespace, KEY_SECRET), log=agent.log)
    live = kube.get("Secret", namespace, "creds") or {}
    recorded = live["metadata"]["annotations"][ANN_APPLIED_HASH]

    def recorded_inventory() -> Inventory | None:
        # a new unit's inventory is claimed (written empty) before anything is applied and
        # filled in after the apply: wait for the write that records what was applied
        cm = kube.get("ConfigMap", namespace, "flower-syncer.supernode.edge")
        inv = decode(cm) if cm is not None else None
        return inv if inv is not None and recorded in {e.applied for e in inv.entries.values()} else None

    inventory = wait_until("the inventory recording the Secret's keyed digest", recorded_inventory, log=agent.log)
    assert "sunshine" not in str(inventory.manifest())
    assert len(base64.b64decode(key["data"]["key"])) == 32

    unit = f"federation/{namespace}/fed"
    before = sts(kube, namespace)["metadata"]["generation"]  # (the controller writes its status meanwhile)
    bad = FED.format(image="flwr/supernode:1.25.0", replicas=5) + \
        "        podTemplate: {spec: {serviceAccountName: flower-syncer, nodeName: control-plane-0}}\n"
    repos.commit({"federations/fed.yaml": bad})
    wait_until("config error reported", lambda: (agent.metric("flower_syncer_config_errors", unit=unit) or 0) >= 1,
               log=agent.log)
    current = sts(kube, namespace)
    assert current["metadata"]["generation"] == before and current["spec"]["replicas"] == 2
    assert "serviceAccountName" not in current["spec"]["template"]["spec"]
    assert kube.get("Secret", namespace, "creds") is not None  # the other unit is untouched
