"""A corpus of broken config repos. Each must be reported, not crash or hang, and point at the
right file, line and field. In each case the line carrying a `#<` comment is the one the error
must name (cases without a marker name line 0: a whole-file problem)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from syncer.render.repo import render_repo
from syncer.repo.loader import load_repo
from tests.unit.broken_corpus import CASES, Case, F, V, fed, tweak, write_files


def _marker_line(text: str | bytes) -> int:
    if isinstance(text, bytes):
        return 0
    for i, line in enumerate(text.splitlines(), 1):
        if "#<" in line:
            return i
    return 0


def test_corpus_is_large_enough() -> None:
    assert len(CASES) >= 30
    assert len({c.name for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_broken_input_is_reported_precisely(case: Case, tmp_path: Path) -> None:
    write_files(tmp_path, case.files)
    start = time.monotonic()
    state = load_repo(tmp_path)
    rendered = render_repo(state)
    assert time.monotonic() - start < 5, "took too long (hang?)"
    diags = state.diagnostics + rendered.diagnostics
    errors = [d for d in diags if d.severity == "error"]
    assert errors, "no error reported"
    rendered_text = "\n".join(d.render() for d in errors)
    matching = [d for d in errors if case.message in d.message]
    assert matching, f"no error mentions {case.message!r}:\n{rendered_text}"
    if case.name == "object-collision":
        return  # which of the two colliding units is named depends on order; the message is what matters
    d = matching[0]
    assert d.file == case.file, rendered_text
    assert d.path == case.path, rendered_text
    expected_line = _marker_line(case.files.get(case.file, ""))
    if expected_line:
        assert d.line == expected_line, rendered_text
    if case.hint:
        assert case.hint in d.hint, rendered_text
    # a unit that fails to load is remembered so the engine keeps its last applied state
    assert not state.units or all(u.source != case.file for u in state.units)


def test_symlink_outside_the_repo_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside.yaml"
    outside.write_text(fed())
    repo = tmp_path / "repo"
    (repo / "federations").mkdir(parents=True)
    (repo / "federations" / "fed.yaml").symlink_to(outside)
    state = load_repo(repo)
    assert [d.message for d in state.errors] == ["symlink points outside the config repository"]
    assert state.errors[0].file == "federations/fed.yaml"
    assert not state.units


def test_a_symlinked_folder_is_followed_only_while_it_stays_inside_the_repo(tmp_path: Path) -> None:
    """Files are read without resolving them when no folder on their way is a symlink; a release
    folder, or the supernodes/ folder itself, that is one is resolved and refused when it leads
    out, and read when it stays inside."""
    outside = tmp_path / "outside"
    (outside / "evil").mkdir(parents=True)
    (outside / "evil" / "values.yaml").write_text("tls:\n  enabled: false\n")
    repo = tmp_path / "repo"
    write_files(repo, {F: fed(), "kept/ok/values.yaml": "tls:\n  enabled: false\n"})
    (repo / "supernodes").mkdir()
    (repo / "supernodes" / "evil").symlink_to(outside / "evil")
    (repo / "supernodes" / "ok").symlink_to(repo / "kept" / "ok")
    state = load_repo(repo)
    assert [(d.file, d.message) for d in state.errors] == [
        ("supernodes/evil/values.yaml", "symlink points outside the config repository")]
    assert sorted(u.unit.name for u in state.units) == ["fed", "ok"]

    (repo / "supernodes" / "evil").unlink()
    (repo / "supernodes" / "ok").unlink()
    (repo / "supernodes").rmdir()
    (repo / "supernodes").symlink_to(outside)
    state = load_repo(repo)
    assert [(d.file, d.message) for d in state.errors] == [
        ("supernodes/evil/values.yaml", "symlink points outside the config repository")]
    assert [u.unit.name for u in state.units] == ["fed"]


def test_all_problems_are_reported_in_one_run(tmp_path: Path) -> None:
    text = tweak("  mode: StatefulSet\n", "  mode: StatefulSet\n  moed: x\n").replace(
        "        replicas: 2\n", "        replicas: 2\n        replica: 3\n")
    text = text.replace("  isolationMode: subprocess\n", "  isolationMode: process\n")
    write_files(tmp_path, {F: text, V: "supernode:\n  replica: 3\n"})
    state = load_repo(tmp_path)
    paths = {(d.file, d.path) for d in state.errors}
    assert (F, "spec.moed") in paths
    assert (F, "spec.supernodes.pools[0].replica") in paths
    assert (F, "spec.superlink.superexecImage") in paths  # a cross-field rule, despite the typos
    assert (V, "supernode.replica") in paths


def test_what_the_operator_accepts_loads_with_a_warning(tmp_path: Path) -> None:
    """Operator files load unchanged (issue 11): a literal `{word}` in a node-config value and
    superexecResources in subprocess mode are warnings; `validate --strict` makes them errors."""
    from syncer.cli import EXIT_FAILED, EXIT_OK, main

    extra = "        images: {}\n        superexecResources: {limits: {cpu: 1}}\n        nodeConfig:\n"
    write_files(tmp_path, {F: tweak("        images: {}", extra + "          name: \"c_{rank}\"")})
    state = load_repo(tmp_path)
    assert state.units and not state.failed
    warnings = sorted(d.message for d in state.diagnostics if d.severity == "warning")
    assert any("{rank} is not a placeholder" in w for w in warnings), warnings
    assert any("superexecResources has no effect in subprocess mode" in w for w in warnings), warnings
    assert main(["validate", str(tmp_path)]) == EXIT_OK
    assert main(["validate", str(tmp_path), "--strict"]) == EXIT_FAILED


HINTS = {  # file text -> (file, words the hint must say)
    "tab": ("federations/f.yaml", "kind: Federation\nmetadata:\n\tname: x\n", "indented with a tab"),
    "dedented-key": ("federations/f.yaml", FED_TEXT_DEDENTED := (
        "apiVersion: flwr.exalsius.ai/v1\nkind: Federation\nmetadata:\n  name: f\nspec:\n  mode: StatefulSet\n"
        "  isolationMode: subprocess\n  superlink:\n    image: flwr/superlink:1.25.0\n  supernodes:\n"
        "    image: flwr/supernode:1.25.0\n    pools:\n      - name: a\n        images: {}\n      replicas: 2\n"),
        "the keys of the nearest level start at 8"),
    "wrong-case-literal": ("federations/f.yaml", FED_TEXT_DEDENTED.replace("mode: StatefulSet", "mode: statefulset")
                           .replace("      replicas: 2", "        replicas: 2"), "write 'StatefulSet'"),
    "unquoted-placeholder": ("federations/f.yaml", FED_TEXT_DEDENTED.replace(
        "      replicas: 2", "        replicas: 2\n        nodeConfig:\n          name: {pool}"), 'quote it, "{pool}"'),
    "key-at-the-wrong-level": ("supernodes/r/values.yaml", "supernode:\n  nodeConfig:\n    a: \"1\"\n",
                               "it belongs at supernode.node.config"),
}


@pytest.mark.parametrize("case", sorted(HINTS))
def test_validation_hints_say_what_went_wrong(case: str, tmp_path: Path) -> None:
    """The hints of issue 11: a tab, a key one level off, a value YAML read as a mapping, a
    case-sensitive spelling."""
    file, text, words = HINTS[case]
    (tmp_path / file).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / file).write_text(text)
    hints = [d.hint for d in load_repo(tmp_path).diagnostics if d.severity == "error"]
    assert any(words in h for h in hints), hints
