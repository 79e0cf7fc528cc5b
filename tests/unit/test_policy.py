"""The admin's policy (syncer.models.policy): narrowing the repository's guardrails, and the
impersonation header on writes only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from syncer.models.policy import AdminPolicy, RepositoryPolicy, narrow, pattern_within
from syncer.models.settings import Guardrails
from tests.fakekube import FakeApiServer, FakeKube


@pytest.mark.parametrize(("entry", "limits", "within"), [
    ("team-a", ["team-*"], True),
    ("team-a-*", ["team-*"], True),
    ("team-*", ["team-*"], True),
    ("*", ["team-*"], False),
    ("team-*", ["team-?"], False),  # `?` in the limit cannot bound a `*`
    ("other", ["team-*"], False),
])
def test_pattern_within(entry: str, limits: list[str], within: bool) -> None:
    assert pattern_within(entry, limits) is within


def test_fields_the_repository_leaves_unset_are_the_admins() -> None:
    admin = Guardrails(allowedNamespaces=["team-*"], allowPodFeatures=["hostPath"])
    rails, problems = narrow(admin, Guardrails.model_validate({}))
    assert rails == admin and problems == []


def test_narrowing_keeps_what_is_within_and_names_what_is_not() -> None:
    admin = Guardrails(allowedNamespaces=["team-*"], allowPodFeatures=["hostPath"])
    repo = Guardrails.model_validate({"allowedNamespaces": ["team-a", "kube-system"],
                                      "allowPodFeatures": ["hostPath", "privileged"]})
    rails, problems = narrow(admin, repo)
    assert rails.allowedNamespaces == ["team-a"] and rails.allowPodFeatures == ["hostPath"]
    assert sorted(field for field, _ in problems) == ["guardrails.allowPodFeatures", "guardrails.allowedNamespaces"]
    assert any("'kube-system' is beyond the admin's limit (team-*)" in p for _, p in problems)


def test_the_admins_default_namespaces_exclude_the_clusters_own() -> None:
    rails, problems = narrow(Guardrails(), Guardrails.model_validate({"allowedNamespaces": ["flower-*", "*"]}))
    assert rails.allowedNamespaces == ["flower-*"]
    assert [f for f, _ in problems] == ["guardrails.allowedNamespaces"]


def test_control_api_targets_unset_by_the_admin_delegate_nothing() -> None:
    repo = Guardrails.model_validate({"allowedControlApiTargets": ["127.0.0.1:*"]})
    rails, problems = narrow(Guardrails(), repo)
    assert rails.allowedControlApiTargets == [] and problems
    admin = Guardrails(allowedControlApiTargets=["*.team-a.svc:9093"])
    rails, problems = narrow(admin, Guardrails.model_validate({"allowedControlApiTargets": ["fed.team-a.svc:9093"]}))
    assert rails.allowedControlApiTargets == ["fed.team-a.svc:9093"] and problems == []


def test_pod_security_may_only_get_stricter_and_pod_rule_lists_are_the_admins() -> None:
    admin = Guardrails(podSecurity="baseline", allowedServiceAccounts=["trainer-*"])
    rails, problems = narrow(admin, Guardrails.model_validate({"podSecurity": "restricted"}))
    assert rails.podSecurity == "restricted" and problems == []
    rails, problems = narrow(admin, Guardrails.model_validate({
        "podSecurity": "privileged", "allowedServiceAccounts": ["trainer-gpu", "flower-syncer"],
        "allowedSecrets": ["*"]}))
    assert rails.podSecurity == "baseline"
    assert rails.allowedServiceAccounts == ["trainer-gpu"] and rails.allowedSecrets == []
    assert sorted(f for f, _ in problems) == ["guardrails.allowedSecrets", "guardrails.allowedServiceAccounts",
                                              "guardrails.podSecurity"]


def test_entries_match_by_source_ref_and_path() -> None:
    admin = AdminPolicy(repositories=[RepositoryPolicy(source="https://git.example.com/a/*", ref="prod",
                                                       serviceAccount="a/prod"),
                                      RepositoryPolicy(source="https://git.example.com/a/*", serviceAccount="a/any")])
    assert admin.for_source("https://git.example.com/a/cfg", "prod").serviceAccount == "a/prod"
    assert admin.for_source("https://git.example.com/a/cfg", "").serviceAccount == "a/any"
    assert admin.for_source("https://git.example.com/b/cfg").serviceAccount is None


def test_only_writes_are_impersonated() -> None:
    seen: list[tuple[str, Any]] = []

    class Recording(FakeApiServer):
        def handle(self, method: str, url: str, headers: Any, body: Any) -> Any:
            seen.append((method, headers.get("Impersonate-User")))
            return super().handle(method, url, headers, body)

    server = Recording()
    server.add_namespace("ns")
    kube = FakeKube(server).impersonating("system:serviceaccount:ns:tenant")
    kube.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "ns"}})
    kube.get("ConfigMap", "ns", "c")
    kube.delete("ConfigMap", "ns", "c")
    assert seen == [("PATCH", "system:serviceaccount:ns:tenant"), ("GET", None),
                    ("DELETE", "system:serviceaccount:ns:tenant")]
    assert FakeKube(server).impersonate is None


def test_the_status_says_which_policy_applies() -> None:
    from syncer.render.tenancy import Tenancy

    assert Tenancy().status()["policy"] is None
    entry = RepositoryPolicy(source="https://git.example.com/a/*", serviceAccount="a/tenant")
    assert Tenancy("src", entry).status()["serviceAccount"] == "a/tenant"


def test_load_picks_the_admins_entry_for_where_the_repository_comes_from(tmp_path: Path) -> None:
    from syncer.actions.load import load
    from tests.builders import FED, pool

    (tmp_path / "federations").mkdir()
    (tmp_path / "federations" / "fed.yaml").write_text(FED.format(name="fed", pools=pool("a"), annotations=""))
    (tmp_path / "flower-syncer.yaml").write_text("defaultNamespace: team-b\n")
    admin = AdminPolicy(repositories=[RepositoryPolicy(source=f"{tmp_path.resolve()}*",
                                                       guardrails=Guardrails(allowedNamespaces=["team-a"]))])
    assert any("'team-b', which this repository may not use" in d.message for d in load(tmp_path, admin=admin).errors)
    assert not load(tmp_path, admin=AdminPolicy()).errors  # the default entry: any but the cluster's own


def test_validate_checks_the_repository_within_the_admins_policy(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """`validate --policy FILE` (or $FLOWER_SYNCER_POLICY) sees what the agent would: a repository
    widening its own guardrails beyond the admin's is invalid, which a CI step can catch before a push."""
    from syncer.cli import main

    repo = tmp_path / "repo"
    (repo / "federations").mkdir(parents=True)
    (repo / "flower-syncer.yaml").write_text("apiVersion: flower-syncer.io/v1\nkind: Settings\nname: team-a\n"
                                             "guardrails:\n  allowedNamespaces: [team-a, kube-system]\n")
    policy = tmp_path / "policy.yaml"
    policy.write_text("apiVersion: flower-syncer.io/v1\nkind: Policy\ndefault:\n"
                      "  guardrails: {allowedNamespaces: [team-a]}\n  names: [team-a]\n")
    monkeypatch.delenv("FLOWER_SYNCER_POLICY", raising=False)
    assert main(["validate", str(repo)]) == 0
    capsys.readouterr()
    assert main(["validate", str(repo), "--policy", str(policy)]) == 1
    out = capsys.readouterr().out
    assert "guardrails.allowedNamespaces" in out and "kube-system" in out
    monkeypatch.setenv("FLOWER_SYNCER_POLICY", str(policy))
    assert main(["validate", str(repo)]) == 1
    policy.write_text("kind: Policy\ndefault: {guardrails: {allowedNamespaces: 7}}\n")
    assert main(["validate", str(repo)]) == 2
    assert "policy" in capsys.readouterr().err


def test_a_repository_pattern_wider_than_the_admins_is_refused() -> None:
    admin = Guardrails(allowedSecrets=["team-?"], allowedServiceAccounts=["trainer-*"])
    rails, problems = narrow(admin, Guardrails.model_validate({
        "allowedSecrets": ["team-*", "team-a"], "allowedServiceAccounts": ["trainer-gpu-*"]}))
    assert rails.allowedSecrets == ["team-a"] and rails.allowedServiceAccounts == ["trainer-gpu-*"]
    assert [f for f, _ in problems] == ["guardrails.allowedSecrets"]
