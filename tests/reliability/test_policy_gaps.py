"""What the admin's policy can now require or forbid (issue 39, item 7): SOPS encryption of the
Secrets in Git, and the rest of the gaps the campaign found. Each case fails on the code before."""

from __future__ import annotations

from pathlib import Path

import pytest

from syncer.actions.load import load
from syncer.agent.revision import RevisionLoader
from syncer.cli import main
from syncer.models.policy import AdminPolicy, RepositoryPolicy, narrow
from syncer.models.settings import Guardrails
from syncer.render.tenancy import Tenancy
from syncer.secrets.keys import Decryption, load_identities
from tests.builders import NS, federation, pool, secret_manifest
from tests.sops_cli import new_key, sops_encrypt

PLAIN = "Secret 'edge-credentials' is in plain text, and the admin's policy sets requireEncryption"


def release_repo(tmp_path: Path, settings: str = "") -> Path:
    repo = tmp_path / "repo"
    (repo / "supernodes" / "edge").mkdir(parents=True)
    (repo / "flower-syncer.yaml").write_text(f"name: team\ndefaultNamespace: {NS}\n{settings}")
    (repo / "supernodes" / "edge" / "values.yaml").write_text("tls:\n  enabled: false\n")
    (repo / "supernodes" / "edge" / "secrets.yaml").write_text(secret_manifest("hunter2-very-secret"))
    return repo


def errors(loaded_diagnostics: list[object]) -> list[str]:
    return [d.message for d in loaded_diagnostics if getattr(d, "severity", "") == "error"]  # type: ignore[attr-defined]


# -- requireEncryption ------------------------------------------------------------------------------


def test_the_admin_can_require_encrypted_secrets(tmp_path: Path) -> None:
    repo = release_repo(tmp_path)
    assert errors(load(repo, policy=RepositoryPolicy()).diagnostics) == []  # not required: a plain Secret loads
    loaded = load(repo, policy=RepositoryPolicy(requireEncryption=True))
    assert errors(loaded.diagnostics) == [PLAIN]
    assert not loaded.rendered.units  # the release is not applied


def test_the_repository_cannot_turn_the_admins_requirement_off(tmp_path: Path) -> None:
    repo = release_repo(tmp_path, "requireEncryption: false\n")
    assert errors(load(repo, policy=RepositoryPolicy(requireEncryption=True)).diagnostics) == [PLAIN]


def test_the_admin_policy_file_requires_it_for_matching_repositories_only(tmp_path: Path) -> None:
    repo = release_repo(tmp_path)
    admin = AdminPolicy(repositories=[RepositoryPolicy(source=f"{tmp_path.resolve()}*", requireEncryption=True)])
    assert errors(load(repo, admin=admin).diagnostics) == [PLAIN]
    assert errors(load(repo, admin=AdminPolicy()).diagnostics) == []


def test_an_encrypted_secret_loads_under_the_admins_requirement(tmp_path: Path) -> None:
    key = tmp_path / "age.key"
    recipient = new_key(key)
    repo = release_repo(tmp_path)
    (repo / "supernodes" / "edge" / "secrets.yaml").write_text(
        sops_encrypt(secret_manifest("hunter2-very-secret"), tmp_path, recipient))
    loaded = load(repo, decryption=Decryption(load_identities([key])),
                  policy=RepositoryPolicy(requireEncryption=True))
    assert errors(loaded.diagnostics) == [] and loaded.rendered.units


def test_the_agent_loads_every_revision_under_the_requirement(tmp_path: Path) -> None:
    repo = release_repo(tmp_path)
    loader = RevisionLoader(tenancy=Tenancy(policy=RepositoryPolicy(requireEncryption=True)))
    revision = loader.load(repo, "r1")
    assert errors(revision.state.diagnostics) == [PLAIN] and not revision.rendered.units
    assert Tenancy(policy=RepositoryPolicy(requireEncryption=True)).status()["requireEncryption"] is True


# -- exposure: Service types, NetworkPolicies, an insecure SuperLink outside the cluster --------------

OPEN = '"flower-syncer.io/network-policies": disabled'
LB = "    service:\n      type: LoadBalancer\n"


def federation_repo(tmp_path: Path, *, annotations: str = OPEN, superlink: str = LB, insecure: bool = True) -> Path:
    repo = tmp_path / "fedrepo"
    (repo / "federations").mkdir(parents=True)
    (repo / "flower-syncer.yaml").write_text(f"name: team\ndefaultNamespace: {NS}\n")
    (repo / "federations" / "fed.yaml").write_text(federation("fed", annotations=annotations, superlink=superlink,
                                                              insecure=insecure))
    return repo


def messages(loaded_diagnostics: list[object], severity: str = "error") -> list[str]:
    return [d.message for d in loaded_diagnostics if getattr(d, "severity", "") == severity]  # type: ignore[attr-defined]


def test_validate_warns_of_an_insecure_superlink_on_a_load_balancer_without_network_policies(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    repo = federation_repo(tmp_path)
    assert main(["validate", str(repo)]) == 0  # a warning: the admin's policy decides whether it is refused
    out = capsys.readouterr()
    assert "Fleet API and Control API are on a LoadBalancer Service, in plain text" in out.out + out.err
    assert main(["validate", str(repo), "--strict"]) == 1
    for safe in (federation_repo(tmp_path / "cluster-ip", annotations=OPEN, insecure=True, superlink=""),
                 federation_repo(tmp_path / "np", annotations="", insecure=True)):
        assert not [m for m in messages(load(safe).diagnostics, "warning") if "plain text" in m]


def test_the_admin_can_refuse_load_balancers(tmp_path: Path) -> None:
    repo = federation_repo(tmp_path, annotations="")
    rails = Guardrails(allowedServiceTypes=["ClusterIP"])
    loaded = load(repo, policy=RepositoryPolicy(guardrails=rails))
    (problem,) = messages(loaded.diagnostics)
    assert "Service flower/fed-superlink" in problem or "fed-superlink" in problem
    assert "LoadBalancer Service, which the guardrails do not allow (allowed: ClusterIP)" in problem
    assert not loaded.rendered.units
    assert messages(load(federation_repo(tmp_path / "ok", annotations="", superlink="")).diagnostics) == []


def test_the_admin_can_require_network_policies(tmp_path: Path) -> None:
    rails = Guardrails(networkPolicies="required")
    loaded = load(federation_repo(tmp_path, superlink=""), policy=RepositoryPolicy(guardrails=rails))
    (problem,) = messages(loaded.diagnostics)
    assert "renders no NetworkPolicy" in problem and not loaded.rendered.units
    on = load(federation_repo(tmp_path / "on", annotations="", superlink=""), policy=RepositoryPolicy(guardrails=rails))
    assert messages(on.diagnostics) == []


def test_the_admin_can_refuse_an_insecure_superlink_outside_the_cluster(tmp_path: Path) -> None:
    rails = Guardrails(allowInsecureExposure=False)
    loaded = load(federation_repo(tmp_path, annotations=""), policy=RepositoryPolicy(guardrails=rails))
    (problem,) = messages(loaded.diagnostics)
    assert "plain text (insecure: true)" in problem and "(LoadBalancer)" in problem
    inside = load(federation_repo(tmp_path / "in", annotations="", superlink=""),
                  policy=RepositoryPolicy(guardrails=rails))
    assert messages(inside.diagnostics) == []


def test_the_repository_can_narrow_exposure_but_not_widen_it(tmp_path: Path) -> None:
    admin = Guardrails(allowedServiceTypes=["ClusterIP", "NodePort"], networkPolicies="required",
                       allowInsecureExposure=False)
    narrowed, problems = narrow(admin, Guardrails(allowedServiceTypes=["ClusterIP"]))
    assert narrowed.allowedServiceTypes == ["ClusterIP"] and problems == []
    _, problems = narrow(admin, Guardrails(allowedServiceTypes=["LoadBalancer"], networkPolicies="optional",
                                           allowInsecureExposure=True))
    assert {field for field, _ in problems} == {"guardrails.allowedServiceTypes", "guardrails.networkPolicies",
                                                "guardrails.allowInsecureExposure"}
    stricter, problems = narrow(Guardrails(), Guardrails(networkPolicies="required", allowInsecureExposure=False))
    assert problems == [] and stricter.networkPolicies == "required" and not stricter.allowInsecureExposure


# -- volumes, pull Secrets and runtime classes only the unit's own or listed ------------------------

POD_TEMPLATE = """\
        podTemplate:
          spec:
            {field}
"""


def pool_repo(tmp_path: Path, field: str) -> Path:
    repo = tmp_path / "poolrepo"
    (repo / "federations").mkdir(parents=True)
    (repo / "flower-syncer.yaml").write_text(f"name: team\ndefaultNamespace: {NS}\n")
    (repo / "federations" / "fed.yaml").write_text(federation("fed", pool("a", 1, POD_TEMPLATE.format(field=field))))
    return repo


CLAIM = "volumes: [{name: data, persistentVolumeClaim: {claimName: billing-db-data}}]"
PULL = "imagePullSecrets: [{name: billing-registry}]"
RUNTIME = "runtimeClassName: unconfined-runc"


def test_another_applications_volume_is_refused_unless_listed(tmp_path: Path) -> None:
    repo = pool_repo(tmp_path, CLAIM)
    (problem,) = messages(load(repo).diagnostics)
    assert "mounts the PersistentVolumeClaim 'billing-db-data', which the unit does not render" in problem
    listed = Guardrails(allowedClaims=["billing-db-*"])
    assert messages(load(repo, policy=RepositoryPolicy(guardrails=listed)).diagnostics) == []


def test_another_applications_pull_secret_is_refused_unless_listed(tmp_path: Path) -> None:
    repo = pool_repo(tmp_path, PULL)
    (problem,) = messages(load(repo).diagnostics)
    assert "pulls with the Secret 'billing-registry', which is not the unit's own" in problem
    listed = Guardrails(allowedSecrets=["billing-registry"])
    assert messages(load(repo, policy=RepositoryPolicy(guardrails=listed)).diagnostics) == []


def test_a_runtime_class_is_refused_unless_listed(tmp_path: Path) -> None:
    repo = pool_repo(tmp_path, RUNTIME)
    (problem,) = messages(load(repo).diagnostics)
    assert "names the RuntimeClass 'unconfined-runc', which the guardrails do not list (allowed: nvidia)" in problem
    listed = Guardrails(allowedRuntimeClasses=["nvidia", "unconfined-*"])
    assert messages(load(repo, policy=RepositoryPolicy(guardrails=listed)).diagnostics) == []
    gpu = pool_repo(tmp_path / "gpu", "runtimeClassName: nvidia")
    assert messages(load(gpu).diagnostics) == []  # the runtime of a GPU pool with mountAll stays allowed


# -- Flower versions outside the known releases -------------------------------------------------------


def version_repo(tmp_path: Path, version: str) -> Path:
    repo = tmp_path / "versions"
    (repo / "federations").mkdir(parents=True)
    (repo / "flower-syncer.yaml").write_text(f"name: team\ndefaultNamespace: {NS}\n")
    (repo / "federations" / "fed.yaml").write_text(federation("fed", version=version))
    return repo


@pytest.mark.parametrize("version", ["1.999.0", "0.9.0", "2.0.0", "1.4.0"])
def test_a_version_outside_the_known_releases_is_a_warning_and_an_error_under_strict(
        tmp_path: Path, version: str, capsys: pytest.CaptureFixture[str]) -> None:
    repo = version_repo(tmp_path, version)
    warnings = [m for m in messages(load(repo).diagnostics, "warning") if "not a release flower-syncer knows" in m]
    assert warnings and version.rsplit(".", 1)[0] in warnings[0]
    assert main(["validate", str(repo)]) == 0
    assert main(["validate", str(repo), "--strict"]) == 1
    capsys.readouterr()


def test_non_ascii_digits_are_not_a_version(tmp_path: Path) -> None:
    """`1.٤٢.0` (Arabic-Indic digits) was read as Flower 1.42: it names no version."""
    repo = version_repo(tmp_path, "1.\u0664\u0662.0")
    warnings = messages(load(repo).diagnostics, "warning")
    assert any("names no Flower version" in m for m in warnings), warnings


def test_a_known_release_gets_no_version_warning(tmp_path: Path) -> None:
    for version in ("1.20.0", "1.42.0", "1.43.0"):
        warnings = messages(load(version_repo(tmp_path / version, version)).diagnostics, "warning")
        assert not [m for m in warnings if "flower-syncer knows" in m or "names no Flower version" in m], warnings


def test_a_supernode_release_outside_the_known_releases_is_a_warning(tmp_path: Path) -> None:
    repo = release_repo(tmp_path)
    (repo / "supernodes" / "edge" / "secrets.yaml").unlink()
    (repo / "supernodes" / "edge" / "values.yaml").write_text(
        "tls:\n  enabled: false\nsupernode:\n  image:\n    tag: 1.999.0\n")
    warnings = [m for m in messages(load(repo).diagnostics, "warning") if "flower-syncer knows" in m]
    assert warnings and "1.999" in warnings[0]
