"""NetworkPolicies for Federations (issue 12, part 2): the Fleet API only from the federation's own
SuperNodes and named sources, the Control API only from named sources, no ingress into pool pods;
sources named in annotations, checked with file:line like every other field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from syncer.models.netsources import parse_sources
from syncer.render.repo import render_repo
from syncer.repo.loader import load_repo
from tests.builders import NS, by_kind, federation


def rendered(tmp_path: Path, annotations: str) -> tuple[list[Any], list[Any]]:
    (tmp_path / "federations").mkdir(parents=True, exist_ok=True)
    (tmp_path / "flower-syncer.yaml").write_text(f"name: np\ndefaultNamespace: {NS}\n")
    (tmp_path / "federations" / "fed.yaml").write_text(federation(annotations=annotations[1:-1], insecure=True))
    state = load_repo(tmp_path)
    errors = [d for d in state.diagnostics if d.severity == "error"]
    units = render_repo(state).units
    return (next(iter(units.values())) if units else []), errors


def test_by_default_only_the_federations_supernodes_reach_the_fleet_api(tmp_path: Path) -> None:
    manifests, errors = rendered(tmp_path, "{}")
    assert errors == []
    superlink = by_kind(manifests, "NetworkPolicy", "fed-superlink")["spec"]
    assert superlink["podSelector"]["matchLabels"] == by_kind(manifests, "StatefulSet", "fed-superlink")[
        "spec"]["selector"]["matchLabels"]
    assert superlink["policyTypes"] == ["Ingress"]
    fleet, health = superlink["ingress"]  # no Control API rule: nobody but port-forward
    assert health == {"ports": [{"protocol": "TCP", "port": 8081}, {"protocol": "TCP", "port": 8082}]}
    assert fleet["ports"] == [{"protocol": "TCP", "port": 9092}]
    (own,) = fleet["from"]
    pool_pods = by_kind(manifests, "StatefulSet", "fed-supernode-a")["spec"]["template"]["metadata"]["labels"]
    assert own["podSelector"]["matchLabels"].items() <= pool_pods.items()
    assert own["podSelector"]["matchLabels"]["flower-syncer.io/unit"] == "fed"
    supernodes = by_kind(manifests, "NetworkPolicy", "fed-supernodes")["spec"]
    assert supernodes["ingress"] == [health] and supernodes["podSelector"] == own["podSelector"]


def test_named_sources(tmp_path: Path) -> None:
    manifests, errors = rendered(tmp_path, '{"flower-syncer.io/fleet-api-from": "10.20.0.0/16, edge-sites", '
                                           '"flower-syncer.io/control-api-from": "ml-team/app=flwr-cli 192.0.2.7/32"}')
    assert errors == []
    fleet, control, _health = by_kind(manifests, "NetworkPolicy", "fed-superlink")["spec"]["ingress"]
    assert fleet["from"][1:] == [
        {"ipBlock": {"cidr": "10.20.0.0/16"}},
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "edge-sites"}}}]
    assert control == {"ports": [{"protocol": "TCP", "port": 9093}], "from": [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ml-team"}},
         "podSelector": {"matchLabels": {"app": "flwr-cli"}}},
        {"ipBlock": {"cidr": "192.0.2.7/32"}}]}
    manifests, _ = rendered(tmp_path, '{"flower-syncer.io/fleet-api-from": "*"}')
    fleet, _health = by_kind(manifests, "NetworkPolicy", "fed-superlink")["spec"]["ingress"]
    assert "from" not in fleet  # anyone


def test_policies_can_be_turned_off(tmp_path: Path) -> None:
    manifests, errors = rendered(tmp_path, '{"flower-syncer.io/network-policies": disabled}')
    assert errors == [] and not [m for m in manifests if m["kind"] == "NetworkPolicy"]


def test_bad_sources_name_the_annotation_file_and_line(tmp_path: Path) -> None:
    manifests, errors = rendered(tmp_path, '{"flower-syncer.io/fleet-api-from": "10.0.0.300/8, Team_A", '
                                           '"flower-syncer.io/network-policies": "off"}')
    assert manifests == []  # the unit does not render: its last applied state stays
    messages = sorted(e.message for e in errors)
    assert all(e.path.startswith("metadata.annotations") and e.line == 5 for e in errors), errors
    assert any("'10.0.0.300/8' is not a CIDR" in m for m in messages)
    assert any("'Team_A'" in m and "lowercase" in m for m in messages)
    assert any("'off' is not a setting" in m for m in messages)


def test_flower_before_1_21_has_no_health_server(tmp_path: Path) -> None:
    from syncer.render.federation import has_health_server
    assert not has_health_server("flwr/superlink:1.20.0") and has_health_server("flwr/superlink:1.21.0")
    assert has_health_server("registry:5000/flwr/supernode:1.25.0-py3.11")
    assert has_health_server("flwr/supernode") and has_health_server("flwr/supernode@sha256:ab")  # unknown: recent
    old = federation(insecure=True, version="1.20.0")
    (tmp_path / "federations").mkdir()
    (tmp_path / "flower-syncer.yaml").write_text(f"name: np\ndefaultNamespace: {NS}\n")
    (tmp_path / "federations" / "fed.yaml").write_text(old)
    manifests = next(iter(render_repo(load_repo(tmp_path)).units.values()))
    sl = by_kind(manifests, "StatefulSet", "fed-superlink")["spec"]["template"]["spec"]["containers"][0]
    assert "livenessProbe" not in sl and sl["readinessProbe"] == {"tcpSocket": {"port": "fleet"}, "periodSeconds": 10}
    assert not any(a.startswith("--health") for a in sl["args"])
    assert len(by_kind(manifests, "NetworkPolicy", "fed-superlink")["spec"]["ingress"]) == 1


def test_source_syntax() -> None:
    sources, problems = parse_sources("10.1.2.3/8 , a, a, b/k=v,*")
    assert problems == [] and [s.cidr or s.namespace for s in sources] == ["10.0.0.0/8", "a", "b", ""]
    assert sources[-1].anywhere
    assert parse_sources("b/k")[1] == ["'b/k': write the pod label as NAMESPACE/KEY=VALUE"]
