"""One repository for a hub cluster and site clusters (syncer.repo.clusters, syncer.repo.sites,
syncer.models.exposure): each cluster's load keeps only its own units, the other clusters' are
known and checked against, and a site release that dials the hub wrongly is an error with file,
line, field and fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from syncer.actions.load import load, validate
from syncer.identity import Unit
from syncer.render.repo import render_repo
from syncer.repo.loader import LoadCache, load_repo
from tests.builders import NS, by_kind, federation, pool, tls_secret_yaml

HUB_NODE = "10.202.1.1"

EXPOSED = ('"flower-syncer.io/superlink-external-address": "' + HUB_NODE + ':30092"')


def hub_federation(annotations: str = EXPOSED, service: str = "NodePort", node_port: str = "30092",
                   insecure: bool = True) -> str:
    text = federation("hub", pool("local"), annotations, insecure=insecure, version="1.42.0")
    ports = f"\n      nodePorts:\n        grpc: {node_port}" if node_port else ""
    return text.replace("  superlink:\n    image: flwr/superlink:1.42.0\n",
                        f"  superlink:\n    image: flwr/superlink:1.42.0\n    service:\n      type: {service}{ports}\n")


def site_values(address: str = HUB_NODE, port: int = 30092, tag: str = "1.42.0", tls: bool = False) -> str:
    return (f"tls:\n  enabled: {str(tls).lower()}\nsupernode:\n  superlink:\n    address: {address}\n    port: {port}\n"
            f"  image:\n    registry: docker.io\n    repository: flwr/supernode\n    tag: {tag}\n")


def fleet(root: Path, hub: str | None = None, site: str | None = None, *, layout: bool = True) -> Path:
    """A repository: the hub's Federation in clusters/hub, a SuperNode release in clusters/site-a."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "flower-syncer.yaml").write_text(f"name: fleet\ndefaultNamespace: {NS}\n")
    hub_dir = root / "clusters" / "hub" if layout else root
    site_dir = root / "clusters" / "site-a" if layout else root
    (hub_dir / "federations").mkdir(parents=True, exist_ok=True)
    (hub_dir / "federations" / "hub.yaml").write_text(hub_federation() if hub is None else hub)
    (site_dir / "supernodes" / "edge").mkdir(parents=True, exist_ok=True)
    (site_dir / "supernodes" / "edge" / "values.yaml").write_text(site_values() if site is None else site)
    return root


HUB = Unit("federation", NS, "hub")
EDGE = Unit("supernode", NS, "edge")


def errors(state_diags: list) -> list:  # type: ignore[type-arg]
    return [d for d in state_diags if d.severity == "error"]


def test_each_cluster_loads_its_own_units_and_knows_the_others(tmp_path: Path) -> None:
    root = fleet(tmp_path)
    hub = load_repo(root, cluster="hub")
    assert [u.unit for u in hub.units] == [HUB] and [u.cluster for u in hub.units] == [""]
    assert [(u.unit, u.cluster) for u in hub.elsewhere] == [(EDGE, "site-a")]
    assert hub.clusters == ("hub", "site-a") and hub.cluster_of(EDGE) == "site-a" and hub.cluster_of(HUB) == ""
    assert errors(hub.diagnostics) == [] and hub.clean
    site = load_repo(root, cluster="site-a")
    assert [u.unit for u in site.units] == [EDGE] and [(u.unit, u.cluster) for u in site.elsewhere] == [(HUB, "hub")]
    assert errors(site.diagnostics) == []
    # the hub renders only its own: nothing of the site's release
    assert set(render_repo(hub).units) == {HUB} and set(render_repo(site).units) == {EDGE}


def test_a_repository_without_a_layout_is_all_this_clusters(tmp_path: Path) -> None:
    root = fleet(tmp_path, layout=False)
    plain, named = load_repo(root), load_repo(root, cluster="anything")
    assert {u.unit for u in plain.units} == {u.unit for u in named.units} == {HUB, EDGE}
    assert all(u.cluster == "" for u in named.units) and named.elsewhere == [] and named.clusters == ()
    assert errors(named.diagnostics) == []


@pytest.mark.parametrize("cluster", ["", "elsewhere"])
def test_a_layout_without_this_clusters_folder_applies_nothing(tmp_path: Path, cluster: str) -> None:
    state = load_repo(fleet(tmp_path), cluster=cluster)
    assert state.units == [] and not state.clean  # not clean: nothing is pruned either
    (problem,) = errors(state.diagnostics)
    assert problem.file == "clusters" and "--cluster" in problem.hint + problem.message


def test_folders_outside_the_layout_are_an_error(tmp_path: Path) -> None:
    root = fleet(tmp_path)
    (root / "federations").mkdir()
    (root / "clusters" / "Bad_Name").mkdir()
    state = load_repo(root, cluster="hub")
    found = {(d.file, "move it into" in d.hint or "rename the folder" in d.hint) for d in errors(state.diagnostics)}
    assert found == {("federations", True), ("clusters/Bad_Name", True)}


def test_another_clusters_broken_file_is_not_this_clusters_problem(tmp_path: Path) -> None:
    root = fleet(tmp_path, site="supernode: [\n")
    hub = load_repo(root, cluster="hub")
    assert hub.clean and hub.failed == set() and [u.unit for u in hub.units] == [HUB]
    assert [d.file for d in hub.elsewhere_diagnostics] == ["clusters/site-a/supernodes/edge/values.yaml"]
    site = load_repo(root, cluster="site-a")
    assert site.failed == {EDGE} and not site.clean
    whole = validate(root)  # the whole repository: every cluster's problems
    assert not whole.valid and EDGE in whole.loaded.rendered.failed


def test_validate_of_the_whole_repository_renders_each_cluster_on_its_own(tmp_path: Path) -> None:
    root = fleet(tmp_path)
    # the same release name in two sites renders the same object names: no clash across clusters
    (root / "clusters" / "site-b" / "supernodes" / "edge2").mkdir(parents=True)
    (root / "clusters" / "site-b" / "supernodes" / "edge2" / "values.yaml").write_text(
        "fullnameOverride: edge-flower-client-supernode\n" + site_values())
    result = validate(root)
    assert result.valid, [str(d) for d in result.loaded.errors]
    assert {u.id for u in result.loaded.units} == {HUB.id, EDGE.id, f"supernode/{NS}/edge2"}
    assert load(root, cluster="site-b").units.keys() == {Unit("supernode", NS, "edge2")}


def test_a_site_dialing_a_port_the_hub_does_not_expose_is_an_error(tmp_path: Path) -> None:
    root = fleet(tmp_path, site=site_values(port=30093))
    state = load_repo(root, cluster="site-a")
    (problem,) = errors(state.diagnostics)
    assert (problem.file, problem.line, problem.path) == ("clusters/site-a/supernodes/edge/values.yaml", 6,
                                                          "supernode.superlink.port")
    assert f"exposes its Fleet API at {HUB_NODE}:30092" in problem.message and "30092" in problem.hint
    assert EDGE in state.failed and state.units == []  # not shipped; its last applied state stays
    hub = load_repo(root, cluster="hub")
    assert hub.clean and hub.failed == set()  # the hub's agent is not held up by it


def test_a_site_dialing_an_address_nobody_exposes_is_warned_about(tmp_path: Path) -> None:
    """It may be a SuperLink outside the repository (a partner's): a warning, which --strict fails on."""
    root = fleet(tmp_path, site=site_values(address="10.9.9.9"))
    result = validate(root, strict=True)
    (problem,) = result.loaded.warnings
    assert problem.path == "supernode.superlink.address" and problem.line == 5 and not result.valid
    assert f"exposed: {HUB_NODE}:30092 by 'hub'" in problem.message and f"address: {HUB_NODE}" in problem.hint
    assert validate(root).valid and EDGE in validate(root).loaded.units
    # an in-cluster Service name no federation of the repository has: a SuperLink deployed otherwise
    other = fleet(tmp_path / "other", site=site_values(address="partner-superlink", port=9092))
    assert validate(other, strict=True).valid


def test_a_site_dialing_the_hubs_service_name_is_told_it_resolves_only_there(tmp_path: Path) -> None:
    root = fleet(tmp_path, site=site_values(address="hub-superlink", port=9092))
    (problem,) = errors(load_repo(root, cluster="site-a").diagnostics)
    assert "which is in another cluster" in problem.message and problem.path == "supernode.superlink.address"


def test_a_site_of_another_fleet_transport_era_is_an_error(tmp_path: Path) -> None:
    root = fleet(tmp_path, site=site_values(tag="1.26.0"))
    (problem,) = errors(load_repo(root, cluster="site-a").diagnostics)
    assert problem.path == "supernode.image.tag" and "cannot talk to the SuperLink" in problem.message


def test_tls_and_node_authentication_must_match_the_hubs(tmp_path: Path) -> None:
    secure = hub_federation(EXPOSED + ', "flower-syncer.io/superlink-issuer": "ca", '
                            '"flower-syncer.io/supernode-auth": "enabled", '
                            '"flower-syncer.io/control-api-from": "flower-syncer"', insecure=False)
    secure = secure.replace("        images: {}\n", "        images: {}\n        extraArgs: "
                            "['--auth-supernode-private-key=/k/key']\n        volumes: [{name: k, secret: "
                            "{secretName: hub-key}}]\n        volumeMounts: [{name: k, mountPath: /k}]\n")
    plain = load_repo(fleet(tmp_path, hub=secure), cluster="site-a")
    assert [d.path for d in errors(plain.diagnostics)] == ["tls.enabled"]


def test_the_hubs_service_gets_its_node_ports_and_its_certificate_the_external_host(tmp_path: Path) -> None:
    hub = hub_federation(EXPOSED + ', "flower-syncer.io/superlink-issuer": "ca"', insecure=False)
    state = load_repo(fleet(tmp_path, hub=hub), cluster="hub")
    assert errors(state.diagnostics) == []
    manifests = list(render_repo(state).units[HUB])
    service = by_kind(manifests, "Service", "hub-superlink")
    assert service["spec"]["type"] == "NodePort"
    assert {p["name"]: p.get("nodePort") for p in service["spec"]["ports"]} == {"fleet": 30092, "control": None}
    assert HUB_NODE in by_kind(manifests, "Certificate", "hub-superlink")["spec"]["ipAddresses"]


@pytest.mark.parametrize(("service", "node_port", "message"), [
    ("ClusterIP", "", "nothing outside the cluster reaches it"),
    ("NodePort", "", "not set in Git"),
    ("NodePort", "30093", "node port is 30093"),
    ("ClusterIP", "30092", "of type ClusterIP, which has none"),
])
def test_an_external_address_the_service_does_not_serve_is_an_error(tmp_path: Path, service: str, node_port: str,
                                                                    message: str) -> None:
    root = fleet(tmp_path, hub=hub_federation(service=service, node_port=node_port))
    problems = errors(load_repo(root, cluster="hub").diagnostics)
    assert any(message in d.message and d.file == "clusters/hub/federations/hub.yaml" and d.line > 1
               for d in problems), [str(d) for d in problems]


def test_a_certificate_in_git_must_name_the_exposed_host(tmp_path: Path) -> None:
    hub = hub_federation(EXPOSED + ', "flower-syncer.io/superlink-tls-secret": "hub-tls"', insecure=False)
    root = fleet(tmp_path, hub=hub + "---\n" + tls_secret_yaml("hub-tls", ["hub-superlink", "10.0.0.1"]),
                 site=site_values(tls=True))
    (problem,) = errors(load_repo(root, cluster="hub").diagnostics)
    assert f"does not name {HUB_NODE}" in problem.message and problem.path.endswith("superlink-external-address']")
    (root / "clusters/hub/federations/hub.yaml").write_text(
        hub + "---\n" + tls_secret_yaml("hub-tls", ["hub-superlink", HUB_NODE]))
    assert errors(load_repo(root, cluster="hub").diagnostics) == []


def test_a_cached_load_told_what_changed_under_a_cluster_reloads_that_release(tmp_path: Path) -> None:
    root = fleet(tmp_path)
    cache = LoadCache()
    load_repo(root, cache=cache, cluster="site-a")
    (root / "clusters/site-a/supernodes/edge/values.yaml").write_text(site_values(port=30093))
    state = load_repo(root, cache=cache, changed={"clusters/site-a/supernodes/edge/values.yaml"}, cluster="site-a")
    assert EDGE in state.failed
    fresh = load_repo(root, cluster="site-a")
    assert (state.failed, [str(d) for d in state.diagnostics]) == (fresh.failed, [str(d) for d in fresh.diagnostics])


def test_each_cluster_opens_only_its_own_secrets(tmp_path: Path) -> None:
    """The hub's TLS Secret is encrypted for the hub's key: the site's agent, with its own key,
    checks the hub's Federation (with the Secret's values left opaque) and ships its release."""
    import pyrage
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    from syncer.models.supernode import SuperNodeValues
    from syncer.secrets.keys import Decryption
    from tests.sops_writer import encrypt

    hub_key, site_key = pyrage.x25519.Identity.generate(), pyrage.x25519.Identity.generate()
    hub = hub_federation(EXPOSED + ', "flower-syncer.io/superlink-tls-secret": "hub-tls"', insecure=False)
    secret = encrypt(tls_secret_yaml("hub-tls", ["hub-superlink", "127.0.0.1", HUB_NODE]), str(hub_key.to_public()),
                     "^(data|stringData)$")
    node_key = ec.generate_private_key(ec.SECP384R1())
    private = node_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                     serialization.NoEncryption()).decode()
    public = node_key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                                serialization.PublicFormat.OpenSSH).decode()
    auth = "global:\n  nodeAuth:\n    enabled: true\n    authSupernodePrivateKey: |\n" + "".join(
        f"      {line}\n" for line in private.strip().splitlines()) + f"    authSupernodePublicKey: {public}\n"
    values = encrypt(auth + site_values(tls=True), str(site_key.to_public()), "^authSupernodePrivateKey$")
    root = fleet(tmp_path, hub=hub + "---\n" + secret, site=values)
    site = load_repo(root, Decryption((site_key,), required=True), cluster="site-a")
    assert errors(site.diagnostics) == [] and [u.unit for u in site.units] == [EDGE]
    assert [u.unit for u in site.elsewhere] == [HUB]
    hub_view = load_repo(root, Decryption((hub_key,), required=True), cluster="hub")
    assert errors(hub_view.diagnostics) == [] and [u.unit for u in hub_view.units] == [HUB]
    # the hub knows the site's release, and its public key, without opening its private key
    (edge,) = hub_view.elsewhere
    assert isinstance(edge.model, SuperNodeValues) and edge.model.global_.nodeAuth.authSupernodePublicKey == public
    assert "PRIVATE" not in edge.model.global_.nodeAuth.authSupernodePrivateKey
    assert {u.id for u in validate(root).loaded.units} == {HUB.id, EDGE.id}  # without any key
    assert load_repo(root, Decryption((site_key,), required=True), cluster="hub").failed == {HUB}


def test_which_releases_dial_a_hubs_superlink(tmp_path: Path) -> None:
    """For matching the hub's SuperNodes to releases of every cluster (the hub's Flower health)."""
    from syncer.repo.sites import dials_superlink

    root = fleet(tmp_path)
    (root / "clusters" / "hub" / "supernodes" / "local").mkdir(parents=True)
    (root / "clusters" / "hub" / "supernodes" / "local" / "values.yaml").write_text(
        site_values(address="hub-superlink", port=9092))
    (root / "clusters" / "hub" / "supernodes" / "wrong").mkdir(parents=True)
    (root / "clusters" / "hub" / "supernodes" / "wrong" / "values.yaml").write_text(
        site_values(address="hub-superlink", port=9093))
    hub = load_repo(root, cluster="hub")
    (fed,) = [u for u in hub.units if u.unit == HUB]
    dialing = {u.unit.name for u in [*hub.units, *hub.elsewhere] if dials_superlink(fed, u)}
    assert dialing == {"local", "edge"}  # "wrong" dials another port (and fails to load: skew)


def test_the_hubs_flower_health_expects_the_sites_supernodes_by_their_cluster(tmp_path: Path) -> None:
    """The hub's plan lists, for its federation's Flower-level health, its own pools and the
    release another cluster applies that dials the exposed address (found by an index on the
    address dialled, not by checking every release against every federation)."""
    from syncer.render.repo import plan_repo

    root = fleet(tmp_path)
    (root / "clusters" / "site-a" / "supernodes" / "other").mkdir(parents=True)
    (root / "clusters" / "site-a" / "supernodes" / "other" / "values.yaml").write_text(
        site_values(address="hub-superlink", port=9092))  # the hub's Service name: it resolves only in the hub
    hub = load_repo(root, cluster="hub")
    plan = plan_repo(hub, render_repo(hub))
    pools = [(p.unit, p.pool, p.cluster) for p in plan.flower[HUB].pools]
    assert pools == [(HUB.id, "local", ""), (EDGE.id, "supernode", "site-a")]


def test_the_cli_takes_the_cluster(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from syncer.cli import main

    root = fleet(tmp_path, site=site_values(port=30093))
    assert main(["validate", str(root), "--cluster", "hub"]) == 0
    assert "valid: 0 error(s)" in capsys.readouterr().out
    assert main(["validate", str(root), "--cluster", "site-a"]) == 1
    assert "clusters/site-a/supernodes/edge/values.yaml:6:" in capsys.readouterr().out
    assert main(["render", str(root), "--cluster", "hub"]) == 0
    assert "name: edge-flower-client-supernode" not in capsys.readouterr().out
    monkeypatch.setenv("FLOWER_SYNCER_CLUSTER", "hub")  # as the chart sets it for the agent
    assert main(["validate", str(root)]) == 0
    capsys.readouterr()
