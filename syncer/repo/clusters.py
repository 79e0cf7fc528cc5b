"""One repository for several clusters, laid out as Flux users lay out fleets:

    clusters/<name>/federations/**/*.yaml
    clusters/<name>/supernodes/<release>/values.yaml ...

Each cluster's flower-syncer is told its name (`--cluster NAME`); it loads and checks the whole
repository (a site's release is checked against the hub's Federation: syncer.repo.sites), and
applies, prunes and reports only its own cluster's units. The units of other clusters end up in
`RepoState.elsewhere`, their files' diagnostics in `RepoState.elsewhere_diagnostics`, and their
failures are not this cluster's. A repository without a `clusters/` folder has no layout: every
unit is the agent's, whatever `--cluster` says. Unit ids stay unique across the whole repository
(an inventory and a status line name a unit by its id alone).
"""

from __future__ import annotations

from pathlib import Path

from syncer.diagnostics import CROSS_CLUSTER, Diagnostic
from syncer.identity import Unit
from syncer.models.names import name_problem
from syncer.repo.state import RepoState

CLUSTERS_DIR = "clusters"


def layout(root: Path) -> list[str] | None:
    """The cluster folders under `clusters/` (names, sorted, hidden ones left out), or None when
    the repository has no `clusters/` folder."""
    folder = root / CLUSTERS_DIR
    if not folder.is_dir():
        return None
    return sorted(p.name for p in folder.iterdir() if not p.name.startswith(".") and p.is_dir())


def cluster_problem(name: str) -> str | None:
    return name_problem(name, "cluster name")


def cluster_of_path(rel: str) -> str | None:
    """The cluster a repository-relative path belongs to (`clusters/<name>/...`), else None."""
    parts = rel.split("/", 2)
    return parts[1] if len(parts) >= 3 and parts[0] == CLUSTERS_DIR else None


def split(state: RepoState, homes: dict[Unit, str]) -> None:
    """Keep in `state` only what the cluster of this load applies and reports: the units, failures
    and diagnostics of other clusters move to `elsewhere` (`homes`: each unit's cluster, loaded or
    failed; "" = this load's). Nothing moves for a whole-repository load (`state.cluster` None) or without a layout."""
    if state.cluster is None or not state.clusters:
        return
    own = state.cluster
    if not own:
        state.diagnostics.append(Diagnostic(
            CLUSTERS_DIR, 0, 0, "", f"this repository lays out clusters ({', '.join(state.clusters)}), and no "
            "cluster was named: nothing is applied or pruned",
            "run the agent (chart value `cluster`) or the command with --cluster NAME"))
    elif own not in state.clusters:
        state.diagnostics.append(Diagnostic(
            CLUSTERS_DIR, 0, 0, "", f"--cluster {own!r}: the repository has no {CLUSTERS_DIR}/{own}/ "
            f"(its clusters: {', '.join(state.clusters)}); nothing is applied or pruned",
            f"add {CLUSTERS_DIR}/{own}/ or name one of its clusters"))
    state.elsewhere = [u for u in state.units if u.cluster]
    state.units = [u for u in state.units if not u.cluster]
    state.failed = {u for u in state.failed if homes.get(u, "") in ("", own)}
    mine: list[Diagnostic] = []
    for d in state.diagnostics:
        where = cluster_of_path(d.file)
        every = d.code == CROSS_CLUSTER  # a unit id in two clusters' folders: every agent's error
        (mine if where is None or where == own or every else state.elsewhere_diagnostics).append(d)
    state.diagnostics = mine
