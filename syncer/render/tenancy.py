"""The admin's policy applied to one loaded repository (see syncer.models.policy).

`apply_policy` narrows the repository's own guardrails to the admin's (a widening is an error
naming the field and the admin's limit, and is left out), refuses a repository `name` or
`renamedFrom` the admin does not allow. The result is a RepoState like any other: render_repo checks
each unit against the effective guardrails (render/control_targets.py: the Control API targets,
where a federation's own SuperLink Service is always allowed), and the plan carries who the
repository is (`Tenancy`). Pure.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from syncer.diagnostics import Diagnostic
from syncer.models.policy import RepositoryPolicy, narrow
from syncer.repo.encrypted import redact_values
from syncer.repo.loader import SETTINGS_FILE
from syncer.repo.state import RepoState


@dataclass(frozen=True)
class Tenancy:
    """Who a repository is, beyond its name, and what the admin lets it do."""

    source: str = ""
    """Where it comes from (identity.source_key: URL or path, ref, sub-path), recorded on its
    inventories: another source claiming the same name does not get its units."""
    policy: RepositoryPolicy | None = None
    """The admin's policy for it; None when the agent runs without one (single-tenant: the
    repository's own guardrails are all there is)."""
    legacy_names: frozenset[str] = frozenset()
    """Names earlier versions derived for it (before the ref was part of the name): units recorded
    under them that the repository still renders are taken over; none is pruned by that name."""

    def status(self) -> dict[str, Any]:
        """Which admin policy bounds the repository, for the agent's status (policy None:
        single-tenant, the repository's own guardrails only)."""
        policy = self.policy
        if policy is None:
            return {"policy": None, "note": "no admin policy: single-tenant, the repository's own guardrails apply"}
        return {"policy": {"source": policy.source, "ref": policy.ref, "path": policy.path},
                "serviceAccount": policy.serviceAccount, "names": policy.names,
                "allowedNamespaces": policy.guardrails.allowedNamespaces,
                "requireEncryption": policy.requireEncryption,
                "verify": ({"mode": policy.verify.mode, "keys": len(policy.verify.publicKeys)}
                           if policy.verify is not None else None)}


def apply_policy(state: RepoState, tenancy: Tenancy | None) -> RepoState:
    """`state` under the admin's policy (the same object when there is none)."""
    if tenancy is None or tenancy.policy is None:
        return state
    policy = tenancy.policy
    settings = state.settings
    diags: list[Diagnostic] = []
    rails, problems = narrow(policy.guardrails, settings.guardrails)
    for field, problem in problems:
        diags.append(Diagnostic(SETTINGS_FILE, 0, 0, field, problem,
                                "ask the cluster's admins to widen the policy, or remove it from flower-syncer.yaml"))
    names = [("name", settings.name)] if settings.name else []
    names += [(f"renamedFrom[{i}]", n) for i, n in enumerate(settings.renamedFrom)]
    refused = [(field, n) for field, n in names if not policy.may_use_name(n)]
    for field, n in refused:
        diags.append(Diagnostic(SETTINGS_FILE, 0, 0, field, f"the admin's policy does not let this repository use "
                                f"the name {n!r} (allowed: {', '.join(policy.names or [])})",
                                "use one of the allowed names, or ask the cluster's admins to allow it"))
    units = list(state.units)
    failed = set(state.failed)
    if refused:  # who the repository is, is in doubt: nothing of it is applied or pruned
        failed |= {u.unit for u in units}
        units = []
    if not diags and rails == settings.guardrails:
        return state
    diags = redact_values(diags, state.secrets)  # they quote what the repository asked for
    return dataclasses.replace(state, settings=settings.model_copy(update={"guardrails": rails}), units=units,
                               failed=failed, diagnostics=[*state.diagnostics, *diags])
