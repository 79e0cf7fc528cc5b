"""Where each Federation's Flower-level health is read (render.flower_targets), worked out again
for each revision with the previous revision's work (FlowerMemo): never another answer than a
fresh computation, and nothing worked out again for what did not change."""

from __future__ import annotations

import shutil
from pathlib import Path

from syncer.render.flower_targets import FlowerMemo, flower_targets
from syncer.repo.loader import LoadCache, load_repo
from tests.builders import NS, federation, pool


def release(address: str, replicas: int = 1) -> str:
    return f"supernode:\n  replicas: {replicas}\n  superlink:\n    address: {address}\n    port: 9092\n"


def write(root: Path, files: dict[str, str | None]) -> None:
    for name, text in files.items():
        path = root / name
        if text is None:
            shutil.rmtree(path) if path.is_dir() else path.unlink()
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_memo_answers_as_a_fresh_computation_revision_after_revision(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    write(root, {
        "flower-syncer.yaml": f"name: team\ndefaultNamespace: {NS}\n",
        "federations/a.yaml": federation("a", pool("p", 2), insecure=True),
        "federations/b.yaml": federation("b", pool("p", 1) + pool("q", 3), insecure=True),
        "supernodes/site-1/values.yaml": release(f"a-superlink.{NS}.svc"),
        "supernodes/site-2/values.yaml": release("b-superlink"),
    })
    revisions: list[tuple[dict[str, str | None], tuple[str, ...] | None]] = [
        ({}, None),  # nothing changed
        ({"supernodes/site-1/values.yaml": release(f"a-superlink.{NS}.svc", replicas=4)}, None),  # a release's count
        ({"supernodes/site-2/values.yaml": release(f"a-superlink.{NS}")}, None),  # ... now dials the other SuperLink
        ({"supernodes/site-3/values.yaml": release("b-superlink")}, None),  # a new release
        ({"federations/b.yaml": federation("b", pool("p", 2), insecure=True)}, None),  # a federation changed
        ({}, ("10.0.0.1:9093",)),  # the admin's list of Control API targets
        ({"supernodes/site-1": None}, ("10.0.0.1:9093",)),  # a release removed
        ({"federations/a.yaml": None}, None),  # a federation removed
    ]
    cache, memo = LoadCache(), FlowerMemo()
    for files, allowed in revisions:
        write(root, files)
        state = load_repo(root, cache=cache)
        assert [d for d in state.diagnostics if d.severity == "error"] == []
        remembered = flower_targets(state.units, allowed, memo=memo)
        fresh = flower_targets(load_repo(root).units, allowed)
        assert remembered == fresh, files
        assert {key[1] for key in memo.targets} == set(fresh)  # only this revision's federations are kept


def test_an_unchanged_federation_keeps_its_target_object(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    write(root, {
        "flower-syncer.yaml": f"name: team\ndefaultNamespace: {NS}\n",
        "federations/a.yaml": federation("a", pool("p", 2), insecure=True),
        "federations/b.yaml": federation("b", pool("p", 1), insecure=True),
        "supernodes/site-1/values.yaml": release("b-superlink"),
    })
    cache, memo = LoadCache(), FlowerMemo()
    first = flower_targets(load_repo(root, cache=cache).units, memo=memo)
    write(root, {"supernodes/site-1/values.yaml": release("b-superlink", replicas=2)})
    second = flower_targets(load_repo(root, cache=cache).units, memo=memo)
    a, b = (u for u in sorted(first))
    assert second[a] is first[a]  # neither it nor a release dialling it changed: taken from the memo
    assert second[b] is not first[b] and [p.expected for p in second[b].pools] == [1, 2]
