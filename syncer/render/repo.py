"""Render every loaded unit of a repo, and check what no single unit can: that two units do not
render the same object."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from syncer.diagnostics import Diagnostic
from syncer.models.federation import Federation
from syncer.render.common import Manifest, RenderContext, Unit, object_ref, sort_manifests
from syncer.render.federation import render_federation
from syncer.render.supernode import render_supernode
from syncer.repo.loader import LoadedUnit, RepoState


@dataclass
class Rendered:
    units: dict[Unit, list[Manifest]] = field(default_factory=dict)
    sources: dict[Unit, str] = field(default_factory=dict)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    failed: set[Unit] = field(default_factory=set)

    def manifests(self) -> list[Manifest]:
        """All objects of all units, in apply order."""
        return sort_manifests(m for ms in self.units.values() for m in ms)


def render_unit(loaded: LoadedUnit) -> list[Manifest]:
    ctx = RenderContext(unit=loaded.unit, source=loaded.source)
    if isinstance(loaded.model, Federation):
        return sort_manifests(render_federation(loaded.model, ctx))
    return sort_manifests(render_supernode(loaded.model, loaded.unit.name, ctx))


def select_units(units: list[LoadedUnit], selectors: list[str]) -> tuple[list[LoadedUnit], list[str]]:
    """Units matching any selector: `NAME`, `KIND/NAME` or `KIND/NAMESPACE/NAME`.

    Returns the matches and the selectors that matched nothing."""
    if not selectors:
        return units, []
    chosen: list[LoadedUnit] = []
    unmatched = []
    for sel in selectors:
        hits = [u for u in units if unit_matches(u.unit, sel)]
        if not hits:
            unmatched.append(sel)
        chosen.extend(h for h in hits if h not in chosen)
    return chosen, unmatched


def unit_matches(unit: Unit, selector: str) -> bool:
    parts = selector.split("/")
    if len(parts) == 1:
        return unit.name == parts[0]
    if len(parts) == 2:
        return (unit.kind, unit.name) == (parts[0], parts[1])
    return (unit.kind, unit.namespace, unit.name) == tuple(parts)


@contextmanager
def _no_gc_pauses() -> Iterator[None]:
    """Rendering allocates many small dicts and lists but never a reference cycle, so the cyclic
    garbage collector only costs time here (about two thirds of it); refcounting frees everything."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def render_repo(state: RepoState, selectors: list[str] | None = None) -> Rendered:
    with _no_gc_pauses():
        return _render_repo(state, selectors)


def _render_repo(state: RepoState, selectors: list[str] | None) -> Rendered:
    result = Rendered(failed=set(state.failed))
    owners: dict[str, LoadedUnit] = {}
    units, _ = select_units(state.units, selectors or [])
    for loaded in units:
        manifests = render_unit(loaded)
        clash = next((object_ref(m) for m in manifests if object_ref(m) in owners), None)
        if clash is not None:
            first = owners[clash]
            result.diagnostics.append(Diagnostic(
                loaded.source, loaded.line, 1, "",
                f"{loaded.unit.kind} {loaded.unit.name!r} renders {clash}, which {first.unit.kind} "
                f"{first.unit.name!r} ({first.source}) renders too",
                "rename one of them, or move one to another namespace", unit=loaded.unit.id))
            result.failed.add(loaded.unit)
            continue
        for m in manifests:
            owners[object_ref(m)] = loaded
        result.units[loaded.unit] = manifests
        result.sources[loaded.unit] = loaded.source
    return result
