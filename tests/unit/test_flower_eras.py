"""Rendering per Flower transport era (syncer.models.flower): gRPC up to 1.34, the HTTP Runtime API
from 1.35, HTTP Control from 1.37, HTTP Fleet from 1.40. Both formats: a Federation and a SuperNode
chart release. Pre-1.35 output is covered byte for byte by the older tests."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.helpers import FIXTURES, container, load_federation, render_federation_text
from tests.unit.test_supernode import load as load_values
from tests.unit.test_supernode import render as render_values

PROCESS = (FIXTURES / "operator" / "process.yaml").read_text()
SUBPROCESS = (FIXTURES / "operator" / "subprocess.yaml").read_text()
TLS = """\
  annotations:
    flower-syncer.io/superlink-issuer: ClusterIssuer/flower-ca
spec:
  insecure: false
"""


def federation(text: str, version: str, *, tls: bool = False) -> dict[tuple[str, str], Any]:
    text = text.replace("1.25.0", version)
    if tls:
        text = text.replace("spec:\n", TLS, 1)
    return render_federation_text(text)


def test_a_1_42_superlink_serves_every_api_on_its_http_port_and_the_service_keeps_its_ports() -> None:
    old = federation(PROCESS, "1.26.0")
    new = federation(PROCESS, "1.42.0")
    svc_old = old[("Service", "federation-process-superlink")]["spec"]["ports"]
    svc_new = new[("Service", "federation-process-superlink")]["spec"]["ports"]
    # an upgrade in Git changes the target ports only: names and numbers stay (a clean apply)
    assert [(p["name"], p["port"]) for p in svc_old] == [(p["name"], p["port"]) for p in svc_new]
    assert [p["targetPort"] for p in svc_old] == [9092, 9093, 9091]
    assert [p["targetPort"] for p in svc_new] == [8000, 8000, 8000]
    sl = container(new[("StatefulSet", "federation-process-superlink")], "superlink")
    assert sl["args"][-2:] == ["--host=0.0.0.0", "--port=8000"]
    assert sl["ports"] == [{"name": "http", "containerPort": 8000, "protocol": "TCP"}]
    assert not any(a.startswith("--health-server-address") for a in sl["args"])
    assert sl["readinessProbe"]["httpGet"] == {"path": "/health", "port": 8000, "scheme": "HTTP"}
    assert sl["livenessProbe"]["httpGet"] == sl["readinessProbe"]["httpGet"]
    sidecar = container(new[("StatefulSet", "federation-process-superlink")], "superexec-serverapp")
    assert sidecar["args"][:2] == ["--runtime-api-address=127.0.0.1:8000", "--insecure"]
    assert sidecar["readinessProbe"] == {"grpc": {"port": 8082}, "periodSeconds": 10, "timeoutSeconds": 1,
                                         "failureThreshold": 3}  # SuperExec serves no HTTP: gRPC health until 1.43


def test_transport_eras_of_the_superlink_ports() -> None:
    def ports(version: str) -> tuple[list[Any], list[Any]]:
        out = federation(PROCESS, version)
        sl = container(out[("StatefulSet", "federation-process-superlink")], "superlink")
        svc = out[("Service", "federation-process-superlink")]["spec"]["ports"]
        return [(p["name"], p["containerPort"]) for p in sl["ports"]], [p["targetPort"] for p in svc]

    assert ports("1.34.0") == ([("fleet", 9092), ("control", 9093), ("serverappio", 9091), ("health", 8081)],
                               [9092, 9093, 9091])
    assert ports("1.35.0") == ([("fleet", 9092), ("control", 9093), ("http", 8000)], [9092, 9093, 8000])
    assert ports("1.37.0") == ([("fleet", 9092), ("http", 8000)], [9092, 8000, 8000])
    assert ports("1.40.0") == ([("http", 8000)], [8000, 8000, 8000])


def test_1_35_supernodes_bind_their_http_api_and_probe_its_health() -> None:
    out = federation(PROCESS, "1.42.0")
    pool = out[("StatefulSet", "federation-process-supernode-default")]
    sn = container(pool, "supernode")
    assert sn["args"][:2] == ["--superlink=federation-process-superlink:9092", "--isolation=process"]
    assert "--host=0.0.0.0" in sn["args"] and "--port=9094" in sn["args"]
    assert not any(a.startswith(("--clientappio-api-address", "--health-server-address")) for a in sn["args"])
    assert sn["readinessProbe"]["httpGet"] == {"path": "/health", "port": 9094, "scheme": "HTTP"}
    exec_ = container(pool, "superexec-clientapp")
    assert exec_["args"][:2] == ["--runtime-api-address=127.0.0.1:9094", "--insecure"]
    assert not any(a.startswith("--plugin-type") for a in exec_["args"])  # ignored from 1.38
    mid = container(federation(PROCESS, "1.35.0")[("StatefulSet", "federation-process-supernode-default")],
                    "superexec-clientapp")
    assert mid["args"][:3] == ["--plugin-type=clientapp", "--appio-api-address=127.0.0.1:9094", "--insecure"]
    sub = container(federation(SUBPROCESS, "1.42.0")[("StatefulSet", "federation-subprocess-supernode-default")],
                    "supernode")
    assert "--host=0.0.0.0" in sub["args"] and sub["readinessProbe"]["httpGet"]["port"] == 9094


def test_tls_from_1_37_the_runtime_api_is_tls_the_sidecar_trusts_the_ca_and_the_certificate_has_127_0_0_1() -> None:
    for version, san, scheme in (("1.26.0", False, None), ("1.36.0", False, "HTTP"), ("1.37.0", True, "HTTPS"),
                                 ("1.42.0", True, "HTTPS")):
        out = federation(PROCESS, version, tls=True)
        cert = out[("Certificate", "federation-process-superlink")]["spec"]
        assert ("127.0.0.1" in cert.get("ipAddresses", [])) is san, version
        sts = out[("StatefulSet", "federation-process-superlink")]
        sl = container(sts, "superlink")
        if scheme is None:
            assert "grpc" in sl["readinessProbe"]
            continue
        assert sl["readinessProbe"]["httpGet"]["scheme"] == scheme
        sidecar = container(sts, "superexec-serverapp")
        if san:
            assert "--root-certificates=/app/certificates/ca.crt" in sidecar["args"]
            assert "--insecure" not in sidecar["args"]
            assert {"name": "superlink-ca", "mountPath": "/app/certificates", "readOnly": True} in \
                sidecar["volumeMounts"]
            volumes = {v["name"]: v for v in sts["spec"]["template"]["spec"]["volumes"]}
            assert volumes["superlink-ca"]["secret"]["secretName"] == "federation-process-superlink-ca"
        else:  # 1.35-1.36: the Runtime API stays plain HTTP beside a TLS SuperLink
            assert "--insecure" in sidecar["args"]


def test_network_policy_follows_the_api_ports() -> None:
    out = federation(PROCESS, "1.42.0")
    policy = out[("NetworkPolicy", "federation-process-superlink")]["spec"]["ingress"]
    assert policy[0]["ports"] == [{"protocol": "TCP", "port": 8000}]  # Fleet over HTTP
    assert policy[-1] == {"ports": [{"protocol": "TCP", "port": 8082}]}  # only the SuperExec's gRPC health
    pools = out[("NetworkPolicy", "federation-process-supernodes")]["spec"]["ingress"]
    assert pools == [{"ports": [{"protocol": "TCP", "port": 8082}]}]
    mid = federation(PROCESS, "1.39.0")[("NetworkPolicy", "federation-process-superlink")]["spec"]["ingress"]
    assert mid[0]["ports"] == [{"protocol": "TCP", "port": 9092}]


def test_version_skew_inside_a_federation_is_an_error_naming_both_versions() -> None:
    text = PROCESS.replace("flwr/superlink:1.25.0", "flwr/superlink:1.42.0").replace(
        "superexecImage: flwr/superexec:1.25.0", "superexecImage: flwr/superexec:1.42.0")
    _, diags = load_federation(text)
    (error,) = [d for d in diags if d.severity == "error"]  # the pool's 1.25 SuperExec beside 1.25 SuperNodes is fine
    assert error.path == "spec.supernodes.image" and error.line > 0
    assert "Flower 1.25" in error.message and "Flower 1.42" in error.message and "HTTP" in error.message


def test_an_image_without_a_version_is_the_newest_with_a_warning_or_the_annotation() -> None:
    text = PROCESS.replace("flwr/superlink:1.25.0", "flwr/superlink:latest").replace("1.25.0", "1.42.0")
    _, diags = load_federation(text)
    warnings = [d for d in diags if d.severity == "warning" and d.path == "spec.superlink.image"]
    assert len(warnings) == 1 and "newest known release" in warnings[0].message and warnings[0].line > 0
    assert not [d for d in diags if d.severity == "error"]
    pinned = text.replace("metadata:\n", "metadata:\n  annotations:\n    flower-syncer.io/flower-version: 1.26.0\n", 1)
    _, diags = load_federation(pinned)
    assert not [d for d in diags if d.path == "spec.superlink.image" and d.severity == "warning"]
    assert [d.path for d in diags if d.severity == "error"] == ["spec.superlink.superexecImage",
                                                               "spec.supernodes.image"]  # 1.26 vs 1.42: skew
    operator_field = text.replace("  isolationMode: process\n", "  isolationMode: process\n  version: 1.26.0\n")
    _, diags = load_federation(operator_field)  # the operator's spec.version says the same
    assert [d.path for d in diags if d.severity == "error"] == ["spec.superlink.superexecImage",
                                                               "spec.supernodes.image"]


def test_deprecated_and_refused_extra_args_per_release() -> None:
    text = PROCESS.replace("1.25.0", "1.42.0").replace(
        "    superexecImage: flwr/superexec:1.42.0  # Required\n",
        "    superexecImage: flwr/superexec:1.42.0  # Required\n    extraArgs: [--fleet-api-type=grpc-rere]\n")
    text = text.replace("        replicas: 2\n",
                        "        replicas: 2\n        extraArgs: [--clientappio-api-address=0.0.0.0:1]\n")
    _, diags = load_federation(text)
    by_path = {d.path: d for d in diags}
    assert by_path["spec.superlink.extraArgs[0]"].severity == "warning"
    assert "deprecated since 1.40" in by_path["spec.superlink.extraArgs[0]"].message
    assert by_path["spec.supernodes.pools[0].extraArgs[0]"].severity == "error"


# ---------------------------------------------------------------------------------------------
# SuperNode chart releases

RELEASE = """\
tls:
  enabled: false
supernode:
  isolationMode: process
  image: {{repository: flwr/supernode, tag: "{version}"}}
  superlink: {{address: fed-superlink.flower.svc, port: 9092}}
superexec:
  enabled: true
  image: {{repository: flwr/superexec, tag: "{version}"}}
"""


@pytest.mark.parametrize(("version", "host_port", "probe", "exec_args"), [
    ("1.26.0", False, "grpc", ["--plugin-type=clientapp", "--appio-api-address=test-flower-client-supernode:9094",
                               "--insecure", "--health-server-address=0.0.0.0:8081"]),
    ("1.35.0", True, "httpGet", ["--plugin-type=clientapp", "--appio-api-address=test-flower-client-supernode:9094",
                                 "--insecure", "--health-server-address=0.0.0.0:8081"]),
    ("1.42.0", True, "httpGet", ["--runtime-api-address=test-flower-client-supernode:9094", "--insecure",
                                 "--health-server-address=0.0.0.0:8081"]),
])
def test_chart_release_per_era(version: str, host_port: bool, probe: str, exec_args: list[str]) -> None:
    out = render_values(RELEASE.format(version=version))
    sn = out[("Deployment", "test-flower-client-supernode")]["spec"]["template"]["spec"]["containers"][0]
    assert ("--host=0.0.0.0" in sn["args"] and "--port=9094" in sn["args"]) is host_port
    assert any(a.startswith("--clientappio-api-address") for a in sn["args"]) is not host_port
    assert probe in sn["readinessProbe"]
    if host_port:
        assert sn["readinessProbe"]["httpGet"] == {"path": "/health", "port": 9094, "scheme": "HTTP"}
        assert [p["name"] for p in sn["ports"]] == ["clientappio"]
        policy = out[("NetworkPolicy", "test-flower-client-supernode")]["spec"]
        assert all(p["ports"] == [{"port": 9094, "protocol": "TCP"}] for p in policy["ingress"])
    se = out[("Deployment", "test-flower-client-superexec-clientapp")]["spec"]["template"]["spec"]["containers"][0]
    assert se["args"] == exec_args


def test_chart_values_that_no_longer_map_onto_a_flag_are_warnings() -> None:
    text = RELEASE.format(version="1.42.0").replace(
        "  superlink: {address: fed-superlink.flower.svc, port: 9092}\n",
        "  superlink: {address: fed-superlink.flower.svc}\n  containerPorts: {health: 8085}\n")
    _, diags = load_values(text)
    warnings = {d.path: d for d in diags if d.severity == "warning"}
    assert "not used" in warnings["supernode.containerPorts.health"].message
    assert "gRPC Fleet port" in warnings["supernode.superlink.port"].message
    latest = RELEASE.format(version="latest")
    _, diags = load_values(latest)
    assert {d.path for d in diags if d.severity == "warning"} >= {"supernode.image.tag", "superexec.image.tag"}
    pinned = latest.replace('tag: "latest"}', 'tag: "latest", flowerVersion: "1.26.0"}')
    _, diags = load_values(pinned)
    assert not [d for d in diags if d.path.endswith("image.tag")]
    out = render_values(pinned)
    sn = out[("Deployment", "test-flower-client-supernode")]["spec"]["template"]["spec"]["containers"][0]
    assert "--clientappio-api-address=0.0.0.0:9094" in sn["args"]
    _, diags = load_values(latest.replace('tag: "latest"}', 'tag: "latest", flowerVersion: "newest"}'))
    assert [d.severity for d in diags if d.path == "supernode.image.flowerVersion"] == ["error"]


# ---------------------------------------------------------------------------------------------
# Across units: a release dialing a federation's SuperLink in the same repository

def _repo(tmp: Any, superlink: str, supernode_tag: str, port: int = 9092) -> Any:
    from syncer.repo.loader import load_repo

    (tmp / "federations").mkdir(parents=True)
    (tmp / "supernodes" / "edge").mkdir(parents=True)
    (tmp / "flower-syncer.yaml").write_text("name: skew\ndefaultNamespace: flower\n")
    (tmp / "federations" / "fed.yaml").write_text(SUBPROCESS.replace("flwr/superlink:1.25.0", superlink).replace(
        "1.25.0", superlink.rsplit(":", 1)[1]))
    (tmp / "supernodes" / "edge" / "values.yaml").write_text(
        "tls:\n  enabled: false\nsupernode:\n  superlink:\n    address: federation-subprocess-superlink.flower.svc\n"
        f"    port: {port}\n  image:\n    repository: flwr/supernode\n    tag: \"{supernode_tag}\"\n")
    return load_repo(tmp)


def test_a_release_that_cannot_talk_to_the_federation_it_dials_is_an_error(tmp_path: Any) -> None:
    state = _repo(tmp_path, "flwr/superlink:1.26.0", "1.42.0")
    (error,) = [d for d in state.diagnostics if d.severity == "error"]
    assert error.file == "supernodes/edge/values.yaml" and error.path == "supernode.image.tag"
    assert error.line == 9  # the tag's own line
    assert "Flower 1.42" in error.message and "Flower 1.26" in error.message and "federations/fed.yaml" in error.message
    assert "transport era" in error.hint
    assert [u.name for u in state.failed] == ["edge"]  # not shipped
    assert [u.unit.name for u in state.units] == ["federation-subprocess"]


def test_a_release_of_the_same_era_or_elsewhere_is_fine(tmp_path: Any) -> None:
    ok = _repo(tmp_path / "a", "flwr/superlink:1.40.0", "1.42.0")
    assert not [d for d in ok.diagnostics if d.severity == "error"], ok.diagnostics
    port = _repo(tmp_path / "b", "flwr/superlink:1.42.0", "1.42.0", port=9093)
    (error,) = [d for d in port.diagnostics if d.severity == "error"]
    assert error.path == "supernode.superlink.port" and "set supernode.superlink.port: 9092" in error.hint


def test_chart_public_key_and_managed_flags_per_release() -> None:
    import tempfile
    from pathlib import Path

    from tests.unit.test_supernode import Keys

    with tempfile.TemporaryDirectory() as folder:
        keys = Keys(Path(folder))
        text = keys.node_auth_values()
    for tag, passed in (("1.21.0", True), ("1.26.0", True), ("1.42.0", False)):
        values = text.replace("\nsupernode:\n  enabled: true\n", "\nsupernode:\n  enabled: true\n  image: "
                              f"{{repository: flwr/supernode, tag: \"{tag}\"}}\n", 1)
        _, diags = load_values(values)
        warned = [d for d in diags if d.path == "global.nodeAuth.authSupernodePublicKey"]
        assert bool(warned) is (tag != "1.21.0"), (tag, diags)  # 1.21-1.22 need it
        out = render_values(values)
        args = out[("Deployment", "test-flower-client-supernode")]["spec"]["template"]["spec"]["containers"][0]["args"]
        assert any(a.startswith("--auth-supernode-public-key=") for a in args) is passed, tag
    _, diags = load_values(RELEASE.format(version="1.42.0").replace(
        "  isolationMode: process\n", "  isolationMode: process\n  extraArgs: [--port=1]\n"))
    assert [d.severity for d in diags if d.path == "supernode.extraArgs[0]"] == ["error"]


def test_chart_superexec_of_another_runtime_era_is_an_error() -> None:
    text = RELEASE.format(version="1.42.0").replace('repository: flwr/superexec, tag: "1.42.0"',
                                                    'repository: flwr/superexec, tag: "1.26.0"')
    _, diags = load_values(text)
    (error,) = [d for d in diags if d.severity == "error"]
    assert error.path == "superexec.image.tag" and "Flower 1.26" in error.message and "Flower 1.42" in error.message
    assert error.line > 0
