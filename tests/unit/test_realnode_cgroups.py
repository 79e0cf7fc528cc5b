"""tools/realnode.py walks a node's cgroups while the runtime may still be removing some of them."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))

from realnode import cgroup_tree


def test_a_cgroup_that_vanishes_during_the_walk_is_left_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # `down` of a CI run failed with FileNotFoundError: a container's cgroup, listed in its pod's
    # directory, was gone by the time the walk opened it.
    base = tmp_path / "fsc-1"
    (base / "kubepods" / "pod1" / "container").mkdir(parents=True)
    (base / "kubepods" / "pod2").mkdir()
    real_scandir = os.scandir

    def vanishing(path: Any = ".") -> Iterator[os.DirEntry[str]]:
        if Path(path).name == "container":
            Path(path).rmdir()
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", vanishing)
    tree = cgroup_tree(base)
    assert base / "kubepods" / "pod1" / "container" not in tree
    assert tree[0] == base
    assert {base / "kubepods", base / "kubepods" / "pod1", base / "kubepods" / "pod2"} <= set(tree)


def test_a_node_without_cgroups_has_none(tmp_path: Path) -> None:
    assert cgroup_tree(tmp_path / "never-created") == []
