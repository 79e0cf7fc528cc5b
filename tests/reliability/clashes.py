"""Config repositories synced once through the engine, for the ownership tests on the local control
plane (ownership clashes, inventory loss): `make_repo`, `write` files into it, `sync` it (with
`selectors`), and the `changes` of a report by object. A helper module, not a test module: tests
import from here, never from each other."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from syncer.cluster.client import Kube
from syncer.engine.sync import SyncReport
from tests import builders


def write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def make_repo(root: Path, name: str, namespace: str, files: dict[str, str]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    write(root, {"flower-syncer.yaml": f"name: {name}\ndefaultNamespace: {namespace}\n", **files})
    return root


def sync(kube: Kube, repo: Path, **opts: Any) -> SyncReport:
    """tests/builders.py's sync with no revision (so no checked revision is recorded)."""
    return builders.sync(kube, repo, revision="", **opts)


def changes(report: SyncReport) -> dict[str, tuple[str, str]]:
    return {str(c.ref): (c.action.value, c.message) for u in report.units for c in u.changes}
