"""The cluster a benchmark runs against: the one given with --kubeconfig, or a dedicated local
control plane (state dir ~/.cache/flower-syncer/devcluster/<name>, default `bench`) started for
the run and stopped after it."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def devcluster(*args: str, name: str = "bench") -> str:
    """Runs tools/devcluster.py with the state dir of cluster `name`; returns its stdout."""
    env = {**os.environ, "FLOWER_SYNCER_DEVCLUSTER_DIR": str(Path.home() / ".cache/flower-syncer/devcluster" / name)}
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "devcluster.py"), *args], env=env,
                         capture_output=True, text=True, check=True)
    return out.stdout


@contextmanager
def bench_cluster(kubeconfig: str | None, *up_args: str, keep: bool = False, name: str = "bench") -> Iterator[str]:
    """Yields a kubeconfig path; a cluster started here is stopped afterwards unless `keep`."""
    if kubeconfig is not None:
        yield kubeconfig
        return
    print(f"starting a dedicated local control plane {' '.join(up_args)} ...", file=sys.stderr, flush=True)
    devcluster("up", *up_args, name=name)
    try:
        yield devcluster("kubeconfig", name=name).strip()
    finally:
        if not keep:
            devcluster("down", name=name)
