"""Every object `flower-syncer render config/examples` prints is accepted by a real API server
(server-side apply with dryRun=All), which checks what no schema can: admission, defaulting,
validation of names, selectors, ports, probes and security contexts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from syncer.cluster.client import ApiError, Kube
from tests.conftest import KubeCluster

pytestmark = pytest.mark.cluster
REPO = Path(__file__).resolve().parents[2]


def test_rendered_examples_pass_server_side_dry_run(kube_cluster: KubeCluster, namespace: str) -> None:
    out = subprocess.run([sys.executable, "-m", "syncer", "render", str(REPO / "config" / "examples"), "-o", "json",
                          "--show-secrets"], capture_output=True, text=True, check=True)
    items = json.loads(out.stdout)["items"]
    assert len(items) >= 20
    kube = Kube.from_kubeconfig(kube_cluster.kubeconfig)
    refused = []
    for m in items:
        m["metadata"]["namespace"] = namespace  # the example namespaces need not exist here
        try:
            kube.apply(m, dry_run=True)
        except ApiError as exc:
            refused.append(f"{m['kind']}/{m['metadata']['name']}: {exc.message}")
    assert not refused, "\n".join(refused)
    assert kube.writes == 0
