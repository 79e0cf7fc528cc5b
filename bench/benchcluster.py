"""The cluster a benchmark runs against: the one given with --kubeconfig, or a dedicated local
control plane (state dir ~/.cache/flower-syncer/devcluster/<name>, default `bench`) started for
the run and stopped after it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from syncer.cluster.client import Kube

ROOT = Path(__file__).resolve().parent.parent


def devcluster(*args: str, name: str = "bench") -> str:
    """Runs tools/devcluster.py with the state dir of cluster `name`; returns its stdout."""
    env = {**os.environ, "FLOWER_SYNCER_DEVCLUSTER_DIR": str(Path.home() / ".cache/flower-syncer/devcluster" / name)}
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "devcluster.py"), *args], env=env,
                         capture_output=True, text=True, check=True)
    return out.stdout


@contextmanager
def bench_cluster(kubeconfig: str | None, *up_args: str, keep: bool = False, name: str = "bench") -> Iterator[str]:
    """Yields a kubeconfig path; a cluster started here is stopped and purged afterwards unless `keep`."""
    if kubeconfig is not None:
        yield kubeconfig
        return
    print(f"starting a dedicated local control plane {' '.join(up_args)} ...", file=sys.stderr, flush=True)
    devcluster("up", *up_args, name=name)
    try:
        yield devcluster("kubeconfig", name=name).strip()
    finally:
        if not keep:
            devcluster("down", "--purge", name=name)  # its volumes and state too: nothing left behind


def wait_for_pods(kube: Kube, namespace: str, want: int, timeout: float, interval: float) -> tuple[int, float]:
    """Waits until `namespace` has `want` pods or `timeout` seconds passed; returns how many it
    has and the seconds waited."""
    start = time.perf_counter()
    while True:
        count = len(kube.list("Pod", namespace, metadata_only=True)[0])
        waited = time.perf_counter() - start
        if count >= want or waited > timeout:
            return count, waited
        time.sleep(interval)
