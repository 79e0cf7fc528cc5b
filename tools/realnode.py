"""Real worker nodes for the devcluster: containerd + runc, kubelet, kube-proxy and CoreDNS.

`python3 tools/devcluster.py up --real-nodes 1` adds one beside the kwok nodes. Everything a real
node does to the host stays in namespaces this module creates, so several clusters run side by
side and `down` leaves the host as it found it:

- a network namespace ``fsc-<n>`` (``ip netns``) holds the node: a veth pair links it to the
  host (host ``10.201.<n>.1/30``, node ``10.201.<n>.2/30``; these addresses exist only on that
  pair), the CNI bridge ``cni0`` with the pods (``10.245.0.0/24``), kube-proxy's iptables rules
  and the node's own masquerade rule. The namespace has no default route and the host forwards
  nothing, so nothing leaves the machine. The apiserver of such a cluster listens on the host end.
- a mount namespace, held by a ``sleep`` process, that kubelet, containerd and its shims share:
  a fresh sysfs for the node's network namespace, and tmpfs over ``/run/netns``,
  ``/run/containerd``, ``/var/lib/cni``, ``/var/lib/kubelet`` and ``/var/log/containers`` (paths
  kubelet and libcni use whatever they are configured with: the network cache of every pod, the
  device-plugin socket, the self-signed serving certificate, the container log links; on the
  host every cluster's node shared them and `down` left them behind), so the pods' network
  namespaces, rootfs and volume mounts vanish with it.
- cgroups under ``/<hierarchy>/fsc-<n>/`` (kubelet's ``cgroupRoot``), removed by ``down``.
- state (containerd's root, kubelet's root, pod logs, CNI IPAM) under the cluster's state dir.

Images come from tools/images.py (no registry is reachable): the pause image and Flower's.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from devutil import DevclusterError, ensure_apt_packages

if TYPE_CHECKING:
    from devutil import ClusterCredentials

NETNS_PREFIX = "fsc-"
HOST_NET = "10.201"  # 10.201.<n>.0/30 per real-node cluster, n in 1..250
POD_CIDR = "10.245.0.0/24"
CLUSTER_DOMAIN = "cluster.local"
CNI_BIN_DIR = Path("/usr/lib/cni")  # Debian's containernetworking-plugins
NODE_CLASS = "real"
APT_COMMANDS = {
    "containerd": "containerd",
    "ctr": "containerd",
    "runc": "runc",
    "iptables": "iptables",
    "conntrack": "conntrack",
    "debootstrap": "debootstrap",
    "nsenter": "util-linux",
    str(CNI_BIN_DIR / "bridge"): "containernetworking-plugins",  # shutil.which takes a path as it is
}
# The processes of a real node, as named in the cluster's state (one node per cluster for now).
DAEMONS = ("containerd", "kubelet", "kube-proxy", "coredns")


class RealNodeError(DevclusterError):
    pass


@dataclass
class NodeNet:
    index: int
    name: str  # the Node's name
    netns: str
    host_if: str
    host_ip: str
    node_ip: str
    cgroup_root: str
    dir: str  # state directory of the node
    holder_pid: int = 0

    @property
    def root(self) -> Path:
        return Path(self.dir)


def _run(*args: str, check: bool = True, netns: str | None = None) -> subprocess.CompletedProcess[str]:
    cmd = ["ip", "netns", "exec", netns, *args] if netns else list(args)
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise RealNodeError(f"{' '.join(cmd)}: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc


def preflight(count: int) -> list[Path]:
    """Check the host, install the Debian packages a node needs, and return the image archives."""
    if count != 1:
        raise RealNodeError("one real node per cluster is supported (--real-nodes 1)")
    if os.geteuid() != 0:
        raise RealNodeError("real nodes need root (network namespaces, cgroups, mounts)")
    if not Path("/sys/fs/cgroup/memory").is_dir() and not Path("/sys/fs/cgroup/cgroup.controllers").exists():
        raise RealNodeError("no cgroup hierarchy at /sys/fs/cgroup")
    ensure_apt_packages(APT_COMMANDS)
    import images  # here: devcluster without real nodes never needs it

    return images.build_all()


def containerd_binary() -> str:
    path = shutil.which("containerd")
    if path is None:
        raise RealNodeError("containerd is not installed (Debian package containerd)")
    return path


def containerd_ready(net: NodeNet) -> bool:
    sock = net.root / "containerd" / "containerd.sock"
    return sock.exists() and _run(*node_prefix(net), "ctr", f"--address={sock}", "version", check=False).returncode == 0


# ---- network ---------------------------------------------------------------------------------


def _used_indexes() -> set[int]:
    used = set()
    for line in _run("ip", "netns", "list", check=False).stdout.splitlines():
        m = re.match(rf"{NETNS_PREFIX}(\d+)\b", line)
        if m:
            used.add(int(m.group(1)))
    for m in re.finditer(rf"inet {re.escape(HOST_NET)}\.(\d+)\.1/", _run("ip", "-4", "-o", "addr").stdout):
        used.add(int(m.group(1)))
    return used


def claim_node(cluster_dir: Path, ordinal: int = 0) -> NodeNet:
    """Claim a free slot n by creating its network namespace `fsc-<n>`: `ip netns add` fails when
    the name exists, so two clusters starting at once never share (or later delete) a slot."""
    used = _used_indexes()
    for index in (i for i in range(1, 251) if i not in used):
        claimed = _run("ip", "netns", "add", f"{NETNS_PREFIX}{index}", check=False)
        if claimed.returncode == 0:
            return NodeNet(
                index=index,
                name=f"real-node-{ordinal}",
                netns=f"{NETNS_PREFIX}{index}",
                host_if=f"fsc{index}h",
                host_ip=f"{HOST_NET}.{index}.1",
                node_ip=f"{HOST_NET}.{index}.2",
                cgroup_root=f"/{NETNS_PREFIX}{index}",
                dir=str(cluster_dir / f"node-{ordinal}"),
            )
        if "exists" not in claimed.stderr:
            raise RealNodeError(f"ip netns add {NETNS_PREFIX}{index}: {claimed.stderr.strip()}")
    raise RealNodeError("all 250 real-node network slots are taken; `down` some clusters")


def create_network(net: NodeNet) -> None:
    """The node's veth link to the host (the host end gets the apiserver), in its claimed namespace."""
    _run("ip", "link", "add", net.host_if, "type", "veth", "peer", "name", f"fsc{net.index}n", "netns", net.netns)
    _run("ip", "link", "set", f"fsc{net.index}n", "name", "eth0", netns=net.netns)
    _run("ip", "addr", "add", f"{net.host_ip}/30", "dev", net.host_if)
    _run("ip", "link", "set", net.host_if, "up")
    _run("ip", "link", "set", "lo", "up", netns=net.netns)
    _run("ip", "addr", "add", f"{net.node_ip}/30", "dev", "eth0", netns=net.netns)
    _run("ip", "link", "set", "eth0", "up", netns=net.netns)
    # Routing between pods and the node, and NAT of pod traffic to the host end (the apiserver),
    # happen inside the namespace only; it has no default route, so nothing goes further.
    _run("sysctl", "-qw", "net.ipv4.ip_forward=1", netns=net.netns)
    _run("iptables", "-t", "nat", "-A", "POSTROUTING", "-s", POD_CIDR, "-o", "eth0", "-j", "MASQUERADE",
         netns=net.netns)


# ---- the node's mount namespace and cgroups --------------------------------------------------

_HOLDER_SCRIPT = """
set -e
mount --make-rslave /
mkdir -p {d}/.cgroup
mount --rbind /sys/fs/cgroup {d}/.cgroup
mount -t sysfs sysfs /sys
mount --rbind {d}/.cgroup /sys/fs/cgroup
umount -l {d}/.cgroup
mkdir -p /run/netns /run/containerd /var/lib/cni /var/lib/kubelet /var/log/containers
mount -t tmpfs -o mode=755 tmpfs /run/netns
mount -t tmpfs -o mode=711 tmpfs /run/containerd
mount -t tmpfs -o mode=700 tmpfs /var/lib/cni
mount -t tmpfs -o mode=755 tmpfs /var/lib/kubelet
mount -t tmpfs -o mode=755 tmpfs /var/log/containers
echo ready > {d}/holder.ready
exec sleep infinity
"""


def start_holder(net: NodeNet) -> int:
    """A process whose mount namespace (and the node's network namespace) every node daemon joins."""
    ready = net.root / "holder.ready"
    ready.unlink(missing_ok=True)
    script = _HOLDER_SCRIPT.format(d=net.root)
    with (net.root / "holder.log").open("ab") as errors:
        proc = subprocess.Popen(
            ["nsenter", f"--net=/run/netns/{net.netns}", "unshare", "--mount", "--propagation", "unchanged",
             "sh", "-c", script],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=errors, start_new_session=True,
        )
    deadline = time.monotonic() + 10
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RealNodeError(f"the node's mount namespace failed: {(net.root / 'holder.log').read_text()[-2000:]}")
        time.sleep(0.02)
    # nsenter, unshare and sh exec in turn; the sleep is the pid that holds the namespaces.
    return _sleep_pid(proc.pid)


def _sleep_pid(pid: int) -> int:
    for _ in range(200):
        with contextlib.suppress(OSError):
            if Path(f"/proc/{pid}/comm").read_text().strip() == "sleep":
                return pid
        time.sleep(0.01)
    raise RealNodeError("the node's namespace holder did not start")


def node_prefix(net: NodeNet) -> list[str]:
    """Command prefix that runs a program in the node's mount and network namespaces."""
    return ["nsenter", f"--target={net.holder_pid}", "--mount", "--net"]


def _hierarchies() -> list[Path]:
    root = Path("/sys/fs/cgroup")
    if (root / "cgroup.controllers").exists():
        return [root]
    return [p for p in sorted(root.iterdir()) if p.is_dir() and not p.is_symlink() and (p / "cgroup.procs").exists()]


# The node's CPU weight against the host's other processes, in busy processes: the node's cgroup
# would otherwise weigh as one process, and on a shared machine at load 20 every container of the
# node together got ~4 % of a core (a Flower 1.42 SuperLink took over 3 min to print its first log
# line, past every readiness wait). A real node is a machine of its own: as much as 4 busy processes.
NODE_CPU_WEIGHT = 4


def create_cgroups(net: NodeNet) -> None:
    for hierarchy in _hierarchies():
        path = hierarchy / net.cgroup_root.lstrip("/")
        path.mkdir(exist_ok=True)
        for name, weight in (("cpu.shares", 1024 * NODE_CPU_WEIGHT), ("cpu.weight", 100 * NODE_CPU_WEIGHT)):
            if (path / name).exists():  # v1: 1024 a process; v2: 100
                (path / name).write_text(f"{weight}\n")
        for name in ("cpuset.cpus", "cpuset.mems"):  # a new v1 cpuset starts empty
            if (path / name).exists() and not (path / name).read_text().strip():
                (path / name).write_text((hierarchy / name).read_text())


def _cgroup_pids(net: NodeNet) -> set[int]:
    pids: set[int] = set()
    for hierarchy in _hierarchies():
        base = hierarchy / net.cgroup_root.lstrip("/")
        for cgroup in cgroup_tree(base):
            with contextlib.suppress(OSError, ValueError):
                pids.update(int(p) for p in (cgroup / "cgroup.procs").read_text().split())
    return pids


def cgroup_tree(base: Path) -> list[Path]:
    """`base` and every cgroup below it, parents first. A cgroup removed while the tree is walked (a
    container the runtime is tearing down) is left out instead of failing the walk, as `rglob` did."""
    return [Path(root) for root, _dirs, _files in os.walk(base)]  # os.walk ignores vanished directories


def _remove_cgroups(net: NodeNet) -> list[str]:
    left = []
    for hierarchy in _hierarchies():
        base = hierarchy / net.cgroup_root.lstrip("/")
        for path in sorted(cgroup_tree(base), key=lambda p: -len(p.parts)):
            for _ in range(50):
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.05)
            else:
                left.append(str(path))
    return left


# ---- configuration files ---------------------------------------------------------------------


def write_configs(cluster: ClusterCredentials, net: NodeNet, port: int) -> dict[str, list[str]]:
    """Configs, certificates and kubeconfigs of the node; returns each daemon's arguments."""
    d = net.root
    for sub in ("containerd", "kubelet", "pod-logs", "cni/net.d", "cni/ipam", "coredns"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    sock = d / "containerd" / "containerd.sock"
    (d / "containerd" / "config.toml").write_text(
        f"""version = 2
root = "{d / 'containerd' / 'root'}"
state = "{d / 'containerd' / 'state'}"
[grpc]
  address = "{sock}"
[ttrpc]
  address = "{sock}.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "{d / 'containerd' / 'opt'}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.10"
  enable_selinux = false
  # No CAP_SYS_RESOURCE on these machines: a negative oom_score_adj (pause: -998) is refused, so
  # containerd keeps every container's at or above its own, as it does rootless.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN_DIR}"
    conf_dir = "{d / 'cni' / 'net.d'}"
"""
    )
    cni = {
        "cniVersion": "1.0.0",
        "name": "devcluster",
        "plugins": [
            {
                "type": "bridge",
                "bridge": "cni0",
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": POD_CIDR}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": str(d / "cni" / "ipam"),
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }
    (d / "cni" / "net.d" / "10-devcluster.conflist").write_text(json.dumps(cni, indent=2) + "\n")

    pki = cluster.pki
    cluster.leaf(f"node-{net.name}", f"/O=system:nodes/CN=system:node:{net.name}", "clientAuth", [])
    cluster.leaf("kube-proxy", "/CN=system:kube-proxy", "clientAuth", [])
    cluster.leaf("coredns", "/CN=devcluster:coredns", "clientAuth", [])
    for user in (f"node-{net.name}", "kube-proxy", "coredns"):
        cluster.write_kubeconfig(d / f"{user}.kubeconfig", user, port, host=net.host_ip)
    (d / "resolv.conf").write_text("")  # pods get the cluster DNS only; nothing of the host's
    kubelet_config = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": net.cgroup_root,
        "address": net.node_ip,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "authentication": {
            "x509": {"clientCAFile": str(pki / "ca.crt")},
            "webhook": {"enabled": False},
            "anonymous": {"enabled": False},
        },
        "authorization": {"mode": "AlwaysAllow"},
        "clusterDomain": CLUSTER_DOMAIN,
        "clusterDNS": [net.node_ip],
        "resolvConf": str(d / "resolv.conf"),
        "failSwapOn": False,
        "podLogsDir": str(d / "pod-logs"),
        "containerRuntimeEndpoint": f"unix://{sock}",
        # Images are imported, never pulled: no garbage collection may delete them.
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%",
                         "nodefs.inodesFree": "1%"},
        "serializeImagePulls": False,
        "registerNode": True,
        "nodeStatusReportFrequency": "10s",
        "syncFrequency": "10s",
        "fileCheckFrequency": "10s",
        "protectKernelDefaults": False,
        "localStorageCapacityIsolation": True,
    }
    (d / "kubelet-config.json").write_text(json.dumps(kubelet_config, indent=2) + "\n")
    proxy_config = {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(d / "kube-proxy.kubeconfig")},
        "mode": "iptables",
        "hostnameOverride": net.name,
        "bindAddress": net.node_ip,
        "healthzBindAddress": "127.0.0.1:10256",
        "metricsBindAddress": "127.0.0.1:10249",
        "clusterCIDR": POD_CIDR,
        "oomScoreAdj": 0,  # its default (-999) needs CAP_SYS_RESOURCE
        # Service traffic between pods on one bridge needs SNAT to come back the same way.
        "iptables": {"masqueradeAll": True, "localhostNodePorts": False},
        # The host's conntrack table is not ours to resize.
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
    }
    (d / "kube-proxy-config.json").write_text(json.dumps(proxy_config, indent=2) + "\n")
    (d / "coredns" / "Corefile").write_text(
        f""".:53 {{
    bind {net.node_ip}
    errors
    ready {net.node_ip}:8181
    health {net.node_ip}:8080
    cache 30
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        kubeconfig {d / 'coredns.kubeconfig'} devcluster
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }}
}}
"""
    )
    labels = ",".join(
        f"{k}={v}"
        for k, v in {
            "devcluster.flower-syncer.dev/node-class": NODE_CLASS,
            "node.kubernetes.io/instance-type": "real",
            "topology.kubernetes.io/region": "local",
            "topology.kubernetes.io/zone": "zone-real",
        }.items()
    )
    return {
        "containerd": [f"--config={d / 'containerd' / 'config.toml'}", "--log-level=warn"],
        "kubelet": [
            f"--config={d / 'kubelet-config.json'}",
            f"--kubeconfig={d / f'node-{net.name}.kubeconfig'}",
            f"--root-dir={d / 'kubelet'}",
            f"--hostname-override={net.name}",
            f"--node-ip={net.node_ip}",
            f"--node-labels={labels}",
            "--v=1",
        ],
        "kube-proxy": [f"--config={d / 'kube-proxy-config.json'}", "--v=1"],
        "coredns": ["-conf", str(d / "coredns" / "Corefile")],
    }


COREDNS_RBAC = (
    (
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "devcluster:coredns"},
            "rules": [
                {"apiGroups": [""], "resources": ["endpoints", "services", "pods", "namespaces"],
                 "verbs": ["list", "watch"]},
                {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]},
            ],
        },
    ),
    (
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "devcluster:coredns"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "devcluster:coredns"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "devcluster:coredns"}],
        },
    ),
)


def import_images(net: NodeNet, archives: list[Path]) -> None:
    sock = net.root / "containerd" / "containerd.sock"
    for archive in archives:
        _run(*node_prefix(net), "ctr", f"--address={sock}", "--namespace=k8s.io", "images", "import",
             "--all-platforms", str(archive))


# ---- teardown --------------------------------------------------------------------------------


def _mnt_ns(pid: int) -> str:
    try:
        return str(Path(f"/proc/{pid}/ns/mnt").readlink())
    except OSError:
        return ""


def stop_node(net: NodeNet, daemon_pids: dict[str, int]) -> list[str]:
    """Stop the node: kubelet first, then every container, the shims and containerd, the rest, the
    namespace holder; then the cgroups. Returns what could not be removed."""
    problems = []
    holder_ns = _mnt_ns(net.holder_pid) if net.holder_pid else ""

    def kill(pids: set[int], sig: int) -> None:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)

    def wait_gone(pids: set[int], seconds: float) -> set[int]:
        deadline = time.monotonic() + seconds
        while pids and time.monotonic() < deadline:
            pids = {p for p in pids if Path(f"/proc/{p}").exists() and not _zombie(p)}
            time.sleep(0.05)
        return pids

    if "kubelet" in daemon_pids:
        kill({daemon_pids["kubelet"]}, signal.SIGTERM)
        if wait_gone({daemon_pids["kubelet"]}, 5):
            kill({daemon_pids["kubelet"]}, signal.SIGKILL)
    # Containers: everything in the node's cgroups, again until none is left (one may have forked).
    for _ in range(3):
        pids = _cgroup_pids(net)
        if not pids:
            break
        kill(pids, signal.SIGKILL)
        wait_gone(pids, 5)
    # The daemons get SIGTERM; the shims (whatever else lives in the node's mount namespace) have
    # nothing left to stop and ignore it, so they get SIGKILL at once.
    daemons = set(daemon_pids.values())
    others = {int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and holder_ns
              and _mnt_ns(int(p.name)) == holder_ns and int(p.name) != net.holder_pid} - daemons
    kill(others, signal.SIGKILL)
    kill(daemons, signal.SIGTERM)
    if left := wait_gone(daemons | others, 5):
        kill(left, signal.SIGKILL)
        wait_gone(left, 5)
    if net.holder_pid:
        kill({net.holder_pid}, signal.SIGKILL)
        wait_gone({net.holder_pid}, 5)
    problems += [f"cgroup {p}" for p in _remove_cgroups(net)]
    return problems


def remove_network(net: NodeNet) -> list[str]:
    """Delete the node's network namespace (its veth pair and rules go with it). After the
    apiserver has stopped: it listens on the host end and talks to itself there until it exits."""
    problems = []
    if _run("ip", "netns", "del", net.netns, check=False).returncode != 0 and net.netns in _netns_names():
        problems.append(f"network namespace {net.netns}")
    _run("ip", "link", "del", net.host_if, check=False)  # gone with the namespace; just in case
    return problems


def _netns_names() -> set[str]:
    return {line.split()[0] for line in _run("ip", "netns", "list", check=False).stdout.splitlines() if line}


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0] in ("Z", "X")
    except OSError:
        return True


def node_record(net: NodeNet) -> dict[str, Any]:
    return asdict(net)


def node_from_record(record: dict[str, Any]) -> NodeNet:
    return NodeNet(**record)


def wipe_node_dir(net: NodeNet) -> None:
    """A fresh node each `up` (etcd starts empty too); mounts in it died with its namespace."""
    shutil.rmtree(net.root, ignore_errors=True)
    net.root.mkdir(parents=True)
