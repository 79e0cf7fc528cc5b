"""Hostile YAML in a config repository (issue 9, item 1): each file of the corpus sits beside a good
federation. The CLI runs as a subprocess, so a crash of the YAML parser (a segfault kills the
process; libyaml's composer recurses in C) fails the case instead of the test run. Every case must
end with the validation exit code, a diagnostic naming the hostile file, the good unit still
rendered, and within a few seconds. Then the engine on the in-memory API server: a unit whose file
turned hostile keeps its objects (nothing is pruned) while the good unit still syncs."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from syncer.actions.load import load
from syncer.actions.sync import sync
from syncer.engine.sync import SyncOptions
from tests.builders import FED, NS, pool
from tests.fakekube import FakeApiServer, FakeKube

EXIT_INVALID = 1
# The CPU seconds a case may take (the CLI's own, not the wall clock: on a busy machine a case's
# process waits for a core longer than it runs; a 20 s wall-clock bound failed at a load of 25 on
# 2 cores). A parser that blows up or loops burns CPU; one that blocks is stopped by the timeout.
DEADLINE_S = 20.0


def _laughs(levels: int = 9, fan: int = 10) -> str:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels + 1):
        refs = ", ".join([f"*a{i - 1}"] * fan)
        lines.append(f"a{i}: &a{i} [{refs}]")
    return "\n".join(lines) + "\n"


NESTED = "nested deeper than 200 levels"
CORPUS: dict[str, tuple[bytes, str]] = {  # name: (contents, what the diagnostic must say)
    # nesting: libyaml's C composer recurses once per level (the original segfault); some libyaml
    # builds stop at 1,000 levels themselves, the pure-Python parser hits RecursionError
    "flow-brackets-50k": (b"[" * 50_000, NESTED),
    "flow-braces-30k": (b"{a: " * 30_000, NESTED),
    "flow-closed-deep": (b"x: " + b"[" * 5_000 + b"]" * 5_000 + b"\n", NESTED),
    "compact-dashes-20k": (b"- " * 20_000 + b"x\n", NESTED),
    "block-indentation-300": ("".join(" " * i + f"k{i}:\n" for i in range(300)).encode() + b" " * 300 + b"v: 1\n",
                              NESTED),
    "flow-multiline-deep": (b"x:\n" + b"  [\n" * 3_000, NESTED),
    # expansion and counts
    "billion-laughs": (_laughs().encode(), "expands to more than 100000 values"),
    "recursive-alias": (b"a: &a [*a]\n", "expands to more than 100000 values"),
    "alias-to-nothing": (b"a: *missing\n", "found undefined alias"),
    "aliases-5000": (b"a: &x 1\nb: [" + b", ".join([b"*x"] * 5_000) + b"]\n", "more than 1000 YAML aliases"),
    "documents-90k": (b"---\na: 1\n" * 90_000, "more than 500 YAML documents"),
    "merge-key-bomb": (b"a: &a {x: 1}\n" + b"".join(f"b{i}: &b{i} {{<<: *{'a' if i == 0 else f'b{i - 1}'}}}\n".encode()
                                                    for i in range(2_000)), "more than 1000 YAML aliases"),
    # size and encoding
    "huge-file-2mib": (b"# " + b"x" * (2 << 20) + b"\n", "larger than the 1048576-byte limit"),
    "long-scalar-900kib": (b"kind: Federation\nmetadata: {name: big}\nspec: {note: '" + b"x" * 900_000 + b"'}\n",
                           "expected apiVersion"),  # big but within limits: parsed, then refused by the schema
    "nul-bytes": (b"a: 1\n\x00\x00\x00\n", "file is binary"),
    "binary-garbage": (bytes(range(256)) * 64, "file is binary"),
    "invalid-utf8": (b"a: \xff\xfe\xfd\n", "not valid UTF-8"),
    "utf16-bom": ("a: 1\n".encode("utf-16"), "file is binary"),
    "tab-indentation": (b"kind: Federation\nmetadata:\n\tname: tab\n", "YAML syntax error"),
    "unterminated-quote": (b"a: 'never closed\nb: 2\n", "YAML syntax error"),
    "python-tag": (b"a: !!python/object/apply:os.system ['echo pwned']\n", "expected apiVersion"),  # never run
    "long-key": (b"k" * 200_000 + b": 1\n", "YAML syntax error"),
}


def good_repo(path: Path, hostile: dict[str, bytes] | None = None) -> Path:
    (path / "federations").mkdir(parents=True, exist_ok=True)
    (path / "flower-syncer.yaml").write_text(f"name: hostile\ndefaultNamespace: {NS}\n")
    (path / "federations" / "good.yaml").write_text(FED.format(name="good", pools=pool("a"), annotations=""))
    for name, data in (hostile or {}).items():
        (path / "federations" / name).write_bytes(data)
    return path


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_cli(*args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    """The CLI's result and the CPU seconds it used (this test process runs one child at a time)."""
    start = _children_cpu()
    proc = subprocess.run([sys.executable, "-m", "syncer", *args], capture_output=True, text=True,
                          timeout=DEADLINE_S * 6, check=False)
    return proc, _children_cpu() - start


@pytest.mark.parametrize("case", sorted(CORPUS))
def test_hostile_file_is_a_per_file_error(case: str, tmp_path: Path) -> None:
    data, expected = CORPUS[case]
    repo = good_repo(tmp_path / "repo", {f"{case}.yaml": data})
    proc, seconds = run_cli("validate", str(repo), "-o", "json")
    assert proc.returncode == EXIT_INVALID, (proc.returncode, proc.stderr[-2000:])  # a crash is -11 or 1 w/ traceback
    assert seconds < DEADLINE_S, seconds  # a bound against hangs, not a performance target
    out = json.loads(proc.stdout)
    messages = [d["message"] for d in out["diagnostics"] if d["file"] == f"federations/{case}.yaml"]
    assert any(expected in m for m in messages), messages
    assert f"federation/{NS}/good" in out["units"]  # everything else still renders
    # `render` survives it too and still prints the good unit
    proc, _ = run_cli("render", str(repo), "--unit", "good")
    assert proc.returncode == EXIT_INVALID and "name: good-superlink" in proc.stdout, proc.stderr[-2000:]


@pytest.mark.parametrize("case", ["flow-brackets-50k", "billion-laughs", "documents-90k", "huge-file-2mib"])
def test_a_unit_whose_file_turns_hostile_keeps_its_objects(case: str, tmp_path: Path) -> None:
    server = FakeApiServer()
    server.add_namespace(NS)
    kube = FakeKube(server)
    repo = good_repo(tmp_path / "repo")
    (repo / "federations" / "victim.yaml").write_text(FED.format(name="victim", pools=pool("a"), annotations=""))
    assert sync(kube, load(repo), SyncOptions()).ok
    (repo / "federations" / "victim.yaml").write_bytes(CORPUS[case][0])
    write_pool = FED.format(name="good", pools=pool("a", replicas=2), annotations="")
    (repo / "federations" / "good.yaml").write_text(write_pool)
    loaded = load(repo)
    assert loaded.errors and not loaded.plan().prune_allowed
    report = sync(kube, loaded, SyncOptions())
    assert not [c for u in report.units for c in u.changes if c.action.value == "deleted"]
    assert kube.get("StatefulSet", NS, "victim-supernode-a") is not None  # never pruned
    assert (kube.get("StatefulSet", NS, "good-supernode-a") or {})["spec"]["replicas"] == 2  # still syncing


def test_the_limits_hold_whatever_parser_is_underneath(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the pure-Python parser (PyYAML without libyaml), deep nesting used to end in a
    RecursionError that no caller expected; the pre-scan stops it before any parser runs."""
    import yaml

    from syncer import yamldoc

    monkeypatch.setattr(yamldoc, "_Loader", yaml.SafeLoader)
    for case in ("flow-brackets-50k", "compact-dashes-20k", "block-indentation-300", "flow-multiline-deep"):
        docs, diags = yamldoc.load_documents(CORPUS[case][0].decode(), f"{case}.yaml")
        assert docs == [] and [d.message for d in diags] == [f"file not parsed: {NESTED}"], case
