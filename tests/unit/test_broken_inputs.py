"""A corpus of broken config repos. Each must be reported, not crash or hang, and point at the
right file, line and field. In each case the line carrying a `#<` comment is the one the error
must name (cases without a marker name line 0: a whole-file problem)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from syncer.render.repo import render_repo
from syncer.repo.loader import load_repo

FED_HEAD = """\
apiVersion: flwr.exalsius.ai/v1
kind: Federation
metadata:
  name: fed
spec:
"""
GOOD_SPEC = """\
  mode: StatefulSet
  isolationMode: subprocess
  superlink:
    image: flwr/superlink:1.25.0
  supernodes:
    image: flwr/supernode:1.25.0
    pools:
      - name: a
        replicas: 2
        images: {}
"""


def fed(spec: str = GOOD_SPEC, head: str = FED_HEAD) -> str:
    return head + spec


def tweak(old: str, new: str) -> str:
    assert old in GOOD_SPEC, old
    return fed(GOOD_SPEC.replace(old, new, 1))


@dataclass
class Case:
    name: str
    files: dict[str, str | bytes]
    file: str  # the file the error must name
    path: str  # the field path it must name ("" for whole-file problems)
    message: str  # a piece of the message
    hint: str = ""  # a piece of the hint (what to do)
    extra: dict[str, str] = field(default_factory=dict)


F = "federations/fed.yaml"
V = "supernodes/r1/values.yaml"

CASES = [
    Case("yaml-syntax", {F: fed().replace("  isolationMode: subprocess\n", "  isolationMode: [subprocess\n")
                         .replace("  superlink:\n", "  superlink: #<\n")},
         F, "", "YAML syntax error"),
    Case("tab-indent", {F: fed().replace("  mode: StatefulSet", "\tmode: StatefulSet #<")}, F, "",
         "YAML syntax error"),
    Case("duplicate-key", {F: tweak("    image: flwr/superlink:1.25.0\n",
                                    "    image: flwr/superlink:1.25.0\n    image: other #<\n")},
         F, "spec.superlink.image", "duplicate key"),
    Case("unknown-top-field", {F: tweak("  mode: StatefulSet\n", "  mode: StatefulSet\n  moed: x #<\n")},
         F, "spec.moed", "unknown field", "did you mean 'mode'?"),
    Case("typo-in-pool", {F: tweak("        replicas: 2\n", "        replicas: 2\n        replica: 3 #<\n")},
         F, "spec.supernodes.pools[0].replica", "unknown field", "did you mean 'replicas'?"),
    Case("typo-superlink-service", {F: tweak("    image: flwr/superlink:1.25.0\n",
                                             "    image: flwr/superlink:1.25.0\n    servce: {} #<\n")},
         F, "spec.superlink.servce", "unknown field", "did you mean 'service'?"),
    Case("missing-mode", {F: fed(GOOD_SPEC.replace("  mode: StatefulSet\n", ""), FED_HEAD.replace(
        "spec:\n", "spec: #<\n"))}, F, "spec.mode", "required field 'mode' is missing"),
    Case("bad-mode-enum", {F: tweak("  mode: StatefulSet", "  mode: Deployment #<")},
         F, "spec.mode", "'DaemonSet' or 'StatefulSet'"),
    Case("quoted-replicas", {F: tweak("        replicas: 2", '        replicas: "2" #<')},
         F, "spec.supernodes.pools[0].replicas", "integer", "remove the quotes"),
    Case("replicas-zero", {F: tweak("        replicas: 2", "        replicas: 0 #<")},
         F, "spec.supernodes.pools[0].replicas", "greater than or equal to 1"),
    Case("cel-daemonset-replicas", {F: tweak("  mode: StatefulSet", "  mode: DaemonSet").replace(
        "        replicas: 2", "        replicas: 2 #<")},
         F, "spec.supernodes.pools[0].replicas", "replicas must not be set for pools when mode is DaemonSet"),
    Case("cel-statefulset-no-replicas", {F: tweak("        replicas: 2\n", "").replace(
        "      - name: a", "      - name: a #<")},
         F, "spec.supernodes.pools[0].replicas", "replicas must be set (>=1)"),
    Case("cel-process-no-superexec", {F: tweak("  isolationMode: subprocess\n", "  isolationMode: process\n")
                                      .replace("    image: flwr/superlink:1.25.0", "    image: flwr/superlink:1.25.0")
                                      .replace("  superlink:\n", "  superlink: #<\n")},
         F, "spec.superlink.superexecImage", "superexecImage is required when isolationMode=process"),
    Case("cel-subprocess-with-superexec", {F: tweak("    image: flwr/superlink:1.25.0\n",
                                                    "    image: flwr/superlink:1.25.0\n"
                                                    "    superexecImage: flwr/superexec:1.25.0 #<\n")},
         F, "spec.superlink.superexecImage", "must be empty when isolationMode=subprocess"),
    Case("cel-pool-superexec-in-subprocess", {F: tweak("        images: {}", "        images:\n"
                                                       "          superexecClientApp: x:1 #<")},
         F, "spec.supernodes.pools[0].images.superexecClientApp", "must be empty when isolationMode=subprocess"),
    Case("cel-mountall-no-vendor", {F: tweak("        images: {}", "        images: {}\n        gpu: #<\n"
                                             "          mountAll: true")},
         F, "spec.supernodes.pools[0].gpu.vendor", "vendor is required when gpu.mountAll=true"),
    Case("bad-gpu-vendor", {F: tweak("        images: {}", "        images: {}\n        gpu:\n"
                                     "          vendor: intel #<")},
         F, "spec.supernodes.pools[0].gpu.vendor", "'nvidia' or 'amd'"),
    Case("duplicate-pool", {F: tweak("        images: {}\n", "        images: {}\n      - name: a #<\n"
                                     "        replicas: 1\n")},
         F, "spec.supernodes.pools[1].name", "used twice"),
    Case("bad-pool-name", {F: tweak("      - name: a", "      - name: Pool_A #<")},
         F, "spec.supernodes.pools[0].name", "lowercase"),
    Case("federation-name-too-long", {F: fed(head=FED_HEAD.replace("name: fed", "name: " + "f" * 60 + " #<"))},
         F, "metadata.name", "characters"),
    Case("workload-name-over-52", {F: fed(GOOD_SPEC.replace("      - name: a", "      - name: a #<"),
                                          head=FED_HEAD.replace("name: fed", "name: " + "f" * 42))},
         F, "spec.supernodes.pools[0].name", "at most 52"),
    Case("federation-name-starts-with-digit", {F: fed(head=FED_HEAD.replace("name: fed", "name: 1fed #<"))},
         F, "metadata.name", "start with a lowercase letter"),
    Case("index-in-daemonset", {F: tweak("  mode: StatefulSet", "  mode: DaemonSet").replace(
        "        replicas: 2\n", "        nodeConfig:\n          partition-id: \"{index}\" #<\n")},
         F, "spec.supernodes.pools[0].nodeConfig.partition-id", "only exist in StatefulSet mode"),
    Case("node-config-dotted-key", {F: tweak("        images: {}", "        images: {}\n        nodeConfig:\n"
                                             "          lr.base: \"0.1\" #<")},
         F, "spec.supernodes.pools[0].nodeConfig['lr.base']", "nested table", "'-' or '_'"),
    Case("node-config-both-quotes", {F: tweak("        images: {}", "        images: {}\n        nodeConfig:\n"
                                              "          name: \"it's \\\"x\\\"\" #<")},
         F, "spec.supernodes.pools[0].nodeConfig.name", "both kinds of quote"),
    Case("node-config-number-not-string", {F: tweak("        images: {}", "        images: {}\n        nodeConfig:\n"
                                                    "          batch-size: 32 #<")},
         F, "spec.supernodes.pools[0].nodeConfig.batch-size", "string", "quote"),
    Case("env-typo", {F: tweak("        images: {}", "        images: {}\n        env:\n          - name: A\n"
                               "            valu: x #<")},
         F, "spec.supernodes.pools[0].env[0].valu", "unknown field 'valu' in EnvVar", "did you mean 'value'?"),
    Case("env-int-value", {F: tweak("        images: {}", "        images: {}\n        env:\n          - name: A\n"
                                    "            value: 1 #<")},
         F, "spec.supernodes.pools[0].env[0].value", "expected a string", 'quote the value: "1"'),
    Case("pod-template-typo", {F: tweak("        images: {}", "        images: {}\n        podTemplate:\n"
                                        "          spec:\n            nodeSelectr: {a: b} #<")},
         F, "spec.supernodes.pools[0].podTemplate.spec.nodeSelectr", "unknown field", "nodeSelector"),
    Case("pod-template-containers", {F: tweak("        images: {}", "        images: {}\n        podTemplate:\n"
                                              "          spec:\n            containers: [{name: x}] #<")},
         F, "spec.supernodes.pools[0].podTemplate.spec.containers", "flower-syncer writes the Flower containers"),
    Case("bad-quantity", {F: tweak("        images: {}", "        images: {}\n        supernodeResources:\n"
                                   "          limits: {cpu: lots} #<")},
         F, "spec.supernodes.pools[0].supernodeResources.limits.cpu", "not a Kubernetes quantity"),
    Case("mount-without-volume", {F: tweak("        images: {}", "        images: {}\n        volumeMounts:\n"
                                           "          - {name: data, mountPath: /data} #<")},
         F, "spec.supernodes.pools[0].volumeMounts[0].name", "not defined"),
    Case("vct-in-daemonset", {F: tweak("  mode: StatefulSet", "  mode: DaemonSet").replace(
        "        replicas: 2\n", "        volumeClaimTemplates: #<\n          - metadata: {name: d}\n"
                                "            spec: {}\n")},
         F, "spec.supernodes.pools[0].volumeClaimTemplates", "only work in StatefulSet mode"),
    Case("bad-service-type", {F: tweak("    image: flwr/superlink:1.25.0\n", "    image: flwr/superlink:1.25.0\n"
                                       "    service:\n      type: Loadbalancer #<\n")},
         F, "spec.superlink.service.type", "'LoadBalancer'"),
    Case("wrong-kind", {F: fed().replace("kind: Federation", "kind: Deployment #<")}, F, "kind",
         "expected apiVersion flwr.exalsius.ai/v1 kind Federation"),
    Case("not-a-mapping", {F: "- just\n- a list\n"}, F, "", "expected a mapping"),
    Case("scalar-document", {F: "hello\n"}, F, "", "expected a mapping"),
    Case("bad-annotation-policy", {F: fed(head=FED_HEAD.replace(
        "  name: fed\n", "  name: fed\n  annotations:\n    flower-syncer.io/suspend: \"yes\" #<\n"))},
         F, "metadata.annotations['flower-syncer.io/suspend']", '"true" or "false"'),
    Case("duplicate-federation", {F: fed(), "federations/zz-copy.yaml": fed(head=FED_HEAD.replace(
        "  name: fed\n", "  name: fed #<\n"))},
         "federations/zz-copy.yaml", "metadata.name", "is also defined in federations/fed.yaml"),
    Case("binary-file", {F: b"\x00\x01\x02binary"}, F, "", "binary"),
    Case("invalid-utf8", {F: b"apiVersion: v1\nkind: \xff\xfe\n"}, F, "", "not valid UTF-8"),
    Case("yaml-bomb", {F: "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n" for i in range(8))
        .replace("b: &b", "b: &b", 1)}, F, "", "expands to more than"),
    Case("recursive-alias", {F: "a: &a\n  b: *a\n"}, F, "", "expands to more than"),
    Case("values-typo", {V: "supernode:\n  replica: 3 #<\n"}, V, "supernode.replica", "unknown field",
         "did you mean 'replicas'?"),
    Case("values-isolation-enum", {V: "supernode:\n  isolationMode: thread #<\n"}, V, "supernode.isolationMode",
         "'subprocess' or 'process'"),
    Case("values-node-config-dotted", {V: "supernode:\n  node:\n    config:\n      a.b: 1 #<\n"}, V,
         "supernode.node.config['a.b']", "nested table"),
    Case("values-pkcs8-key", {V: "global:\n  nodeAuth:\n    enabled: true\n    authSupernodePrivateKey: | #<\n"
                                 "      -----BEGIN PRIVATE KEY-----\n      MC4CAQAwBQYDK2VwBCIEIA==\n"
                                 "      -----END PRIVATE KEY-----\n"}, V, "global.nodeAuth.authSupernodePrivateKey",
         "PKCS#8", "ssh-keygen"),
    Case("values-multi-doc", {V: "supernode: {}\n---\nsupernode: {} #<\n"}, V, "", "single YAML document"),
    Case("release-name-invalid", {"supernodes/Bad_Name/values.yaml": "{}\n"}, "supernodes/Bad_Name", "",
         "release name"),
    Case("release-without-values", {"supernodes/r2/release.yaml": "namespace: x\n"}, "supernodes/r2", "",
         "has no values.yaml"),
    Case("release-settings-typo", {V: "{}\n", "supernodes/r1/release.yaml": "namesapce: x #<\n"},
         "supernodes/r1/release.yaml", "namesapce", "unknown field", "did you mean 'namespace'?"),
    Case("values-at-wrong-place", {"supernodes/r3.yaml": "{}\n"}, "supernodes/r3.yaml", "",
         "supernodes/<release>/values.yaml"),
    Case("settings-typo", {F: fed(), "flower-syncer.yaml": "defaultNamespac: x #<\n"}, "flower-syncer.yaml",
         "defaultNamespac", "unknown field", "did you mean 'defaultNamespace'?"),
    Case("object-collision", {F: tweak("      - name: a\n", "      - name: a-superlink\n"),
                              "federations/c.yaml": fed(head=FED_HEAD.replace("  name: fed\n",
                                                                              "  name: fed-supernode-a\n"))},
         "", "", "renders"),
]


def _marker_line(text: str | bytes) -> int:
    if isinstance(text, bytes):
        return 0
    for i, line in enumerate(text.splitlines(), 1):
        if "#<" in line:
            return i
    return 0


def _write(root: Path, files: dict[str, str | bytes]) -> None:
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)


def test_corpus_is_large_enough() -> None:
    assert len(CASES) >= 30
    assert len({c.name for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_broken_input_is_reported_precisely(case: Case, tmp_path: Path) -> None:
    _write(tmp_path, case.files)
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
    _write(repo, {F: fed(), "kept/ok/values.yaml": "tls:\n  enabled: false\n"})
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
    _write(tmp_path, {F: text, V: "supernode:\n  replica: 3\n"})
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
    _write(tmp_path, {F: tweak("        images: {}", extra + "          name: \"c_{rank}\"")})
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
