"""Validation does not pass what the API server refuses or silently changes (issue 9, item 7): each
case is a Federation or SuperNode values file that used to validate, then failed at apply time
(or, worse, landed changed: replicas 4294967299 became 3 and `diff` saw no drift). Each must now
be a diagnostic naming the file and the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from syncer.repo.loader import load_repo
from tests.builders import NS, federation


def fed(name: str = "fed", env: str = "[]", replicas: str = "1", pool_env: str = "[]", node_config: str = "{}",
        gpu: str = "null", pod_template: str = "null") -> str:
    """A Federation with the fields the cases set (YAML text of each)."""
    extra = (f"        env: {pool_env}\n        nodeConfig: {node_config}\n        gpu: {gpu}\n"
             f"        podTemplate: {pod_template}\n")
    return federation(name, f"      - name: a\n        replicas: {replicas}\n        images: {{}}\n{extra}",
                      supernodes=f"    env: {env}\n")

BASE = {"name": "fed", "env": "[]", "replicas": "1", "pool_env": "[]", "node_config": "{}", "gpu": "null",
        "pod_template": "null"}
PROBE = (
    "{{spec: {{containers: [{{name: supernode, readinessProbe: {{tcpSocket: {{port: 9094}}, periodSeconds: {}}}}}]}}}}"
)

# case: (fields changed from BASE, field path the diagnostic names, words it says)
CASES: dict[str, tuple[dict[str, str], str, str]] = {
    "replicas-int32-overflow": ({"replicas": "4294967299"}, "spec.supernodes.pools[0].replicas", "less than or equal"),
    "replicas-2^31": ({"replicas": str(2**31)}, "spec.supernodes.pools[0].replicas", "less than or equal"),
    "gpu-count-beyond-int64": ({"gpu": f"{{enabled: true, count: {2**63}}}"}, "spec.supernodes.pools[0].gpu.count",
                               "less than or equal"),
    "env-name-empty": ({"env": '[{name: "", value: x}]'}, "spec.supernodes.env[0].name", "non-empty name"),
    "env-name-with-equals": ({"env": '[{name: "A=B", value: x}]'}, "spec.supernodes.env[0].name", "contains '='"),
    "env-name-twice": ({"pool_env": "[{name: A, value: x}, {name: A, value: y}]"},
                       "spec.supernodes.pools[0].env[1].name", "is set twice"),
    "env-pod-name-vs-wrapper": ({"pool_env": "[{name: POD_NAME, value: x}]",
                                 "node_config": '{partition-id: "{index}"}'},
                                "spec.supernodes.pools[0].env[0].name", "node-config wrapper"),
    "node-config-int-beyond-int64": ({"node_config": '{seed: "9223372036854775808"}'},
                                     "spec.supernodes.pools[0].nodeConfig.seed", "does not fit in 64 bits"),
    "name-trailing-newline": ({"name": '"fed\\n"'}, "metadata.name", "must consist of"),
    "probe-period-int32-overflow": ({"pod_template": PROBE.format(2**31)},
                                    "spec.supernodes.pools[0].podTemplate.spec.containers[0].readinessProbe"
                                    ".periodSeconds", "does not fit in 32 bits"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_what_the_api_server_refuses_is_a_validation_error(case: str, tmp_path: Path) -> None:
    fields, path, words = CASES[case]
    (tmp_path / "federations").mkdir()
    (tmp_path / "flower-syncer.yaml").write_text(f"name: limits\ndefaultNamespace: {NS}\n")
    (tmp_path / "federations" / "fed.yaml").write_text(fed(**{**BASE, **fields}))
    state = load_repo(tmp_path)
    errors = [d for d in state.diagnostics if d.severity == "error"]
    assert any(d.file == "federations/fed.yaml" and d.path == path and words in d.message for d in errors), \
        [d.render() for d in errors]


def test_the_base_document_is_valid(tmp_path: Path) -> None:
    """The cases above differ from a valid document only in what they name."""
    (tmp_path / "federations").mkdir()
    (tmp_path / "federations" / "fed.yaml").write_text(fed(**BASE))
    assert load_repo(tmp_path).diagnostics == []


SUPERNODE_CASES: dict[str, tuple[str, str, str]] = {
    "replica-count-int32-overflow": ("supernode:\n  replicas: 4294967299\n", "supernode.replicas",
                                     "less than or equal"),
    "probe-seconds-int32-overflow": ("supernode:\n  readinessProbe:\n    periodSeconds: 2147483648\n",
                                     "supernode.readinessProbe.periodSeconds", "less than or equal"),
    "run-as-user-beyond-int32": ("supernode:\n  podSecurityContext:\n    runAsUser: 4294967296\n",
                                 "supernode.podSecurityContext.runAsUser", "not a valid user or group id"),
    "env-name-twice": ("supernode:\n  env: [{name: A, value: x}, {name: A, value: y}]\n", "supernode.env[1].name",
                       "is set twice"),
    "node-config-int-beyond-int64": ("supernode:\n  node:\n    config: {seed: 9223372036854775808}\n",
                                     "supernode.node.config.seed", "does not fit in 64 bits"),
}


@pytest.mark.parametrize("case", sorted(SUPERNODE_CASES))
def test_supernode_values_the_api_server_refuses(case: str, tmp_path: Path) -> None:
    text, path, words = SUPERNODE_CASES[case]
    release = tmp_path / "supernodes" / "edge"
    release.mkdir(parents=True)
    (release / "values.yaml").write_text("tls:\n  enabled: false\n" + text)
    errors = [d for d in load_repo(tmp_path).diagnostics if d.severity == "error"]
    assert any(d.path == path and words in d.message for d in errors), [d.render() for d in errors]


@pytest.mark.parametrize(("where", "arg", "path"), [
    ("superlink", "--isolation=process", "spec.superlink.extraArgs[0]"),
    ("pool", "--superlink=elsewhere:9092", "spec.supernodes.pools[0].extraArgs[0]"),
    ("pool", "--insecure", "spec.supernodes.pools[0].extraArgs[0]"),
])
def test_extra_args_that_reset_a_managed_flag(where: str, arg: str, path: str, tmp_path: Path) -> None:
    """Federation extraArgs are checked like the SuperNode chart's (issue 11)."""
    text = fed(**BASE)
    if where == "superlink":
        image = "    image: flwr/superlink:1.25.0\n"
        text = text.replace(image, f"{image}    extraArgs: [{arg}]\n")
    else:
        text = text.replace("        images: {}\n", f"        images: {{}}\n        extraArgs: [{arg}]\n")
    (tmp_path / "federations").mkdir()
    (tmp_path / "federations" / "fed.yaml").write_text(text)
    errors = [d for d in load_repo(tmp_path).diagnostics if d.severity == "error"]
    assert [(d.path, d.message.split(" is ")[0]) for d in errors] == [(path, arg.split("=", maxsplit=1)[0])], errors
