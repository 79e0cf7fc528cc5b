"""The Helm chart (charts/flower-syncer) for the chart's and the tenancy tests: the pinned `helm`
(fixture; the devcluster build's, else one on PATH; without any the tests skip, or fail with
CI=true), `cluster_helm`, `template_text` (the rendered chart), `one` (the one object of a kind),
`second_namespace` (fixture) and `sa_kubeconfig` (a ServiceAccount's own kubeconfig).
tests/integration/conftest.py imports the fixtures. A helper module, not a test module: tests
import from here, never from each other."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

if TYPE_CHECKING:
    from tests.conftest import KubeCluster

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "flower-syncer"
DEVCLUSTER = REPO / "tools" / "devcluster.py"


def _unavailable(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


def _pinned_bin_dir() -> Path | None:
    proc = subprocess.run([sys.executable, str(DEVCLUSTER), "status", "--json"], capture_output=True, text=True,
                          timeout=30, check=False)
    try:
        return Path(json.loads(proc.stdout)["bin_dir"])
    except (ValueError, KeyError, TypeError):
        return None


@pytest.fixture(scope="module")
def helm() -> str:
    """The pinned helm (v4) from the devcluster build, else helm from PATH."""
    bin_dir = _pinned_bin_dir()
    pinned = bin_dir / "helm" if bin_dir else None
    exe = str(pinned) if pinned and os.access(pinned, os.X_OK) else shutil.which("helm")
    if exe is None:
        _unavailable(f"helm not found (no {pinned}; run `python3 tools/devcluster.py build`) and none on PATH")
    assert exe is not None
    return exe


def run_helm(helm: str, *args: str, kubeconfig: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    if kubeconfig:
        env["KUBECONFIG"] = kubeconfig
    return subprocess.run([helm, *args], capture_output=True, text=True, timeout=60, env=env, check=False)


def one(objs: list[dict[str, Any]], kind: str, name: str | None = None, namespace: str | None = None) -> dict[str, Any]:
    found = [o for o in objs if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)
             and (namespace is None or o["metadata"].get("namespace") == namespace)]
    assert len(found) == 1, f"{kind} {name or ''}: {len(found)} found"
    return found[0]


@pytest.fixture
def second_namespace(kube_cluster: KubeCluster, namespace: str) -> Iterator[str]:
    name = f"{namespace}-b"
    kube_cluster.kubectl("create", "namespace", name)
    kube_cluster.kubectl("label", "namespace", name, "flower-syncer.dev/test=true")
    yield name
    kube_cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


def cluster_helm(kube_cluster: KubeCluster, helm: str) -> str:
    pinned = kube_cluster.bin_dir / "helm" if kube_cluster.bin_dir else None
    return str(pinned) if pinned and pinned.exists() else helm


def template_text(helm: str, namespace: str, values: dict[str, Any], *extra: str) -> str:
    proc = subprocess.run([helm, "template", "fs", str(CHART), "--namespace", namespace, "--values", "-", *extra],
                          input=yaml.safe_dump(values), capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def sa_kubeconfig(kube_cluster: KubeCluster, namespace: str, service_account: str, path: Path) -> Path:
    """A kubeconfig with a TokenRequest token of the ServiceAccount (server and CA from the admin's)."""
    token = kube_cluster.kubectl("create", "token", service_account, "-n", namespace,
                                 "--duration", "10m").stdout.strip()
    admin = json.loads(kube_cluster.kubectl("config", "view", "--raw", "--minify", "--flatten", "-o", "json").stdout)
    cluster = admin["clusters"][0]["cluster"]
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "sa",
        "clusters": [{"name": "c", "cluster": {k: cluster[k] for k in ("server", "certificate-authority-data")}}],
        "users": [{"name": "sa", "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "c", "user": "sa"}}],
    }))
    return path
