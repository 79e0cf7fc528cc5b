"""Every unit of config/examples syncs into the local control plane and becomes ready: pods
created, scheduled (the GPU pool onto NVIDIA nodes) and Ready, the TLS CA copied."""

from __future__ import annotations

import base64
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from syncer.cluster.client import Kube
from tests.conftest import KubeCluster

pytestmark = pytest.mark.cluster
EXAMPLES = Path(__file__).resolve().parents[2] / "config" / "examples"


def test_examples_sync_and_become_ready(kube_cluster: KubeCluster, namespace: str, tmp_path: Path) -> None:
    repo = tmp_path / "config"
    shutil.copytree(EXAMPLES, repo)
    (repo / "flower-syncer.yaml").write_text(f"name: {namespace}\ndefaultNamespace: {namespace}\n")
    for release in repo.glob("supernodes/*/release.yaml"):
        release.write_text(release.read_text().replace("namespace: flower-edge", f"namespace: {namespace}"))
    kube = Kube.from_kubeconfig(kube_cluster.kubeconfig)
    kube.apply({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                "metadata": {"name": "superlink-tls", "namespace": namespace},
                "data": {"tls.crt": base64.b64encode(b"cert").decode(), "tls.key": base64.b64encode(b"key").decode(),
                         "ca.crt": base64.b64encode(b"ca").decode()}}, manager="cert-manager")
    env = {"KUBECONFIG": kube_cluster.kubeconfig, "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-m", "syncer", "sync", str(repo), "--wait", "--timeout", "90s"],
                         capture_output=True, text=True, env=env, timeout=150, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    status = subprocess.run([sys.executable, "-m", "syncer", "status", str(repo), "-o", "json"],
                            capture_output=True, text=True, env=env, timeout=60, check=False)
    assert status.returncode == 0, status.stdout + status.stderr
    import json

    report = json.loads(status.stdout)
    units = {u["unit"]: u for u in report["units"]}
    assert len(units) == 5
    assert all(u["ready"] and u["drift"] == 0 for u in units.values()), units
    gpu = units[f"federation/{namespace}/federation-gpu"]
    pool = next(p for p in gpu["pools"] if p["pool"] == "gpu")
    assert pool["gpus"]["nvidia.com/gpu"]["allocated"] == pool["desired"] >= 1
    pods, _ = kube.list("Pod", namespace, labels="flower.flwr.ai/pool=gpu")
    assert pods and all(p["spec"]["nodeName"].startswith("gpu-nvidia") for p in pods)
    again = subprocess.run([sys.executable, "-m", "syncer", "sync", str(repo), "-o", "json"], capture_output=True,
                           text=True, env=env, timeout=60, check=False)
    assert json.loads(again.stdout)["writes"] == 0
