#!/usr/bin/env python3
"""Which of tools/test's cached builds are already in ~/.cache/flower-syncer, so that its per-step
table can say "cached" or "cold" for each. Reads stamps only: builds nothing, needs no root and no
third-party package (it runs before the virtualenv exists).

    python3 tools/buildcache.py      # one line per build: "<step> cached" or "<step> cold"

The steps are tools/test's names: devcluster, sops, cert-manager, images, agent-image, flower-releases.
Each check is the one the build itself makes before deciding to skip, so the answer matches what the
build then does.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import build_cert_manager
import build_sops
import devbuild
import flower_releases
import images


def _sops() -> bool:
    binary = build_sops.sops_path()
    stamp = binary.with_name(".build-stamp")
    return binary.exists() and stamp.exists() and stamp.read_text().strip() == f"{build_sops.MODULE}@" \
        f"{build_sops.SOPS_VERSION}"


def _cert_manager() -> bool:
    stamp = build_cert_manager.home() / ".build-stamp"
    want = f"{build_cert_manager.PACKAGE}@{build_cert_manager.VERSION}"
    return (build_cert_manager.binary_path().exists() and stamp.exists() and stamp.read_text().strip() == want
            and all(p.exists() for p in build_cert_manager.crd_paths()))


CHECKS: dict[str, Callable[[], bool]] = {
    "devcluster": lambda: devbuild.binaries_ready(devbuild.default_bin_dir()),
    "sops": _sops,
    "cert-manager": _cert_manager,
    "images": images.all_cached,
    "agent-image": images.agent_cached,
    "flower-releases": lambda: not flower_releases.missing(),
}


def main() -> int:
    for name, check in CHECKS.items():
        try:
            cached = check()
        except Exception:  # a stamp we cannot read means a build would run: cold
            cached = False
        print(f"{name} {'cached' if cached else 'cold'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
