"""Where the agent may register SuperNode keys (issue 25, finding 4 and item 5): the federation's
own SuperLink Service, or a target the admin allows; never a scheme or a socket; never two
federations of one repository on one Control API."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from syncer.models.nodeauth import control_address_problem, control_target_allowed
from syncer.render.repo import plan_repo, render_repo
from syncer.repo.loader import load_repo
from tests.builders import NS
from tests.nodeauth import auth_federation as fed

AT = "metadata.annotations['flower-syncer.io/control-api-address']"


def repo(tmp_path: Path, feds: dict[str, str]) -> Path:
    root = tmp_path / "repo"
    (root / "federations").mkdir(parents=True)
    (root / "flower-syncer.yaml").write_text(f"name: targets\ndefaultNamespace: {NS}\n"
                                             "guardrails: {allowedSecrets: [superlink-tls]}\n")
    for name, text in feds.items():
        (root / "federations" / f"{name}.yaml").write_text(text)
    return root


@pytest.mark.parametrize(("address", "ok"), [
    ("fed-superlink.ns.svc:8000", True), ("127.0.0.1:9093", True), ("[::1]:8000", True),
    ("unix:/var/run/flower.sock", False), ("unix:///tmp/x", False), ("https://superlink:8000", False),
    ("dns:///superlink:8000", False), ("superlink", False), ("superlink:0", False), ("superlink:65536", False),
    ("superlink:http", False), ("user@superlink:22", False), ("a b:80", False), ("x:80\nforged", False),
    ("Upper.Case:80", False), ("[nothex]:80", False), ("", False)])
def test_only_host_and_port_is_an_address(address: str, ok: bool) -> None:
    assert (control_address_problem(address) == "") is ok


def test_patterns_of_the_admin_allow_targets() -> None:
    own = ("fed-superlink.ns:8000", "fed-superlink.ns.svc:8000")
    assert control_target_allowed("fed-superlink.ns.svc:8000", own, [])
    assert not control_target_allowed("other-superlink.team-a.svc:8000", own, [])
    assert control_target_allowed("127.0.0.1:4711", own, ["127.0.0.1:*"])
    assert not control_target_allowed("127.0.0.2:4711", own, ["127.0.0.1:*"])


def errors_of(root: Path, **kwargs: Any) -> tuple[list[Any], Any]:
    state = load_repo(root)
    rendered = render_repo(state, **kwargs)
    return [d for d in state.diagnostics + rendered.diagnostics if d.severity == "error"], \
        plan_repo(state, rendered, revision="r")


@pytest.mark.parametrize("address", ["unix:/var/run/flower.sock", '"superlink:8000\\nforged: line"',
                                     "https://fed-superlink.ns.svc:8000"])
def test_a_scheme_a_socket_or_a_newline_is_a_validation_error(tmp_path: Path, address: str) -> None:
    errors, plan = errors_of(repo(tmp_path, {"fed": fed("fed", address)}))
    (error,) = errors
    assert (error.file, error.path) == ("federations/fed.yaml", AT) and error.line > 0
    assert "forged" not in error.render() and plan.units == {}


def test_another_teams_superlink_is_refused_unless_the_admin_allows_it(tmp_path: Path) -> None:
    root = repo(tmp_path, {"fed": fed("fed", "team-a-superlink.team-a.svc:8000")})
    errors, plan = errors_of(root)
    (error,) = errors
    assert (error.file, error.path) == ("federations/fed.yaml", AT)
    assert "not this federation's own SuperLink Service" in error.message and f"fed-superlink.{NS}.svc:9093" in \
        error.message and "admin" in error.hint
    assert plan.units == {}  # nothing of it is applied, no key registered
    errors, plan = errors_of(root, control_targets=["*.team-a.svc:8000"])
    assert errors == []
    (planned,) = plan.units.values()
    assert planned.node_auth is not None and planned.node_auth.address == "team-a-superlink.team-a.svc:8000"


def test_the_own_service_needs_no_permission(tmp_path: Path) -> None:
    errors, plan = errors_of(repo(tmp_path, {"fed": fed("fed", f"fed-superlink.{NS}.svc.cluster.local:9093")}))
    assert errors == [] and len(plan.units) == 1


def test_two_federations_on_one_control_api_fail_naming_each_other(tmp_path: Path) -> None:
    root = repo(tmp_path, {"fed": fed("fed", "127.0.0.1:4711"), "two": fed("two", "127.0.0.1:4711"),
                           "three": fed("three", None)})
    errors, plan = errors_of(root, control_targets=["127.0.0.1:*"])
    assert sorted((d.file, d.path) for d in errors) == [("federations/fed.yaml", AT), ("federations/two.yaml", AT)]
    assert all("127.0.0.1:4711" in d.message for d in errors)
    assert "'two' (federations/two.yaml)" in next(d.message for d in errors if d.file == "federations/fed.yaml")
    assert "'fed' (federations/fed.yaml)" in next(d.message for d in errors if d.file == "federations/two.yaml")
    assert [u.name for u in plan.units] == ["three"]


def test_the_targets_are_the_effective_guardrails(tmp_path: Path) -> None:
    """By default render_repo takes the allowed targets from the guardrails (which an admin policy
    narrows, render.tenancy): without a list, only the federation's own SuperLink Service."""
    root = repo(tmp_path, {"fed": fed("fed", "127.0.0.1:4711")})
    errors, plan = errors_of(root)
    assert len(errors) == 1 and plan.units == {}
    (root / "flower-syncer.yaml").write_text(f"name: targets\ndefaultNamespace: {NS}\n"
                                             "guardrails: {allowedControlApiTargets: ['127.0.0.1:*'],"
                                             " allowedSecrets: [superlink-tls]}\n")
    errors, plan = errors_of(root)
    assert errors == [] and len(plan.units) == 1
