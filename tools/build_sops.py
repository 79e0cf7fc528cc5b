#!/usr/bin/env python3
"""Build the pinned `sops` CLI from its Go module into ~/.cache/flower-syncer/sops/<version>/ (once;
later runs find it there). The tests encrypt with the real sops and check that flower-syncer
decrypts what it writes; flower-syncer itself never runs sops. Prints the binary's path.

    python3 tools/build_sops.py          # cold on 2 cores: ~2 min (Go proxy reachable)
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SOPS_VERSION = "v3.10.2"
MODULE = "github.com/getsops/sops/v3/cmd/sops"


def sops_path() -> Path:
    base = Path(os.environ.get("FLOWER_SYNCER_CACHE", Path.home() / ".cache" / "flower-syncer"))
    return base / "sops" / SOPS_VERSION / "sops"


def build() -> Path:
    binary = sops_path()
    stamp = binary.with_name(".build-stamp")
    if binary.exists() and stamp.exists() and stamp.read_text().strip() == f"{MODULE}@{SOPS_VERSION}":
        return binary
    binary.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "GOBIN": str(binary.parent), "GOFLAGS": "-mod=mod", "GOTOOLCHAIN": "local"}
    proc = subprocess.run(["go", "install", f"{MODULE}@{SOPS_VERSION}"], env=env, capture_output=True, text=True,
                          check=False)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout + proc.stderr)
        raise SystemExit(f"building sops {SOPS_VERSION} failed")
    stamp.write_text(f"{MODULE}@{SOPS_VERSION}\n")
    return binary


if __name__ == "__main__":
    print(build())
