"""The Kubernetes Pod Security Standards (PSS), checked on a rendered pod before anything is applied.

`baseline` and `restricted` as the Pod Security Admission controller defines them (the checks of
k8s.io/pod-security-admission/policy at Kubernetes 1.36, the version flower-syncer pins), over
`containers`, `initContainers` and `ephemeralContainers` alike:

baseline
  hostProcess (Windows), host namespaces, privileged, capabilities beyond the container runtime's
  default set, hostPath volumes, host ports, AppArmor (no `Unconfined`), SELinux (type from the
  allowed set, no user/role), /proc mount `Default`, seccomp (no `Unconfined`), sysctls from the
  safe set, probe and lifecycle hosts.
restricted (everything of baseline, and)
  volume types (configMap, csi, downwardAPI, emptyDir, ephemeral, image, persistentVolumeClaim,
  projected, secret), allowPrivilegeEscalation false, runAsNonRoot true, runAsUser not 0, seccomp
  `RuntimeDefault` or `Localhost`, capabilities drop `ALL` and add at most `NET_BIND_SERVICE`.

As in Kubernetes, a pod in a user namespace (`hostUsers: false`) is not held to runAsNonRoot,
runAsUser or (baseline) procMount, and a Windows pod (`os.name: windows`) not to the Linux-only
restricted controls. PSS defines no control on groups (runAsGroup, supplementalGroups), so none is
checked here.

Each finding names its `feature`: the `guardrails.allowPodFeatures` entry that exempts exactly that
control (e.g. `sysctls` lets a pod set any sysctl, and nothing else). The device paths of an AMD
`gpu.mountAll` (/dev/kfd, /dev/dri) are not counted as hostPath in a pod that has a privileged
container: such a container sees every device of the node anyway, and `privileged` is checked (so
an AMD mountAll pool needs `allowPodFeatures: [privileged]`, or `podSecurity: privileged`).

Pure: no I/O; the same pod gives the same findings in the same order.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

Level = Literal["privileged", "baseline", "restricted"]

GPU_DEVICE_PATHS = frozenset({"/dev/kfd", "/dev/dri"})  # what gpu.mountAll mounts for AMD GPUs
DEFAULT_CAPABILITIES = frozenset({"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
                                  "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"})
SAFE_SYSCTLS = frozenset({
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range",
    "net.ipv4.ip_unprivileged_port_start", "net.ipv4.ip_local_reserved_ports", "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes",
    "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"})  # Kubernetes 1.32-1.36; 1.37 adds two more
SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"})
RESTRICTED_VOLUME_TYPES = frozenset({"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "image",
                                     "persistentVolumeClaim", "projected", "secret"})
SECCOMP_ANNOTATION_POD = "seccomp.security.alpha.kubernetes.io/pod"
SECCOMP_ANNOTATION_CONTAINER = "container.seccomp.security.alpha.kubernetes.io/"
APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"
_VOLUME_SOURCE_IGNORED = frozenset({"name"})

# feature -> why it is a risk (the diagnostics explain each finding with it)
REASONS: dict[str, str] = {
    "hostProcess": "a Windows HostProcess container runs on the node itself, outside any isolation",
    "hostNetwork": "the pod would share the node's network namespace (sniff and bind the node's traffic)",
    "hostPID": "the pod would see and signal every process of the node",
    "hostIPC": "the pod would share the node's IPC namespace (shared memory of other processes)",
    "privileged": "a privileged container has every capability and device of the node: it is root on the node",
    "capabilities": "capabilities beyond the container runtime's defaults give kernel powers "
                    "(restricted: every container must drop ALL and may add only NET_BIND_SERVICE)",
    "hostPath": "a hostPath volume reads or writes the node's file system",
    "hostPort": "a host port binds the node's network interface and bypasses Services and NetworkPolicies",
    "appArmor": "an Unconfined AppArmor profile turns off the kernel's mandatory access control",
    "seLinux": "a custom SELinux type, user or role can escape the container's SELinux confinement",
    "procMount": "an Unmasked /proc exposes kernel settings the container runtime hides",
    "seccomp": "without a seccomp profile every system call of the kernel is reachable "
               "(restricted: RuntimeDefault or Localhost must be set)",
    "sysctls": "only the namespaced, isolated sysctls are safe; others change the whole node",
    "hostProbes": "a probe or lifecycle hook with a host makes the kubelet connect to any address",
    "volumeTypes": "restricted pods use only configMap, csi, downwardAPI, emptyDir, ephemeral, image, "
                   "persistentVolumeClaim, projected and secret volumes",
    "privilegeEscalation": "allowPrivilegeEscalation lets a process gain more privileges than its parent "
                           "(setuid binaries); restricted pods must set it to false",
    "runAsRoot": "a container running as root (UID 0) is one kernel bug away from root on the node; "
                 "restricted pods must set runAsNonRoot: true and no runAsUser: 0",
}


@dataclass(frozen=True, order=True)
class Finding:
    """One control a pod breaks: the `guardrails.allowPodFeatures` entry that exempts it, where in
    the pod spec (`spec.containers[0].securityContext.privileged`), and what is wrong."""

    feature: str
    path: str
    detail: str
    level: Literal["baseline", "restricted"] = "baseline"

    @property
    def reason(self) -> str:
        return REASONS[self.feature]


def _d(value: Any) -> dict[str, Any]:
    """`value` if it is a mapping, else an empty one (the checks never trip over a bad shape)."""
    return value if isinstance(value, dict) else {}


def _l(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def containers(pod_spec: Mapping[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(field path, container) of every container, init and ephemeral container."""
    for key in ("initContainers", "containers", "ephemeralContainers"):
        for i, c in enumerate(_l(pod_spec.get(key))):
            if isinstance(c, dict):
                yield f"spec.{key}[{i}]", c


def check_pod(pod_meta: Mapping[str, Any], pod_spec: Mapping[str, Any], level: Level,
              allowed: frozenset[str] = frozenset()) -> list[Finding]:
    """Every PSS control of `level` the pod (its template's metadata and spec) breaks, except the
    controls whose feature is `allowed`. `privileged` checks nothing."""
    if level == "privileged":
        return []
    found = list(_baseline(pod_meta, pod_spec, strict_caps=level == "restricted"))
    if level == "restricted":
        found.extend(_restricted(pod_spec))
    return sorted(f for f in found if f.feature not in allowed)


def _sc(c: Mapping[str, Any]) -> dict[str, Any]:
    return _d(c.get("securityContext"))


def _baseline(meta: Mapping[str, Any], spec: Mapping[str, Any], *, strict_caps: bool) -> Iterator[Finding]:
    pod_sc = _d(spec.get("securityContext"))
    user_ns = spec.get("hostUsers") is False
    annotations = _d(meta.get("annotations"))
    if _d(pod_sc.get("windowsOptions")).get("hostProcess"):
        yield Finding("hostProcess", "spec.securityContext.windowsOptions.hostProcess", "hostProcess: true")
    for flag in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(flag):
            yield Finding(flag, f"spec.{flag}", f"{flag}: true")
    any_privileged = False
    for where, c in containers(spec):
        sc = _sc(c)
        if _d(sc.get("windowsOptions")).get("hostProcess"):
            yield Finding("hostProcess", f"{where}.securityContext.windowsOptions.hostProcess", "hostProcess: true")
        if sc.get("privileged"):
            any_privileged = True
            yield Finding("privileged", f"{where}.securityContext.privileged", "privileged: true")
        added = [str(a) for a in _l(_d(sc.get("capabilities")).get("add"))]
        if not strict_caps:
            bad = [a for a in added if a not in DEFAULT_CAPABILITIES]
            if bad:
                yield Finding("capabilities", f"{where}.securityContext.capabilities.add",
                              f"adds {', '.join(bad)}, outside the default set")
        for j, port in enumerate(_l(c.get("ports"))):
            if isinstance(port, dict) and port.get("hostPort"):
                yield Finding("hostPort", f"{where}.ports[{j}].hostPort", f"hostPort: {port['hostPort']}")
        profile = _d(sc.get("appArmorProfile")).get("type")
        if profile is not None and profile not in ("RuntimeDefault", "Localhost"):
            yield Finding("appArmor", f"{where}.securityContext.appArmorProfile.type", f"type: {profile}")
        yield from _selinux(sc.get("seLinuxOptions"), f"{where}.securityContext.seLinuxOptions")
        proc = sc.get("procMount")
        if proc is not None and proc != "Default" and not user_ns:
            yield Finding("procMount", f"{where}.securityContext.procMount", f"procMount: {proc}")
        seccomp = _d(sc.get("seccompProfile")).get("type")
        if seccomp is not None and seccomp not in ("RuntimeDefault", "Localhost"):
            yield Finding("seccomp", f"{where}.securityContext.seccompProfile.type", f"type: {seccomp}")
        yield from _probe_hosts(c, where)
    profile = _d(pod_sc.get("appArmorProfile")).get("type")
    if profile is not None and profile not in ("RuntimeDefault", "Localhost"):
        yield Finding("appArmor", "spec.securityContext.appArmorProfile.type", f"type: {profile}")
    for key, value in sorted(annotations.items()):
        if str(key).startswith(APPARMOR_ANNOTATION) and value and value != "runtime/default" \
                and not str(value).startswith("localhost/"):
            yield Finding("appArmor", f"metadata.annotations[{key}]", f"{key}={value}")
        if (key == SECCOMP_ANNOTATION_POD or str(key).startswith(SECCOMP_ANNOTATION_CONTAINER)) \
                and value not in ("runtime/default", "docker/default") and not str(value).startswith("localhost/"):
            yield Finding("seccomp", f"metadata.annotations[{key}]", f"{key}={value}")
    yield from _selinux(pod_sc.get("seLinuxOptions"), "spec.securityContext.seLinuxOptions")
    seccomp = _d(pod_sc.get("seccompProfile")).get("type")
    if seccomp is not None and seccomp not in ("RuntimeDefault", "Localhost"):
        yield Finding("seccomp", "spec.securityContext.seccompProfile.type", f"type: {seccomp}")
    for i, sysctl in enumerate(_l(pod_sc.get("sysctls"))):
        name = _d(sysctl).get("name")
        if not isinstance(name, str) or name not in SAFE_SYSCTLS:
            yield Finding("sysctls", f"spec.securityContext.sysctls[{i}].name", f"sysctl {name}")
    for i, vol in enumerate(_l(spec.get("volumes"))):
        host = _d(vol).get("hostPath")
        if host is None:
            continue
        if any_privileged and isinstance(host, dict) and host.get("path") in GPU_DEVICE_PATHS:
            continue
        path = host.get("path") if isinstance(host, dict) else None
        yield Finding("hostPath", f"spec.volumes[{i}].hostPath", f"hostPath {path}")


def _selinux(opts: Any, where: str) -> Iterator[Finding]:
    if not isinstance(opts, dict):
        return
    kind = opts.get("type") or ""
    if not isinstance(kind, str) or kind not in SELINUX_TYPES:
        yield Finding("seLinux", f"{where}.type", f"type: {kind}")
    for key in ("user", "role"):
        if opts.get(key):
            yield Finding("seLinux", f"{where}.{key}", f"{key} is set")


def _probe_hosts(c: Mapping[str, Any], where: str) -> Iterator[Finding]:
    handlers: list[tuple[str, Any]] = [(p, c.get(p)) for p in ("livenessProbe", "readinessProbe", "startupProbe")]
    lifecycle = _d(c.get("lifecycle"))
    handlers += [(f"lifecycle.{h}", lifecycle.get(h)) for h in ("postStart", "preStop")]
    for name, handler in handlers:
        if not isinstance(handler, dict):
            continue
        for action in ("httpGet", "tcpSocket"):
            host = _d(handler.get(action)).get("host")
            if host:
                yield Finding("hostProbes", f"{where}.{name}.{action}.host", f"host {host}")


def _restricted(spec: Mapping[str, Any]) -> Iterator[Finding]:
    pod_sc = _d(spec.get("securityContext"))
    windows = _d(spec.get("os")).get("name") == "windows"
    user_ns = spec.get("hostUsers") is False
    for i, vol in enumerate(_l(spec.get("volumes"))):
        if not isinstance(vol, dict):
            continue
        kinds = [k for k in vol if k not in _VOLUME_SOURCE_IGNORED]
        bad = [k for k in kinds if k not in RESTRICTED_VOLUME_TYPES and k != "hostPath"]  # hostPath: baseline's
        if bad:
            yield Finding("volumeTypes", f"spec.volumes[{i}].{bad[0]}", f"volume type {bad[0]}", "restricted")
    pod_non_root = pod_sc.get("runAsNonRoot")
    pod_seccomp = _d(pod_sc.get("seccompProfile")).get("type") in ("RuntimeDefault", "Localhost")
    if not user_ns:
        if pod_non_root is False:
            yield Finding("runAsRoot", "spec.securityContext.runAsNonRoot", "runAsNonRoot: false", "restricted")
        if pod_sc.get("runAsUser") == 0:
            yield Finding("runAsRoot", "spec.securityContext.runAsUser", "runAsUser: 0", "restricted")
    for where, c in containers(spec):
        sc = _sc(c)
        if not windows:
            if sc.get("allowPrivilegeEscalation") is not False:
                yield Finding("privilegeEscalation", f"{where}.securityContext.allowPrivilegeEscalation",
                              "allowPrivilegeEscalation is not false", "restricted")
            caps = _d(sc.get("capabilities"))
            if "ALL" not in _l(caps.get("drop")):
                yield Finding("capabilities", f"{where}.securityContext.capabilities.drop",
                              "does not drop ALL", "restricted")
            bad = [str(a) for a in _l(caps.get("add")) if a != "NET_BIND_SERVICE"]
            if bad:
                yield Finding("capabilities", f"{where}.securityContext.capabilities.add",
                              f"adds {', '.join(bad)} (only NET_BIND_SERVICE may be added)", "restricted")
            if "seccompProfile" not in sc and not pod_seccomp:
                yield Finding("seccomp", f"{where}.securityContext.seccompProfile",
                              "no seccompProfile (RuntimeDefault or Localhost) on the pod or container",
                              "restricted")
        if user_ns:
            continue
        non_root = sc.get("runAsNonRoot")
        if non_root is False or (non_root is None and pod_non_root is not True):
            yield Finding("runAsRoot", f"{where}.securityContext.runAsNonRoot",
                          "runAsNonRoot is false" if non_root is False else
                          "runAsNonRoot: true is set neither on the pod nor on the container", "restricted")
        if sc.get("runAsUser") == 0:
            yield Finding("runAsRoot", f"{where}.securityContext.runAsUser", "runAsUser: 0", "restricted")
    proc_checked = not user_ns  # baseline's procMount already covers pods outside a user namespace
    if not proc_checked:
        for where, c in containers(spec):
            proc = _sc(c).get("procMount")
            if proc is not None and proc != "Default":
                yield Finding("procMount", f"{where}.securityContext.procMount", f"procMount: {proc}", "restricted")
