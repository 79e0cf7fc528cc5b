"""How far the agent is with the revisions it installed: pure bookkeeping, no I/O.

For each new revision, the units it changed wait for their sync. Two things follow from that:
- commit to applied: when a unit's sync of that revision succeeds, the time since the revision
  reached the agent is the unit's figure; when the last one succeeds, the revision's;
- checked: once every unit of the newest revision has been synced (successfully or not), the
  repository was checked at that revision (the REVISION column of `status`, see
  syncer.engine.checked_revision). A newer revision replaces an older one still in progress.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from syncer.identity import Unit


@dataclass
class _Revision:
    seen_at: float
    unapplied: set[Unit] = field(default_factory=set)  # not yet synced successfully at this revision


class RevisionProgress:
    def __init__(self, *, applied: Callable[[float], None], unit_applied: Callable[[Unit, float], None],
                 checked: Callable[[str], None]) -> None:
        self._applied = applied  # (seconds): every unit of a revision is applied
        self._unit_applied = unit_applied  # (unit, seconds): one unit of a revision is applied
        self._checked = checked  # (revision): the newest revision was synced over every unit it changed
        self._revisions: dict[str, _Revision] = {}
        self._checking: tuple[str, dict[Unit, str]] | None = None

    def installed(self, revision: str, seen_at: float, expected: Mapping[Unit, str]) -> None:
        """`revision` was installed; `expected` maps each unit it changed to the revision its
        sync reports (its own, or an older one when it keeps its last good state)."""
        if expected:
            self._revisions[revision] = _Revision(seen_at, {u for u, r in expected.items() if r == revision})
        self._checking = (revision, dict(expected))
        self._maybe_checked()

    def synced(self, unit: Unit, revision: str, ok: bool, now: float) -> None:
        """A sync of `unit` at `revision` ended."""
        rev = self._revisions.get(revision)
        if ok and rev is not None and unit in rev.unapplied:
            rev.unapplied.discard(unit)
            self._unit_applied(unit, now - rev.seen_at)
            if not rev.unapplied:
                self._applied(now - rev.seen_at)
                del self._revisions[revision]
        if self._checking is not None and self._checking[1].get(unit) == revision:
            del self._checking[1][unit]
            self._maybe_checked()

    def _maybe_checked(self) -> None:
        if self._checking is not None and not self._checking[1]:
            revision = self._checking[0]
            self._checking = None
            self._checked(revision)
