"""Every manifest we render validates against the official Kubernetes OpenAPI schema (strict: no
unknown fields), for the example repo and for every operator README example."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from syncer.models.k8s import kubernetes_schema_version
from syncer.render.repo import render_repo
from syncer.repo.loader import load_repo
from tests.unit.helpers import FIXTURES, render_federation_text

REPO = Path(__file__).resolve().parents[2]
K8S = kubernetes_schema_version()


def _validate(manifest: dict[str, Any]) -> None:
    try:
        kubernetes_validate.validate(manifest, K8S, strict=True)
    except kubernetes_validate.ValidationError as exc:
        ref = f"{manifest['kind']}/{manifest['metadata']['name']}"
        raise AssertionError(f"{ref}: {exc.message} at {list(exc.path)}") from None


def test_example_repo_renders_schema_valid_objects() -> None:
    state = load_repo(REPO / "config" / "examples")
    assert not state.errors, [d.render() for d in state.errors]
    manifests = render_repo(state).manifests()
    kinds = {m["kind"] for m in manifests}
    assert {"StatefulSet", "DaemonSet", "Deployment", "Service", "ServiceAccount", "NetworkPolicy",
            "Secret"} <= kinds
    for m in manifests:
        _validate(m)


@pytest.mark.parametrize("path", sorted((FIXTURES / "operator").glob("*.yaml")), ids=lambda p: p.stem)
def test_operator_examples_render_schema_valid_objects(path: Path) -> None:
    for m in render_federation_text(path.read_text()).values():
        _validate(m)
