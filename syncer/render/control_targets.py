"""Control API targets: where a federation may register SuperNode keys.

A Federation with SuperNode authentication has its keys registered at a Control API. By default
that is its own SuperLink Service (`<fed>-superlink.<ns>.svc` at the Control port of its Flower
release), the only target a repository can name by itself: the annotation
`flower-syncer.io/control-api-address` may point elsewhere only where the cluster's admins allow
it (`allowed`, patterns such as `*.flower.example.com:9093` or `127.0.0.1:*`: the guardrail
`allowedControlApiTargets`, which an admin policy narrows, so Git alone cannot widen it where the
agent runs with one; render.tenancy). Otherwise a repository could aim the agent's TLS client at another
team's SuperLink (and wipe or add keys there) or at any host and port.

Two federations of one repository on one Control API target would each take the other's keys
for strays: that is a validation error naming both files, and neither registers keys.
"""

from __future__ import annotations

from collections.abc import Sequence

from syncer.diagnostics import Diagnostic, format_path
from syncer.identity import Unit
from syncer.models.federation import Federation
from syncer.models.nodeauth import (
    ANN_CONTROL_API_ADDRESS,
    control_address_problem,
    control_target_allowed,
)
from syncer.repo.state import LoadedUnit, RepoState

AT = format_path(("metadata", "annotations", ANN_CONTROL_API_ADDRESS))


def control_target_diagnostics(state: RepoState, allowed: Sequence[str] = ()) -> tuple[list[Diagnostic], set[Unit]]:
    """Diagnostics for Control API targets a federation may not use, and the units they fail."""
    diagnostics: list[Diagnostic] = []
    failed: set[Unit] = set()
    by_target: dict[str, list[LoadedUnit]] = {}
    for loaded in state.units:
        fed = loaded.model
        if not isinstance(fed, Federation) or not fed.supernode_auth or fed.spec.insecure:
            continue
        namespace = loaded.unit.namespace
        address = fed.control_api_address(namespace)
        if control_address_problem(address):
            continue  # the model's own validation reported it, and the unit did not load
        own = fed.own_control_targets(namespace)
        if not control_target_allowed(address, own, allowed):
            diagnostics.append(Diagnostic(
                loaded.source, loaded.line, 1, AT,
                f"the Control API target {address!r} is not this federation's own SuperLink Service ({own[1]}) "
                "and the cluster's admins allow no other target like it: flower-syncer registers SuperNode keys "
                "only where the admin policy allows",
                f"remove {ANN_CONTROL_API_ADDRESS} to use {own[1]}, or ask the cluster's admins to allow this "
                "target in their policy (allowedControlApiTargets)", unit=loaded.unit.id))
            failed.add(loaded.unit)
            continue
        by_target.setdefault(address.lower(), []).append(loaded)
    for address, users in sorted(by_target.items()):
        if len(users) < 2:
            continue
        for loaded in users:
            others = ", ".join(f"{o.unit.name!r} ({o.source})" for o in users if o is not loaded)
            diagnostics.append(Diagnostic(
                loaded.source, loaded.line, 1, AT,
                f"federation {loaded.unit.name!r} registers SuperNode keys at the Control API {address!r}, and so "
                f"does federation {others}: each would see the other's keys on one SuperLink",
                "give each federation its own SuperLink (remove the annotation, or point it at the right one)",
                unit=loaded.unit.id))
            failed.add(loaded.unit)
    return diagnostics, failed
