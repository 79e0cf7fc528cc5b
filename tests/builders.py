"""Shared builders for tests: Federation YAML, config repositories on disk, and a sync of one
through the engine on a given API client. A helper module, not a test module: tests import from
here (and from tests/fakekube.py, tests/conftest.py), never from each other."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from syncer.cluster.client import Kube
from syncer.engine.sync import Engine, SyncOptions, SyncReport
from syncer.render.repo import plan_repo, render_repo
from syncer.repo.loader import load_repo

if TYPE_CHECKING:
    from syncer.agent.agent import Agent
    from syncer.identity import Unit

NS = "flower"
# A minimal valid Federation: `FED.format(name=..., pools=..., annotations=...)`, pools from `pool`.
FED = """\
apiVersion: flwr.exalsius.ai/v1
kind: Federation
metadata:
  name: {name}
  annotations: {{{annotations}}}
spec:
  mode: StatefulSet
  isolationMode: subprocess
  superlink:
    image: flwr/superlink:1.25.0
  supernodes:
    image: flwr/supernode:1.25.0
    pools:
{pools}
"""


def pool(name: str, replicas: int = 1) -> str:
    """One entry of `spec.supernodes.pools`, indented for `FED`."""
    return f"      - name: {name}\n        replicas: {replicas}\n        images: {{}}\n"


def federation(name: str = "fed", pools: str = "", annotations: str = "", *, insecure: bool | None = None,
               version: str = "1.25.0") -> str:
    """The text of a Federation `name` with `pools` (default: one pool "a" of one replica), the
    `annotations` (the inside of a flow mapping), `insecure` when given, and the images of Flower
    `version`."""
    text = FED.format(name=name, pools=pools or pool("a"), annotations=annotations)
    if insecure is not None:
        text = text.replace("  isolationMode: subprocess\n",
                            f"  isolationMode: subprocess\n  insecure: {str(insecure).lower()}\n", 1)
    return text.replace(":1.25.0\n", f":{version}\n")


def write(repo: Path, name: str = "fed", pools: str = "", annotations: str = "", repo_name: str = "team") -> Path:
    """A config repository at `repo` (settings named `repo_name`, default namespace NS) with the
    Federation `name` in federations/<name>.yaml; returns `repo`."""
    (repo / "federations").mkdir(parents=True, exist_ok=True)
    (repo / "flower-syncer.yaml").write_text(f"name: {repo_name}\ndefaultNamespace: {NS}\n")
    (repo / "federations" / f"{name}.yaml").write_text(federation(name, pools, annotations))
    return repo


def sync(kube: Kube, repo: Path, **opts: bool) -> SyncReport:
    """Load, render, plan and sync the repository at `repo` once (revision "r1")."""
    state = load_repo(repo)
    return Engine(kube).sync(plan_repo(state, render_repo(state), revision="r1"), SyncOptions(**opts))


def by_kind(manifests: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    """The manifest of `kind` named `name` (fails the test when there is none)."""
    return next(m for m in manifests if m["kind"] == kind and m["metadata"]["name"] == name)


def repo_at(root: Path, files: dict[str, str]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "flower-syncer.yaml").write_text(f"name: team\ndefaultNamespace: {NS}\n")
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def install(agent: Agent, root: Path, revision: str) -> list[Unit]:
    """As the dispatcher does: load with the agent's caches, then install."""
    loaded = agent.revisions.load(root)
    changed = agent._install(loaded.state, loaded.rendered, revision)
    agent.loaded.set()
    return changed
