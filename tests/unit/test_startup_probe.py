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


def test_liveness_never_restarts_a_busy_flower_process_only_a_stuck_one() -> None:
    """A busy process (a round on a loaded node) answers its health check late; a stuck one never
    does. Every Flower container of a federation, in both transport eras, waits 10 s for an answer
    and is restarted only after a minute without one; readiness keeps reacting within seconds."""
    from tests.unit.helpers import render_federation_text

    for version in ("1.26.0", "1.42.0"):
        text = federation(pools=pool("p", extra=f"        images: {{superexecClientApp: flwr/superexec:{version}}}\n")
                          .replace("        images: {}\n", ""), version=version, isolation="process",
                          superlink=f"    superexecImage: flwr/superexec:{version}\n")
        for manifest in render_federation_text(text).values():
            if manifest["kind"] not in ("StatefulSet", "DaemonSet"):
                continue
            for container in manifest["spec"]["template"]["spec"]["containers"]:
                live, ready = container["livenessProbe"], container["readinessProbe"]
                assert live["timeoutSeconds"] >= 10, (version, container["name"], live)
                assert live["failureThreshold"] * live["periodSeconds"] >= 60, (version, container["name"])
                assert ready["timeoutSeconds"] == 1
