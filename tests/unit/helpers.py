"""Small helpers shared by the unit tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from syncer.identity import Manifest, Unit
from syncer.models.base import validate_document
from syncer.models.federation import Federation
from syncer.render.common import RenderContext
from syncer.render.federation import render_federation
from syncer.yamldoc import load_documents

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def load_federation(text: str, file: str = "federations/test.yaml") -> tuple[Federation | None, list[Any]]:
    docs, diags = load_documents(text, file)
    assert docs, diags
    model, problems = validate_document(Federation, docs[0])
    return model, diags + problems


def render_federation_text(text: str, namespace: str = "flower") -> dict[tuple[str, str], Manifest]:
    model, diags = load_federation(text)
    assert model is not None, [d.render() for d in diags]
    ctx = RenderContext(Unit("federation", namespace, model.name), "federations/test.yaml")
    return {(m["kind"], m["metadata"]["name"]): m for m in render_federation(model, ctx)}


def container(manifest: Manifest, name: str) -> dict[str, Any]:
    for c in manifest["spec"]["template"]["spec"]["containers"]:
        if c["name"] == name:
            return dict(c)
    raise AssertionError(f"no container {name}")
