"""`devcluster down --purge` (tools/devlifecycle.py, tools/devutil.py): a stopped cluster's folder
goes whole, a real node's containerd and kubelet folders with it, but never through a mount a
container left behind (the removal would follow it into the host's own files)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import IN_CI

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import devlifecycle


def stopped_cluster(root: Path) -> Path:
    folder = root / "c"
    for sub in ("pki", "logs", "flexvolume", "node-0/containerd", "node-0/kubelet"):
        (folder / sub).mkdir(parents=True)
    (folder / ".lock").touch()
    (folder / "kubeconfig").touch()
    return folder


def test_purge_removes_the_whole_folder_of_a_stopped_cluster(tmp_path: Path) -> None:
    folder = stopped_cluster(tmp_path)
    devlifecycle.Cluster(folder, tmp_path / "bin").down(purge=True)
    assert not folder.exists()


def test_purge_never_follows_a_mount_left_under_a_real_node(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        if IN_CI:
            pytest.fail("CI runs as root: bind mounts are needed for this test")
        pytest.skip("needs root for a bind mount")
    folder = stopped_cluster(tmp_path)
    host = tmp_path / "host"
    host.mkdir()
    (host / "precious").write_text("the host's own file")
    rootfs = folder / "node-0" / "rootfs"
    rootfs.mkdir()
    subprocess.run(["mount", "--bind", str(host), str(rootfs)], check=True)
    try:
        devlifecycle.Cluster(folder, tmp_path / "bin").down(purge=True)
        assert (host / "precious").read_text() == "the host's own file"
        assert rootfs.is_dir() and not (folder / "pki").exists()
    finally:
        subprocess.run(["umount", str(rootfs)], check=True)
