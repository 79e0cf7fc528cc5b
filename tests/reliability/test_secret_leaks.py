"""Secrets stay secret (issue 25, item 6): requireEncryption checks every secret value, not just
that the file went through sops; encrypted env values and node config reach pods through a Secret,
never as plain values in a workload spec; decrypted scalars of every type stay out of `render`;
and what flower-syncer records of a Secret (inventory, applied-hash annotation) is a keyed digest
that a `view` user cannot test guesses against. Files are encrypted natively (tests/sops_writer.py),
so these run without the sops CLI."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from syncer.cli import EXIT_OK, main
from syncer.engine.digestkey import KEY_SECRET
from syncer.engine.inventory import decode
from syncer.engine.normalize import canonical_json, fingerprint
from syncer.engine.ownership import stamp_repository
from syncer.engine.sync import Engine, SyncOptions
from syncer.identity import ANN_APPLIED_HASH, Unit
from syncer.render.encrypted_values import ANN_SEALED
from syncer.render.repo import plan_repo, render_repo
from syncer.repo.loader import load_repo
from syncer.secrets.keys import Decryption, load_identities
from tests.builders import FED, NS, SECRET_VALUES, secret_manifest
from tests.fakekube import FakeApiServer, FakeKube
from tests.sops_writer import encrypt

VALUES = SECRET_VALUES.replace("  replicas: 2\n", "")  # the redaction test sets its own


@pytest.fixture
def key(tmp_path: Path) -> tuple[Path, str]:
    import pyrage

    identity = pyrage.x25519.Identity.generate()
    path = tmp_path / "age.key"
    path.write_text(f"{identity}\n")
    return path, str(identity.to_public())


def release(root: Path, files: dict[str, str], settings: str = "") -> Path:
    (root / "supernodes" / "edge").mkdir(parents=True, exist_ok=True)
    (root / "flower-syncer.yaml").write_text(f"name: leaks\ndefaultNamespace: {NS}\n{settings}")
    for name, text in files.items():
        (root / "supernodes" / "edge" / name).write_text(text)
    return root


def errors(root: Path, key_file: Path | None, required: bool = True) -> list[str]:
    decryption = Decryption(load_identities([key_file]) if key_file else (), required=required)
    state = load_repo(root, decryption)
    rendered = render_repo(state)
    return [d.render() for d in state.diagnostics + rendered.diagnostics if d.severity == "error"]


# -- requireEncryption checks each value ---------------------------------------------------------------

def test_a_sops_file_whose_regex_encrypts_nothing_does_not_satisfy_require_encryption(
        tmp_path: Path, key: tuple[Path, str]) -> None:
    key_file, public = key
    hollow = encrypt(secret_manifest(password="sunshine"), public, encrypted_regex="^nothing$")
    assert "sops:" in hollow and "sunshine" in hollow  # encrypted with sops, and nothing encrypted
    root = release(tmp_path, {"values.yaml": "tls:\n  enabled: false\n", "secrets.yaml": hollow},
                   "requireEncryption: true\n")
    found = errors(root, key_file)
    assert len(found) == 1, found
    assert "supernodes/edge/secrets.yaml:7:3: error: stringData.password: Secret 'edge-credentials'" in found[0]
    assert "not encrypted" in found[0] and "sunshine" not in found[0]
    partial = encrypt(secret_manifest(password="sunshine"), public, encrypted_regex="^stringData$")
    (root / "supernodes" / "edge" / "secrets.yaml").write_text(partial)
    assert errors(root, key_file) == []
    assert errors(root, None, required=False) == []  # validate without the key: the value is left encrypted


def test_a_private_key_left_plain_by_the_sops_rules_is_refused(tmp_path: Path, key: tuple[Path, str]) -> None:
    key_file, public = key
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    pem = ec.generate_private_key(ec.SECP384R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()).decode()
    body = "".join(f"      {line}\n" for line in pem.strip().splitlines())
    values = ("tls:\n  enabled: true\nsupernode:\n  image:\n    tag: 1.25.0\nglobal:\n  nodeAuth:\n    enabled: true\n"
              f"    authSupernodePrivateKey: |\n{body}")
    root = release(tmp_path, {"values.yaml": encrypt(values, public, encrypted_regex="^image$")},
                   "requireEncryption: true\n")
    found = errors(root, key_file)
    assert any("global.nodeAuth.authSupernodePrivateKey" in m and "plain text" in m for m in found), found
    (root / "supernodes" / "edge" / "values.yaml").write_text(encrypt(values, public))
    assert errors(root, key_file) == []
    # the digest that rolls the pods when the key changes is keyed, not a plain hash of the key
    manifests = rendered(root, key_file)
    (secret,) = [m for m in manifests if m["kind"] == "Secret" and m["metadata"]["name"].endswith("-node-auth")]
    (deployment,) = [m for m in manifests if m["kind"] == "Deployment"]
    digest = deployment["spec"]["template"]["metadata"]["annotations"]["flower-syncer.io/node-auth-sha256"]
    assert digest != hashlib.sha256("\0".join(secret["data"].values()).encode()).hexdigest()


# -- encrypted values reach pods through a Secret --------------------------------------------------------

def rendered(root: Path, key_file: Path) -> list[dict[str, Any]]:
    state = load_repo(root, Decryption(load_identities([key_file])))
    out = render_repo(state)
    assert out.clean, [d.render() for d in out.diagnostics]
    return out.manifests()


def test_encrypted_env_and_node_config_never_land_in_the_workload_spec(tmp_path: Path,
                                                                        key: tuple[Path, str]) -> None:
    key_file, public = key
    root = release(tmp_path, {"values.yaml": encrypt(VALUES, public, encrypted_regex="^(config|value)$")})
    manifests = rendered(root, key_file)
    (deployment,) = [m for m in manifests if m["kind"] == "Deployment"]
    spec = json.dumps(deployment)
    for plain in ("top-secret-api-key", "s3cr3t-token-value", "12345678901234567", "epochs=3", "flag=true"):
        assert plain not in spec, plain
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e for e in container["env"]}
    assert "--isolation=subprocess" in container["args"]  # what was not encrypted stays as it is
    ref = env["API_KEY"]["valueFrom"]["secretKeyRef"]
    (sealed,) = [m for m in manifests if m["kind"] == "Secret" and m["metadata"]["name"] == ref["name"]]
    data = {k: base64.b64decode(v).decode() for k, v in sealed["data"].items()}
    assert data[ref["key"]] == "top-secret-api-key"
    node_config = [a for a in container["args"] if a.startswith("$(FLOWER_SYNCER_SEALED_")]
    assert len(node_config) == 1
    var = node_config[0][2:-1]
    arg = data[env[var]["valueFrom"]["secretKeyRef"]["key"]]
    assert arg.startswith("--node-config=") and "epochs=3" in arg and 's3cr3t-token-value' in arg
    # the pods roll when a value changes, by a keyed digest (not a hash anyone could test guesses against)
    digest = deployment["spec"]["template"]["metadata"]["annotations"][ANN_SEALED]
    blob = "\0".join(f"{k}={v}" for k, v in sorted(data.items()))
    assert digest != hashlib.sha256(blob.encode()).hexdigest()


def test_an_encrypted_federation_keeps_pool_env_and_node_config_in_a_secret(tmp_path: Path,
                                                                           key: tuple[Path, str]) -> None:
    key_file, public = key
    pools = ("      - name: a\n        replicas: 1\n        images: {}\n"
             "        env: [{name: WANDB_API_KEY, value: wandb-very-secret}]\n"
             "        nodeConfig: {partition: \"7\", secret: hunter2-node}\n")
    text = FED.format(name="fed", pools=pools, annotations="")
    (tmp_path / "federations").mkdir()
    (tmp_path / "flower-syncer.yaml").write_text(f"name: leaks\ndefaultNamespace: {NS}\n")
    (tmp_path / "federations" / "fed.yaml").write_text(encrypt(text, public, encrypted_regex="^(env|nodeConfig)$"))
    manifests = rendered(tmp_path, key_file)
    workloads = json.dumps([m for m in manifests if m["kind"] == "StatefulSet"])
    for plain in ("wandb-very-secret", "hunter2-node"):
        assert plain not in workloads, plain
    assert any(m["kind"] == "Secret" and m["metadata"]["name"] == "fed-supernode-a-sealed" for m in manifests)


def test_render_redacts_decrypted_scalars_of_every_type(tmp_path: Path, key: tuple[Path, str],
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    key_file, public = key
    values = VALUES + "  replicas: 4242\n"
    root = release(tmp_path, {"values.yaml": encrypt(values, public)})
    assert main(["render", str(root), "--decryption-key-file", str(key_file)]) == EXIT_OK
    out = capsys.readouterr().out
    assert "kind: Deployment" in out
    assert "replicas: '**redacted**'" in out
    for plain in ("12345678901234567", "4242", "top-secret-api-key", "s3cr3t-token-value", "epochs=3"):
        assert plain not in out, plain


# -- no unsalted digest of secret content ---------------------------------------------------------------

def sync(kube: FakeKube, root: Path) -> Any:
    state = load_repo(root)
    return Engine(kube).sync(plan_repo(state, render_repo(state), revision="r1"), SyncOptions())


def test_the_inventory_digest_of_a_secret_cannot_be_tested_against_a_dictionary(tmp_path: Path) -> None:
    server = FakeApiServer()
    server.add_namespace(NS)
    kube = FakeKube(server)
    root = release(tmp_path, {"values.yaml": "tls:\n  enabled: false\n",
                              "secrets.yaml": secret_manifest(password="sunshine")})
    assert sync(kube, root).ok
    inventory = decode(kube.get("ConfigMap", NS, "flower-syncer.supernode.edge") or {})
    assert inventory is not None
    recorded = {str(r): e.applied for r, e in inventory.entries.items()}[f"Secret/{NS}/edge-credentials"]
    live = kube.get("Secret", NS, "edge-credentials") or {}
    assert live["metadata"]["annotations"][ANN_APPLIED_HASH] == recorded

    state = load_repo(root)
    (desired,) = [m for m in render_repo(state).manifests() if m["metadata"]["name"] == "edge-credentials"]
    desired = stamp_repository(desired, "leaks")

    def guess(password: str) -> str:
        data = {"password": base64.b64encode(password.encode()).decode()}
        return fingerprint({**desired, "data": data})

    assert recorded not in {guess(p) for p in ("123456", "password", "sunshine", "qwerty")}  # the attack fails
    assert hashlib.sha256(canonical_json(desired)).hexdigest()[:32] != recorded
    stored = kube.get("Secret", NS, KEY_SECRET) or {}
    assert recorded == fingerprint(desired, base64.b64decode(stored["data"]["key"]))  # the agent's key opens it
    assert "flower-syncer.io/unit" not in stored["metadata"].get("labels", {})  # no unit owns or prunes it


def test_keyed_digests_keep_an_unchanged_repository_at_zero_writes(tmp_path: Path) -> None:
    server = FakeApiServer()
    server.add_namespace(NS)
    kube = FakeKube(server)
    root = release(tmp_path, {"values.yaml": "tls:\n  enabled: false\n",
                              "secrets.yaml": secret_manifest(password="sunshine")})
    assert sync(kube, root).ok
    key = (kube.get("Secret", NS, KEY_SECRET) or {})["data"]["key"]
    again = sync(kube, root)  # a new engine, as a one-shot CLI run or a restarted agent
    assert again.ok and again.writes == 0
    assert (kube.get("Secret", NS, KEY_SECRET) or {})["data"]["key"] == key
    (root / "supernodes" / "edge" / "secrets.yaml").write_text(secret_manifest(password="moonshine"))
    changed = sync(kube, root)
    assert changed.ok and changed.writes >= 1  # a changed value is still seen without a plain digest
    (root / "supernodes" / "edge" / "secrets.yaml").unlink()
    assert sync(kube, root).ok
    assert kube.get("Secret", NS, "edge-credentials") is None  # pruned with its unit's objects
    assert kube.get("Secret", NS, KEY_SECRET) is not None  # the key stays
    assert Unit("supernode", NS, "edge")


def test_a_guardrail_message_never_quotes_a_decrypted_value(tmp_path: Path, key: tuple[Path, str]) -> None:
    """Render and guardrail diagnostics are made after loading and quote what was asked for (a
    ServiceAccount, a host path): a value from an encrypted file is redacted there too, as in the
    loader's own diagnostics (they reach the log, Events, notifications and status)."""
    key_file, public = key
    pools = ("      - name: a\n        replicas: 1\n        images: {}\n"
             "        podTemplate: {spec: {serviceAccountName: sa-very-secret-name}}\n")
    text = FED.format(name="fed", pools=pools, annotations="")
    (tmp_path / "federations").mkdir()
    (tmp_path / "flower-syncer.yaml").write_text(f"name: leaks\ndefaultNamespace: {NS}\n")
    (tmp_path / "federations" / "fed.yaml").write_text(encrypt(text, public, encrypted_regex="^serviceAccountName$"))
    found = errors(tmp_path, key_file)
    assert found and any("serviceAccountName" in e for e in found), found
    assert not any("sa-very-secret-name" in e for e in found), found
