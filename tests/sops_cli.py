"""The real `sops` CLI for tests (built by tools/build_sops.py; missing: skipped, or failed with
CI=true): `sops_encrypt` a document for age recipients, `new_key` an age identity, and `SECRET`, a
Secret manifest with a value to encrypt. Shared by the SOPS corpus, the agent's SOPS tests and
node authentication's. A helper module, not a test module: tests import from here, never from
each other."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.builders import secret_manifest

SECRET = secret_manifest("hunter2-very-secret")


def sops_binary() -> str:
    cache = Path(os.environ.get("FLOWER_SYNCER_CACHE") or Path.home() / ".cache" / "flower-syncer")
    path = Path(os.environ.get("FLOWER_SYNCER_SOPS") or cache / "sops" / "v3.10.2" / "sops")
    if not path.exists():
        if os.environ.get("CI") == "true":
            pytest.fail(f"the sops CLI is missing ({path}): tools/test builds it with tools/build_sops.py")
        pytest.skip("sops not built: run python3 tools/build_sops.py")
    return str(path)


def new_key(path: Path) -> str:
    import pyrage

    identity = pyrage.x25519.Identity.generate()
    path.write_text(f"# public key: {identity.to_public()}\n{identity}\n")
    return str(identity.to_public())


def sops_encrypt(text: str, tmp: Path, *recipients: str, args: tuple[str, ...] = (),
                 config: Path | None = None) -> str:
    """`sops encrypt` of `text` for the age recipients (or the creation rule of `config`)."""
    src = tmp / f"plain-{len(list(tmp.iterdir()))}.yaml"
    src.write_text(text)
    head = ["--config", str(config), "encrypt"] if config else ["encrypt", "--age", ",".join(recipients)]
    proc = subprocess.run([sops_binary(), *head, *args, "--input-type", "yaml", "--output-type", "yaml", str(src)],
                          capture_output=True, text=True, check=False,
                          env={**os.environ, "SOPS_AGE_KEY_FILE": "/nonexistent"})
    assert proc.returncode == 0, proc.stderr
    src.unlink()
    return proc.stdout
