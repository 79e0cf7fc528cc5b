"""Encrypted values moved out of workload specs (syncer.render.encrypted_values), and the digest key of
Secrets (syncer.engine.digestkey) when it cannot be read."""

from __future__ import annotations

import base64
import copy
from pathlib import Path
from typing import Any

from syncer.engine.digestkey import KEY_SECRET, holds_git_content
from syncer.engine.sync import Engine, SyncOptions
from syncer.identity import ANN_COPY_FROM, Unit
from syncer.render.common import RenderContext
from syncer.render.encrypted_values import ANN_SEALED, seal
from syncer.render.repo import plan_repo, render_repo
from syncer.repo.loader import load_repo
from tests.fakekube import FakeApiServer, FakeKube, _Response, _status

CTX = RenderContext(Unit("supernode", "flower", "edge"), "supernodes/edge/values.yaml")


def workload(**container: Any) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "edge", "namespace": "flower",
                                                                         "labels": {"a": "b"}},
            "spec": {"template": {"metadata": {"labels": {}}, "spec": {
                "initContainers": [{"name": "init", "args": ["--token=long-secret-value"]}],
                "containers": [{"name": "main", **container}]}}}}


def test_nothing_sealed_leaves_the_manifests_as_they_are() -> None:
    m = workload(env=[{"name": "A", "value": "long-secret-value"}])
    assert seal([m], frozenset(), b"k", CTX) == [m]


def test_env_args_and_node_config_move_into_one_secret() -> None:
    m = workload(env=[{"name": "A", "value": "long-secret-value"}, {"name": "B", "value": "other"},
                      {"name": "C", "value": "Bearer long-secret-value"}],
                 args=["--isolation=process", "--node-config=epochs=3 lr=0.5", "--replicas=3"])
    out = seal([copy.deepcopy(m)], frozenset({"long-secret-value", "3"}), b"k", CTX)
    deployment, secret = out
    spec = deployment["spec"]["template"]["spec"]
    env = {e["name"]: e for e in spec["containers"][0]["env"]}
    assert env["B"] == {"name": "B", "value": "other"}
    assert env["A"]["valueFrom"]["secretKeyRef"] == {"name": "edge-sealed", "key": "main.env.A"}
    assert "valueFrom" in env["C"]
    # a short value is looked for in node config only
    assert spec["containers"][0]["args"] == ["--isolation=process", "$(FLOWER_SYNCER_SEALED_ARGS_1)", "--replicas=3"]
    assert env["FLOWER_SYNCER_SEALED_ARGS_1"]["valueFrom"]["secretKeyRef"]["key"] == "main.args.1"
    assert spec["initContainers"][0]["args"] == ["$(FLOWER_SYNCER_SEALED_ARGS_0)"]
    data = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    assert data == {"main.env.A": "long-secret-value", "main.env.C": "Bearer long-secret-value",
                    "main.args.1": "--node-config=epochs=3 lr=0.5", "init.args.0": "--token=long-secret-value"}
    assert secret["metadata"]["labels"]["flower-syncer.io/unit"] == "edge"
    again = seal([copy.deepcopy(m)], frozenset({"long-secret-value", "3"}), b"k", CTX)
    assert again == out  # deterministic
    other_key = seal([copy.deepcopy(m)], frozenset({"long-secret-value", "3"}), b"x", CTX)
    assert other_key[0]["spec"]["template"]["metadata"]["annotations"][ANN_SEALED] != \
        deployment["spec"]["template"]["metadata"]["annotations"][ANN_SEALED]


def test_which_secrets_need_a_keyed_digest() -> None:
    secret = {"kind": "Secret", "metadata": {"name": "s", "namespace": "n"}, "data": {"a": "eA=="}}
    assert holds_git_content(secret)
    assert not holds_git_content({**secret, "data": {}})
    assert not holds_git_content({**secret, "metadata": {"name": "s", "annotations": {ANN_COPY_FROM: "x"}}})
    assert not holds_git_content({"kind": "ConfigMap", "metadata": {}, "data": {"a": "b"}})


class _NoKeyServer(FakeApiServer):
    def handle(self, method: str, url: str, headers: Any, body: Any) -> _Response:
        if KEY_SECRET in url or (method == "POST" and "/secrets" in url and KEY_SECRET in str(body)):
            return _status(403, "Forbidden", "secrets is forbidden")
        return super().handle(method, url, headers, body)


def test_a_digest_key_that_cannot_be_read_fails_the_unit_and_applies_nothing(tmp_path: Path) -> None:
    server = _NoKeyServer()
    server.add_namespace("flower")
    kube = FakeKube(server)
    (tmp_path / "supernodes" / "edge").mkdir(parents=True)
    (tmp_path / "flower-syncer.yaml").write_text("name: t\ndefaultNamespace: flower\n")
    (tmp_path / "supernodes" / "edge" / "values.yaml").write_text("tls:\n  enabled: false\n")
    (tmp_path / "supernodes" / "edge" / "secrets.yaml").write_text(
        "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\nstringData: {password: sunshine}\n")
    state = load_repo(tmp_path)
    report = Engine(kube).sync(plan_repo(state, render_repo(state)), SyncOptions())
    assert not report.ok
    (unit,) = report.units
    assert unit.errors and "digest key Secret flower/flower-syncer.digest-key" in unit.errors[0]
    assert kube.get("Secret", "flower", "s") is None and kube.get("Deployment", "flower",
                                                                   "edge-flower-client-supernode") is None
