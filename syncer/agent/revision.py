"""Loading a fetched revision for the agent: read the SOPS keys again (a rotated key needs no
restart), then load and render the checkout with the caches kept from the previous revision, so
a commit that changes one file parses, validates and renders one file's units. Dispatcher thread
only."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import structlog

from syncer.cluster.whoami import agent_account
from syncer.diagnostics import primary_first
from syncer.observe.conditions import describe
from syncer.render.flower_targets import FlowerMemo
from syncer.render.repo import RenderCache, Rendered, render_repo
from syncer.render.tenancy import Tenancy, apply_policy
from syncer.repo.loader import LoadCache, load_repo
from syncer.repo.state import RepoState
from syncer.secrets.keys import Decryption, load_identities
from syncer.secrets.sops import SopsError

log = structlog.get_logger("syncer.agent")


@dataclass(frozen=True)
class LoadedRevision:
    state: RepoState
    rendered: Rendered
    parsed: int  # federation files and release folders parsed and validated anew
    reused: int  # ... taken from the previous revision unchanged
    ms: int  # to load and render

    @property
    def errors(self) -> int:
        return sum(1 for d in self.state.diagnostics + self.rendered.diagnostics if d.severity == "error")

    def error_lines(self, limit: int = 20) -> list[str]:
        """The errors for the log, as `file:line: field: message (hint)` (the diagnostics of SOPS
        files carry no secret value), the primary ones of each unit first."""
        errors = sorted((d for d in self.state.diagnostics + self.rendered.diagnostics if d.severity == "error"),
                        key=lambda d: (d.unit, primary_first(d)))
        return [describe(d) for d in errors[:limit]]


class RevisionLoader:
    def __init__(self, key_files: tuple[Path, ...] = (), tenancy: Tenancy | None = None, cluster: str = "") -> None:
        self.key_files = key_files
        self.cluster = cluster  # this cluster's name in a repository of several (syncer.repo.clusters)
        self.tenancy = tenancy  # the admin's policy, applied to every revision
        self._files = LoadCache()
        self._renders = RenderCache()
        self.flower_memo = FlowerMemo()  # for plan_repo: the revisions' Flower-level health targets
        self._agent = agent_account()  # no pod from Git may run as it
        self._loaded: tuple[Path, str] | None = None  # the root and revision of the latest load

    def load(self, root: Path, revision: str = "", *, since: str = "",
             changed: frozenset[str] | None = None) -> LoadedRevision:
        """Load the checkout of `revision` at `root`. `changed` (the paths that differ from the
        revision `since`, as Git says) is used only if the previous load was of `since` at `root`."""
        started = time.monotonic()
        if not (since and self._loaded == (root, since)):
            changed = None
        self._loaded = (root, revision) if revision else None
        policy = self.tenancy.policy if self.tenancy is not None else None
        state = apply_policy(load_repo(root, self.decryption(), self._files, changed, self.cluster,
                                       require_encryption=policy is not None and policy.requireEncryption),
                             self.tenancy)
        rendered = render_repo(state, cache=self._renders, agent=self._agent)
        return LoadedRevision(state, rendered, self._files.misses, self._files.hits,
                              round((time.monotonic() - started) * 1000))

    def decryption(self) -> Decryption:
        """The SOPS keys, read again for every revision. A key file that cannot be read leaves
        encrypted units failing (kept as they are), not the agent."""
        try:
            identities = load_identities(self.key_files)
        except SopsError as exc:
            log.error("cannot read the decryption keys; encrypted files fail to load", error=exc.detail)
            identities = ()
        return Decryption(identities, required=True)
