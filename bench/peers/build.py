#!/usr/bin/env python3
"""Build the Flux peer (bench/peers/fluxapply: fluxcd/pkg/ssa v0.78.0, pinned with go.sum) into
~/.cache/flower-syncer/peers/<digest>/fluxapply, once; the digest covers go.mod, go.sum and the
sources, so an edit rebuilds. Prints the binary's path.

    python3 bench/peers/build.py      # cold on 2 cores: ~4 min (Go proxy reachable)
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _digest() -> str:
    h = hashlib.sha256()
    for path in sorted([HERE / "go.mod", HERE / "go.sum", *HERE.glob("fluxapply/*.go")]):
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:16]


def binary_path() -> Path:
    base = Path(os.environ.get("FLOWER_SYNCER_CACHE", Path.home() / ".cache" / "flower-syncer"))
    return base / "peers" / _digest() / "fluxapply"


def build() -> Path:
    binary = binary_path()
    if binary.exists():
        return binary
    binary.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "GOFLAGS": "-mod=readonly", "GOTOOLCHAIN": "local", "CGO_ENABLED": "0"}
    partial = binary.with_suffix(".partial")
    proc = subprocess.run(["go", "build", "-trimpath", "-o", str(partial), "./fluxapply"], cwd=HERE, env=env,
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout + proc.stderr)
        raise SystemExit("building bench/peers/fluxapply failed")
    partial.rename(binary)
    return binary


if __name__ == "__main__":
    print(build())
