"""Helpers shared by the devcluster tools (devcluster.py, realnode.py, images.py): standard library only."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol


class ClusterCredentials(Protocol):
    """What a node of the cluster (realnode.py) needs from the cluster (devcluster.Cluster): its PKI
    directory, a leaf certificate signed by its CA, and a kubeconfig for a user."""

    @property
    def pki(self) -> Path: ...

    def leaf(self, name: str, subject: str, usage: str, sans: list[str], ca: str = "ca") -> None: ...

    def write_kubeconfig(self, path: Path, user: str, port: int, host: str = "127.0.0.1") -> None: ...


class DevclusterError(Exception):
    """A failure with a message meant for the user (no traceback needed)."""


def log(msg: str) -> None:
    print(msg, flush=True)


def fmt_secs(seconds: float) -> str:
    if seconds >= 60:
        return f"{int(seconds // 60)}m{seconds % 60:04.1f}s"
    return f"{seconds:.1f}s"


@contextlib.contextmanager
def step(title: str) -> Iterator[None]:
    """Print a progress line before and the elapsed time after a step."""
    log(f"==> {title}")
    start = time.monotonic()
    yield
    log(f"    done in {fmt_secs(time.monotonic() - start)}")


def cache_root() -> Path:
    return Path(os.environ.get("FLOWER_SYNCER_CACHE", "~/.cache/flower-syncer")).expanduser()


def ensure_apt_packages(commands: dict[str, str]) -> None:
    """Install Debian packages for missing commands ({command: package}), idempotently."""
    missing = sorted({pkg for cmd, pkg in commands.items() if shutil.which(cmd) is None})
    if not missing:
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise DevclusterError(f"missing commands; please install the packages: {' '.join(missing)}")
    with step(f"apt-get install {' '.join(missing)}"):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *missing]):
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                raise DevclusterError(f"{' '.join(cmd)} failed:\n{proc.stdout}{proc.stderr}")


def purge_cluster_files(state_dir: Path, volumes: Path) -> None:
    """`devcluster down --purge` of a stopped cluster: its certificates, logs, kwok and volume state,
    kubeconfigs, the controller-manager's flexvolume folder and each real node's folder (containerd,
    kubelet, pod logs)."""
    for folder in (state_dir / "pki", state_dir / "logs", state_dir / "kwok", volumes, state_dir / "flexvolume"):
        shutil.rmtree(folder, ignore_errors=True)
    (state_dir / "audit-policy.yaml").unlink(missing_ok=True)
    for f in state_dir.glob("*kubeconfig"):
        f.unlink()
    for node in state_dir.glob("node-*"):
        if node.is_dir():
            remove_unless_mounted(node)


def drop_if_only_lock(state_dir: Path) -> None:
    """Remove a cluster's folder when nothing but its lock file is left in it."""
    with contextlib.suppress(OSError):
        if {p.name for p in state_dir.iterdir()} <= {".lock"}:
            (state_dir / ".lock").unlink(missing_ok=True)
            state_dir.rmdir()


def remove_unless_mounted(folder: Path) -> None:
    """Remove `folder` unless something is still mounted under it (a container's bind mount would
    lead the removal into the host's own files): then it stays, and says so."""
    prefix = str(folder.resolve())
    try:
        mounts = [line.split()[1].replace("\\040", " ") for line in Path("/proc/self/mounts").read_text().splitlines()]
    except OSError:
        mounts = [prefix]  # cannot tell: keep it
    if any(m == prefix or m.startswith(prefix + "/") for m in mounts):
        log(f"warning: {folder} kept: something is still mounted under it")
        return
    shutil.rmtree(folder, ignore_errors=True)
