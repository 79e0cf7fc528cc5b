"""The admin's policy: what a repository may do, set where only the cluster's admins write.

The agent reads it from a file (`--policy FILE`; the chart renders it from its values into a
ConfigMap of the agent's namespace, which tenants cannot edit). Each entry of `repositories`
matches repositories by where they come from (shell patterns on the source URL without
credentials, the ref and the sub-path, as Argo CD's AppProject `sourceRepos` do, both sides in
one spelling first: models/policymatch.py); the first that matches applies, else `default`. An entry says:

- `guardrails`: the limits (allowed namespaces, pod features, ...), in the very schema of the
  repository's own `guardrails`; the repository's `flower-syncer.yaml` can only narrow them;
- `names`: the repository names it may claim (`name`) and take over (`renamedFrom`) even when
  another source recorded them; unset: any name no other source uses;
- `serviceAccount`: `namespace/name` of the ServiceAccount the agent impersonates for every write
  of this repository (Flux's `serviceAccountName`), so the API server's RBAC is the boundary;
- `verify`: the signatures its revisions must carry (models/verify.py): nothing else is applied;
- `requireEncryption`: Secrets in Git must be SOPS-encrypted (the repository cannot turn it off).

Pure data and pure functions: no I/O.
"""

from __future__ import annotations

import fnmatch
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, field_validator

from syncer.models.base import StrictModel
from syncer.models.durations import OFF, duration_problem, parse_duration
from syncer.models.k8s import Issue
from syncer.models.names import name_problem
from syncer.models.policymatch import canonical_path, canonical_source, refs_match
from syncer.models.settings import PROTECTED_NAMESPACES, Guardrails
from syncer.models.verify import CommitVerification

_WILDCARDS = frozenset("*?[")


class HoldLimits(StrictModel):
    """The admin's bounds on rollouts that wait for training (engine.holds): the wait when Git
    names none, and the longest Git may ask for (a longer one is cut to it)."""

    default: str = "1h"
    """How long a change that restarts pods waits for the federation's runs to end when Git names no
    `flower-syncer.io/hold-for-runs` (a duration such as `30m`, or `off`: never held)."""
    maximum: str = "24h"
    """The longest wait Git may ask for; a longer one is cut to it (`off`: nothing is held)."""

    @field_validator("default", "maximum")
    @classmethod
    def _duration(cls, value: str) -> str:
        problem = duration_problem(value, allow_off=True)
        if problem:
            raise ValueError(problem)
        return value

    def seconds(self) -> tuple[float, float]:
        """(default, maximum) in seconds; "off" is 0."""
        return _seconds(self.default), _seconds(self.maximum)


def _seconds(text: str) -> float:
    return 0.0 if text.strip().lower() in OFF else parse_duration(text) or 0.0


class RepositoryPolicy(StrictModel):
    """What the repositories this entry matches may do."""

    source: str = "*"
    """Shell pattern on the repository's source (its URL without credentials, or its local path)."""
    ref: str = "*"
    """Shell pattern on the ref the agent syncs ("" when it syncs the remote's default branch)."""
    path: str = "*"
    """Shell pattern on the sub-path of the config in the repository ("" for the root)."""
    guardrails: Guardrails = Guardrails()
    """The admin's limits; the repository's own `guardrails` can only narrow them."""
    names: list[str] | None = None
    """Repository names (shell patterns) this repository may use as `name` and `renamedFrom`, and
    take over from another source. Unset: any name that no other source uses."""
    serviceAccount: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9.-]*/[a-z0-9][a-z0-9.-]*$")] | None = None
    """`namespace/name` of the ServiceAccount every write of this repository is made as."""
    verify: CommitVerification | None = None
    """Apply only revisions signed by one of these keys (OpenPGP or SSH); unset: any revision."""
    requireEncryption: bool = False
    """Secrets and node-auth private keys must come from SOPS-encrypted files, whatever the
    repository's flower-syncer.yaml says."""
    holds: HoldLimits = Field(default_factory=HoldLimits)
    """How long a change that restarts pods may wait for Flower runs to end (docs/rollouts.md)."""

    def matches(self, source: str, ref: str, path: str) -> bool:
        """Whether the entry's patterns match, both sides in one spelling (models/policymatch.py):
        another spelling of the same repository, ref or folder never falls through to a later entry."""
        return (fnmatch.fnmatchcase(canonical_source(source), canonical_source(self.source))
                and refs_match(ref, self.ref)
                and fnmatch.fnmatchcase(canonical_path(path), canonical_path(self.path)))

    def may_use_name(self, name: str) -> bool:
        return self.names is None or any(fnmatch.fnmatchcase(name, p) for p in self.names)

    def may_take_over(self, name: str) -> bool:
        """Whether units another source recorded under `name` may be taken over (the admin listed it)."""
        return self.names is not None and any(fnmatch.fnmatchcase(name, p) for p in self.names)

    @property
    def impersonate(self) -> str | None:
        """The user the API server sees for this repository's writes."""
        if self.serviceAccount is None:
            return None
        ns, name = self.serviceAccount.split("/", 1)
        return f"system:serviceaccount:{ns}:{name}"


class AdminPolicy(StrictModel):
    """`--policy FILE`."""

    apiVersion: Literal["flower-syncer.io/v1"] = "flower-syncer.io/v1"
    kind: Literal["Policy"] = "Policy"
    default: RepositoryPolicy = RepositoryPolicy()
    """For repositories no entry of `repositories` matches."""
    repositories: list[RepositoryPolicy] = []
    """Entries tried in order against each repository's source, ref and path: the first match applies."""

    field_hints: ClassVar[dict[str, str]] = {"serviceAccount": "namespace/name of a ServiceAccount"}

    def for_source(self, source: str, ref: str = "", path: str = "") -> RepositoryPolicy:
        return next((p for p in self.repositories if p.matches(source, ref or "", path or "")), self.default)

    def entry_name(self, entry: RepositoryPolicy) -> str:
        """`repositories[i]` or `default`: where `entry` is in the file."""
        return next((f"repositories[{i}]" for i, e in enumerate(self.repositories) if e is entry), "default")

    def semantic_issues(self) -> list[Issue]:
        issues = []
        for where, entry in [(("default",), self.default),
                             *((("repositories", i), e) for i, e in enumerate(self.repositories))]:
            for j, name in enumerate(entry.names or []):
                if not _WILDCARDS & set(name) and name_problem(name, "repository name"):
                    issues.append(Issue((*where, "names", j), str(name_problem(name, "repository name")),
                                        "use a DNS-style name or a shell pattern"))
            if entry.verify is not None:
                issues += entry.verify.key_issues((*where, "verify"))
        return issues


def pattern_within(entry: str, limits: list[str]) -> bool:
    """Whether every namespace the pattern `entry` matches is matched by one of `limits`
    (conservative: a pattern with `*` is within a limit only when the limit, read with its own
    `*`, matches the entry's text and uses no `?` or `[...]`)."""
    if not _WILDCARDS & set(entry):
        return any(fnmatch.fnmatchcase(entry, limit) for limit in limits)
    return any(not ({"?", "["} & set(limit)) and fnmatch.fnmatchcase(entry, limit) for limit in limits)


def narrow(admin: Guardrails, repo: Guardrails) -> tuple[Guardrails, list[tuple[str, str]]]:
    """The repository's guardrails within the admin's: for each field the repository set, what it
    asks inside the admin's limit (an intersection); each part outside it is a (field, problem)
    pair naming the admin's limit, and is left out. Fields the repository did not set are the
    admin's. List fields this function does not know (added later) are intersected as sets; any
    other field set by the repository must equal the admin's."""
    problems: list[tuple[str, str]] = []
    values: dict[str, Any] = admin.model_dump()
    for name in sorted(repo.model_fields_set):
        ours, theirs = getattr(repo, name), getattr(admin, name)
        if name == "allowedNamespaces":
            values[name] = _narrow_namespaces(ours, admin, problems)
        elif isinstance(ours, list):
            limit = set(theirs or ())  # unset by the admin: nothing beyond the default is delegated
            # a pattern of the repository is within the admin's only if everything it matches is
            # (team-* is not within team-?): the same rule as for namespaces
            wider = [v for v in ours if v not in limit
                     and not (isinstance(v, str) and pattern_within(v, [str(t) for t in limit]))]
            for value in wider:
                problems.append((f"guardrails.{name}", f"{value!r} is beyond the admin's limit "
                                 f"({_listing(theirs)}); the admin's policy decides it, not the repository"))
            values[name] = [v for v in ours if v not in wider]
        elif ours is None:
            continue  # unset: the admin's
        elif ours != theirs and not _narrower(name, ours, theirs):
            problems.append((f"guardrails.{name}", f"{ours!r} is not the admin's {theirs!r}; only the admin's "
                             "policy may change it"))
        else:
            values[name] = ours
    return Guardrails.model_validate(values), problems


_LEVELS: dict[str, tuple[Any, ...]] = {  # stricter later
    "podSecurity": ("privileged", "baseline", "restricted"),
    "networkPolicies": ("optional", "required"),
    "allowInsecureExposure": (True, False),
}


def _narrower(name: str, ours: Any, theirs: Any) -> bool:
    order = _LEVELS.get(name)
    if order is None or ours not in order:
        return False
    return theirs not in order or order.index(ours) >= order.index(theirs)


def _narrow_namespaces(ours: list[str] | None, admin: Guardrails, problems: list[tuple[str, str]]) -> list[str] | None:
    if ours is None:
        return admin.allowedNamespaces
    kept = []
    for entry in ours:
        limits = admin.allowedNamespaces
        if limits is None:  # the admin's default: any namespace but the cluster's own
            within = not any(fnmatch.fnmatchcase(p, entry) for p in PROTECTED_NAMESPACES)
        else:
            within = pattern_within(entry, limits)
        if within:
            kept.append(entry)
        else:
            unset = "any but " + ", ".join(PROTECTED_NAMESPACES)
            problems.append(("guardrails.allowedNamespaces", f"{entry!r} is beyond the admin's limit "
                             f"({_listing(admin.allowedNamespaces, unset)}); "
                             "the admin's policy decides it, not the repository"))
    return kept


def _listing(values: list[str] | None, unset: str = "unset") -> str:
    if values is None:
        return unset
    return ", ".join(map(str, values)) if values else "none"
