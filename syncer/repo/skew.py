"""Version skew across units: a SuperNode chart release that dials a Federation's SuperLink in the
same repository (matched by the address it dials: the Service `<federation>-superlink`, its
namespace, the Fleet port) must run a Flower that can talk to that SuperLink
(syncer.models.flower.fleet_skew). An error names both files, both versions and the fix.

Runs after the load, over the loaded units; it reads a values file again only to point at the
line of an error (rare), so an unchanged repository still opens no file."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING

from syncer.diagnostics import Diagnostic, FieldPath, Severity, format_path
from syncer.identity import Unit
from syncer.models.federation import Federation
from syncer.models.flower import fleet_skew
from syncer.models.supernode import SuperNodeValues, interface
from syncer.yamldoc import load_documents

if TYPE_CHECKING:
    from syncer.repo.state import LoadedUnit, RepoState

_CLUSTER_SUFFIXES = (".svc.cluster.local", ".svc")


def check_version_skew(state: RepoState) -> None:
    """Append a diagnostic to `state.diagnostics` for each release whose Flower cannot talk to
    the federation SuperLink it dials."""
    # (cluster, namespace, service) -> the federation: a Service name resolves in its own cluster only
    superlinks: dict[tuple[str, str, str], LoadedUnit] = {}
    for loaded in state.units:
        if isinstance(loaded.model, Federation):
            superlinks[(loaded.cluster, loaded.unit.namespace, loaded.model.superlink_name())] = loaded
    if not superlinks:
        return
    failed: set[Unit] = set()
    for loaded in state.units:
        values = loaded.model
        if not isinstance(values, SuperNodeValues) or not values.supernode.enabled:
            continue
        target = service_of(values.supernode.superlink.address, loaded.unit.namespace)
        fed_unit = superlinks.get((loaded.cluster, *target)) if target else None
        if fed_unit is None:
            continue
        fed = fed_unit.model
        assert isinstance(fed, Federation)
        port = values.supernode.superlink.port
        fleet = fed.spec.superlink.service.ports.grpc
        link = fed.flower(fed.spec.superlink.image)
        node = interface(values.supernode.image)
        where = f"{fed_unit.source}:{fed_unit.line}"
        if port != fleet:
            failed.add(loaded.unit)
            state.diagnostics.append(diagnostic_at(
                state.root, loaded.source, loaded.line, ("supernode", "superlink", "port"), loaded.unit.id,
                f"the SuperNodes dial {fed.superlink_name()}:{port}, but the Fleet API of that SuperLink ({where}) "
                f"is on port {fleet}", f"set supernode.superlink.port: {fleet}"))
            continue
        problem = fleet_skew(node, link)
        if not problem:
            continue
        severity: Severity = "warning" if node.assumed or link.assumed else "error"
        if severity == "error":
            failed.add(loaded.unit)  # not shipped: its last applied state stays
        state.diagnostics.append(diagnostic_at(
            state.root, loaded.source, loaded.line, ("supernode", "image", "tag"), loaded.unit.id,
            f"these SuperNodes (Flower {node.label}, image tag {values.supernode.image.tag!r}) cannot talk to the "
            f"SuperLink they dial, federation {fed.name!r} ({where}, Flower {link.label}, {fed.spec.superlink.image}): "
            f"{problem}",
            f"use a SuperNode image of Flower {link.label} (or any release of the same transport era: both before "
            "1.40, or both 1.40 or newer), or move the federation to this release", severity))
    if failed:
        state.failed |= failed
        state.units = [u for u in state.units if u.unit not in failed]


@functools.lru_cache(maxsize=4096)  # pure, asked for every release at every revision (skew and sites)
def service_of(address: str, namespace: str) -> tuple[str, str] | None:
    """(namespace, service) of an in-cluster Service address; None for anything else."""
    host = address.strip().lower().rstrip(".")
    for suffix in _CLUSTER_SUFFIXES:
        if host.endswith(suffix):
            host = host[: -len(suffix)]
            break
    parts = host.split(".")
    if len(parts) == 1:
        return (namespace, parts[0])
    if len(parts) == 2:
        return (parts[1], parts[0])
    return None


def diagnostic_at(root: Path, source: str, fallback_line: int, path: FieldPath, unit: str, message: str, hint: str,
        severity: Severity = "error") -> Diagnostic:
    line, col = fallback_line, 1
    try:
        text = (root / source).read_text()
        docs, _ = load_documents(text, source)
        if docs:
            line, col = docs[0].position(path)
    except (OSError, UnicodeDecodeError, ValueError, KeyError):
        pass
    return Diagnostic(source, line, col, format_path(path), message, hint, severity=severity, unit=unit)
