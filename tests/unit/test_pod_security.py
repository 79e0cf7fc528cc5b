"""The Pod Security Standards checker (syncer.render.podsecurity), control by control: a pod that
meets `restricted` passes every level; each mutation breaks exactly the control it names, at the
levels Kubernetes holds it to, and is exempted by exactly its allowPodFeatures entry."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from syncer.render.podsecurity import check_pod

Pod = dict[str, Any]


def restricted_pod() -> Pod:
    secure = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "runAsNonRoot": True}
    return {"metadata": {"annotations": {}},
            "spec": {"securityContext": {"seccompProfile": {"type": "RuntimeDefault"}, "runAsUser": 1000},
                     "initContainers": [{"name": "init", "image": "busybox", "securityContext": dict(secure)}],
                     "containers": [{"name": "app", "image": "app", "securityContext": copy.deepcopy(secure),
                                     "ports": [{"containerPort": 80}]}],
                     "volumes": [{"name": "v", "emptyDir": {}}, {"name": "s", "secret": {"secretName": "x"}},
                                 {"name": "p", "projected": {"sources": []}}]}}


def features(pod: Pod, level: Any, allowed: frozenset[str] = frozenset()) -> list[str]:
    return [f.feature for f in check_pod(pod["metadata"], pod["spec"], level, allowed)]


def sc(pod: Pod, key: str = "containers", i: int = 0) -> dict[str, Any]:
    return pod["spec"][key][i].setdefault("securityContext", {})  # type: ignore[no-any-return]


Mutation = Callable[[Pod], None]

# (name, mutation, feature, broken at baseline?)
CASES: list[tuple[str, Mutation, str, bool]] = [
    ("hostNetwork", lambda p: p["spec"].update(hostNetwork=True), "hostNetwork", True),
    ("hostPID", lambda p: p["spec"].update(hostPID=True), "hostPID", True),
    ("hostIPC", lambda p: p["spec"].update(hostIPC=True), "hostIPC", True),
    ("privileged init container", lambda p: sc(p, "initContainers").update(privileged=True), "privileged", True),
    ("privileged ephemeral container", lambda p: p["spec"].update(ephemeralContainers=[
        {"name": "debug", "securityContext": {"privileged": True, "allowPrivilegeEscalation": False,
                                               "runAsNonRoot": True, "capabilities": {"drop": ["ALL"]}}}]),
     "privileged", True),
    ("hostProcess", lambda p: sc(p).update(windowsOptions={"hostProcess": True}), "hostProcess", True),
    ("capability SYS_ADMIN", lambda p: sc(p)["capabilities"].update(add=["SYS_ADMIN"]), "capabilities", True),
    ("capability NET_RAW", lambda p: sc(p)["capabilities"].update(add=["NET_RAW"]), "capabilities", True),
    ("capability CHOWN (default set)", lambda p: sc(p)["capabilities"].update(add=["CHOWN"]), "capabilities", False),
    ("no drop ALL", lambda p: sc(p)["capabilities"].update(drop=["NET_RAW"]), "capabilities", False),
    ("hostPath volume", lambda p: p["spec"]["volumes"].append({"name": "h", "hostPath": {"path": "/"}}),
     "hostPath", True),
    ("hostPort", lambda p: p["spec"]["containers"][0]["ports"][0].update(hostPort=8080), "hostPort", True),
    ("AppArmor Unconfined", lambda p: sc(p).update(appArmorProfile={"type": "Unconfined"}), "appArmor", True),
    ("AppArmor Unconfined on the pod", lambda p: p["spec"]["securityContext"].update(
        appArmorProfile={"type": "Unconfined"}), "appArmor", True),
    ("AppArmor annotation unconfined", lambda p: p["metadata"]["annotations"].update(
        {"container.apparmor.security.beta.kubernetes.io/app": "unconfined"}), "appArmor", True),
    ("SELinux type", lambda p: sc(p).update(seLinuxOptions={"type": "spc_t"}), "seLinux", True),
    ("SELinux user", lambda p: sc(p, "initContainers").update(seLinuxOptions={"user": "system_u"}), "seLinux", True),
    ("SELinux role on the pod", lambda p: p["spec"]["securityContext"].update(seLinuxOptions={"role": "r"}),
     "seLinux", True),
    ("procMount Unmasked", lambda p: sc(p).update(procMount="Unmasked"), "procMount", True),
    ("seccomp Unconfined", lambda p: sc(p, "initContainers").update(seccompProfile={"type": "Unconfined"}),
     "seccomp", True),
    ("seccomp Unconfined on the pod", lambda p: p["spec"]["securityContext"].update(
        seccompProfile={"type": "Unconfined"}), "seccomp", True),
    ("seccomp annotation unconfined", lambda p: p["metadata"]["annotations"].update(
        {"seccomp.security.alpha.kubernetes.io/pod": "unconfined"}), "seccomp", True),
    ("no seccomp profile", lambda p: p["spec"]["securityContext"].pop("seccompProfile"), "seccomp", False),
    ("unsafe sysctl", lambda p: p["spec"]["securityContext"].update(
        sysctls=[{"name": "kernel.msgmax", "value": "1"}]), "sysctls", True),
    ("probe host", lambda p: p["spec"]["containers"][0].update(
        livenessProbe={"httpGet": {"host": "169.254.169.254", "port": 80}}), "hostProbes", True),
    ("lifecycle host", lambda p: p["spec"]["containers"][0].update(
        lifecycle={"preStop": {"tcpSocket": {"host": "10.0.0.1", "port": 22}}}), "hostProbes", True),
    ("nfs volume", lambda p: p["spec"]["volumes"].append({"name": "n", "nfs": {"server": "s", "path": "/"}}),
     "volumeTypes", False),
    ("privilege escalation unset", lambda p: sc(p).pop("allowPrivilegeEscalation"), "privilegeEscalation", False),
    ("privilege escalation true", lambda p: sc(p, "initContainers").update(allowPrivilegeEscalation=True),
     "privilegeEscalation", False),
    ("runAsNonRoot unset", lambda p: sc(p).pop("runAsNonRoot"), "runAsRoot", False),
    ("runAsNonRoot false", lambda p: sc(p, "initContainers").update(runAsNonRoot=False), "runAsRoot", False),
    ("runAsUser 0", lambda p: sc(p).update(runAsUser=0), "runAsRoot", False),
    ("runAsUser 0 on the pod", lambda p: p["spec"]["securityContext"].update(runAsUser=0), "runAsRoot", False),
]


def test_a_restricted_pod_passes_every_level() -> None:
    for level in ("privileged", "baseline", "restricted"):
        assert features(restricted_pod(), level) == [], level


@pytest.mark.parametrize(("name", "mutate", "feature", "baseline"), CASES, ids=[c[0] for c in CASES])
def test_each_control(name: str, mutate: Mutation, feature: str, baseline: bool) -> None:
    pod = restricted_pod()
    mutate(pod)
    assert set(features(pod, "restricted")) == {feature}, name
    assert features(pod, "baseline") == ([feature] if baseline else []), name
    assert features(pod, "privileged") == []
    assert features(pod, "restricted", frozenset({feature})) == []  # the feature exempts exactly its control
    others = frozenset({"privileged", "hostPath", "sysctls", "seccomp", "runAsRoot"} - {feature})
    assert set(features(pod, "restricted", others)) == {feature}


def test_every_safe_sysctl_passes_baseline() -> None:
    pod = restricted_pod()
    pod["spec"]["securityContext"]["sysctls"] = [{"name": n, "value": "1"} for n in (
        "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.tcp_keepalive_time")]
    assert features(pod, "restricted") == []


def test_baseline_allows_what_only_restricted_forbids() -> None:
    """A pod with no security context at all (what most charts render) is baseline."""
    pod = {"metadata": {}, "spec": {"containers": [{"name": "a", "image": "x"}],
                                    "volumes": [{"name": "n", "nfs": {"server": "s", "path": "/"}}]}}
    assert features(pod, "baseline") == []
    assert set(features(pod, "restricted")) == {"volumeTypes", "privilegeEscalation", "capabilities", "seccomp",
                                                "runAsRoot"}


def test_allowed_profiles_and_types() -> None:
    pod = restricted_pod()
    sc(pod).update(seccompProfile={"type": "Localhost", "localhostProfile": "p.json"},
                   appArmorProfile={"type": "Localhost", "localhostProfile": "p"},
                   seLinuxOptions={"type": "container_init_t", "level": "s0:c1"}, procMount="Default")
    pod["metadata"]["annotations"]["container.apparmor.security.beta.kubernetes.io/app"] = "runtime/default"
    pod["spec"]["containers"][0]["readinessProbe"] = {"httpGet": {"port": 80, "host": ""}}
    sc(pod)["capabilities"]["add"] = ["NET_BIND_SERVICE"]
    assert features(pod, "restricted") == []


def test_user_namespaces_relax_root_and_proc_mount_as_kubernetes_does() -> None:
    pod = restricted_pod()
    pod["spec"]["hostUsers"] = False
    sc(pod).update(runAsNonRoot=False, runAsUser=0, procMount="Unmasked")
    assert features(pod, "baseline") == []
    assert features(pod, "restricted") == ["procMount"]  # restricted's procMount has no such relaxation


def test_windows_pods_skip_the_linux_only_restricted_controls() -> None:
    pod = restricted_pod()
    pod["spec"]["os"] = {"name": "windows"}
    for c in (sc(pod), sc(pod, "initContainers")):
        c.pop("allowPrivilegeEscalation")
        c.pop("capabilities")
    pod["spec"]["securityContext"].pop("seccompProfile")
    assert features(pod, "restricted") == []


def test_gpu_device_paths_count_as_host_paths_unless_the_pod_is_privileged() -> None:
    pod = restricted_pod()
    pod["spec"]["volumes"].append({"name": "dri", "hostPath": {"path": "/dev/dri"}})
    assert features(pod, "baseline") == ["hostPath"]
    sc(pod).update(privileged=True)
    assert features(pod, "baseline") == ["privileged"]
    assert features(pod, "baseline", frozenset({"privileged"})) == []


def test_findings_name_their_field() -> None:
    pod = restricted_pod()
    sc(pod, "initContainers").update(privileged=True)
    pod["spec"]["volumes"].append({"name": "h", "hostPath": {"path": "/etc"}})
    found = check_pod(pod["metadata"], pod["spec"], "baseline")
    assert [(f.feature, f.path) for f in found] == [
        ("hostPath", "spec.volumes[3].hostPath"), ("privileged", "spec.initContainers[0].securityContext.privileged")]
    assert all(f.reason for f in found)


def test_no_shape_of_pod_makes_a_check_raise() -> None:
    """Whatever a podTemplate holds, the checks report or pass; they never raise (a raise would
    stop the render of the whole repository)."""
    import random

    from syncer.render.podrules import AgentAccount, Allowances, check_pod_spec

    keys = ["securityContext", "capabilities", "add", "drop", "containers", "initContainers", "ephemeralContainers",
            "volumes", "hostPath", "path", "ports", "hostPort", "seccompProfile", "type", "appArmorProfile",
            "seLinuxOptions", "procMount", "sysctls", "name", "windowsOptions", "hostProcess", "livenessProbe",
            "httpGet", "host", "lifecycle", "preStop", "runAsNonRoot", "runAsUser", "allowPrivilegeEscalation",
            "privileged", "os", "hostUsers", "tolerations", "key", "operator", "priorityClassName", "nodeName",
            "serviceAccountName", "projected", "sources", "secret", "secretName", "items", "serviceAccountToken",
            "audience", "env", "valueFrom", "secretKeyRef", "envFrom", "secretRef", "dnsConfig", "annotations"]
    rng = random.Random(7)

    def value(depth: int) -> Any:
        r = rng.random()
        if depth > 4 or r < 0.3:
            return rng.choice([None, True, 0, 1, "x", "Unconfined", "ALL", "/", [], {}, 3.5, "windows", "Exists"])
        if r < 0.6:
            return [value(depth + 1) for _ in range(rng.randint(0, 3))]
        return {rng.choice(keys): value(depth + 1) for _ in range(rng.randint(0, 4))}

    for _ in range(3000):
        spec = {rng.choice(keys): value(1) for _ in range(rng.randint(0, 6))}
        meta = {"annotations": value(2)}
        for level in ("baseline", "restricted"):
            check_pod(meta, spec, level)
        list(check_pod_spec(spec, "ns", own_accounts=set(), secrets=set(), agent=AgentAccount(), allow=Allowances()))
