"""Unit ids are unique across the whole repository, every cluster's folder included (syncer.repo.
clusters): an inventory, an object's labels and a status line name a unit by its id alone, so two
definitions of one id would be one unit to every agent that reads them."""

from __future__ import annotations

from syncer.diagnostics import CROSS_CLUSTER, Diagnostic
from syncer.identity import Unit
from syncer.repo.state import LoadedUnit, RepoState


def check_duplicates(state: RepoState) -> set[Unit]:
    """Fail every unit defined twice (both definitions), with an error at the second naming the
    first. Returns the units defined in two clusters' folders (syncer.repo.clusters): their error
    is every cluster's (code CROSS_CLUSTER), so no agent applies or prunes them, nor prunes anything
    else, while it stands; without that, the agent of the first cluster lost its own unit to the
    second's folder and pruned its objects."""
    seen: dict[Unit, LoadedUnit] = {}
    kept: list[LoadedUnit] = []
    crossed: set[Unit] = set()
    for loaded in state.units:
        first = seen.get(loaded.unit)
        if first is None:
            seen[loaded.unit] = loaded
            kept.append(loaded)
            continue
        what = f"{loaded.unit.kind} {loaded.unit.name!r} in namespace {loaded.unit.namespace!r}"
        if first.cluster != loaded.cluster:
            crossed.add(loaded.unit)
            state.diagnostics.append(Diagnostic(
                loaded.source, loaded.line, 1, "metadata.name",
                f"{what} is defined in two clusters' folders, here and in {first.source}:{first.line}: a unit id "
                "names one unit in every cluster, so neither is applied and no cluster's agent prunes anything "
                "until one is renamed (the last applied state stays)",
                "rename one of them (or move it to another namespace); a unit belongs to one cluster's folder",
                unit=loaded.unit.id, code=CROSS_CLUSTER))
        else:
            state.diagnostics.append(Diagnostic(
                loaded.source, loaded.line, 1, "metadata.name", f"{what} is also defined in {first.source}:"
                f"{first.line}", "rename one of them or remove the duplicate", unit=loaded.unit.id))
        state.failed.add(loaded.unit)
    state.units = [u for u in kept if u.unit not in state.failed]
    return crossed
