"""A Flower 1.35+ SuperLink, and a chart release's SuperNode, get a startup probe on GET /health:
liveness starts only once the API has answered, so a container that needs over a minute to start
on a loaded node (66 s seen on the e2e real node) is not restarted for ever."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from syncer.render.repo import render_repo
from syncer.repo.loader import load_repo
from tests.builders import federation, pool


def _superlink(tmp_path: Path, version: str) -> dict[str, Any]:
    (tmp_path / "federations").mkdir()
    (tmp_path / "flower-syncer.yaml").write_text("name: t\ndefaultNamespace: ns\n")
    (tmp_path / "federations" / "fed.yaml").write_text(federation(pools=pool("p"), version=version))
    rendered = render_repo(load_repo(tmp_path))
    manifests = [m for unit in rendered.units.values() for m in unit]
    sts = next(m for m in manifests if m["kind"] == "StatefulSet" and m["metadata"]["name"] == "fed-superlink")
    return next(c for c in sts["spec"]["template"]["spec"]["containers"] if c["name"] == "superlink")


def test_a_1_42_superlink_is_probed_for_liveness_only_after_it_started(tmp_path: Path) -> None:
    container = _superlink(tmp_path, "1.42.0")
    startup = container["startupProbe"]
    assert startup["httpGet"] == container["livenessProbe"]["httpGet"] == {"path": "/health", "port": 8000,
                                                                           "scheme": "HTTP"}
    assert startup["failureThreshold"] * startup["periodSeconds"] >= 300


def test_a_1_42_chart_supernode_is_probed_for_liveness_only_after_it_started(tmp_path: Path) -> None:
    (tmp_path / "supernodes" / "edge").mkdir(parents=True)
    (tmp_path / "flower-syncer.yaml").write_text("name: t\ndefaultNamespace: ns\n")
    (tmp_path / "supernodes" / "edge" / "values.yaml").write_text(
        "tls:\n  enabled: false\nsupernode:\n  superlink:\n    address: hub-superlink\n    port: 9092\n"
        "  image:\n    registry: docker.io\n    repository: flwr/supernode\n    tag: 1.42.0\n")
    rendered = render_repo(load_repo(tmp_path))
    (deployment,) = [m for unit in rendered.units.values() for m in unit if m["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["startupProbe"]["httpGet"] == container["livenessProbe"]["httpGet"]
    assert container["startupProbe"]["failureThreshold"] * container["startupProbe"]["periodSeconds"] >= 300
