"""The agent as a platform team installs it: its image built from the project's Dockerfile (with
buildah, tools/images.py), `helm install` of charts/flower-syncer with the chart's RBAC confined to
one namespace, the agent running as a pod and fetching over HTTP with a token from a Git server
on the node. A push then reaches the cluster, and the agent runs with the chart's hardening."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import TypeVar

import pytest

from tests.conftest import DEVCLUSTER, REPO, wait_until
from tests.e2e.apps import federation
from tests.e2e.conftest import CLUSTER_NAME, ConfigRepo, RealCluster, ready_replicas
from tests.integration.gitservers import GitHttpServer

pytestmark = pytest.mark.e2e
T = TypeVar("T")
CLONE_NEWNET = 0x40000000
AGENT_IMAGE = "localhost/flower-syncer:dev"


def in_netns(netns: str, make: Callable[[], T]) -> T:
    """Run `make` in a thread that joined network namespace `netns`: the sockets it opens live
    there (a network namespace is per thread), whichever thread uses them afterwards."""
    out: list[T] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            fd = os.open(f"/run/netns/{netns}", os.O_RDONLY)
            try:
                if ctypes.CDLL(None, use_errno=True).setns(fd, CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), f"setns into {netns}")
            finally:
                os.close(fd)
            out.append(make())
        except BaseException as exc:  # handed to the caller
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if errors:
        raise errors[0]
    return out[0]


def test_the_agent_installed_with_helm_syncs_a_push(real_cluster: RealCluster, e2e_namespace: str,
                                                   config_repo: ConfigRepo) -> None:
    ns = e2e_namespace
    built = subprocess.run([sys.executable, str(REPO / "tools" / "images.py"), "agent"], capture_output=True,
                           text=True, timeout=1200, check=False)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    archive = built.stdout.strip().splitlines()[-1]
    loaded = subprocess.run([sys.executable, str(DEVCLUSTER), "load-image", "--name", CLUSTER_NAME, archive],
                            capture_output=True, text=True, timeout=300, check=False)
    assert loaded.returncode == 0, loaded.stdout + loaded.stderr

    config_repo.commit({"flower-syncer.yaml": f"name: in-cluster\ndefaultNamespace: {ns}\n",
                        "federations/train.yaml": federation("subprocess", replicas=2)}, "two SuperNodes")
    token = "e2e-git-token"
    node = real_cluster.node
    server = in_netns(node["netns"], lambda: GitHttpServer(config_repo.bare.parent, token, host=node["node_ip"]))
    server.start()
    helm = str(real_cluster.bin_dir / "helm")
    values = {
        "image.repository": AGENT_IMAGE.rsplit(":", 1)[0], "image.tag": "dev", "image.pullPolicy": "Never",
        "git.repo": f"{server.base_url}/{config_repo.bare.name}", "git.token": token, "git.interval": "3",
        "rbac.namespaces[0]": ns, "rbac.nodes": "false", "grafanaDashboards.enabled": "false",
    }
    sets = [arg for k, v in values.items() for arg in ("--set", f"{k}={v}")]
    env = {**os.environ, "KUBECONFIG": real_cluster.kubeconfig}
    try:
        install = subprocess.run([helm, "install", "fs", str(REPO / "charts" / "flower-syncer"), "-n", ns, *sets,
                                  "--wait", "--timeout", "180s"], capture_output=True, text=True, env=env,
                                 timeout=240, check=False)
        pods = real_cluster.json("-n", ns, "get", "pods", "-l", "app.kubernetes.io/instance=fs")["items"]
        assert install.returncode == 0, (install.stdout + install.stderr)[-3000:] + "\n" + "\n".join(
            real_cluster.logs(ns, p["metadata"]["name"])[-2000:] for p in pods)
        agent_pod = pods[0]["metadata"]["name"]

        def agent_log() -> str:
            return real_cluster.logs(ns, agent_pod)[-3000:]

        # The first sync, from the Git server on the node: real pods, Ready through their probes.
        wait_until("the federation synced by the in-cluster agent",
                   lambda: ready_replicas(real_cluster, ns, "statefulset", "train-supernode-p") == 2,
                   timeout=180, interval=1)
        # A push reaches the cluster at the next poll (every 3 s here).
        config_repo.commit({"federations/train.yaml": federation("subprocess", replicas=3)}, "three")
        try:
            wait_until("the pushed change applied",
                       lambda: ready_replicas(real_cluster, ns, "statefulset", "train-supernode-p") == 3,
                       timeout=120, interval=1)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n--- agent log ---\n{agent_log()}") from None

        # It runs as the chart says: user 65532, read-only root filesystem.
        probe = ["-n", ns, "exec", agent_pod, "--"]
        assert real_cluster.kubectl(*probe, "id", "-u").stdout.strip() == "65532"
        denied = real_cluster.kubectl(*probe, "sh", "-c", "touch /probe", check=False)
        assert "Read-only file system" in denied.stderr, denied
        assert "flower-syncer" in real_cluster.kubectl(*probe, "flower-syncer", "--version").stdout
    finally:
        subprocess.run([helm, "uninstall", "fs", "-n", ns, "--wait", "--timeout", "60s"], capture_output=True,
                       env=env, timeout=120, check=False)
        server.stop()
