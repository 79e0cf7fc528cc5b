"""SuperNode chart values: every example of the chart docs renders what the docs describe, and bad
values are reported at the right file, line and field."""

from __future__ import annotations

import base64
import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from syncer.diagnostics import Diagnostic
from syncer.identity import ANN_COPY_FROM, ANN_COPY_KEYS, Manifest, Unit
from syncer.models.supernode import (
    SuperNodeValues,
    helm_fullname,
    parse_openssh_private_key,
)
from syncer.render.common import RenderContext, to_yaml
from syncer.render.supernode import render_supernode
from tests.flower_parse import parse_node_config
from tests.unit.chart_docs import (
    ALL_IN_ONE,
    DISTRIBUTED,
    DISTRIBUTED_SUPEREXEC,
    DISTRIBUTED_SUPERNODE,
    NO_TLS,
    NODE_CONFIG,
    PYTORCH,
    TENSORFLOW,
    TLS_COPY,
    TLS_DEFAULT,
    TLS_EXISTING,
)
from tests.unit.helpers import Keys
from tests.unit.helpers import load_values as load
from tests.unit.helpers import render_values as render
from tests.unit.helpers import render_values_list as render_list

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "config" / "examples" / "supernodes"

SELECTOR = {"app.kubernetes.io/name": "flower-client", "app.kubernetes.io/component": "supernode"}
WRITABLE = [("tmp-flwr", "/app/.flwr"), ("tmp-cache", "/app/.cache"), ("tmp-config", "/app/.config"),
            ("tmp-var-tmp", "/var/tmp")]

# ---------------------------------------------------------------------------------------------
# Helpers


def errors(text: str, release: str = "test") -> list[Diagnostic]:
    model, diags = load(text, release)
    assert model is None and diags, "expected validation errors"
    return diags


def only(diags: list[Diagnostic], path: str) -> Diagnostic:
    found = [d for d in diags if d.path == path]
    assert len(found) == 1, [d.render() for d in diags]
    return found[0]


def pod(objs: dict[tuple[str, str], Manifest], name: str) -> dict[str, Any]:
    spec: dict[str, Any] = objs[("Deployment", name)]["spec"]["template"]["spec"]
    return spec


def container(objs: dict[tuple[str, str], Manifest], name: str) -> dict[str, Any]:
    containers = pod(objs, name)["containers"]
    assert len(containers) == 1
    c: dict[str, Any] = containers[0]
    return c


def volume(objs: dict[tuple[str, str], Manifest], deployment: str, name: str) -> dict[str, Any]:
    for v in pod(objs, deployment).get("volumes", []):
        if v["name"] == name:
            return dict(v)
    raise AssertionError(f"no volume {name}")


def mount(objs: dict[tuple[str, str], Manifest], deployment: str, name: str) -> dict[str, Any]:
    for m in container(objs, deployment).get("volumeMounts", []):
        if m["name"] == name:
            return dict(m)
    raise AssertionError(f"no mount {name}")




def _ssh_string(data: bytes) -> bytes:
    return len(data).to_bytes(4, "big") + data


def synthetic_openssh_key(key_type: bytes, cipher: bytes = b"none") -> str:
    """An openssh-key-v1 structure built by hand (the parser only reads its header)."""
    public = _ssh_string(key_type) + _ssh_string(b"\x04" + b"\x11" * 32)
    kdf = b"bcrypt" if cipher != b"none" else b"none"
    raw = (b"openssh-key-v1\x00" + _ssh_string(cipher) + _ssh_string(kdf) + _ssh_string(b"")
           + (1).to_bytes(4, "big") + _ssh_string(public) + _ssh_string(b"\x00" * 48))
    body = base64.b64encode(raw).decode()
    lines = [body[i:i + 70] for i in range(0, len(body), 70)]
    pem = ["-----BEGIN OPENSSH PRIVATE KEY-----", *lines, "-----END OPENSSH PRIVATE KEY-----"]
    return "\n".join(pem) + "\n"


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Keys:
    return Keys(tmp_path_factory.mktemp("keys"))


# ---------------------------------------------------------------------------------------------
# Defaults: the chart's values tables


DEFAULTS = REPO / "tests" / "fixtures" / "supernode-chart-defaults.tsv"


def _table_rows() -> list[tuple[str, Any]]:
    """The chart's documented parameters and defaults, from the fixture (always there: no skip
    under CI=true)."""
    rows = []
    for line in DEFAULTS.read_text().splitlines():
        if line and not line.startswith("#"):
            param, _, default = line.partition("\t")
            rows.append((param, yaml.safe_load(default) if default else ""))
    return rows


def test_every_documented_parameter_exists_with_its_default() -> None:
    rows = _table_rows()
    assert len(rows) > 120  # the tables were found and read
    dumped = SuperNodeValues().model_dump(by_alias=True)
    for param, expected in rows:
        node: Any = dumped
        for part in param.split("."):
            assert isinstance(node, dict) and part in node, f"{param} is not a field"
            node = node[part]
        if expected == {} and isinstance(node, dict) and node:
            # superexec.supernode documents `{}`: a mapping whose fields are all unset
            assert not any(node.values()), param
        else:
            assert node == expected, f"{param}: {node!r} != documented {expected!r}"


def test_a_values_file_only_overrides_what_it_names() -> None:
    model, _ = load("supernode:\n  image:\n    tag: 1.25.0\nglobal:\n  podSecurityContext:\n"
                    "    runAsNonRoot: false\n")
    assert model is not None
    assert model.supernode.image.repository == "flwr/supernode-ee"
    assert model.supernode.image.registry == "registry.hub.docker.com"
    assert model.superexec.image.repository == "flwr/superexec"
    assert model.superexec.image.tag == "1.21.0-py3.11-ubuntu24.04"
    assert model.global_.podSecurityContext.readOnlyRootFilesystem is True
    assert model.global_.podSecurityContext.capabilities.drop == ["ALL"]


def test_an_empty_values_file_renders_the_chart_defaults() -> None:
    objs = render("", release="demo")
    assert set(objs) == {
        ("ServiceAccount", "demo-flower-client-supernode"),
        ("Service", "demo-flower-client-supernode"),
        ("NetworkPolicy", "demo-flower-client-supernode"),
        ("Deployment", "demo-flower-client-supernode"),
    }
    c = container(objs, "demo-flower-client-supernode")
    assert c["image"] == "registry.hub.docker.com/flwr/supernode-ee:1.21.0-ubuntu"
    assert c["args"] == [
        "--superlink=my-superlink.example.com:9092",
        "--isolation=subprocess",
        "--clientappio-api-address=0.0.0.0:9094",
        "--health-server-address=0.0.0.0:8081",
        "--root-certificates=/app/certificates/ca.crt",
    ]


# ---------------------------------------------------------------------------------------------
# Multi project setup


def test_pytorch_example() -> None:
    objs = render(PYTORCH, release="pytorch")
    name = "pytorch-flower-client-supernode"
    assert set(objs) == {(k, name) for k in ("ServiceAccount", "Service", "NetworkPolicy", "Deployment")}
    dep = objs[("Deployment", name)]
    assert dep["spec"]["replicas"] == 1
    assert dep["spec"]["selector"] == {"matchLabels": {**SELECTOR, "app.kubernetes.io/instance": "pytorch"}}
    c = container(objs, name)
    assert c["name"] == "supernode"
    assert c["image"] == "myregistry.example.com/flwr/supernode:1.20.0-pytorch"
    assert c["imagePullPolicy"] == "IfNotPresent"
    # Flower 1.20 has no health server: no flag, and no probe that would kill the pod.
    assert c["args"] == [
        "--superlink=my-superlink.example.com:9092",
        "--isolation=subprocess",
        "--clientappio-api-address=0.0.0.0:9094",
        "--root-certificates=/app/certificates/ca.crt",
        "--node-config=num-partitions=2 partition-id=0",
    ]
    assert "livenessProbe" not in c and "readinessProbe" not in c
    assert c["ports"] == [{"name": "clientappio", "containerPort": 9094, "protocol": "TCP"},
                          {"name": "health", "containerPort": 8081, "protocol": "TCP"}]
    assert volume(objs, name, "superlink-ca") == {
        "name": "superlink-ca",
        "secret": {"secretName": "flower-client-tls", "items": [{"key": "ca.crt", "path": "ca.crt"}]},
    }
    assert pod(objs, name)["serviceAccountName"] == name


def test_tensorflow_example() -> None:
    objs = render(TENSORFLOW, release="tensorflow")
    name = "tensorflow-flower-client-supernode"
    assert objs[("Deployment", name)]["spec"]["replicas"] == 3
    args = container(objs, name)["args"]
    assert args[0] == "--superlink=my-other-superlink.example.com:9092"
    assert args[-1] == "--node-config=num-partitions=2 partition-id=1"
    assert container(objs, name)["image"] == "myregistry.example.com/flwr/supernode:1.20.0-tensorflow"
    assert objs[("Service", name)]["spec"]["selector"]["app.kubernetes.io/instance"] == "tensorflow"


# ---------------------------------------------------------------------------------------------
# TLS


def test_tls_default_secret_is_mounted_and_trusted() -> None:
    objs = render(TLS_DEFAULT, release="tls")
    name = "tls-flower-client-supernode"
    c = container(objs, name)
    assert "--root-certificates=/app/certificates/ca.crt" in c["args"]
    assert "--insecure" not in c["args"]
    # only ca.crt of the kubernetes.io/tls Secret reaches the pod, read-only
    assert volume(objs, name, "superlink-ca")["secret"] == {
        "secretName": "flower-client-tls", "items": [{"key": "ca.crt", "path": "ca.crt"}]}
    assert mount(objs, name, "superlink-ca") == {"name": "superlink-ca", "mountPath": "/app/certificates",
                                                  "readOnly": True}
    assert not [k for k in objs if k[0] == "Secret"]  # the user provides flower-client-tls


def test_tls_existing_secret() -> None:
    objs = render(TLS_EXISTING, release="tls")
    name = "tls-flower-client-supernode"
    assert volume(objs, name, "superlink-ca")["secret"]["secretName"] == "my-custom-tls-secret-name"
    assert not [k for k in objs if k[0] == "Secret"]


def test_tls_copy_from_existing_secret() -> None:
    objs = render(TLS_COPY, release="tls")
    name = "tls-flower-client-supernode"
    secret = objs[("Secret", "my-custom-tls-secret-name")]
    assert secret["type"] == "Opaque"
    assert secret["data"] == {}
    assert secret["metadata"]["annotations"][ANN_COPY_FROM] == "superlink-tls-secret-name"
    assert secret["metadata"]["annotations"][ANN_COPY_KEYS] == "ca.crt,tls.crt"
    assert secret["metadata"]["namespace"] == "flower"
    # the SuperNode mounts the copy, never the SuperLink's Secret
    assert volume(objs, name, "superlink-ca")["secret"]["secretName"] == "my-custom-tls-secret-name"
    assert "superlink-tls-secret-name" not in json.dumps(pod(objs, name))


def test_tls_copy_default_name() -> None:
    objs = render("supernode:\n  superlink:\n    certificate:\n      existingSecret: superlink-tls\n"
                  "      copyFromExistingSecret:\n        enabled: true\n", release="tls")
    assert objs[("Secret", "flower-client-tls")]["metadata"]["annotations"][ANN_COPY_FROM] == "superlink-tls"
    ca = volume(objs, "tls-flower-client-supernode", "superlink-ca")
    assert ca["secret"]["secretName"] == "flower-client-tls"


def test_without_tls() -> None:
    objs = render(NO_TLS, release="plain")
    name = "plain-flower-client-supernode"
    c = container(objs, name)
    assert "--insecure" in c["args"]
    assert not [a for a in c["args"] if a.startswith("--root-certificates")]
    assert "superlink-ca" not in [v["name"] for v in pod(objs, name)["volumes"]]


# ---------------------------------------------------------------------------------------------
# Node authentication


def test_node_auth_example(keys: Keys) -> None:
    objs = render(keys.node_auth_values(), release="edge")
    sn = "edge-flower-client-supernode"
    secret = objs[("Secret", "edge-flower-client-node-auth")]
    assert secret["type"] == "Opaque"
    assert base64.b64decode(secret["data"]["private-key"]).decode() == keys.private
    assert base64.b64decode(secret["data"]["public-key"]).decode() == keys.public + "\n"
    c = container(objs, sn)
    assert "--auth-supernode-private-key=/app/node-auth/private-key" in c["args"]
    assert "--auth-supernode-public-key=/app/node-auth/public-key" in c["args"]
    assert "--root-certificates=/app/certificates/ca.crt" in c["args"]
    assert volume(objs, sn, "node-auth") == {
        "name": "node-auth", "secret": {"secretName": "edge-flower-client-node-auth", "defaultMode": 0o440}}
    assert mount(objs, sn, "node-auth") == {"name": "node-auth", "mountPath": "/app/node-auth",
                                            "readOnly": True}
    assert pod(objs, sn)["securityContext"]["fsGroup"] == 49999  # the group that may read the 0440 files
    # key material only in the Secret
    body_line = keys.private.splitlines()[1]
    for (kind, _), m in objs.items():
        if kind != "Secret":
            assert body_line not in json.dumps(m)
    # the SuperExec of this release talks to the SuperNode named in the values, without TLS
    se = container(objs, "edge-flower-client-superexec-clientapp")
    assert se["args"][:3] == ["--plugin-type=clientapp", "--appio-api-address=my-supernode.example.com:9094",
                              "--insecure"]
    assert not [v for v in pod(objs, "edge-flower-client-superexec-clientapp")["volumes"]
                if v["name"] in ("node-auth", "superlink-ca")]


def test_node_auth_key_change_rolls_the_pods(keys: Keys) -> None:
    first = render(keys.node_auth_values(), release="edge")
    second = render(keys.node_auth_values(keys.private2, keys.public2), release="edge")
    name = ("Deployment", "edge-flower-client-supernode")

    def annotations(objs: dict[tuple[str, str], Manifest]) -> dict[str, str]:
        result: dict[str, str] = objs[name]["spec"]["template"]["metadata"]["annotations"]
        return result

    assert annotations(first) != annotations(second)
    assert annotations(first) == annotations(render(keys.node_auth_values(), release="edge"))


def test_node_auth_key_is_read_like_flower_reads_it(keys: Keys) -> None:
    """What we accept, Flower's loader (cryptography's OpenSSH loader, EC keys only) accepts."""
    serialization = pytest.importorskip("cryptography.hazmat.primitives.serialization")
    ec = pytest.importorskip("cryptography.hazmat.primitives.asymmetric.ec")
    parsed = parse_openssh_private_key(keys.private)
    assert parsed.key_type == "ecdsa-sha2-nistp384"
    loaded = serialization.load_ssh_private_key(keys.private.encode(), None)
    assert isinstance(loaded, ec.EllipticCurvePrivateKey)
    with pytest.raises(ValueError):
        serialization.load_ssh_private_key(keys.pkcs8.encode(), None)


def test_pkcs8_key_is_rejected_with_a_conversion_hint(keys: Keys) -> None:
    text = keys.node_auth_values(private=keys.pkcs8)
    diags = errors(text, release="edge")
    d = only(diags, "global.nodeAuth.authSupernodePrivateKey")
    assert d.file == "supernodes/test/values.yaml"
    assert d.line == 4
    assert "PKCS#8" in d.message
    assert "ssh-keygen -p -m RFC4716 -f" in d.hint and "ssh-keygen -t ecdsa -b 384" in d.hint
    body_line = keys.pkcs8.splitlines()[1]
    assert not [x for x in diags if body_line[:20] in x.message + x.hint]


def test_the_conversion_hint_works(keys: Keys, tmp_path: Path) -> None:
    if not keys.ssh_keygen:  # pragma: no cover
        pytest.skip("ssh-keygen not installed")
    path = tmp_path / "key"
    path.write_text(keys.pkcs8)
    path.chmod(0o600)
    subprocess.run([keys.ssh_keygen, "-q", "-p", "-m", "RFC4716", "-P", "", "-N", "", "-f", str(path)],
                   check=True, capture_output=True, timeout=30)
    assert parse_openssh_private_key(path.read_text()).key_type == "ecdsa-sha2-nistp384"
    model, diags = load(keys.node_auth_values(private=path.read_text(), public=keys.public))
    # the converted key is valid, but it is not the test pair's private key
    assert model is None
    assert only(diags, "global.nodeAuth.authSupernodePublicKey").message == (
        "node-auth public key does not belong to the private key")


@pytest.mark.parametrize(("key", "message"), [
    (synthetic_openssh_key(b"ssh-ed25519"), "is a ssh-ed25519 key; Flower needs an ECDSA key"),
    (synthetic_openssh_key(b"ecdsa-sha2-nistp384", cipher=b"aes256-ctr"), "protected by a passphrase"),
    ("-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIA==\n-----END EC PRIVATE KEY-----\n", "PEM EC key"),
    ("-----BEGIN OPENSSH PRIVATE KEY-----\nnot base64!\n-----END OPENSSH PRIVATE KEY-----\n",
     "not valid base64"),
    ("-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n", "must end with"),
    ("[...]", "must start with -----BEGIN OPENSSH PRIVATE KEY-----"),
])
def test_unusable_private_keys(keys: Keys, key: str, message: str) -> None:
    diags = errors(keys.node_auth_values(private=key, public="ecdsa-sha2-nistp384 AAAA"), release="edge")
    assert message in only(diags, "global.nodeAuth.authSupernodePrivateKey").message


def test_public_key_must_match_the_private_key(keys: Keys) -> None:
    diags = errors(keys.node_auth_values(public=keys.public2), release="edge")
    d = only(diags, "global.nodeAuth.authSupernodePublicKey")
    assert d.line == 15
    assert "does not belong" in d.message
    assert keys.public2.split()[1][:16] not in d.message + d.hint


def test_public_key_format(keys: Keys) -> None:
    diags = errors(keys.node_auth_values(public="ecdsa-sha2-nistp384 [...]"), release="edge")
    assert "ecdsa-sha2-nistp384 <base64>" in only(diags, "global.nodeAuth.authSupernodePublicKey").message


def test_node_auth_needs_a_key_and_tls() -> None:
    diags = errors("global:\n  nodeAuth:\n    enabled: true\ntls:\n  enabled: false\n")
    assert only(diags, "global.nodeAuth.authSupernodePrivateKey").line == 2
    assert "needs TLS" in only(diags, "global.nodeAuth.enabled").message


def test_flower_before_1_23_needs_the_public_key(keys: Keys) -> None:
    without = keys.node_auth_values().replace(f"    authSupernodePublicKey: {keys.public}\n", "")
    d = only(errors(without), "global.nodeAuth.authSupernodePublicKey")  # default image: Flower 1.21
    assert "before 1.23" in d.message
    newer = without.replace("supernode:\n  enabled: true\n", "supernode:\n  enabled: true\n  image:\n"
                            "    tag: 1.25.0\n")
    objs = render(newer, release="edge")
    assert "--auth-supernode-private-key=/app/node-auth/private-key" in container(
        objs, "edge-flower-client-supernode")["args"]
    assert not [a for a in container(objs, "edge-flower-client-supernode")["args"] if "public-key" in a]
    assert set(objs[("Secret", "edge-flower-client-node-auth")]["data"]) == {"private-key"}


# ---------------------------------------------------------------------------------------------
# Isolation


def test_isolation_all_in_one() -> None:
    objs = render(ALL_IN_ONE, release="iso")
    sn, se = "iso-flower-client-supernode", "iso-flower-client-superexec-clientapp"
    assert set(objs) == {
        ("ServiceAccount", sn), ("Service", sn), ("NetworkPolicy", sn), ("Deployment", sn),
        ("ServiceAccount", se), ("NetworkPolicy", se), ("Deployment", se),
    }
    assert "--isolation=process" in container(objs, sn)["args"]
    c = container(objs, se)
    assert c["name"] == "superexec"
    assert c["image"] == "registry.hub.docker.com/flwr/superexec:1.21.0-py3.11-ubuntu24.04"
    assert c["args"] == ["--plugin-type=clientapp", f"--appio-api-address={sn}:9094", "--insecure",
                         "--health-server-address=0.0.0.0:8081"]
    assert c["ports"] == [{"name": "health", "containerPort": 8081, "protocol": "TCP"}]
    assert c["readinessProbe"]["grpc"] == {"port": 8081}
    # the SuperExec dials the Service, which selects the SuperNode pods
    service = objs[("Service", sn)]["spec"]
    assert service["ports"] == [{"name": "clientappio", "port": 9094, "targetPort": 9094, "protocol": "TCP"}]
    assert service["selector"] == objs[("Deployment", sn)]["spec"]["selector"]["matchLabels"]
    assert objs[("Deployment", se)]["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] == (
        "superexec-clientapp")
    assert objs[("NetworkPolicy", se)]["spec"]["policyTypes"] == ["Egress"]


def test_superexec_follows_the_service_port() -> None:
    objs = render("supernode:\n  isolationMode: process\n  service:\n    servicePortClientAppIo: 19094\n"
                  "superexec:\n  enabled: true\n", release="iso")
    assert "--appio-api-address=iso-flower-client-supernode:19094" in container(
        objs, "iso-flower-client-superexec-clientapp")["args"]


def test_isolation_distributed_as_one_file() -> None:
    objs = render(DISTRIBUTED, release="dist")
    args = container(objs, "dist-flower-client-superexec-clientapp")["args"]
    assert "--appio-api-address=my-supernode.example.com:9094" in args


def test_isolation_distributed_as_two_releases() -> None:
    supernode = render(DISTRIBUTED_SUPERNODE, release="site-a")
    assert {k[0] for k in supernode} == {"ServiceAccount", "Service", "NetworkPolicy", "Deployment"}
    assert "--isolation=process" in container(supernode, "site-a-flower-client-supernode")["args"]
    superexec = render(DISTRIBUTED_SUPEREXEC, release="site-a-exec")
    assert set(superexec) == {
        ("ServiceAccount", "site-a-exec-flower-client-superexec-clientapp"),
        ("NetworkPolicy", "site-a-exec-flower-client-superexec-clientapp"),
        ("Deployment", "site-a-exec-flower-client-superexec-clientapp"),
    }
    assert "--appio-api-address=my-supernode.example.com:9094" in container(
        superexec, "site-a-exec-flower-client-superexec-clientapp")["args"]


def test_superexec_next_to_a_subprocess_supernode_is_an_error() -> None:
    diags = errors("supernode:\n  enabled: true\nsuperexec:\n  enabled: true\n")
    d = only(diags, "supernode.isolationMode")
    assert d.line == 1
    assert "isolationMode: process" in d.hint


def test_superexec_without_any_supernode_is_an_error() -> None:
    diags = errors("supernode:\n  enabled: false\nsuperexec:\n  enabled: true\n")
    d = only(diags, "superexec.supernode.address")
    assert d.line == 3


# ---------------------------------------------------------------------------------------------
# Node config


def test_node_config_keeps_yaml_types() -> None:
    objs = render(NODE_CONFIG)
    args = container(objs, "test-flower-client-supernode")["args"]
    config_args = [a for a in args if a.startswith("--node-config=")]
    assert config_args == ['--node-config=bool=false float=21.23 int=1 int-as-string="1" '
                           'negative_float=-1.34 negative_int=-1 string="value 1"']
    assert parse_node_config(config_args[0].removeprefix("--node-config=")) == {
        "bool": False, "int": 1, "negative_int": -1, "float": 21.23, "negative_float": -1.34,
        "string": "value 1", "int-as-string": "1"}


def test_large_integers_print_exactly() -> None:
    objs = render("supernode:\n  node:\n    config:\n      n: 1000000\n")
    assert "--node-config=n=1000000" in container(objs, "test-flower-client-supernode")["args"]


@pytest.mark.parametrize(("config", "path", "line", "message"), [
    ("      bad.key: 1\n", "supernode.node.config['bad.key']", 4, "contains a dot"),
    ("      ok: 1\n      bad key: 1\n", "supernode.node.config['bad key']", 5, "not a TOML bare key"),
    ("      both: \"it's \\\"x\\\"\"\n", "supernode.node.config.both", 4, "both kinds of quote"),
    ("      list: [1, 2]\n", "supernode.node.config.list", 4, "is a list"),
])
def test_bad_node_config(config: str, path: str, line: int, message: str) -> None:
    d = only(errors("supernode:\n  node:\n    config:\n" + config), path)
    assert (d.file, d.line) == ("supernodes/test/values.yaml", line)
    assert message in d.message


# ---------------------------------------------------------------------------------------------
# Names


def test_helm_fullname_rules() -> None:
    assert helm_fullname("pytorch", "flower-client", "") == "pytorch-flower-client"
    assert helm_fullname("my-flower-client", "flower-client", "") == "my-flower-client"
    assert helm_fullname("pytorch", "", "") == "pytorch-flower-client"
    assert helm_fullname("pytorch", "fl", "") == "pytorch-fl"
    assert helm_fullname("pytorch", "flower-client", "edge") == "edge"
    assert helm_fullname("x" * 49, "flower-client", "") == "x" * 49 + "-flower-client"  # 63: fits
    assert helm_fullname("x" * 50, "flower-client", "") == "x" * 50 + "-flower-clien"  # trunc 63
    assert helm_fullname("f" * 70, "", "") == "f" * 63
    assert helm_fullname("a" * 62 + "-b", "c", "") == "a" * 62  # trailing '-' trimmed


def test_names_with_overrides() -> None:
    objs = render("fullnameOverride: edge\nsupernode:\n  name: node\n", release="whatever")
    assert ("Deployment", "edge-node") in objs
    dep = objs[("Deployment", "edge-node")]
    assert dep["metadata"]["labels"]["app.kubernetes.io/component"] == "node"
    assert dep["metadata"]["labels"]["app.kubernetes.io/instance"] == "whatever"
    objs = render("nameOverride: fl\n", release="pytorch")
    assert ("Deployment", "pytorch-fl-supernode") in objs
    labels = objs[("Deployment", "pytorch-fl-supernode")]["metadata"]["labels"]
    assert labels["app.kubernetes.io/name"] == "fl"
    assert ("Deployment", "my-flower-client-supernode") in render("", release="my-flower-client")


def test_too_long_release_name() -> None:
    release = "a" * 50  # a valid Helm release name, but the derived names do not fit
    d = only(errors("supernode:\n  replicas: 2\n", release=release), "fullnameOverride")
    assert (d.file, d.line) == ("supernodes/test/values.yaml", 1)
    assert f"{'a' * 50}-flower-clien-supernode" in d.message and "73 characters" in d.message
    assert "fullnameOverride" in d.hint and release in d.hint


def test_too_long_name_points_at_the_field_that_made_it() -> None:
    d = only(errors("supernode:\n  replicas: 2\nnameOverride: a-rather-long-chart-name\n", release="b" * 30),
             "nameOverride")
    assert d.line == 3
    d = only(errors("fullnameOverride: " + "f" * 60 + "\n"), "fullnameOverride")
    assert d.line == 1 and "shorten fullnameOverride" in d.hint


def test_invalid_component_name() -> None:
    d = only(errors("supernode:\n  name: Super_Node\n"), "supernode.name")
    assert d.line == 2


# ---------------------------------------------------------------------------------------------
# Pods: security, volumes, scheduling, env


def test_security_defaults() -> None:
    objs = render("", release="sec")
    name = "sec-flower-client-supernode"
    assert pod(objs, name)["securityContext"] == {
        "runAsUser": 49999, "runAsGroup": 49999, "fsGroup": 49999, "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"}}
    assert container(objs, name)["securityContext"] == {
        "readOnlyRootFilesystem": True, "allowPrivilegeEscalation": False, "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]}}
    for vol_name, path in WRITABLE:
        assert volume(objs, name, vol_name) == {"name": vol_name, "emptyDir": {}}
        assert mount(objs, name, vol_name) == {"name": vol_name, "mountPath": path}
    assert pod(objs, name)["automountServiceAccountToken"] is True


def test_component_security_context_goes_where_kubernetes_accepts_it() -> None:
    objs = render("supernode:\n  podSecurityContext:\n    runAsUser: 1000\n    fsGroup: 2000\n"
                  "    runAsNonRoot: false\n    readOnlyRootFilesystem: false\n"
                  "    capabilities:\n      add: [NET_BIND_SERVICE]\n"
                  "    supplementalGroups: [3000]\n", release="sec")
    name = "sec-flower-client-supernode"
    assert pod(objs, name)["securityContext"] == {
        "runAsUser": 1000, "runAsGroup": 49999, "fsGroup": 2000, "runAsNonRoot": False,
        "seccompProfile": {"type": "RuntimeDefault"}, "supplementalGroups": [3000]}
    assert container(objs, name)["securityContext"] == {
        "readOnlyRootFilesystem": False, "allowPrivilegeEscalation": False, "runAsNonRoot": False,
        "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}}
    # a writable root filesystem needs no emptyDirs
    assert [v["name"] for v in pod(objs, name)["volumes"]] == ["superlink-ca"]


def test_security_context_errors() -> None:
    d = only(errors("supernode:\n  podSecurityContext:\n    readOnlyRootFileSystem: true\n"),
             "supernode.podSecurityContext.readOnlyRootFileSystem")
    assert d.line == 3 and d.hint == "did you mean 'readOnlyRootFilesystem'?"
    diags = errors("superexec:\n  podSecurityContext:\n    fsGroup: \"1\"\n")  # checked even when disabled
    d = only(diags, "superexec.podSecurityContext.fsGroup")
    assert d.message == "expected an integer, got a string"
    diags = errors("supernode:\n  podSecurityContext:\n    runAsUser: 0\n")
    assert "runAsUser is 0" in only(diags, "supernode.podSecurityContext").message
    diags = errors("supernode:\n  podSecurityContext:\n    privileged: true\n")
    assert "allowPrivilegeEscalation" in only(diags, "supernode.podSecurityContext").message


def test_user_volumes_come_after_ours() -> None:
    objs = render("supernode:\n  volumes:\n    - name: data\n      persistentVolumeClaim:\n"
                  "        claimName: data\n  volumeMounts:\n    - name: data\n      mountPath: /data\n"
                  "      readOnly: null\n")
    name = "test-flower-client-supernode"
    assert [v["name"] for v in pod(objs, name)["volumes"]] == [
        "tmp-flwr", "tmp-cache", "tmp-config", "tmp-var-tmp", "superlink-ca", "data"]
    assert container(objs, name)["volumeMounts"][-1] == {"name": "data", "mountPath": "/data"}  # null dropped


def test_volume_errors() -> None:
    diags = errors("supernode:\n  volumes:\n    - name: tmp-flwr\n      emptyDir: {}\n"
                   "  volumeMounts:\n    - name: missing\n      mountPath: /var/tmp\n")
    assert only(diags, "supernode.volumes[0].name").line == 3
    assert "not defined" in only(diags, "supernode.volumeMounts[0].name").message
    assert only(diags, "supernode.volumeMounts[0].mountPath").line == 7


def test_affinity_presets() -> None:
    objs = render("", release="aff")
    name = "aff-flower-client-supernode"
    selector = {**SELECTOR, "app.kubernetes.io/instance": "aff"}
    assert pod(objs, name)["affinity"] == {"podAntiAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 1, "podAffinityTerm": {"labelSelector": {"matchLabels": selector},
                                              "topologyKey": "kubernetes.io/hostname"}}]}}
    expressions = [{"key": "pool", "operator": "In", "values": ["edge"]}]
    objs = render("global:\n  affinity:\n    podAntiAffinity: hard\n    nodeAffinity:\n      type: soft\n"
                  "      matchExpressions:\n        - key: pool\n          operator: In\n"
                  "          values: [edge]\n", release="aff")
    assert pod(objs, name)["affinity"] == {
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": selector}, "topologyKey": "kubernetes.io/hostname"}]},
        "nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 1, "preference": {"matchExpressions": expressions}}]},
    }
    objs = render("global:\n  affinity:\n    podAntiAffinity: none\n    nodeAffinity:\n"
                  "      matchExpressions:\n        - {key: pool, operator: Exists}\n", release="aff")
    assert pod(objs, name)["affinity"] == {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "pool", "operator": "Exists"}]}]}}}
    objs = render("global:\n  affinity:\n    podAntiAffinity: none\n", release="aff")
    assert "affinity" not in pod(objs, name)  # type hard, but no expressions


def test_component_affinity_is_merged_over_the_presets() -> None:
    objs = render("supernode:\n  affinity:\n    podAntiAffinity:\n"
                  "      requiredDuringSchedulingIgnoredDuringExecution:\n"
                  "        - topologyKey: topology.kubernetes.io/zone\n"
                  "    nodeAffinity:\n      preferredDuringSchedulingIgnoredDuringExecution:\n"
                  "        - weight: 5\n          preference:\n            matchExpressions:\n"
                  "              - {key: gpu, operator: Exists}\n", release="aff")
    affinity = pod(objs, "aff-flower-client-supernode")["affinity"]
    anti = affinity["podAntiAffinity"]
    assert anti["requiredDuringSchedulingIgnoredDuringExecution"] == [
        {"topologyKey": "topology.kubernetes.io/zone"}]
    assert anti["preferredDuringSchedulingIgnoredDuringExecution"][0]["weight"] == 1  # preset kept
    assert affinity["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]["weight"] == 5


def test_env_node_selector_tolerations_and_pull_secrets_merge() -> None:
    objs = render("""\
global:
  env:
    - {name: A, value: "1"}
    - {name: B, value: "2"}
  nodeSelector: {zone: a, disk: ssd}
  tolerations:
    - {key: edge, operator: Exists}
  imagePullSecrets:
    - name: global-pull
  image:
    pullPolicy: Always
supernode:
  env:
    - {name: B, value: "3"}
    - {name: C, value: "4"}
  nodeSelector: {zone: b}
  tolerations:
    - {key: gpu, operator: Exists, effect: NoSchedule}
  imagePullSecrets:
    - name: supernode-pull
superexec:
  enabled: true
  image:
    pullPolicy: Never
  supernode:
    address: elsewhere
""")
    sn, se = "test-flower-client-supernode", "test-flower-client-superexec-clientapp"
    c = container(objs, sn)
    assert c["env"] == [{"name": "A", "value": "1"}, {"name": "B", "value": "3"}, {"name": "C", "value": "4"}]
    assert container(objs, se)["env"] == [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]
    assert pod(objs, sn)["nodeSelector"] == {"zone": "b", "disk": "ssd"}
    assert pod(objs, sn)["tolerations"] == [{"key": "edge", "operator": "Exists"},
                                            {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert pod(objs, sn)["imagePullSecrets"] == [{"name": "supernode-pull"}]
    assert pod(objs, se)["imagePullSecrets"] == [{"name": "global-pull"}]
    assert c["imagePullPolicy"] == "Always"  # the component does not set one
    assert container(objs, se)["imagePullPolicy"] == "Never"


def test_labels_and_annotations() -> None:
    objs = render("""\
global:
  labels: {team: fl}
  podLabels: {tier: edge}
  annotations: {owner: ml-team}
supernode:
  labels: {extra: "yes"}
  podLabels: {more: "yes"}
  selectorLabels: {site: a}
  annotations: {note: hi}
  podAnnotations: {scrape: "true"}
  serviceAccount:
    labels: {sa: "1"}
    annotations: {iam: role}
    automountServiceAccountToken: false
  automountServiceAccountToken: false
""", release="lab")
    name = "lab-flower-client-supernode"
    dep = objs[("Deployment", name)]
    assert dep["spec"]["selector"]["matchLabels"] == {**SELECTOR, "app.kubernetes.io/instance": "lab",
                                                      "site": "a"}
    assert dep["metadata"]["labels"]["team"] == "fl"
    assert dep["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "flower-syncer"
    assert dep["metadata"]["labels"]["flower-syncer.io/unit"] == "lab"
    assert dep["metadata"]["annotations"]["owner"] == "ml-team"
    assert dep["metadata"]["annotations"]["note"] == "hi"
    assert dep["metadata"]["annotations"]["flower-syncer.io/source"] == "supernodes/lab/values.yaml"
    template = dep["spec"]["template"]["metadata"]
    assert {"tier": "edge", "extra": "yes", "more": "yes", "site": "a"}.items() <= template["labels"].items()
    assert set(dep["spec"]["selector"]["matchLabels"].items()) <= set(template["labels"].items())
    assert template["annotations"] == {"scrape": "true"}
    sa = objs[("ServiceAccount", name)]
    assert sa["metadata"]["labels"]["sa"] == "1" and sa["metadata"]["annotations"]["iam"] == "role"
    assert sa["automountServiceAccountToken"] is False
    assert pod(objs, name)["automountServiceAccountToken"] is False
    assert objs[("Service", name)]["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"]


def test_disabled_service_account_and_network_policy() -> None:
    objs = render("supernode:\n  serviceAccount:\n    enabled: false\n  networkPolicy:\n    enabled: false\n")
    assert {k[0] for k in objs} == {"Service", "Deployment"}
    assert "serviceAccountName" not in pod(objs, "test-flower-client-supernode")


def test_probes_and_strategy() -> None:
    objs = render("supernode:\n  containerPorts:\n    health: 9000\n  livenessProbe:\n    periodSeconds: 30\n"
                  "    failureThreshold: 5\n  readinessProbe:\n    enabled: false\n"
                  "  updateStrategy:\n    rollingUpdate:\n      maxUnavailable: 0\n      maxSurge: 1\n")
    name = "test-flower-client-supernode"
    c = container(objs, name)
    assert c["livenessProbe"] == {"grpc": {"port": 9000}, "initialDelaySeconds": 0, "periodSeconds": 30,
                                  "timeoutSeconds": 1, "failureThreshold": 5, "successThreshold": 1}
    assert "readinessProbe" not in c
    assert "--health-server-address=0.0.0.0:9000" in c["args"]
    assert objs[("Deployment", name)]["spec"]["strategy"] == {
        "type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}
    objs = render("supernode:\n  updateStrategy:\n    type: Recreate\n")
    assert objs[("Deployment", name)]["spec"]["strategy"] == {"type": "Recreate"}


def test_image_digest_and_extra_args() -> None:
    digest = "sha256:" + "a" * 64
    objs = render(f"supernode:\n  image:\n    digest: {digest}\n  extraArgs: [--max-retries=5]\n")
    c = container(objs, "test-flower-client-supernode")
    assert c["image"] == f"registry.hub.docker.com/flwr/supernode-ee:1.21.0-ubuntu@{digest}"
    assert c["args"][-1] == "--max-retries=5"


# ---------------------------------------------------------------------------------------------
# Services and NetworkPolicies


def test_node_port_service() -> None:
    objs = render("supernode:\n  service:\n    type: NodePort\n    nodePortClientAppIo: 30094\n"
                  "    servicePortClientAppIoName: appio\n")
    spec = objs[("Service", "test-flower-client-supernode")]["spec"]
    assert spec["type"] == "NodePort"
    assert spec["ports"] == [{"name": "appio", "port": 9094, "targetPort": 9094, "protocol": "TCP",
                              "nodePort": 30094}]


def test_default_network_policy_allows_the_ports_and_all_egress() -> None:
    spec = render("")[("NetworkPolicy", "test-flower-client-supernode")]["spec"]
    assert spec == {
        "podSelector": {"matchLabels": {**SELECTOR, "app.kubernetes.io/instance": "test"}},
        "policyTypes": ["Ingress", "Egress"],
        "ingress": [{"ports": [{"port": 9094, "protocol": "TCP"}, {"port": 8081, "protocol": "TCP"}]}],
        "egress": [{}],
    }


def test_restricted_network_policy() -> None:
    objs = render("""\
supernode:
  superlink:
    port: 443
  networkPolicy:
    allowExternal: false
    allowExternalEgress: false
    ingressPodMatchLabels: {role: monitor}
    ingressNSMatchLabels: {team: fl}
    ingressNSPodMatchLabels: {app: client}
    extraIngress:
      - from: [{ipBlock: {cidr: 10.0.0.0/8}}]
    extraEgress:
      - to: [{ipBlock: {cidr: 10.1.0.0/16}}]
        ports: [{port: 8080}]
""")
    spec = objs[("NetworkPolicy", "test-flower-client-supernode")]["spec"]
    ports = [{"port": 9094, "protocol": "TCP"}, {"port": 8081, "protocol": "TCP"}]
    assert spec["ingress"] == [
        {"from": [{"podSelector": {"matchLabels": {"role": "monitor"}}},
                  {"namespaceSelector": {"matchLabels": {"team": "fl"}},
                   "podSelector": {"matchLabels": {"app": "client"}}}],
         "ports": ports},
        {"from": [{"ipBlock": {"cidr": "10.0.0.0/8"}}]},
    ]
    assert spec["egress"] == [
        {"ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]},
        {"ports": [{"port": 443, "protocol": "TCP"}]},
        {"to": [{"ipBlock": {"cidr": "10.1.0.0/16"}}], "ports": [{"port": 8080}]},
    ]


def test_closed_network_policy_never_opens_up() -> None:
    spec = render("supernode:\n  networkPolicy:\n    allowExternal: false\n")[
        ("NetworkPolicy", "test-flower-client-supernode")]["spec"]
    assert spec["ingress"] == []  # deny all ingress: a rule without `from` would allow everyone
    assert "Ingress" in spec["policyTypes"]


def test_process_isolation_lets_the_superexec_in() -> None:
    objs = render("supernode:\n  isolationMode: process\n  containerPorts:\n    clientAppIo: 9999\n"
                  "  networkPolicy:\n    allowExternal: false\n    allowExternalEgress: false\n"
                  "superexec:\n  enabled: true\n  networkPolicy:\n    allowExternalEgress: false\n",
                  release="iso")
    sn = objs[("NetworkPolicy", "iso-flower-client-supernode")]["spec"]
    assert sn["ingress"] == [{
        "from": [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "flower-client",
                                                  "app.kubernetes.io/instance": "iso",
                                                  "app.kubernetes.io/component": "superexec-clientapp"}}}],
        "ports": [{"port": 9999, "protocol": "TCP"}]}]
    se = objs[("NetworkPolicy", "iso-flower-client-superexec-clientapp")]["spec"]
    assert se["policyTypes"] == ["Egress"]
    # the pod port behind the Service, which is what NetworkPolicies see
    assert se["egress"] == [{"ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]},
                            {"ports": [{"port": 9999, "protocol": "TCP"}]}]
    assert "ingress" not in se


# ---------------------------------------------------------------------------------------------
# Validation messages


def test_unknown_key_with_did_you_mean() -> None:
    d = only(errors("supernode:\n  replica: 3\n"), "supernode.replica")
    assert (d.file, d.line, d.column) == ("supernodes/test/values.yaml", 2, 3)
    assert d.message == "unknown field 'replica'" and d.hint == "did you mean 'replicas'?"


def test_unknown_key_inside_kubernetes_types() -> None:
    diags = errors("supernode:\n  env:\n    - name: A\n      valueFrm: x\n  resources:\n    limit: {cpu: 1}\n"
                   "  lifecycle:\n    preStp: {}\n  tolerations:\n    - {key: a, operater: Exists}\n"
                   "  affinity:\n    nodeAfinity: {}\n  networkPolicy:\n    extraEgress:\n      - too: []\n")
    assert only(diags, "supernode.env[0].valueFrm").hint == "did you mean 'valueFrom'?"
    assert only(diags, "supernode.resources.limit").hint == "did you mean 'limits'?"
    assert only(diags, "supernode.lifecycle.preStp").hint == "did you mean 'preStop'?"
    assert only(diags, "supernode.tolerations[0].operater").line == 10
    assert only(diags, "supernode.affinity.nodeAfinity").hint == "did you mean 'nodeAffinity'?"
    assert only(diags, "supernode.networkPolicy.extraEgress[0].too").hint == "did you mean 'to'?"


def test_unknown_global_key() -> None:
    d = only(errors("global:\n  nodeSelectr: {}\n"), "global.nodeSelectr")
    assert d.hint == "did you mean 'nodeSelector'?"


@pytest.mark.parametrize(("text", "path", "message", "hint"), [
    ("supernode:\n  service:\n    type: Loadbalancer\n", "supernode.service.type", "LoadBalancer",
     "capital B"),
    ("supernode:\n  isolationMode: Process\n", "supernode.isolationMode", "subprocess", "process"),
    ("global:\n  affinity:\n    podAntiAffinity: medium\n", "global.affinity.podAntiAffinity", "soft",
     "none"),
    ("supernode:\n  replicas: \"3\"\n", "supernode.replicas", "integer", "remove the quotes"),
    ("supernode:\n  superlink:\n    port: 70000\n", "supernode.superlink.port", "65535", ""),
    ("tls:\n  enabled: yes please\n", "tls.enabled", "boolean", ""),
    ("supernode:\n  extraArgs: [--insecure]\n", "supernode.extraArgs[0]", "already set", "tls.enabled"),
    ("supernode:\n  superlink:\n    address: my-superlink:9092\n", "supernode.superlink.address",
     "includes a port", "superlink.port"),
    ("supernode:\n  service:\n    nodePortClientAppIo: 30094\n", "supernode.service.nodePortClientAppIo",
     "NodePort", "NodePort"),
    ("supernode:\n  image:\n    digest: latest\n", "supernode.image.digest", "not an image digest", "sha256"),
    ("supernode:\n  updateStrategy:\n    type: Recreate\n    rollingUpdate: {maxSurge: 1}\n",
     "supernode.updateStrategy.rollingUpdate", "Recreate", ""),
    ("supernode:\n  livenessProbe:\n    successThreshold: 2\n", "supernode.livenessProbe.successThreshold",
     "successThreshold to be 1", ""),
    ("supernode:\n  containerPorts:\n    health: 9094\n", "supernode.containerPorts.health", "both use", ""),
    ("supernode:\n  selectorLabels:\n    app.kubernetes.io/name: x\n",
     "supernode.selectorLabels['app.kubernetes.io/name']", "set by flower-syncer", ""),
    ("global:\n  labels:\n    team: a b\n", "global.labels.team", "label value", ""),
    ("supernode:\n  superlink:\n    certificate:\n      copyFromExistingSecret:\n        enabled: true\n",
     "supernode.superlink.certificate.existingSecret", "copy from", ""),
    ("superexec:\n  enabled: true\n  image:\n    tag: 1.20.0\n  supernode:\n    address: x\n",
     "superexec.image.tag", "1.21", ""),
])
def test_validation_errors(text: str, path: str, message: str, hint: str) -> None:
    d = only(errors(text), path)
    assert message in d.message
    assert hint in d.hint
    assert d.file == "supernodes/test/values.yaml" and d.line > 0


# ---------------------------------------------------------------------------------------------
# Output properties


def _walk(value: Any, path: str = "") -> list[str]:
    """Paths of null values and empty optional containers."""
    found = []
    if value is None:
        found.append(path)
    elif isinstance(value, dict):
        for k, v in value.items():
            found.extend(_walk(v, f"{path}.{k}"))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            found.extend(_walk(v, f"{path}[{i}]"))
    return found


ALL_EXAMPLES = {
    "pytorch": PYTORCH, "tensorflow": TENSORFLOW, "tls": TLS_DEFAULT, "tls-existing": TLS_EXISTING,
    "tls-copy": TLS_COPY, "no-tls": NO_TLS, "all-in-one": ALL_IN_ONE, "distributed": DISTRIBUTED,
    "distributed-supernode": DISTRIBUTED_SUPERNODE, "distributed-superexec": DISTRIBUTED_SUPEREXEC,
    "node-config": NODE_CONFIG,
}


def _example_texts(keys: Keys) -> dict[str, str]:
    texts = dict(ALL_EXAMPLES)
    texts["node-auth"] = keys.node_auth_values()
    for folder in sorted(EXAMPLES.iterdir()):
        texts[f"config-{folder.name}"] = (folder / "values.yaml").read_text()
    return texts


def test_rendering_is_deterministic_and_has_no_nulls(keys: Keys) -> None:
    for release, text in _example_texts(keys).items():
        first = render_list(text, release)
        second = render_list(text, release)
        assert first == second
        assert to_yaml(first) == to_yaml(second)
        assert json.loads(json.dumps(first)) == first
        for m in first:
            assert _walk(m) == [], (release, m["kind"])


def test_rendered_objects_share_nothing_with_the_values() -> None:
    text = ("global:\n  env: [{name: A, value: '1'}]\n  tolerations: [{key: a, operator: Exists}]\n"
            "supernode:\n  resources: {limits: {cpu: 1}}\n  affinity: {podAffinity: {}}\n")
    model, _ = load(text)
    assert model is not None
    ctx = RenderContext(Unit("supernode", "flower", "test"), "supernodes/test/values.yaml")
    first = render_supernode(model, "test", ctx)
    expected = json.loads(json.dumps(first))
    dep = next(m for m in first if m["kind"] == "Deployment")
    spec = dep["spec"]["template"]["spec"]
    spec["containers"][0]["env"][0]["value"] = "changed"
    spec["containers"][0]["resources"]["limits"]["cpu"] = 2
    spec["tolerations"][0]["key"] = "b"
    spec["affinity"]["podAffinity"]["x"] = 1
    assert render_supernode(model, "test", ctx) == expected


def test_rendered_objects_pass_the_kubernetes_schema(keys: Keys) -> None:
    kv = pytest.importorskip("kubernetes_validate")
    for release, text in _example_texts(keys).items():
        for m in render_list(text, release):
            try:
                kv.validate(m, "1.34", strict=True)
            except kv.ValidationError as exc:  # pragma: no cover - shows what failed
                pytest.fail(f"{release}: {m['kind']}/{m['metadata']['name']}: {exc.message}")


def test_example_config_releases_validate_and_render() -> None:
    found = sorted(p.name for p in EXAMPLES.iterdir())
    assert found == ["pytorch", "secure-edge", "tensorflow"]
    pytorch = render((EXAMPLES / "pytorch" / "values.yaml").read_text(), release="pytorch")
    args = container(pytorch, "pytorch-flower-client-supernode")["args"]
    assert args[0] == "--superlink=federation-statefulset-superlink:9092" and "--insecure" in args
    assert container(pytorch, "pytorch-flower-client-supernode")["image"] == "docker.io/flwr/supernode:1.42.0"
    edge = render((EXAMPLES / "secure-edge" / "values.yaml").read_text(), release="secure-edge",
                  namespace="flower-edge")
    copy = edge[("Secret", "secure-edge-superlink-ca")]
    assert copy["metadata"]["annotations"][ANN_COPY_FROM] == "superlink-tls"
    assert ("Secret", "secure-edge-flower-client-node-auth") in edge
    assert "--isolation=process" in container(edge, "secure-edge-flower-client-supernode")["args"]
    release = yaml.safe_load((EXAMPLES / "secure-edge" / "release.yaml").read_text())
    assert release == {"apiVersion": "flower-syncer.io/v1", "kind": "Release", "namespace": "flower-edge"}


def test_thousand_releases_render_fast(keys: Keys) -> None:
    model, _ = load(keys.node_auth_values())
    assert model is not None
    ctx = RenderContext(Unit("supernode", "flower", "test"), "supernodes/test/values.yaml")
    # This process's CPU time, not the wall clock: on a busy machine (2 cores, CI beside other work)
    # the wall clock also counts the time spent waiting for a core, which says nothing of the renderer.
    start = time.process_time()
    for i in range(1000):
        render_supernode(model, f"release-{i}", ctx)
    assert time.process_time() - start < 1.0
