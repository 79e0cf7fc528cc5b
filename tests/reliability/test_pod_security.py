"""Pod security (issue 25, item 3): what a commit asked of a pod in the second hostile-input
campaign, each refused by `validate` and by the sync (the unit fails like a config error: nothing
of it is applied, nothing pruned), with a diagnostic that names the object, the field and why.
The Pod Security Standards at `baseline` by default (restricted opt-in), and the rules PSS lacks:
the agent's own or another ServiceAccount, ServiceAccount-token Secrets, nodeName, control-plane
tolerations, system priority classes, token audiences, other applications' Secrets, hostAliases,
dnsConfig. In-process, on the in-memory API server."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from syncer.cli import EXIT_FAILED, EXIT_OK, main
from syncer.cluster.whoami import account_of_token, agent_account
from syncer.engine.sync import Engine, SyncOptions
from syncer.render.podrules import AgentAccount
from syncer.render.repo import plan_repo, render_repo
from syncer.repo.loader import load_repo
from tests.builders import FED, NS, pool
from tests.fakekube import FakeApiServer, FakeKube

REPO = Path(__file__).resolve().parents[2]


def repo(root: Path, pools: str, rails: str = "", files: dict[str, str] | None = None) -> Path:
    (root / "federations").mkdir(parents=True, exist_ok=True)
    (root / "flower-syncer.yaml").write_text(f"name: hostile\ndefaultNamespace: {NS}\n{rails}")
    (root / "federations" / "fed.yaml").write_text(FED.format(name="fed", pools=pools, annotations=""))
    for rel, text in (files or {}).items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def errors(root: Path, agent: AgentAccount | None = None) -> list[str]:
    state = load_repo(root)
    rendered = render_repo(state, agent=agent)
    return [d.message for d in state.diagnostics + rendered.diagnostics if d.severity == "error"]


def template(spec: str) -> str:
    """A pool whose podTemplate.spec is `spec` (a YAML flow mapping)."""
    return pool("a") + f"        podTemplate: {{spec: {spec}}}\n"


def one(found: list[str], *needles: str) -> str:
    hits = [m for m in found if all(n in m for n in needles)]
    assert len(hits) == 1, found
    return hits[0]


# -- the Pod Security Standards ------------------------------------------------------------------------

ROOT_INIT = "{initContainers: [{name: init, image: busybox, securityContext: {runAsUser: 0, %s}}]}"
PSS_CASES = {
    "privileged DaemonSet init container with hostPath /": (
        pool("a") + "        volumes: [{name: root, hostPath: {path: /}}]\n"
        + "        podTemplate: {spec: {initContainers: [{name: x, image: busybox, "
          "securityContext: {privileged: true}}]}}\n", ["hostPath", "privileged"]),
    "root init container with Unconfined seccomp": (
        template(ROOT_INIT % "seccompProfile: {type: Unconfined}"), ["seccomp"]),
    "root init container with Unconfined AppArmor": (
        template(ROOT_INIT % "appArmorProfile: {type: Unconfined}"), ["appArmor"]),
    "pod sysctls outside the safe set": (
        template("{securityContext: {sysctls: [{name: kernel.core_pattern, value: '|/tmp/x'}]}}"), ["sysctls"]),
    "host namespaces": (template("{hostNetwork: true, hostPID: true, hostIPC: true}"),
                        ["hostNetwork", "hostPID", "hostIPC"]),
    "SELinux spc_t": (template("{securityContext: {seLinuxOptions: {type: spc_t}}}"), ["seLinux"]),
    "probe host in an init container": (
        template("{initContainers: [{name: p, image: b, startupProbe: {httpGet: {host: 10.0.0.1, port: 80}}}]}"),
        ["hostProbes"]),
    "Unmasked /proc": (template("{initContainers: [{name: p, image: b, securityContext: {procMount: Unmasked}}]}"),
                       ["procMount"]),
    "NET_RAW capability": (
        template("{initContainers: [{name: p, image: b, securityContext: {capabilities: {add: [NET_RAW]}}}]}"),
        ["capabilities"]),
}


@pytest.mark.parametrize("case", sorted(PSS_CASES))
def test_baseline_refuses(case: str, tmp_path: Path) -> None:
    pools, features = PSS_CASES[case]
    found = errors(repo(tmp_path, pools))
    for feature in features:
        message = one(found, f"uses {feature} (")
        assert "Pod Security Standard 'baseline' forbids it" in message and "because" in message
    assert len(found) == len(features), found
    opt_in = f"guardrails:\n  allowPodFeatures: [{', '.join(features)}]\n"
    assert errors(repo(tmp_path / "allowed", pools, opt_in)) == []  # each feature exempts exactly its control


def test_privileged_level_lifts_the_standards_but_not_the_gitops_rules(tmp_path: Path) -> None:
    pools = template("{hostPID: true, nodeName: node-1}")
    found = errors(repo(tmp_path, pools, "guardrails:\n  podSecurity: privileged\n"))
    assert len(found) == 1 and "nodeName" in found[0], found


def test_restricted_is_opt_in_and_the_chart_defaults_meet_it(tmp_path: Path) -> None:
    root = repo(tmp_path, pool("a"), "guardrails:\n  podSecurity: restricted\n",
                {"supernodes/edge/values.yaml": "supernode:\n  isolationMode: process\nsuperexec:\n  enabled: true\n"})
    found = errors(root)
    assert found and all("StatefulSet/flower/fed-" in m for m in found), found  # the federation's containers
    assert any("uses runAsRoot (" in m and "'restricted'" in m for m in found)
    assert errors(repo(tmp_path / "baseline", pool("a"))) == []


def test_everything_we_render_by_default_and_the_examples_pass_baseline(tmp_path: Path) -> None:
    assert errors(REPO / "config" / "examples") == []
    defaults = repo(tmp_path, pool("a") + pool("b"), files={"supernodes/edge/values.yaml": ""})
    assert errors(defaults) == []


def test_amd_mount_all_needs_privileged_and_nothing_else(tmp_path: Path) -> None:
    amd = pool("a") + "        gpu: {enabled: true, vendor: amd, mountAll: true}\n"
    found = errors(repo(tmp_path, amd))
    assert len(found) == 1 and "uses privileged (" in found[0], found
    assert errors(repo(tmp_path / "ok", amd, "guardrails:\n  allowPodFeatures: [privileged]\n")) == []


# -- what PSS allows and a GitOps tool must refuse ------------------------------------------------------

SECRET = """apiVersion: v1
kind: Secret
metadata:
  name: {name}
  annotations: {{kubernetes.io/service-account.name: flower-syncer}}
type: {type}
"""
RULE_CASES = {
    "the agent's ServiceAccount": (template("{serviceAccountName: flower-syncer}"), "the agent's own ServiceAccount"),
    "the agent's ServiceAccount, old field": (template("{serviceAccount: flower-syncer}"), "the agent's own"),
    "another ServiceAccount of the namespace": (template("{serviceAccountName: cluster-admin-bot}"),
                                                "which the unit does not render"),
    "nodeName": (template("{nodeName: control-plane-0}"), "nodeName bypasses the scheduler"),
    "tolerate everything": (template("{tolerations: [{operator: Exists}]}"), "tolerates every taint"),
    "control-plane taint": (template("{tolerations: [{key: node-role.kubernetes.io/control-plane, "
                                     "operator: Exists, effect: NoSchedule}]}"), "control-plane nodes"),
    "master taint": (template("{tolerations: [{key: node-role.kubernetes.io/master, operator: Exists}]}"),
                     "tolerates node-role.kubernetes.io/master"),
    "system-node-critical": (template("{priorityClassName: system-node-critical}"), "reserved for the cluster"),
    "system-cluster-critical": (template("{priorityClassName: system-cluster-critical}"), "preempt them"),
    "projected token for any audience": (
        pool("a") + "        volumes: [{name: t, projected: {sources: [{serviceAccountToken: "
                    "{audience: vault, path: token}}]}}]\n", "for the audience 'vault'"),
    "another application's Secret as a volume": (
        pool("a") + "        volumes: [{name: s, secret: {secretName: billing-db}}]\n",
        "mounts the Secret 'billing-db'"),
    "another application's Secret, projected": (
        pool("a") + "        volumes: [{name: s, projected: {sources: [{secret: {name: billing-db}}]}}]\n",
        "projects the Secret 'billing-db'"),
    "another application's Secret in env": (
        pool("a") + "        env: [{name: DB, valueFrom: {secretKeyRef: {name: billing-db, key: password}}}]\n",
        "reads the Secret 'billing-db'"),
    "another application's Secret in envFrom": (
        template("{initContainers: [{name: i, image: b, envFrom: [{secretRef: {name: billing-db}}]}]}"),
        "reads the Secret 'billing-db'"),
    "hostAliases": (template("{hostAliases: [{ip: 10.9.9.9, hostnames: [fed-superlink]}]}"), "hostAliases redirect"),
    "dnsConfig": (template("{dnsPolicy: None, dnsConfig: {nameservers: [10.9.9.9]}}"), "custom DNS"),
}


@pytest.mark.parametrize("case", sorted(RULE_CASES))
def test_gitops_rules_refuse(case: str, tmp_path: Path) -> None:
    pools, reason = RULE_CASES[case]
    found = errors(repo(tmp_path, pools))
    message = one(found, reason)
    assert message.startswith("StatefulSet/flower/fed-supernode-a spec.template.spec."), message
    assert ": refused, because " in message


def test_a_service_account_token_secret_from_git_is_refused(tmp_path: Path) -> None:
    root = repo(tmp_path, pool("a"), files={
        "supernodes/edge/values.yaml": "tls:\n  enabled: false\n",
        "supernodes/edge/secrets.yaml": SECRET.format(name="agent-token", type="kubernetes.io/service-account-token")})
    message = one(errors(root), "kubernetes.io/service-account-token")
    assert "non-expiring token" in message and "Secret/flower/agent-token" in message
    root = repo(tmp_path / "opaque", pool("a"), files={
        "supernodes/edge/values.yaml": "tls:\n  enabled: false\n",
        "supernodes/edge/secrets.yaml": SECRET.format(name="agent-token", type="Opaque")})
    assert errors(root) == []


def test_the_agents_account_is_refused_whatever_the_guardrails_say(tmp_path: Path) -> None:
    rails = "guardrails:\n  allowedServiceAccounts: ['*']\n  podSecurity: privileged\n"
    assert errors(repo(tmp_path / "other", template("{serviceAccountName: team-bot}"), rails)) == []
    found = errors(repo(tmp_path / "agent", template("{serviceAccountName: flower-syncer}"), rails))
    assert len(found) == 1 and "the agent's own ServiceAccount" in found[0]
    # known from the in-cluster token: exactly that account in that namespace
    agent = AgentAccount("gitops", NS)
    found = errors(repo(tmp_path / "token", template("{serviceAccountName: gitops}"), rails), agent)
    assert len(found) == 1 and "the agent's own ServiceAccount" in found[0]
    assert errors(repo(tmp_path / "elsewhere", template("{serviceAccountName: gitops}"), rails),
                  AgentAccount("gitops", "ops")) == []


def test_the_agent_knows_its_account_from_its_token(tmp_path: Path) -> None:
    claims = {"sub": "system:serviceaccount:flower-system:flower-syncer", "aud": ["https://kubernetes.default.svc"]}
    body = base64.urlsafe_b64encode(json.dumps(claims).encode()).decode().rstrip("=")
    token = tmp_path / "token"
    token.write_text(f"eyJhbGciOiJSUzI1NiJ9.{body}.c2ln")
    assert agent_account(token) == AgentAccount("flower-syncer", "flower-system")
    assert agent_account(tmp_path / "missing") == AgentAccount("flower-syncer", None)  # every namespace
    assert account_of_token("not-a-jwt") is None and account_of_token("a.!!!.c") is None


def test_allowances_open_exactly_what_they_name(tmp_path: Path) -> None:
    pools = (pool("a") + "        volumes: [{name: s, secret: {secretName: shared-ca-bundle}}, {name: t, projected: "
             "{sources: [{serviceAccountToken: {audience: vault, path: t}}]}}]\n"
             "        podTemplate: {spec: {serviceAccountName: trainer}}\n")
    assert len(errors(repo(tmp_path / "none", pools))) == 3
    rails = ("guardrails:\n  allowedSecrets: [shared-*]\n  allowedTokenAudiences: [vault]\n"
             "  allowedServiceAccounts: [trainer]\n")
    assert errors(repo(tmp_path / "all", pools, rails)) == []


def test_own_secrets_and_public_ca_keys_pass(tmp_path: Path) -> None:
    """The unit's own Secrets (rendered, or the Certificate's), and a volume of only ca.crt."""
    own = repo(tmp_path, pool("a"), files={
        "supernodes/edge/values.yaml": "tls:\n  enabled: false\nsupernode:\n  env:\n    - name: TOKEN\n"
                                       "      valueFrom: {secretKeyRef: {name: edge-token, key: t}}\n",
        "supernodes/edge/secrets.yaml": SECRET.format(name="edge-token", type="Opaque")})
    assert errors(own) == []
    ca_only = pool("a") + ("        volumes: [{name: c, secret: {secretName: any-ca, "
                           "items: [{key: ca.crt, path: c}]}}]\n")
    assert errors(repo(tmp_path / "ca", ca_only)) == []
    assert errors(repo(tmp_path / "tls", pool("a"), files={"supernodes/edge/values.yaml": ""})) == []


# -- where they are reported, and what the sync does ---------------------------------------------------

def test_validate_fails_naming_file_line_object_and_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = repo(tmp_path, template("{nodeName: n1, securityContext: {sysctls: [{name: kernel.msgmax, value: '1'}]}}"))
    assert main(["validate", str(root)]) == EXIT_FAILED
    out = capsys.readouterr()
    text = out.out + out.err
    assert "federations/fed.yaml:4:1: error: StatefulSet/flower/fed-supernode-a spec.template.spec.nodeName" in text
    assert "spec.template.spec.securityContext.sysctls[0].name" in text
    assert "hint:" in text
    assert main(["validate", str(repo(tmp_path / "ok", pool("a")))]) == EXIT_OK


def test_a_unit_that_crosses_a_rule_is_neither_applied_nor_pruned(tmp_path: Path) -> None:
    server = FakeApiServer()
    server.add_namespace(NS)
    kube = FakeKube(server)
    root = repo(tmp_path, pool("a") + pool("b"))
    state = load_repo(root)
    assert Engine(kube).sync(plan_repo(state, render_repo(state)), SyncOptions()).ok
    before = {n: kube.get("StatefulSet", NS, n) for n in ("fed-supernode-a", "fed-supernode-b", "fed-superlink")}
    # the next commit drops pool b and runs pool a as the agent
    repo(root, template("{serviceAccountName: flower-syncer}"))
    state = load_repo(root)
    plan = plan_repo(state, render_repo(state))
    assert plan.units == {} and not plan.prune_allowed and len(plan.failed) == 1
    report = Engine(kube).sync(plan, SyncOptions())
    assert not report.ok and "configuration has errors" in report.units[0].errors[0]
    assert report.writes <= 1  # at most the unit's condition on its inventory
    after = {n: kube.get("StatefulSet", NS, n) for n in before}
    assert after == before and None not in after.values()  # nothing applied, nothing pruned
