"""What is a repository's ("ours") and what is a unit's own: the one definition that the engine,
the agent and the CLI use (issue 39, item 3). Pure data and pure functions.

**Ours.** What was recorded (on an inventory, or an object's `flower-syncer.io/repository` label)
- under the repository's name or a former one (`renamedFrom`) is ours, for any unit: taken over
  while the unit is in Git, pruned once it has left;
- under a legacy name (derived before refs were part of derived names) is ours only for a unit
  still in Git: taken over, never pruned by that name;
and only when it was recorded from the repository's own source (or a source unknown on either side,
or a name the admin's policy lets it take over): a name another source uses is not ours.

**A unit's own Secrets.** Those it renders, and those a Certificate it renders has cert-manager
write. Nothing else, whatever a document says: a Secret a Federation names by annotation
(`flower-syncer.io/superlink-tls-secret`) must be one of those, or one the admin lists
(`guardrails.allowedSecrets`, which an admin policy bounds: `listed`); any other is refused with a
diagnostic (render.repo), so an annotation never lets a pod read another application's Secret.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any


@dataclass(frozen=True)
class Ours:
    """Who a repository is, for deciding what is its own in the cluster."""

    repository: str
    former: frozenset[str] = frozenset()
    """Earlier names (`renamedFrom`)."""
    legacy: frozenset[str] = frozenset()
    """Names earlier versions derived for it: ours only for units still in Git."""
    source: str = ""
    """Where it comes from (identity.source_key); "" when unknown."""
    layout_source: str = ""
    """The source as recorded before the repository was laid out by cluster: still ours."""
    movable: frozenset[str] = frozenset()
    """Names the admin's policy lets it take over from another source."""

    @cached_property
    def names(self) -> frozenset[str]:
        """Names whose records are ours for every unit (in Git or gone from it)."""
        return frozenset({self.repository, *self.former})

    @cached_property
    def names_in_git(self) -> frozenset[str]:
        """Names whose records are ours for a unit still in Git (the legacy ones too)."""
        return self.names | self.legacy

    def owns(self, repository: str) -> bool:
        """Whether what `repository` recorded is ours by name (for any unit)."""
        return repository in self.names

    def owns_record(self, repository: str, source: str, *, in_git: bool = False) -> bool:
        """Whether what `repository` recorded from `source` (an inventory) is ours: by name (a
        legacy one only `in_git`), and from our source, or a source unknown on either side, or a
        name the admin lets us take over."""
        if repository not in (self.names_in_git if in_git else self.names):
            return False
        return not source or not self.source or self.own_source(source) or repository in self.movable

    def foreign_source(self, repository: str, source: str) -> bool:
        """Recorded under one of our names by another source that we may not take over."""
        return bool(source and self.source and not self.own_source(source) and repository not in self.movable)

    def own_source(self, source: str) -> bool:
        return source in (self.source, self.layout_source)


def own_secrets(manifests: Iterable[Mapping[str, Any]]) -> set[str]:
    """The unit's own Secrets: those it renders, and those a Certificate it renders writes."""
    names = set()
    for m in manifests:
        if m.get("kind") == "Secret":
            names.add(str(m["metadata"]["name"]))
        elif m.get("kind") == "Certificate":
            spec = m.get("spec")
            name = spec.get("secretName") if isinstance(spec, dict) else None
            if name:
                names.add(str(name))
    return names


def listed(name: str, patterns: Sequence[str]) -> bool:
    """Whether the admin's list (shell patterns: guardrails.allowedSecrets) names the Secret."""
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def secret_is_own_or_listed(name: str, manifests: Iterable[Mapping[str, Any]], patterns: Sequence[str]) -> bool:
    """Whether a pod of the unit may read the Secret `name` that a document names: the unit's own,
    or listed by the admin."""
    return name in own_secrets(manifests) or listed(name, patterns)
