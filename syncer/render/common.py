"""What every rendered object shares: identity labels, the source annotation, apply order and
serialisation. Pure functions, no I/O."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import yaml

from syncer.identity import (
    ANN_SOURCE,
    Manifest,
    Unit,
    apply_level,
)

# Re-exported for modules that still import them from here; syncer.identity defines them.

T = TypeVar("T")


@dataclass(frozen=True)
class RenderContext:
    unit: Unit
    source: str  # repo-relative path of the file that defines the unit


def clone(value: T) -> T:
    """A copy of a JSON-like tree (dicts, lists, scalars); much faster than copy.deepcopy.

    Renderers copy user-provided sub-trees so no two manifests share a mutable object."""
    if isinstance(value, dict):
        return {k: clone(v) for k, v in value.items()}  # type: ignore[return-value]
    if isinstance(value, list):
        return [clone(v) for v in value]  # type: ignore[return-value]
    return value


def metadata(ctx: RenderContext, name: str, labels: Mapping[str, str] | None = None,
             annotations: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Object metadata: user/derived labels, then our identity labels (which always win)."""
    all_labels = dict(labels or {})
    all_labels.update(ctx.unit.labels())
    all_annotations = dict(annotations or {})
    all_annotations[ANN_SOURCE] = ctx.source
    return {
        "name": name,
        "namespace": ctx.unit.namespace,
        "labels": all_labels,
        "annotations": all_annotations,
    }


def object_key(m: Manifest) -> tuple[int, str, str, str]:
    meta = m["metadata"]
    return apply_level(m["kind"]), m["kind"], meta.get("namespace", ""), meta["name"]


def sort_manifests(manifests: Iterable[Manifest]) -> list[Manifest]:
    return sorted(manifests, key=object_key)


def object_ref(m: Manifest) -> str:
    meta = m["metadata"]
    ns = meta.get("namespace")
    return f"{m['kind']}/{ns}/{meta['name']}" if ns else f"{m['kind']}/{meta['name']}"


_BaseDumper: type[yaml.SafeDumper] = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class _Dumper(_BaseDumper):  # type: ignore[valid-type,misc]
    """Block style, multi-line strings as literal blocks, no aliases."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _str_representer(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    if "\n" in data:
        return dumper.represent_scalar("tag:yaml.org,2002:str", data, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", data)


_Dumper.add_representer(str, _str_representer)


def to_yaml(manifests: Iterable[Manifest]) -> str:
    """A multi-document YAML stream; keys sorted, so output is byte-identical run to run."""
    docs = [yaml.dump(m, Dumper=_Dumper, sort_keys=True, default_flow_style=False, width=1 << 16,
                      allow_unicode=True) for m in manifests]
    return "".join("---\n" + d for d in docs)


def to_json(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n"

