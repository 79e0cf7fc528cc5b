"""Every command flower-syncer renders parses with the Flower release it is rendered for.

For each minor release 1.20 ... 1.42 (and the pinned flwr-nightly 1.43.0.dev), the image tags of
config/examples, the operator fixtures (tests/fixtures/operator) and the SuperNode chart's documented
cases (tests/unit/chart_docs.py) are set to that release, the documents are validated and
rendered, and every container command (flower-superlink, flower-supernode, flower-superexec) is
parsed by THAT release's own argparse parser, imported from its wheel (tools/flower_releases.py
caches them: the only step that uses the package registry; this test runs offline). The resulting
matrix is printed and written to <cache>/flower/matrix.md (README.md shows it).

With CI=true a missing cache fails the test instead of skipping it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from syncer.identity import Manifest, Unit
from syncer.models.base import validate_document
from syncer.models.federation import Federation
from syncer.models.flower import flower_interface, parse_version
from syncer.models.supernode import validate_values
from syncer.render.common import RenderContext
from syncer.render.federation import render_federation
from syncer.render.repo import render_repo
from syncer.render.supernode import render_supernode
from syncer.repo.loader import load_repo
from syncer.yamldoc import load_documents
from tests.unit import chart_docs
from tests.unit.helpers import Keys

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))
import flower_releases  # noqa: E402

OPERATOR = REPO / "tests" / "fixtures" / "operator"
EXAMPLES = REPO / "config" / "examples"
CHART_CASES = ["PYTORCH", "TENSORFLOW", "TLS_DEFAULT", "TLS_EXISTING", "TLS_COPY", "NO_TLS", "NODE_AUTH",
               "ALL_IN_ONE", "DISTRIBUTED", "DISTRIBUTED_SUPERNODE", "DISTRIBUTED_SUPEREXEC", "NODE_CONFIG"]
VERSION_IN_TAG = re.compile(r"(?<=[:\s])1\.\d{2}\.\d+(?=[\s\"'@-]|$)", re.MULTILINE)
EXECUTABLES = {"superlink": "flower-superlink", "supernode": "flower-supernode"}


@dataclass
class Command:
    source: str  # e.g. operator/process.yaml StatefulSet/x superexec-serverapp
    exe: str
    args: list[str]


@dataclass
class Release:
    version: str
    commands: list[Command] = field(default_factory=list)
    invalid: list[str] = field(default_factory=list)  # documents validation refuses at this release


def _with_version(text: str, version: str) -> str:
    return VERSION_IN_TAG.sub(version, text)


def _commands(manifests: list[Manifest], source: str) -> list[Command]:
    out = []
    for m in manifests:
        if m["kind"] not in ("StatefulSet", "DaemonSet", "Deployment"):
            continue
        for c in m["spec"]["template"]["spec"]["containers"]:
            exe = "flower-superexec" if c["name"].startswith("superexec") else EXECUTABLES[c["name"]]
            args = list(c.get("args", []))
            if c.get("command", [None])[0] == "/bin/sh":  # the node-config wrapper appends one pair
                args += ["--node-config", "partition-id=0"]
            out.append(Command(f"{source} {m['kind']}/{m['metadata']['name']} {c['name']}", exe, args))
    return out


def _federation(text: str, source: str, release: Release) -> None:
    docs, _ = load_documents(text, source)
    model, problems = validate_document(Federation, docs[0])
    if model is None or any(d.severity == "error" for d in problems):
        release.invalid.append(source)
        return
    ctx = RenderContext(Unit("federation", "flower", model.name), source)
    release.commands += _commands(render_federation(model, ctx), source)


def _chart(text: str, source: str, release: Release) -> None:
    data: dict[str, Any] = yaml.safe_load(text) or {}
    for key in ("supernode", "superexec"):
        image = data.setdefault(key, {}).setdefault("image", {})
        tag = str(image.get("tag", ""))
        suffix = tag.split("-", 1)[1] if "-" in tag and parse_version(tag) else ""
        image["tag"] = f"{release.version}-{suffix}" if suffix else release.version
    docs, _ = load_documents(yaml.safe_dump(data), source)
    model, _ = validate_values(docs[0], "docs")
    if model is None:
        release.invalid.append(source)
        return
    ctx = RenderContext(Unit("supernode", "flower", "docs"), source)
    release.commands += _commands(render_supernode(model, "docs", ctx), source)


def _examples(version: str, tmp: Path, release: Release) -> None:
    root = tmp / f"examples-{version}"
    shutil.copytree(EXAMPLES, root)
    for path in root.rglob("*.yaml"):
        path.write_text(_with_version(path.read_text(), version))
    rendered = render_repo(load_repo(root))
    for unit in sorted(rendered.failed, key=str):
        release.invalid.append(f"examples {unit}")
    for unit, manifests in sorted(rendered.units.items(), key=lambda kv: str(kv[0])):
        release.commands += _commands(list(manifests), f"examples {unit}")


def render_all(version: str, tmp: Path, keys: Keys) -> Release:
    release = Release(version)
    for path in sorted(OPERATOR.glob("*.yaml")):
        _federation(_with_version(path.read_text(), version), f"operator/{path.name}", release)
    for name in CHART_CASES:
        text = keys.node_auth_values() if name == "NODE_AUTH" else getattr(chart_docs, name)
        _chart(text, f"chart-docs/{name}", release)
    _examples(version, tmp, release)
    return release


def parse_with_release(release: Release) -> list[dict[str, Any]]:
    payload = json.dumps([{"exe": c.exe, "args": c.args} for c in release.commands])
    env = {**os.environ, "PYTHONPATH": str(flower_releases.release_dir(release.version))}
    done = subprocess.run([str(flower_releases.deps_python()), str(REPO / "tools" / "flower_parse_commands.py")],
                          input=payload, capture_output=True, text=True, env=env, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout)
    assert out["flwr"].startswith(str(flower_releases.release_dir(release.version))), out["flwr"]
    results: list[dict[str, Any]] = out["results"]
    return results


def era(version: str) -> str:
    iface = flower_interface(parse_version(version))
    if not iface.http_runtime:
        return "gRPC"
    if iface.fleet_transport == "http":
        return "HTTP"
    return "HTTP Runtime" + (" + Control" if iface.control_transport == "http" else "")


@pytest.fixture(scope="module")
def releases() -> None:
    todo = flower_releases.missing()
    if todo:
        message = (f"Flower releases not cached ({', '.join(todo[:4])}{', ...' if len(todo) > 4 else ''}): "
                   "run python3 tools/flower_releases.py fetch")
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)


def test_every_rendered_command_parses_with_its_own_release(releases: None, tmp_path: Path) -> None:
    rows = []
    failures = []
    (tmp_path / "keys").mkdir()
    keys = Keys(tmp_path / "keys")
    rendered = [render_all(v, tmp_path, keys) for v in flower_releases.ALL]
    with ThreadPoolExecutor(max_workers=2) as pool:
        parsed = list(pool.map(parse_with_release, rendered))
    for release, results in zip(rendered, parsed, strict=True):
        counts: dict[str, list[int]] = {}
        deprecated: set[str] = set()
        for command, result in zip(release.commands, results, strict=True):
            if result.get("missing"):  # an image without a version (my-app:latest) beside a 1.20 SuperLink
                continue
            ok, total = counts.setdefault(command.exe, [0, 0])
            counts[command.exe] = [ok + bool(result["ok"]), total + 1]
            deprecated.update(result["deprecated"])
            if not result["ok"]:
                failures.append(f"{release.version}: {command.source}: {command.exe} {' '.join(command.args)}\n"
                                f"    {result['error']}")
        cells = [f"{counts.get(exe, [0, 0])[0]}/{counts.get(exe, [0, 0])[1]}"
                 for exe in ("flower-superlink", "flower-supernode", "flower-superexec")]
        if flower_interface(parse_version(release.version)).http_runtime and deprecated:
            failures.append(f"{release.version}: renders flags its parser calls deprecated: {sorted(deprecated)}")
        rows.append(f"| {release.version} | {era(release.version)} | {' | '.join(cells)} | "
                    f"{len(release.invalid)} | {', '.join(sorted(deprecated)) or '-'} |")
    matrix = "\n".join([
        "| Flower | transport era | flower-superlink | flower-supernode | flower-superexec | documents refused "
        "by validation | deprecated flags rendered |",
        "|---|---|---|---|---|---|---|", *rows])
    (flower_releases.cache_root() / "matrix.md").write_text(matrix + "\n")
    print("\n" + matrix)
    assert failures == [], "\n".join(failures[:40])
    # Refused only where a release lacks what the document uses: flower-superexec (1.21+), and a node-auth
    # key without its public half (the secure-edge example; Flower derives it from 1.23)
    refused = {r.version: r.invalid for r in rendered if r.invalid}
    assert set(refused) <= {"1.20.0", "1.21.0", "1.22.0"}, refused
    assert all(doc.endswith("secure-edge')") for v in ("1.21.0", "1.22.0") for doc in refused.get(v, [])), refused
