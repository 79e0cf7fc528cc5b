#!/usr/bin/env python3
"""Load + decrypt time of SOPS-encrypted values files, against the same files in plain text.

Makes N SuperNode releases whose values.yaml is encrypted by the real sops CLI (tools/build_sops.py)
for a fresh age key, then times `load_repo` (the loader: read, pre-scan, parse, decrypt, validate)
for the encrypted and the plain repository, best of R rounds. Prints the figures.

    python3 bench/sops_load.py [N=100] [R=5]   (R >= 2)
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pyrage

from syncer.repo.loader import load_repo
from syncer.secrets.keys import Decryption

VALUES = """\
tls:
  enabled: false
supernode:
  replicas: {i}
  node:
    config: {{partition-id: {i}, lr: 0.05, token: secret-token-{i}}}
  env:
    - {{name: API_KEY, value: top-secret-{i}}}
"""


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    sops = Path.home() / ".cache/flower-syncer/sops/v3.10.2/sops"
    identity = pyrage.x25519.Identity.generate()
    with tempfile.TemporaryDirectory() as tmp:
        plain, encrypted = Path(tmp) / "plain", Path(tmp) / "encrypted"
        for repo in (plain, encrypted):
            (repo / "supernodes").mkdir(parents=True)
            (repo / "flower-syncer.yaml").write_text("name: bench\ndefaultNamespace: flower\n")
        for i in range(n):
            text = VALUES.format(i=i)
            for repo in (plain, encrypted):
                (repo / "supernodes" / f"r{i}").mkdir()
            (plain / "supernodes" / f"r{i}" / "values.yaml").write_text(text)
            src = Path(tmp) / "in.yaml"
            src.write_text(text)
            out = subprocess.run([str(sops), "encrypt", "--age", str(identity.to_public()), "--input-type", "yaml",
                                  "--output-type", "yaml", str(src)], capture_output=True, text=True, check=True)
            (encrypted / "supernodes" / f"r{i}" / "values.yaml").write_text(out.stdout)
        keys = Decryption((identity,))

        def timed(repo: Path) -> tuple[float, float]:
            """(first load, best of the loads after it): cold, then with the agent's caches warm, as
            when a new revision changed none of these files."""
            times = []
            for _ in range(rounds):
                start = time.perf_counter()
                state = load_repo(repo, keys)
                times.append(time.perf_counter() - start)
                assert len(state.units) == n and not state.errors, state.errors[:3]
            return times[0], min(times[1:])

        load_repo(plain, keys)  # imports and first-use costs out of the figures
        (p_cold, p_warm), (e_cold, e_warm) = timed(plain), timed(encrypted)
        print(f"{n} releases, {rounds} loads each")
        print(f"  first load:  plain {p_cold * 1000:.1f} ms, encrypted {e_cold * 1000:.1f} ms "
              f"(decrypt {(e_cold - p_cold) / n * 1000:.2f} ms per file)")
        print(f"  unchanged:   plain {p_warm * 1000:.1f} ms, encrypted {e_warm * 1000:.1f} ms "
              f"({(e_warm / p_warm - 1) * 100:+.0f} %; target: at most +10 %)")


if __name__ == "__main__":
    main()
