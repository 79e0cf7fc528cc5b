#!/usr/bin/env python3
"""What the admin's `verify` costs per new revision: `GitSource.fetch()` of a new signed commit
with verification (OpenPGP, then SSH) against the same fetch without it, median of N commits.
Real keys (gpg without passphrase in a temporary GNUPGHOME, ssh-keygen -t ed25519), real
`git commit -S`, a local repository. Prints the figures.

    python3 bench/verify_cost.py [N=20]
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from syncer.source.git import GitSource, SourceSpec
from syncer.source.signatures import Verification


def run(cwd: Path, *args: str, env: dict[str, str]) -> str:
    return subprocess.run(list(args), cwd=cwd, env=env, capture_output=True, text=True, check=True).stdout


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    tmp = Path(tempfile.mkdtemp(prefix="fs-vb-"))
    home = tmp / "g"
    home.mkdir(mode=0o700)
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("GIT_")}, "GNUPGHOME": str(home),
           "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_AUTHOR_NAME": "b",
           "GIT_AUTHOR_EMAIL": "b@example.org", "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@example.org"}
    try:
        run(tmp, "gpg", "--batch", "--passphrase", "", "--quick-gen-key", "bench <b@example.org>", "ed25519",
            "sign", "never", env=env)
        fpr = next(line.split(":")[9] for line in run(tmp, "gpg", "--batch", "--with-colons", "--list-keys",
                                                         env=env).splitlines() if line.startswith("fpr:"))
        pgp = run(tmp, "gpg", "--batch", "--armor", "--export", fpr, env=env)
        run(tmp, "ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp / "k"), env=env)
        ssh = (tmp / "k.pub").read_text().strip()
        repo = tmp / "repo"
        repo.mkdir()
        run(repo, "git", "init", "-q", "-b", "main", env=env)
        signing = {"openpgp": ["-c", "gpg.format=openpgp", "-c", f"user.signingkey={fpr}"],
                   "ssh": ["-c", "gpg.format=ssh", "-c", f"user.signingkey={tmp / 'k'}"]}
        keys = {"openpgp": pgp, "ssh": ssh}
        print(f"{n} new commits per case, median ms per fetch of a new revision (load: {os.getloadavg()[0]:.1f})")
        for kind, options in signing.items():
            for verify in (None, Verification("HEAD", (keys[kind],))):
                src = GitSource(SourceSpec(url=str(repo), cache_dir=tmp / f"cache-{kind}-{verify is not None}",
                                           verify=verify))
                times = []
                for i in range(n + 1):
                    (repo / "f.yaml").write_text(f"i: {i}\n")
                    run(repo, "git", "add", "-A", env=env)
                    run(repo, "git", *options, "commit", "-q", "-S", "-m", f"c{i}", env=env)
                    started = time.perf_counter()
                    src.fetch()
                    if i:  # the first is a clone
                        times.append((time.perf_counter() - started) * 1000)
                label = "verified" if verify is not None else "not verified"
                print(f"  {kind:8} {label:13} {statistics.median(times):7.1f} ms")
    finally:
        subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "all"], check=False, capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
