"""The agent's caches across revisions (issue 14): a load given a LoadCache parses only the files
that changed, a render given a RenderCache renders only the units whose content key is new
(render.cachekey; each input in turn: test_cachekey.py), and neither changes what comes out:
every case of the broken-input corpus, and the example repo, load and render the same with a
warm cache as without one."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any, cast

import pytest

from syncer.agent.revision import LoadedRevision, RevisionLoader
from syncer.identity import ObjectRef
from syncer.models.federation import Federation
from syncer.plan import Claims
from syncer.render.packed_manifests import PackedManifests
from syncer.render.repo import RenderCache, Rendered, plan_repo, render_repo
from syncer.repo import loader, reader
from syncer.repo.loader import LoadCache, load_repo
from syncer.repo.state import RepoState
from tests.unit.broken_corpus import CASES, GOOD_SPEC, Case, fed, write_files

REPO = Path(__file__).resolve().parents[2]


def outcome(state: RepoState, rendered: Rendered) -> dict[str, Any]:
    """Everything a load and render hand on to the plan, the status and the CLI."""
    return {
        "units": [(u.unit, u.source, u.line, u.model.model_dump(), u.policy, u.secrets) for u in state.units],
        "diagnostics": [d.render() for d in state.diagnostics + rendered.diagnostics],
        "failed": (sorted(state.failed), sorted(rendered.failed)),
        "files": state.files,
        "secrets": state.secrets,
        "manifests": rendered.units,
        "claims": dict(plan_repo(state, rendered).claims.objects),
    }


def uncached(root: Path) -> dict[str, Any]:
    state = load_repo(root)
    return outcome(state, render_repo(state))


def cached(root: Path, files: LoadCache, renders: RenderCache) -> dict[str, Any]:
    state = load_repo(root, cache=files)
    return outcome(state, render_repo(state, cache=renders))


def differing(a: Path, b: Path) -> frozenset[str]:
    """The paths that differ between two trees (content, kind or link target), as `git diff
    --name-only` lists them between two commits."""
    def tree(root: Path) -> dict[str, tuple[str, bytes]]:
        out = {}
        for p in root.rglob("*"):
            if p.is_symlink():
                out[p.relative_to(root).as_posix()] = ("link", str(p.readlink()).encode())
            elif p.is_file():
                out[p.relative_to(root).as_posix()] = ("file", p.read_bytes())
        return out
    ta, tb = tree(a), tree(b)
    return frozenset(p for p in ta.keys() | tb.keys() if ta.get(p) != tb.get(p))


@pytest.mark.parametrize("mode", ["files-read", "signatures-trusted", "changes-told"])
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_a_warm_cache_changes_nothing_for_broken_input(case: Case, mode: str, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Each broken case beside a good federation and release: parsed, then replayed, then reached
    from a good revision (only the broken files parsed anew), always the same as a fresh load;
    with every file read again, with the files whose signatures are unchanged not read, and with
    the load told which paths changed (as the agent is, by Git)."""
    if mode != "files-read":
        real = reader._now_ns
        monkeypatch.setattr(reader, "_now_ns", lambda: real() + 10_000_000_000)
    good = tmp_path / "good"
    write_files(good, {"federations/other.yaml": fed().replace("name: fed\n", "name: other\n"),
                  "supernodes/ok/values.yaml": "tls:\n  enabled: false\n"})
    broken = tmp_path / "broken"
    shutil.copytree(good, broken, symlinks=True)
    write_files(broken, case.files)
    told = mode == "changes-told"
    diff = differing(good, broken)

    def load(root: Path, changed: frozenset[str]) -> dict[str, Any]:
        state = load_repo(root, cache=files, changed=changed if told else None)
        return outcome(state, render_repo(state, cache=renders))

    files, renders = LoadCache(), RenderCache()
    assert cached(good, files, renders) == uncached(good)
    expected = uncached(broken)
    assert load(broken, diff) == expected  # from the good revision's cache
    assert load(broken, frozenset()) == expected  # all replayed
    assert files.misses == 0
    assert load(good, diff) == uncached(good)  # and back


def test_the_example_repo_loads_the_same_from_a_warm_cache(tmp_path: Path) -> None:
    files, renders = LoadCache(), RenderCache()
    root = REPO / "config" / "examples"
    first = cached(root, files, renders)
    again = cached(root, files, renders)
    assert first == again == uncached(root)
    assert files.misses == 0 and files.hits == len(files) >= 5
    assert renders.hits == len(renders) == len(first["units"])
    # kept packed across revisions, and read back as the very objects a fresh render makes
    state = load_repo(root, cache=files)
    kept = render_repo(state, cache=renders).units
    assert kept and all(isinstance(ms, PackedManifests) for ms in kept.values())
    assert {u: list(ms) for u, ms in kept.items()} == render_repo(load_repo(root)).units


def three_units(root: Path) -> None:
    write_files(root, {"federations/a.yaml": fed().replace("name: fed\n", "name: a\n"),
                  "federations/b.yaml": fed().replace("name: fed\n", "name: b\n"),
                  "supernodes/r/values.yaml": "tls:\n  enabled: false\n"})


def test_a_commit_to_one_file_parses_and_renders_that_file_only(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    three_units(tmp_path)
    parsed: list[str] = []
    real = reader.load_documents  # type: ignore[attr-defined]

    def counting(text: str, rel: str) -> Any:
        parsed.append(rel)
        return real(text, rel)

    monkeypatch.setattr(reader, "load_documents", counting)
    files, renders = LoadCache(), RenderCache()
    before = load_repo(tmp_path, cache=files)
    before_rendered = render_repo(before, cache=renders)
    assert sorted(parsed) == ["federations/a.yaml", "federations/b.yaml", "supernodes/r/values.yaml"]
    parsed.clear()
    (tmp_path / "federations/b.yaml").write_text(
        fed(GOOD_SPEC.replace("replicas: 2", "replicas: 3")).replace("name: fed\n", "name: b\n"))
    after = load_repo(tmp_path, cache=files)
    after_rendered = render_repo(after, cache=renders)
    assert parsed == ["federations/b.yaml"] and (files.hits, files.misses) == (2, 1)
    assert renders.hits == 2
    old = {u.unit.name: u for u in before.units}
    new = {u.unit.name: u for u in after.units}
    assert new["a"] is old["a"] and new["r"] is old["r"] and new["b"] is not old["b"]
    by_name = {u.name: ms for u, ms in after_rendered.units.items()}
    was = {u.name: ms for u, ms in before_rendered.units.items()}
    assert by_name["a"] is was["a"] and by_name["b"] != was["b"]
    assert [m["spec"]["replicas"] for m in by_name["b"] if m["kind"] == "StatefulSet"] == [1, 3]  # SuperLink, pool


def test_a_release_folder_is_one_piece_with_its_file_names(tmp_path: Path) -> None:
    three_units(tmp_path)
    files = LoadCache()
    load_repo(tmp_path, cache=files)
    (tmp_path / "supernodes/r/release.yaml").write_text("namespace: elsewhere\n")
    moved = load_repo(tmp_path, cache=files)
    assert files.misses == 1 and {u.unit.namespace for u in moved.units if u.unit.name == "r"} == {"elsewhere"}
    (tmp_path / "supernodes/r/notes.yaml").write_text("x: 1\n")  # a stray file: a warning, from the folder's names
    warned = load_repo(tmp_path, cache=files)
    assert files.misses == 1 and [d.file for d in warned.diagnostics] == ["supernodes/r/notes.yaml"]
    assert load_repo(tmp_path, cache=files).diagnostics == warned.diagnostics and files.misses == 0


def test_settings_and_guardrails_are_part_of_what_is_cached(tmp_path: Path) -> None:
    three_units(tmp_path)
    files, renders = LoadCache(), RenderCache()
    render_repo(load_repo(tmp_path, cache=files), cache=renders)
    (tmp_path / "flower-syncer.yaml").write_text("defaultNamespace: team-b\n")
    state = load_repo(tmp_path, cache=files)
    assert files.misses == 3 and {u.unit.namespace for u in state.units} == {"team-b"}
    render_repo(state, cache=renders)
    (tmp_path / "flower-syncer.yaml").write_text("defaultNamespace: team-b\nguardrails:\n"
                                                 "  allowedNamespaces: [team-a]\n")
    state = load_repo(tmp_path, cache=files)  # new settings: parsed again, and checked again
    refused = render_repo(state, cache=renders)
    assert refused.units == {} and len(refused.failed) == 3
    assert render_repo(state, cache=renders).failed == refused.failed and renders.hits == 3


def test_the_cache_holds_only_what_the_latest_load_used(tmp_path: Path) -> None:
    three_units(tmp_path)
    files, renders = LoadCache(), RenderCache()
    render_repo(load_repo(tmp_path, cache=files), cache=renders)
    (tmp_path / "federations/b.yaml").unlink()
    render_repo(load_repo(tmp_path, cache=files), cache=renders)
    assert len(files) == 2 and len(renders) == 2


def test_claims_from_the_renderers_references_are_the_claims_of_the_manifests(tmp_path: Path) -> None:
    three_units(tmp_path)
    write_files(tmp_path, {"federations/clash.yaml": fed().replace("name: fed\n", "name: a\n")})  # a duplicate: failed
    renders = RenderCache()
    for _ in range(2):
        state = load_repo(tmp_path, cache=LoadCache())
        rendered = render_repo(state, ["r"], cache=renders)  # b and a unselected; a failed
        plan = plan_repo(state, rendered)
        assert plan.claims == Claims.of([*rendered.units.items(), *rendered.unselected.items()], plan.failed)
        assert set(plan.claims.objects.values()) == {u.unit for u in state.units}
        for planned in plan.units.values():
            assert planned.refs == tuple(ObjectRef.of(m) for m in planned.manifests) and planned.object_refs


class Reads:
    """The files a load reads from disk (by path under the root)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.rels: list[str] = []
        real = reader.Reader._read

        def spy(this: reader.Reader, path: Path) -> str | None:
            self.rels.append(this.rel(path))
            return real(this, path)

        monkeypatch.setattr(reader.Reader, "_read", spy)

    def take(self) -> list[str]:
        rels, self.rels = sorted(self.rels), []
        return rels


@pytest.fixture
def later(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every read happens 10 s after the files were written (as in the agent, where a revision
    comes seconds after the previous one), so their signatures are trusted."""
    real = reader._now_ns
    monkeypatch.setattr(reader, "_now_ns", lambda: real() + 10_000_000_000)


ALL = ["federations/a.yaml", "federations/b.yaml", "supernodes/r/values.yaml"]


@pytest.mark.usefixtures("later")
def test_a_revision_reads_only_the_files_whose_signature_changed(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    three_units(tmp_path)
    reads, files, renders = Reads(monkeypatch), LoadCache(), RenderCache()
    cached(tmp_path, files, renders)
    assert reads.take() == ALL
    assert cached(tmp_path, files, renders) == uncached(tmp_path) and files.hits == 3
    reads.take()  # the uncached load read them all
    assert cached(tmp_path, files, renders) == uncached(tmp_path)
    reads.take()
    b = tmp_path / "federations/b.yaml"
    b.write_text(fed(GOOD_SPEC.replace("replicas: 2", "replicas: 12")).replace("name: fed\n", "name: b\n"))
    changed = cached(tmp_path, files, renders)
    assert reads.take() == ["federations/b.yaml"] and (files.hits, files.misses) == (2, 1)
    assert changed == uncached(tmp_path)


@pytest.mark.usefixtures("later")
def test_a_file_replaced_with_the_same_size_and_times_is_read_again(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """As git checks out a file: a new file renamed over the old one. Its inode tells it apart even
    when its size and modification time are those of the file it replaced."""
    three_units(tmp_path)
    reads, files, renders = Reads(monkeypatch), LoadCache(), RenderCache()
    cached(tmp_path, files, renders)
    b = tmp_path / "federations/b.yaml"
    was = b.stat()
    new = tmp_path / "federations/.b.yaml.new"
    new.write_text(fed(GOOD_SPEC.replace("replicas: 2", "replicas: 3")).replace("name: fed\n", "name: b\n"))
    assert new.stat().st_size == was.st_size
    os.utime(new, ns=(was.st_atime_ns, was.st_mtime_ns))
    new.rename(b)
    reads.take()
    assert cached(tmp_path, files, renders) == uncached(tmp_path)
    assert reads.take().count("federations/b.yaml") == 2  # by the cached load, then by the uncached one
    assert files.misses == 1


def test_a_file_changed_within_the_last_second_is_read_at_every_load(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Git's racily-clean rule: a file changed so shortly before it was read could change again
    within the file system's clock tick, leaving its signature as it was; so it is not trusted."""
    three_units(tmp_path)
    reads, files = Reads(monkeypatch), LoadCache()
    load_repo(tmp_path, cache=files)
    load_repo(tmp_path, cache=files)
    assert reads.take() == sorted(ALL * 2) and files.hits == 3


@pytest.mark.usefixtures("later")
def test_symlinked_and_unreadable_files_are_read_at_every_load(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    three_units(tmp_path)
    (tmp_path / "shared").mkdir()
    (tmp_path / "supernodes/r/values.yaml").rename(tmp_path / "shared/values.yaml")
    (tmp_path / "supernodes/r/values.yaml").symlink_to("../../shared/values.yaml")
    (tmp_path / "federations/bad.yaml").write_bytes(b"kind: Federation\nname: \xff\n")
    reads, files = Reads(monkeypatch), LoadCache()
    first = load_repo(tmp_path, cache=files)
    assert [d.file for d in first.errors] == ["federations/bad.yaml"]
    reads.take()
    again = load_repo(tmp_path, cache=files)
    assert reads.take() == ["federations/bad.yaml", "supernodes/r/values.yaml"]
    assert again.diagnostics == first.diagnostics
    (tmp_path / "shared/values.yaml").write_text("tls:\n  enabled: true\n")  # what the link points to
    changed = load_repo(tmp_path, cache=files)
    assert [u.model.model_dump()["tls"]["enabled"] for u in changed.units if u.unit.name == "r"] == [True]


def test_a_plan_keeps_the_unit_plans_of_units_that_did_not_change(tmp_path: Path) -> None:
    """The agent plans each revision from the previous plan: a unit rendered with the same
    content key keeps its UnitPlan (the revision that last changed it included), a changed one is
    planned anew at the new revision, and the claims are those of a plan made from scratch."""
    three_units(tmp_path)
    files, renders = LoadCache(), RenderCache()
    state = load_repo(tmp_path, cache=files)
    first = plan_repo(state, render_repo(state, cache=renders), revision="r1")
    (tmp_path / "federations/b.yaml").write_text(
        fed(GOOD_SPEC.replace("replicas: 2", "replicas: 3")).replace("name: fed\n", "name: b\n"))
    state = load_repo(tmp_path, cache=files)
    rendered = render_repo(state, cache=renders)
    second = plan_repo(state, rendered, revision="r2", previous=first.units)
    by_name = {u.name: p for u, p in second.units.items()}
    was = {u.name: p for u, p in first.units.items()}
    assert by_name["a"] is was["a"] and by_name["r"] is was["r"] and by_name["a"].revision == "r1"
    assert by_name["b"] is not was["b"] and by_name["b"].revision == "r2"
    scratch = plan_repo(state, rendered, revision="r2")
    assert second.claims == scratch.claims
    assert {u: (p.manifests, p.policy, p.node_auth, p.refs) for u, p in second.units.items()} == \
        {u: (p.manifests, p.policy, p.node_auth, p.refs) for u, p in scratch.units.items()}


@pytest.mark.usefixtures("later")
def test_a_load_told_what_changed_looks_at_nothing_else(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    three_units(tmp_path)
    reads, files, renders = Reads(monkeypatch), LoadCache(), RenderCache()
    listed: list[str] = []
    real_folder = loader._load_release_folder

    def listing(r: reader.Reader, folder: Path, pieces: Any) -> None:
        listed.append(folder.name)
        real_folder(r, folder, pieces)

    monkeypatch.setattr(loader, "_load_release_folder", listing)
    cached(tmp_path, files, renders)
    reads.take()
    listed.clear()
    b = tmp_path / "federations/b.yaml"
    b.write_text(fed(GOOD_SPEC.replace("replicas: 2", "replicas: 12")).replace("name: fed\n", "name: b\n"))
    state = load_repo(tmp_path, cache=files, changed={"federations/b.yaml", "README.md"})
    assert reads.take() == ["federations/b.yaml"] and listed == []
    assert outcome(state, render_repo(state, cache=renders)) == uncached(tmp_path)
    reads.take()
    listed.clear()
    (tmp_path / "supernodes/r/release.yaml").write_text("namespace: elsewhere\n")  # a file new in the folder
    state = load_repo(tmp_path, cache=files, changed={"supernodes/r/release.yaml"})
    assert listed == ["r"] and "supernodes/r/release.yaml" in reads.take()
    assert {u.unit.namespace for u in state.units if u.unit.name == "r"} == {"elsewhere"}
    (tmp_path / "federations/b.yaml").unlink()
    state = load_repo(tmp_path, cache=files, changed={"federations/b.yaml"})
    assert sorted(u.unit.name for u in state.units) == ["a", "r"] and reads.take() == []
    assert outcome(state, render_repo(state, cache=renders)) == uncached(tmp_path)


@pytest.mark.usefixtures("later")
def test_a_piece_read_through_a_symlink_is_read_even_when_told_it_did_not_change(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Git lists the file a symlink points to, not the symlink: such a piece is always read."""
    three_units(tmp_path)
    (tmp_path / "shared").mkdir()
    (tmp_path / "supernodes/r/values.yaml").rename(tmp_path / "shared/values.yaml")
    (tmp_path / "supernodes/r/values.yaml").symlink_to("../../shared/values.yaml")
    files = LoadCache()
    load_repo(tmp_path, cache=files)
    (tmp_path / "shared/values.yaml").write_text("tls:\n  enabled: true\n")
    state = load_repo(tmp_path, cache=files, changed={"shared/values.yaml"})
    assert [u.model.model_dump()["tls"]["enabled"] for u in state.units if u.unit.name == "r"] == [True]


@pytest.mark.usefixtures("later")
def test_the_agent_trusts_what_changed_only_since_the_revision_it_loaded_last(tmp_path: Path) -> None:
    three_units(tmp_path)
    revisions = RevisionLoader()
    revisions.load(tmp_path, "r1")

    def replicas(loaded: LoadedRevision) -> list[int | None]:
        return [p.replicas for u in loaded.state.units if u.unit.name == "b"
                for p in cast(Federation, u.model).spec.supernodes.pools]

    b = tmp_path / "federations/b.yaml"
    b.write_text(fed(GOOD_SPEC.replace("replicas: 2", "replicas: 12")).replace("name: fed\n", "name: b\n"))
    assert replicas(revisions.load(tmp_path, "r3", since="r2", changed=frozenset())) == [12]  # r2 never loaded
    # (another size: within one clock tick an edit in place of the same size keeps the signature, which
    # the fixture's clock trusts; the agent's does not: see RACY_NS)
    b.write_text(fed(GOOD_SPEC.replace("replicas: 2", "replicas: 123")).replace("name: fed\n", "name: b\n"))
    assert replicas(revisions.load(tmp_path, "r4", since="r3", changed=frozenset())) == [12]  # as Git said
    assert replicas(revisions.load(tmp_path, "r5", since="r4", changed=frozenset({"federations/b.yaml"}))) == [123]


def test_claims_and_clashes_follow_each_revision_from_a_warm_cache(tmp_path: Path) -> None:
    """Two releases come to render the same objects, then one more, then they part again: with the
    render cache's running owners map the failed units, their messages and the claims are those of
    a fresh render at every step, and claims handed out for one revision never change afterwards."""
    three_units(tmp_path)
    files, renders = LoadCache(), RenderCache()
    values = tmp_path / "supernodes"

    def release(name: str, text: str) -> None:
        (values / name).mkdir(exist_ok=True)
        (values / name / "values.yaml").write_text("tls:\n  enabled: false\n" + text)

    steps = [
        lambda: release("s", ""),
        lambda: release("s", "fullnameOverride: r-flower-client\n"),  # clashes with r
        lambda: release("t", "fullnameOverride: r-flower-client\n"),  # a third one
        lambda: release("s", ""),  # s leaves the clash, r and t stay in it
        lambda: shutil.rmtree(values / "t"),  # r is alone again
        (tmp_path / "federations" / "b.yaml").unlink,
    ]
    clashing = []
    handed_out: list[tuple[Any, dict[ObjectRef, Any]]] = []
    for step in steps:
        step()
        state = load_repo(tmp_path, cache=files)
        rendered = render_repo(state, cache=renders)
        assert outcome(state, rendered) == uncached(tmp_path)
        clashing.append(sorted(u.name for u in rendered.failed))
        handed_out.append((rendered.claims, dict(rendered.claims or {})))
    assert clashing == [[], ["r", "s"], ["r", "s", "t"], ["r", "t"], [], []]
    for kept, copy in handed_out:
        assert kept == copy  # the very dicts handed out, unchanged by the later renders
