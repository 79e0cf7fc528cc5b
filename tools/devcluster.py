#!/usr/bin/env python3
"""A real, local Kubernetes control plane for flower-syncer's tests and demo.

It runs etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok as plain
processes bound to 127.0.0.1 (no containers, no kubelet), and registers fake CPU and GPU
nodes that kwok keeps Ready. `up --real-nodes 1` adds a real worker as well (containerd,
kubelet, kube-proxy, CoreDNS; see realnode.py).  Pods are really created by controllers, bound by the
scheduler and turned Running/Ready by kwok, so readiness and GPU placement are observable.

Subcommands::

    devcluster.py build        # build the pinned binaries into ~/.cache/flower-syncer/bin/<k8s version>/
    devcluster.py up           # start the cluster (idempotent), print how long it took
    devcluster.py status       # processes, RSS, readiness, nodes
    devcluster.py env          # `eval "$(devcluster.py env)"` sets KUBECONFIG and PATH
    devcluster.py kubeconfig   # print the admin kubeconfig path
    devcluster.py down         # stop the processes this tool started; --purge also drops certs/logs

Only the Python standard library and the `openssl` command are used, so it runs before the
project's own dependencies are installed.  See tools/README.md.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import fcntl
import functools
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

TOOLS_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(TOOLS_DIR))

import realnode  # noqa: E402
from devutil import DevclusterError, cache_root, ensure_apt_packages, fmt_secs, log, step  # noqa: E402

GOBUILD_DIR = TOOLS_DIR / "gobuild"

# Bump when the build recipe (flags, names, extra files) changes, to force a rebuild.
BUILD_RECIPE = "3"

# Go main packages built from the wrapper module in tools/gobuild (one `go build` for all).
GO_PACKAGES: dict[str, str] = {
    "kube-apiserver": "k8s.io/kubernetes/cmd/kube-apiserver",
    "kube-controller-manager": "k8s.io/kubernetes/cmd/kube-controller-manager",
    "kube-scheduler": "k8s.io/kubernetes/cmd/kube-scheduler",
    "kubectl": "k8s.io/kubernetes/cmd/kubectl",
    "etcd": "go.etcd.io/etcd/server/v3",
    "kwok": "sigs.k8s.io/kwok/cmd/kwok",
    # for real nodes (`up --real-nodes N`, tools/realnode.py)
    "kubelet": "k8s.io/kubernetes/cmd/kubelet",
    "kube-proxy": "k8s.io/kubernetes/cmd/kube-proxy",
}
# CoreDNS with only the plugins a real node needs, from its own wrapper module (tools/coredns).
COREDNS_DIR = TOOLS_DIR / "coredns"
# Helm is its own module without replace directives, so `go install pkg@version` works.
HELM_MODULE = "helm.sh/helm/v4"
HELM_VERSION = "v4.3.1"
BINARIES = (*GO_PACKAGES, "helm", "coredns")

# kwok stage files shipped in the kwok module (same set kwokctl uses by default).
KWOK_STAGE_FILES = (
    "kustomize/stage/node/fast/node-initialize.yaml",
    "kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "kustomize/stage/pod/fast/pod-ready.yaml",
    "kustomize/stage/pod/fast/pod-complete.yaml",
    "kustomize/stage/pod/fast/pod-delete.yaml",
)
KWOK_STAGES_NAME = "kwok-stages.yaml"
STAMP_NAME = ".build-stamp.json"

KWOK_ANNOTATION = "kwok.x-k8s.io/node"
DEVCLUSTER_LABEL = "devcluster.flower-syncer.dev/node-class"
SERVICE_CIDR = "10.96.0.0/16"
POD_CIDR = "10.244.0.1/16"  # kwok hands out pod IPs from here; nothing ever routes to them
# `up --audit`: every write at the Metadata level (who, which user agent, what, when), nothing else.
AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
rules:
  - level: Metadata
    verbs: [create, update, patch, delete, deletecollection]
  - level: None
"""
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")


def read_gomod_versions() -> dict[str, str]:
    """Versions pinned in tools/gobuild/go.mod (the single source of truth)."""
    text = (GOBUILD_DIR / "go.mod").read_text()
    wanted = {
        "kubernetes": "k8s.io/kubernetes",
        "etcd": "go.etcd.io/etcd/server/v3",
        "kwok": "sigs.k8s.io/kwok",
    }
    found: dict[str, str] = {}
    for key, module in wanted.items():
        m = re.search(rf"^\s*{re.escape(module)}\s+(v\S+)", text, re.MULTILINE)
        if not m:
            raise DevclusterError(f"{module} is not required in {GOBUILD_DIR / 'go.mod'}")
        found[key] = m.group(1)
    found["helm"] = HELM_VERSION
    m = re.search(r"^require github.com/coredns/coredns (v\S+)", (COREDNS_DIR / "go.mod").read_text(), re.MULTILINE)
    found["coredns"] = m.group(1) if m else "unknown"
    return found


def default_bin_dir() -> Path:
    override = os.environ.get("FLOWER_SYNCER_BIN_DIR")
    if override:
        return Path(override).expanduser()
    return cache_root() / "bin" / read_gomod_versions()["kubernetes"]


def build_key() -> str:
    h = hashlib.sha256()
    for path in (GOBUILD_DIR / "go.mod", GOBUILD_DIR / "go.sum", *sorted(COREDNS_DIR.iterdir())):
        h.update(path.read_bytes())
    h.update(f"{BUILD_RECIPE}|{HELM_MODULE}@{HELM_VERSION}|{sys.platform}".encode())
    return h.hexdigest()


def _which_go() -> str:
    go = shutil.which("go")
    if go is None and Path("/usr/local/go/bin/go").exists():
        go = "/usr/local/go/bin/go"
    if go is None:
        raise DevclusterError("the Go toolchain (`go`) is not on PATH; install Go 1.26 or newer")
    return go


# --------------------------------------------------------------------------------------------
# build


def binaries_ready(bin_dir: Path) -> bool:
    try:
        stamp = json.loads((bin_dir / STAMP_NAME).read_text())
    except (OSError, ValueError):
        return False
    if stamp.get("key") != build_key():
        return False
    return all(os.access(bin_dir / b, os.X_OK) for b in BINARIES) and (bin_dir / KWOK_STAGES_NAME).exists()


def _ldflags_kubernetes(version: str) -> str:
    m = re.fullmatch(r"v(\d+)\.(\d+)\.\d+", version)
    if not m:
        raise DevclusterError(f"unexpected Kubernetes version {version!r}")
    build_date = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    flags = ["-s", "-w"]
    # k8s.io/component-base/version feeds the servers' --version and /version; kubectl reads
    # k8s.io/client-go/pkg/version for its client version.  The module zip carries no git
    # commit, so gitCommit stays empty instead of claiming one.
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [
            f"-X {pkg}.gitVersion={version}",
            f"-X {pkg}.gitMajor={m.group(1)}",
            f"-X {pkg}.gitMinor={m.group(2)}",
            f"-X {pkg}.gitTreeState=clean",
            f"-X {pkg}.buildDate={build_date}",
            f"-X {pkg}.gitCommit=",
        ]
    return " ".join(flags)


_PKG_LINE = re.compile(r"^[A-Za-z0-9_.\-~+/]+$")


def _run_go(args: list[str], *, cwd: Path, env: dict[str, str], label: str) -> None:
    """Run a go command with -v, printing a package counter every 20 s instead of the list."""
    start = time.monotonic()
    proc = subprocess.Popen(args, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    count = 0
    other: list[str] = []
    last_report = start
    for raw in proc.stdout:
        line = raw.rstrip("\n")
        if _PKG_LINE.match(line):
            count += 1
        else:
            other.append(line)
        now = time.monotonic()
        if now - last_report >= 20:
            log(f"    {label}: {count} packages built ({fmt_secs(now - start)})")
            last_report = now
    rc = proc.wait()
    if rc != 0:
        tail = "\n".join(other[-60:])
        raise DevclusterError(f"`{' '.join(args[:3])} ...` failed (exit {rc}):\n{tail}")
    log(f"    {label}: {count} packages built")


def build(bin_dir: Path, *, force: bool = False) -> None:
    total = time.monotonic()
    versions = read_gomod_versions()
    if not force and binaries_ready(bin_dir):
        log(f"binaries up to date in {bin_dir} ({fmt_secs(time.monotonic() - total)})")
        return
    log(
        f"building Kubernetes {versions['kubernetes']}, etcd {versions['etcd']}, "
        f"kwok {versions['kwok']}, helm {versions['helm']} into {bin_dir}"
    )
    ensure_apt_packages({"openssl": "openssl"})
    go = _which_go()
    bin_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".build-", dir=bin_dir.parent))
    env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-buildvcs=false"}
    env.pop("GOBIN", None)
    try:
        modcache = subprocess.run(
            [go, "env", "GOMODCACHE", "GOCACHE"], env=env, capture_output=True, text=True, check=False
        ).stdout.split()
        with step(f"go mod download (module cache {modcache[0] if modcache else '?'})"):
            proc = subprocess.run(
                [go, "mod", "download"], cwd=GOBUILD_DIR, env=env, capture_output=True, text=True, check=False
            )
            if proc.returncode != 0:
                raise DevclusterError(f"go mod download failed:\n{proc.stdout}{proc.stderr}")
        with step(
            "go build kube-apiserver kube-controller-manager kube-scheduler kubectl etcd kwok kubelet kube-proxy "
            f"(one invocation, build cache {modcache[1] if len(modcache) > 1 else '?'}; "
            "cold on 2 cores: ~7.5 min; helm ~2-3 min and CoreDNS ~1.5 min more)"
        ):
            _run_go(
                [
                    go,
                    "build",
                    "-v",
                    "-trimpath",
                    "-ldflags",
                    _ldflags_kubernetes(versions["kubernetes"]),
                    "-o",
                    f"{work}/",
                    *GO_PACKAGES.values(),
                ],
                cwd=GOBUILD_DIR,
                env=env,
                label="go build",
            )
            # go names the binary of go.etcd.io/etcd/server/v3 after "server"
            if (work / "server").exists():
                (work / "server").rename(work / "etcd")
        with step(f"go install {HELM_MODULE}/cmd/helm@{HELM_VERSION}"):
            ldflags = f"-s -w -X {HELM_MODULE}/internal/version.version={HELM_VERSION}"
            helm_env = {**env, "GOBIN": str(work)}
            _run_go(
                [
                    go,
                    "install",
                    "-v",
                    "-trimpath",
                    "-ldflags",
                    ldflags,
                    f"{HELM_MODULE}/cmd/helm@{HELM_VERSION}",
                ],
                cwd=work,
                env=helm_env,
                label="go install",
            )
        with step("go build CoreDNS (tools/coredns: bind, cache, errors, health, kubernetes, log, ready)"):
            _run_go(
                [go, "build", "-v", "-trimpath", "-ldflags", "-s -w", "-o", f"{work}/coredns", "."],
                cwd=COREDNS_DIR,
                env=env,
                label="go build",
            )
        with step("collect kwok stage files from the kwok module"):
            proc = subprocess.run(
                [go, "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/kwok"],
                cwd=GOBUILD_DIR,
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
            kwok_dir = Path(proc.stdout.strip())
            docs = []
            for rel in KWOK_STAGE_FILES:
                docs.append(f"# from sigs.k8s.io/kwok@{versions['kwok']}/{rel}\n" + (kwok_dir / rel).read_text())
            (work / KWOK_STAGES_NAME).write_text("\n---\n".join(docs))
        with step("check versions"):
            _check_versions(work, versions)
        for item in work.iterdir():
            item.replace(bin_dir / item.name)
        stamp = {"key": build_key(), "versions": versions, "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ")}
        (bin_dir / STAMP_NAME).write_text(json.dumps(stamp, indent=2) + "\n")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    log(f"build finished in {fmt_secs(time.monotonic() - total)}; binaries in {bin_dir}")


def _check_versions(bin_dir: Path, versions: dict[str, str]) -> None:
    checks = {
        "kube-apiserver": (["--version"], f"Kubernetes {versions['kubernetes']}"),
        "kube-controller-manager": (["--version"], f"Kubernetes {versions['kubernetes']}"),
        "kube-scheduler": (["--version"], f"Kubernetes {versions['kubernetes']}"),
        "kubectl": (["version", "--client"], f"Client Version: {versions['kubernetes']}"),
        "etcd": (["--version"], f"etcd Version: {versions['etcd'].lstrip('v')}"),
        "kwok": (["--version"], versions["kwok"].lstrip("v")),
        "helm": (["version", "--short"], versions["helm"]),
        "kubelet": (["--version"], f"Kubernetes {versions['kubernetes']}"),
        "kube-proxy": (["--version"], f"Kubernetes {versions['kubernetes']}"),
        "coredns": (["-version"], "CoreDNS-"),
    }
    for name, (args, expect) in checks.items():
        proc = subprocess.run(
            [str(bin_dir / name), *args],
            capture_output=True,
            text=True,
            check=False,
            env={**os.environ, "KWOK_WORKDIR": str(bin_dir / ".kwok")},
        )
        out = (proc.stdout + proc.stderr).strip()
        if proc.returncode != 0 or expect not in out:
            raise DevclusterError(f"{name} {' '.join(args)} printed {out!r}, expected {expect!r}")
        log(f"    {name}: {out.splitlines()[0]}")
    shutil.rmtree(bin_dir / ".kwok", ignore_errors=True)


# --------------------------------------------------------------------------------------------
# cluster state


@dataclass
class NodeSpec:
    name: str
    node_class: str
    cpu: str
    memory: str
    labels: dict[str, str]
    extended: dict[str, str] = field(default_factory=dict)
    taints: list[dict[str, str]] = field(default_factory=list)


def default_nodes(cpu_nodes: int = 4, nvidia_nodes: int = 2, amd_nodes: int = 1) -> list[NodeSpec]:
    zones = ("zone-a", "zone-b")
    nodes: list[NodeSpec] = []
    for i in range(cpu_nodes):
        nodes.append(
            NodeSpec(
                name=f"cpu-node-{i}",
                node_class="cpu",
                cpu="16",
                memory="64Gi",
                labels={"node.kubernetes.io/instance-type": "cpu-16x64"},
            )
        )
    for i in range(nvidia_nodes):
        nodes.append(
            NodeSpec(
                name=f"gpu-nvidia-{i}",
                node_class="gpu-nvidia",
                cpu="32",
                memory="256Gi",
                labels={
                    "node.kubernetes.io/instance-type": "gpu-a100x4",
                    "nvidia.com/gpu.present": "true",
                    "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB",
                    "nvidia.com/gpu.count": "4",
                    "nvidia.com/gpu.memory": "40960",
                    "nvidia.com/gpu.family": "ampere",
                },
                extended={"nvidia.com/gpu": "4"},
            )
        )
    for i in range(amd_nodes):
        nodes.append(
            NodeSpec(
                name=f"gpu-amd-{i}",
                node_class="gpu-amd",
                cpu="32",
                memory="256Gi",
                labels={
                    "node.kubernetes.io/instance-type": "gpu-mi210x2",
                    "amd.com/gpu.present": "true",
                    "amd.com/gpu.product-name": "AMD_Instinct_MI210",
                    "amd.com/gpu.family": "AI",
                    "amd.com/gpu.vram": "64G",
                    "amd.com/gpu.count": "2",
                },
                extended={"amd.com/gpu": "2"},
            )
        )
    for idx, node in enumerate(nodes):
        node.labels = {
            "kubernetes.io/hostname": node.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "topology.kubernetes.io/region": "local",
            "topology.kubernetes.io/zone": zones[idx % len(zones)],
            "type": "kwok",
            DEVCLUSTER_LABEL: node.node_class,
            **node.labels,
        }
    return nodes


def real_node_layout(nodes: list[NodeSpec]) -> list[NodeSpec]:
    """With a real node, the fake GPU nodes are tainted the way GPU node pools usually are
    (`<vendor>/gpu=present:NoSchedule`), so only pods that tolerate it (GPU pools) land there and
    everything else runs in containers on the real node; the fake CPU nodes are left out."""
    out = []
    for node in nodes:
        vendor = {"gpu-nvidia": "nvidia.com/gpu", "gpu-amd": "amd.com/gpu"}.get(node.node_class)
        if vendor:
            node.taints = [{"key": vendor, "value": "present", "effect": "NoSchedule"}]
            out.append(node)
    return out


def node_manifest(node: NodeSpec) -> dict[str, Any]:
    resources = {
        "cpu": node.cpu,
        "memory": node.memory,
        "pods": "110",
        "ephemeral-storage": "100Gi",
        **node.extended,
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": node.name, "labels": node.labels, "annotations": {KWOK_ANNOTATION: "fake"}},
        "spec": {"taints": node.taints} if node.taints else {},
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "nodeInfo": {"architecture": "amd64", "operatingSystem": "linux"},
        },
    }


class Cluster:
    """One devcluster: its state directory, certificates, processes and API access."""

    def __init__(self, state_dir: Path, bin_dir: Path) -> None:
        self.state_dir = state_dir
        self.bin_dir = bin_dir
        self.pki = state_dir / "pki"
        self.logs = state_dir / "logs"
        self.state_file = state_dir / "state.json"
        self.kubeconfig = state_dir / "kubeconfig"

    # ---- persisted state -------------------------------------------------------------------

    def load_state(self) -> dict[str, Any] | None:
        try:
            data: dict[str, Any] = json.loads(self.state_file.read_text())
        except (OSError, ValueError):
            return None
        return data

    def save_state(self, state: dict[str, Any]) -> None:
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2) + "\n")
        tmp.replace(self.state_file)

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        with (self.state_dir / ".lock").open("w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def etcd_data_dir(self) -> Path:
        """etcd lives on tmpfs when there is one: fast, and gone after a reboot."""
        digest = hashlib.sha256(str(self.state_dir).encode()).hexdigest()[:10]
        shm = Path("/dev/shm")
        if shm.is_dir() and os.access(shm, os.W_OK):
            return shm / f"flower-syncer-devcluster-{os.getuid()}-{digest}" / "etcd"
        return self.state_dir / "etcd-data"

    # ---- processes -------------------------------------------------------------------------

    def running_pids(self, state: dict[str, Any] | None = None) -> dict[str, int]:
        """Components from the state file whose pid still runs our binary."""
        state = state if state is not None else self.load_state()
        if not state:
            return {}
        alive: dict[str, int] = {}
        for name, info in state.get("processes", {}).items():
            pid = int(info["pid"])
            if is_our_process(pid, str(info["binary"])):
                alive[name] = pid
        return alive

    def _wait_ready(self, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self._readyz():
                return True
            time.sleep(0.5)
        return False

    @staticmethod
    def components(state: dict[str, Any] | None) -> tuple[str, ...]:
        """The control plane, plus the daemons of the real nodes when it has some."""
        return COMPONENTS + tuple((state or {}).get("node_components", ()))

    def is_up(self) -> bool:
        state = self.load_state()
        if not state or set(self.running_pids(state)) != set(self.components(state)):
            return False
        return self._readyz()

    # ---- API access (admin client certificate) -----------------------------------------------

    def ssl_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.pki / "ca.crt"))
        ctx.load_cert_chain(str(self.pki / "admin.crt"), str(self.pki / "admin.key"))
        return ctx

    def server_url(self) -> str:
        state = self.load_state() or {}
        port = state.get("ports", {}).get("apiserver")
        if not port:
            raise DevclusterError("cluster is not running (no state)")
        return f"https://{state.get('host', '127.0.0.1')}:{port}"

    def api_request(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        *,
        timeout: float = 10,
        content_type: str = "application/json",
    ) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.server_url() + path, data=data, method=method)
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(req, timeout=timeout, context=self.ssl_context()) as resp:
                text = resp.read().decode()
                status = int(resp.status)
        except urllib.error.HTTPError as err:
            text = err.read().decode()
            status = err.code
        try:
            return status, json.loads(text)
        except ValueError:
            return status, text

    def api_get(self, path: str, *, timeout: float = 10) -> Any:
        status, payload = self.api_request("GET", path, timeout=timeout)
        if status != 200:
            raise DevclusterError(f"GET {path}: HTTP {status}: {payload}")
        return payload

    # ---- certificates and kubeconfigs ----------------------------------------------------------

    def ensure_pki(self, extra_sans: Sequence[str] = ()) -> None:
        """Create a CA, serving/client certificates and service-account keys (kept across restarts).
        `extra_sans` (a real node's host address) re-issue the apiserver's certificate when they change."""
        sans = [*APISERVER_SANS, *extra_sans]
        sans_file = self.pki / "apiserver.sans"
        needed = [
            "ca.crt",
            "ca.key",
            "sa.key",
            "sa.pub",
            "apiserver.crt",
            "apiserver.key",
            "front-proxy-ca.crt",
            "front-proxy-client.crt",
            "front-proxy-client.key",
        ]
        needed += [f"{c}.crt" for c in CLIENTS] + [f"{c}.key" for c in CLIENTS]
        fresh = all((self.pki / n).exists() for n in needed)
        if fresh and time.time() - (self.pki / "ca.crt").stat().st_mtime < 300 * 86400:
            if not sans_file.exists() or sans_file.read_text() != "\n".join(sans):
                self.leaf("apiserver", "/CN=kube-apiserver", "serverAuth", sans)
                sans_file.write_text("\n".join(sans))
            return
        shutil.rmtree(self.pki, ignore_errors=True)
        self.pki.mkdir(parents=True, mode=0o700)
        p = self.pki
        # "ca" signs everything; "front-proxy-ca" only the aggregation-layer client (requestheader).
        for ca, cn in (("ca", "devcluster-ca"), ("front-proxy-ca", "devcluster-front-proxy-ca")):
            args = ["req", "-x509", "-new", *EC_KEY, *CA_EXTENSIONS, "-days", "3650", "-subj", f"/CN={cn}"]
            openssl(*args, "-keyout", p / f"{ca}.key", "-out", p / f"{ca}.crt")
        openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", p / "sa.key")
        openssl("ec", "-in", p / "sa.key", "-pubout", "-out", p / "sa.pub")
        self.leaf("apiserver", "/CN=kube-apiserver", "serverAuth", sans)
        sans_file.write_text("\n".join(sans))
        for name, subject in CLIENTS.items():
            self.leaf(name, subject, "clientAuth", [])
        self.leaf("front-proxy-client", "/CN=front-proxy-client", "clientAuth", [], ca="front-proxy-ca")
        for f in p.iterdir():
            f.chmod(0o600)

    def leaf(self, name: str, subject: str, usage: str, sans: list[str], ca: str = "ca") -> None:
        p = self.pki
        ext = ["basicConstraints=CA:FALSE", "keyUsage=critical,digitalSignature,keyEncipherment"]
        ext.append(f"extendedKeyUsage={usage}")
        if sans:
            ext.append("subjectAltName=" + ",".join(sans))
        extfile, csr = p / f"{name}.ext", p / f"{name}.csr"
        extfile.write_text("\n".join(ext) + "\n")
        openssl("req", "-new", *EC_KEY, "-keyout", p / f"{name}.key", "-out", csr, "-subj", subject)
        serial = str(int.from_bytes(os.urandom(8), "big"))
        ca_args: list[str | Path] = ["-CA", p / f"{ca}.crt", "-CAkey", p / f"{ca}.key", "-set_serial", serial]
        io_args: list[str | Path] = ["-extfile", extfile, "-in", csr, "-out", p / f"{name}.crt"]
        openssl("x509", "-req", "-days", "365", *ca_args, *io_args)
        csr.unlink()
        extfile.unlink()
        (p / f"{name}.key").chmod(0o600)

    def write_kubeconfig(self, path: Path, user: str, port: int, host: str = "127.0.0.1") -> None:
        def b64(name: str) -> str:
            return base64.b64encode((self.pki / name).read_bytes()).decode()

        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "devcluster",
                    "cluster": {
                        "server": f"https://{host}:{port}",
                        "certificate-authority-data": b64("ca.crt"),
                    },
                }
            ],
            "users": [
                {
                    "name": user,
                    "user": {
                        "client-certificate-data": b64(f"{user}.crt"),
                        "client-key-data": b64(f"{user}.key"),
                    },
                }
            ],
            "contexts": [{"name": "devcluster", "context": {"cluster": "devcluster", "user": user}}],
            "current-context": "devcluster",
            "preferences": {},
        }
        # JSON is valid YAML; every kubeconfig reader accepts it.
        path.write_text(json.dumps(config, indent=2) + "\n")
        path.chmod(0o600)

    # ---- up / down ---------------------------------------------------------------------------

    def up(self, nodes: list[NodeSpec], timeout: float = 90, audit: bool = False,
           controller_qps: float | None = None, real_nodes: int = 0) -> float:
        """Start the cluster. With `audit`, the apiserver writes an audit log (`audit_log`, JSON
        lines): one event per write (create, update, patch, delete) at the end of its response,
        with verb, object, user, user agent and times, so tests can attribute every write.
        `controller_qps` raises the controller-manager's client rate limit (default 20/s, burst 30),
        for benchmarks that wait until tens of thousands of pods exist.
        `real_nodes` (0 or 1) adds a real worker (tools/realnode.py) beside the fake nodes."""
        start = time.monotonic()
        if not binaries_ready(self.bin_dir):
            script = TOOLS_DIR / "devcluster.py"
            raise DevclusterError(f"binaries missing or stale in {self.bin_dir}; run: python3 {script} build")
        archives: list[Path] = []
        if real_nodes:
            archives = realnode.preflight(real_nodes)
        with self.locked():
            if self.is_up():
                has_real = bool((self.load_state() or {}).get("real_nodes"))
                if has_real != bool(real_nodes):
                    raise DevclusterError(f"devcluster is running {'with' if has_real else 'without'} a real node; "
                                          "`down` it first to change that")
                log(f"devcluster already running ({self.server_url()}); kubeconfig: {self.kubeconfig}")
                return 0.0
            state = self.load_state()
            alive = self.running_pids(state)
            if alive and set(alive) == set(self.components(state)):
                # All processes run but /readyz failed: maybe just busy. Never restart a cluster
                # someone may be using because of one slow answer.
                if self._wait_ready(30):
                    log(f"devcluster already running ({self.server_url()}); kubeconfig: {self.kubeconfig}")
                    return 0.0
                raise DevclusterError(
                    f"devcluster processes run but /readyz fails (logs: {self.logs}); `down` it first"
                )
            if alive:
                log(f"found a partly running devcluster ({', '.join(alive)}); stopping it first")
                self._stop()
            try:
                self._start(nodes, deadline=start + timeout, audit=audit, controller_qps=controller_qps,
                            archives=archives if real_nodes else None)
            except BaseException:
                log(f"startup failed; logs are in {self.logs}")
                self._stop()
                raise
        elapsed = time.monotonic() - start
        log(f"devcluster up in {fmt_secs(elapsed)}: {self.server_url()}")
        log(f"kubeconfig: {self.kubeconfig}")
        where = "" if self.state_dir == default_state_dir("default") else f" --state-dir {self.state_dir}"
        log(f'use it with: eval "$(python3 {TOOLS_DIR / "devcluster.py"} env{where})"')
        return elapsed

    @property
    def audit_log(self) -> Path:
        return self.logs / "audit.log"

    def _audit_args(self) -> list[str]:
        policy = self.state_dir / "audit-policy.yaml"
        policy.write_text(AUDIT_POLICY)
        self.audit_log.unlink(missing_ok=True)
        return [f"--audit-policy-file={policy}", f"--audit-log-path={self.audit_log}", "--audit-log-format=json",
                "--audit-log-mode=blocking", "--audit-log-maxbackup=1", "--audit-log-maxsize=200"]

    def _start(self, nodes: list[NodeSpec], deadline: float, audit: bool = False,
               controller_qps: float | None = None, archives: list[Path] | None = None) -> None:
        t0 = time.monotonic()
        self.logs.mkdir(parents=True, exist_ok=True)
        net = None
        if archives is not None:
            with step("real node: network namespace and veth link"):
                net = realnode.claim_node(self.state_dir)
                # recorded at once, so a failed start is cleaned up by _stop
                self.save_state({"processes": {}, "real_nodes": [realnode.node_record(net)]})
                realnode.wipe_node_dir(net)
                realnode.create_network(net)
        host = net.host_ip if net else "127.0.0.1"
        with step("certificates"):
            self.ensure_pki(extra_sans=[f"IP:{host}"] if net else ())
        ports = {
            name: free_port() for name in ("etcd", "etcd-peer", "apiserver", "controller-manager", "scheduler", "kwok")
        }
        data_dir = self.etcd_data_dir()
        shutil.rmtree(data_dir, ignore_errors=True)
        data_dir.mkdir(parents=True, mode=0o700)
        state: dict[str, Any] = {
            "ports": ports,
            "processes": {},
            "etcd_data_dir": str(data_dir),
            "bin_dir": str(self.bin_dir),
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "versions": json.loads((self.bin_dir / STAMP_NAME).read_text())["versions"],
            "host": host,
            **({"real_nodes": [realnode.node_record(net)]} if net else {}),
        }
        self.write_kubeconfig(self.kubeconfig, "admin", ports["apiserver"], host)
        for comp in ("kube-controller-manager", "kube-scheduler", "kwok"):
            self.write_kubeconfig(self.state_dir / f"{comp}.kubeconfig", comp, ports["apiserver"], host)
        self.save_state(state)  # ports are known now; server_url() works for the readiness checks

        p, sd = self.pki, self.state_dir
        etcd_url, peer_url = f"http://127.0.0.1:{ports['etcd']}", f"http://127.0.0.1:{ports['etcd-peer']}"
        with step("etcd"):
            self._spawn(
                state,
                "etcd",
                [
                    "--name=devcluster",
                    f"--data-dir={data_dir}",
                    f"--listen-client-urls={etcd_url}",
                    f"--advertise-client-urls={etcd_url}",
                    f"--listen-peer-urls={peer_url}",
                    f"--initial-advertise-peer-urls={peer_url}",
                    f"--initial-cluster=devcluster={peer_url}",
                    "--initial-cluster-state=new",
                    "--unsafe-no-fsync",
                    "--log-level=warn",
                    "--quota-backend-bytes=2147483648",
                    "--auto-compaction-retention=5m",
                ],
            )
            wait_for(lambda: http_ok(f"{etcd_url}/health"), deadline, "etcd /health", self, "etcd")
        with step("kube-apiserver"):
            self._spawn(
                state,
                "kube-apiserver",
                [
                    f"--etcd-servers={etcd_url}",
                    f"--bind-address={host}",
                    f"--secure-port={ports['apiserver']}",
                    f"--advertise-address={host}",
                    # the `kubernetes` Service only has an endpoint pods can reach with real nodes
                    f"--endpoint-reconciler-type={'lease' if net else 'none'}",
                    f"--kubelet-client-certificate={p / 'kube-apiserver-kubelet-client.crt'}",
                    f"--kubelet-client-key={p / 'kube-apiserver-kubelet-client.key'}",
                    "--kubelet-preferred-address-types=InternalIP",
                    f"--tls-cert-file={p / 'apiserver.crt'}",
                    f"--tls-private-key-file={p / 'apiserver.key'}",
                    f"--client-ca-file={p / 'ca.crt'}",
                    f"--requestheader-client-ca-file={p / 'front-proxy-ca.crt'}",
                    "--requestheader-allowed-names=front-proxy-client",
                    "--requestheader-username-headers=X-Remote-User",
                    "--requestheader-group-headers=X-Remote-Group",
                    "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                    f"--proxy-client-cert-file={p / 'front-proxy-client.crt'}",
                    f"--proxy-client-key-file={p / 'front-proxy-client.key'}",
                    "--authorization-mode=Node,RBAC",
                    "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                    f"--service-account-key-file={p / 'sa.pub'}",
                    f"--service-account-signing-key-file={p / 'sa.key'}",
                    f"--service-cluster-ip-range={SERVICE_CIDR}",
                    "--allow-privileged=true",
                    "--profiling=false",
                    *(self._audit_args() if audit else []),
                ],
            )
            wait_for(self._readyz, deadline, "kube-apiserver /readyz", self, "kube-apiserver")
        with step("kube-controller-manager, kube-scheduler, kwok"):
            cm_kc = sd / "kube-controller-manager.kubeconfig"
            self._spawn(
                state,
                "kube-controller-manager",
                [
                    f"--kubeconfig={cm_kc}",
                    f"--authentication-kubeconfig={cm_kc}",
                    f"--authorization-kubeconfig={cm_kc}",
                    "--bind-address=127.0.0.1",
                    f"--secure-port={ports['controller-manager']}",
                    "--leader-elect=false",
                    "--use-service-account-credentials=true",
                    f"--root-ca-file={p / 'ca.crt'}",
                    f"--service-account-private-key-file={p / 'sa.key'}",
                    f"--cluster-signing-cert-file={p / 'ca.crt'}",
                    f"--cluster-signing-key-file={p / 'ca.key'}",
                    f"--service-cluster-ip-range={SERVICE_CIDR}",
                    "--controllers=*",
                    f"--flex-volume-plugin-dir={sd / 'flexvolume'}",  # default is under /usr/libexec
                    "--profiling=false",
                    *([f"--kube-api-qps={controller_qps:g}", f"--kube-api-burst={int(controller_qps * 2)}"]
                      if controller_qps else []),
                ],
            )
            sch_kc = sd / "kube-scheduler.kubeconfig"
            self._spawn(
                state,
                "kube-scheduler",
                [
                    f"--kubeconfig={sch_kc}",
                    f"--authentication-kubeconfig={sch_kc}",
                    f"--authorization-kubeconfig={sch_kc}",
                    "--bind-address=127.0.0.1",
                    f"--secure-port={ports['scheduler']}",
                    "--leader-elect=false",
                    "--profiling=false",
                ],
            )
            self._spawn(
                state,
                "kwok",
                [
                    f"--kubeconfig={sd / 'kwok.kubeconfig'}",
                    f"--config={self.bin_dir / KWOK_STAGES_NAME}",
                    "--manage-all-nodes=false",
                    f"--manage-nodes-with-annotation-selector={KWOK_ANNOTATION}=fake",
                    f"--server-address=127.0.0.1:{ports['kwok']}",
                    "--node-ip=127.0.0.1",
                    f"--node-port={ports['kwok']}",
                    f"--cidr={POD_CIDR}",
                    "--node-lease-duration-seconds=40",
                ],
                env={"KWOK_WORKDIR": str(sd / "kwok")},
            )
            for comp, port in (
                ("kube-controller-manager", ports["controller-manager"]),
                ("kube-scheduler", ports["scheduler"]),
            ):
                url = f"https://127.0.0.1:{port}/healthz"
                check = functools.partial(http_ok, url, insecure=True)
                wait_for(check, deadline, f"{comp} /healthz", self, comp)
        with step(f"register {len(nodes)} fake nodes and wait until they are Ready"):
            for node in nodes:
                status, payload = self.api_request("POST", "/api/v1/nodes", node_manifest(node))
                if status not in (201, 409):
                    raise DevclusterError(f"creating node {node.name}: HTTP {status}: {payload}")
            names = {n.name for n in nodes}
            wait_for(lambda: self._nodes_ready(names), deadline, "nodes Ready and untainted", self, "kwok")
        with step("wait for the default ServiceAccount and kube-root-ca.crt"):
            wait_for(
                lambda: (
                    self._get_ok("/api/v1/namespaces/default/serviceaccounts/default")
                    and self._get_ok("/api/v1/namespaces/default/configmaps/kube-root-ca.crt")
                ),
                deadline,
                "default ServiceAccount",
                self,
                "kube-controller-manager",
            )
        if net is not None and archives is not None:
            self._start_real_node(state, net, archives, ports["apiserver"], deadline)
        state["startup_seconds"] = round(time.monotonic() - t0, 1)
        self.save_state(state)

    def _start_real_node(
        self, state: dict[str, Any], net: realnode.NodeNet, archives: list[Path], port: int, deadline: float
    ) -> None:
        t0 = time.monotonic()
        with step(f"real node {net.name}: mount namespace, cgroups {net.cgroup_root}, containerd"):
            args = realnode.write_configs(self, net, port)
            realnode.create_cgroups(net)
            net.holder_pid = realnode.start_holder(net)
            state["real_nodes"] = [realnode.node_record(net)]
            state["node_components"] = list(realnode.DAEMONS)
            prefix = realnode.node_prefix(net)
            self._spawn(state, "containerd", args["containerd"], binary=realnode.containerd_binary(), prefix=prefix)
            wait_for(lambda: realnode.containerd_ready(net), deadline, "containerd", self, "containerd")
        with step(f"import images ({', '.join(a.name for a in archives)})"):
            realnode.import_images(net, archives)
        with step("kubelet, kube-proxy, CoreDNS; wait until the node is Ready"):
            for path, body in realnode.COREDNS_RBAC:
                status, payload = self.api_request("POST", path, body)
                if status not in (201, 409):
                    raise DevclusterError(f"POST {path}: HTTP {status}: {payload}")
            for daemon in ("kubelet", "kube-proxy", "coredns"):
                self._spawn(state, daemon, args[daemon], prefix=prefix)
            wait_for(lambda: self._nodes_ready({net.name}), deadline, f"node {net.name} Ready", self, "kubelet")
            wait_for(lambda: http_ok(f"http://{net.node_ip}:8181/ready"), deadline, "CoreDNS /ready", self, "coredns")
        state["real_node_seconds"] = round(time.monotonic() - t0, 1)

    def _spawn(self, state: dict[str, Any], name: str, args: list[str], env: dict[str, str] | None = None,
               binary: str | None = None, prefix: Sequence[str] = ()) -> None:
        """Start a component; `prefix` (nsenter) runs it in a real node's namespaces, and execs it,
        so the pid and its command line are the component's own."""
        binary = binary or str(self.bin_dir / name)
        logfile = self.logs / f"{name}.log"
        with logfile.open("ab") as out:
            out.write(f"\n==== {time.strftime('%Y-%m-%dT%H:%M:%S')} starting {name}\n".encode())
            out.flush()
            proc = subprocess.Popen(
                [*prefix, binary, *args],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.state_dir,
                env={**os.environ, **(env or {})},
                start_new_session=True,
            )
        state["processes"][name] = {"pid": proc.pid, "binary": binary, "log": str(logfile)}
        self.save_state(state)
        # Reap it in the background if it dies while this process still runs (no zombies).
        threading.Thread(target=proc.wait, daemon=True).start()

    def _readyz(self) -> bool:
        try:
            status, payload = self.api_request("GET", "/readyz", timeout=3)
        except OSError:
            return False
        return status == 200 and payload == "ok"

    def _get_ok(self, path: str) -> bool:
        status, _ = self.api_request("GET", path, timeout=5)
        return status == 200

    def _nodes_ready(self, names: set[str]) -> bool:
        status, payload = self.api_request("GET", "/api/v1/nodes", timeout=5)
        if status != 200:
            return False
        ready = set()
        for item in payload.get("items", []):
            conds = {c["type"]: c["status"] for c in item.get("status", {}).get("conditions", [])}
            # the node lifecycle's taints (not-ready, unreachable); not the GPU taints of real_node_layout
            taints = [t for t in item.get("spec", {}).get("taints") or []
                      if t["key"].startswith("node.kubernetes.io/")]
            if conds.get("Ready") == "True" and not taints:
                ready.add(item["metadata"]["name"])
        return names <= ready

    def down(self, purge: bool = False) -> None:
        with self.locked():
            stopped = self._stop()
            if purge:
                shutil.rmtree(self.pki, ignore_errors=True)
                shutil.rmtree(self.logs, ignore_errors=True)
                shutil.rmtree(self.state_dir / "kwok", ignore_errors=True)
                (self.state_dir / "audit-policy.yaml").unlink(missing_ok=True)
                for f in self.state_dir.glob("*kubeconfig"):
                    f.unlink()
        log(f"devcluster stopped ({', '.join(stopped) or 'nothing was running'})")

    def _stop(self) -> list[str]:
        """Stop our processes: the API clients together, then the apiserver, then etcd.

        The apiserver shuts down cleanly in ~1 s while etcd is still there, but hangs until
        SIGKILL when etcd goes first, hence the order.
        """
        state = self.load_state() or {}
        alive = self.running_pids(state)
        stopped: list[str] = []
        for record in state.get("real_nodes", []):
            net = realnode.node_from_record(record)
            daemons = {n: alive[n] for n in realnode.DAEMONS if n in alive}
            for problem in realnode.stop_node(net, daemons):
                log(f"warning: could not remove the real node's {problem}")
            stopped += daemons
        for group in (("kwok", "kube-scheduler", "kube-controller-manager"), ("kube-apiserver",), ("etcd",)):
            procs = {n: (alive[n], str(state["processes"][n]["binary"])) for n in group if n in alive}
            for sig, grace in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
                for pid, binary in procs.values():
                    if is_our_process(pid, binary):
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(pid, sig)
                deadline = time.monotonic() + grace
                while any(is_our_process(*p) for p in procs.values()) and time.monotonic() < deadline:
                    time.sleep(0.05)
            stopped += procs
        for record in state.get("real_nodes", []):
            for problem in realnode.remove_network(realnode.node_from_record(record)):
                log(f"warning: could not remove the real node's {problem}")
        data_dir = state.get("etcd_data_dir")
        if data_dir:
            shutil.rmtree(Path(data_dir).parent if Path(data_dir).name == "etcd" else data_dir, ignore_errors=True)
        if self.state_file.exists():
            self.state_file.unlink()
        return stopped

    # ---- status ------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        state = self.load_state()
        info: dict[str, Any] = {
            "state_dir": str(self.state_dir),
            "kubeconfig": str(self.kubeconfig),
            "bin_dir": str(self.bin_dir),
            "running": False,
            "processes": {},
        }
        if not state:
            return info
        alive = self.running_pids(state)
        total = 0
        for name in self.components(state):
            proc = state.get("processes", {}).get(name)
            if not proc:
                continue
            rss = rss_kib(proc["pid"]) if name in alive else 0
            total += rss
            info["processes"][name] = {
                "pid": proc["pid"],
                "alive": name in alive,
                "rss_mib": round(rss / 1024, 1),
            }
        info["rss_total_mib"] = round(total / 1024, 1)
        info["ports"] = state.get("ports", {})
        info["versions"] = state.get("versions", {})
        info["startup_seconds"] = state.get("startup_seconds")
        info["started_at"] = state.get("started_at")
        info["real_nodes"] = [
            {k: r[k] for k in ("name", "netns", "host_if", "host_ip", "node_ip", "cgroup_root", "dir")}
            for r in state.get("real_nodes", [])
        ]
        if state.get("real_node_seconds") is not None:
            info["real_node_seconds"] = state["real_node_seconds"]
        if set(alive) == set(self.components(state)):
            info["server"] = self.server_url()
            info["readyz"] = self._readyz()
            info["running"] = bool(info["readyz"])
            with contextlib.suppress(OSError, DevclusterError):
                nodes = self.api_get("/api/v1/nodes", timeout=5)["items"]
                ready = [
                    n
                    for n in nodes
                    if any(
                        c["type"] == "Ready" and c["status"] == "True"
                        for c in n.get("status", {}).get("conditions", [])
                    )
                ]
                info["nodes"] = {"total": len(nodes), "ready": len(ready)}
        return info


EC_KEY = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
CA_EXTENSIONS = (
    "-addext",
    "basicConstraints=critical,CA:TRUE",
    "-addext",
    "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
)
APISERVER_SANS = [
    "DNS:localhost",
    "DNS:kubernetes",
    "DNS:kubernetes.default",
    "DNS:kubernetes.default.svc",
    "DNS:kubernetes.default.svc.cluster.local",
    "IP:127.0.0.1",
    "IP:10.96.0.1",  # first address of SERVICE_CIDR: the `kubernetes` Service
]
CLIENTS = {
    "admin": "/O=system:masters/CN=admin",
    "kube-controller-manager": "/CN=system:kube-controller-manager",
    "kube-scheduler": "/CN=system:kube-scheduler",
    # kwok plays every kubelet (node status, leases, pod status and deletion); kept simple here.
    "kwok": "/O=system:masters/CN=kwok-controller",
    # the apiserver's client certificate towards real kubelets (logs, exec)
    "kube-apiserver-kubelet-client": "/O=system:masters/CN=kube-apiserver-kubelet-client",
}


def openssl(*args: str | Path) -> None:
    proc = subprocess.run(["openssl", *map(str, args)], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise DevclusterError(f"openssl {' '.join(map(str, args[:2]))} failed: {proc.stderr.strip()}")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def http_ok(url: str, *, insecure: bool = False) -> bool:
    ctx = ssl._create_unverified_context() if insecure else None  # self-signed serving certs
    try:
        with urllib.request.urlopen(url, timeout=3, context=ctx) as resp:
            return int(resp.status) == 200
    except (OSError, ValueError):
        return False


def is_our_process(pid: int, binary: str) -> bool:
    """True if pid runs `binary` (guards against pid reuse) and is not a zombie.

    A process caught in the middle of execve() shows an empty /proc/<pid>/cmdline for a few
    milliseconds (measured: 8 in 200 spawns right after Popen returned). Reading that as "not
    ours" made `up` declare a healthy etcd or apiserver dead and stop the cluster, so an empty
    command line is read again until the exec has finished.
    """
    for _ in range(100):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        if stat.rsplit(")", 1)[-1].split()[0] in ("Z", "X"):
            return False
        argv0 = cmdline.split(b"\0")[0].decode(errors="replace")
        if cmdline and argv0 != "nsenter":  # a real node's daemon is nsenter until it has exec'd
            return argv0 == binary
        time.sleep(0.005)
    return False  # still no command line after 0.5 s: a kernel thread, not ours


def rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def wait_for(check: Callable[[], object], deadline: float, what: str, cluster: Cluster, component: str) -> None:
    """Poll `check` until true; fail early if `component` died, or at the deadline."""
    while True:
        with contextlib.suppress(OSError, DevclusterError):
            if check():
                return
        state = cluster.load_state() or {}
        if component in state.get("processes", {}) and component not in cluster.running_pids(state):
            raise DevclusterError(
                f"{component} exited while waiting for {what}:\n" + tail_file(cluster.logs / f"{component}.log")
            )
        if time.monotonic() > deadline:
            raise DevclusterError(
                f"timed out waiting for {what}; last log lines of {component}:\n"
                + tail_file(cluster.logs / f"{component}.log")
            )
        time.sleep(0.1)


def tail_file(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


# --------------------------------------------------------------------------------------------
# command line


def default_state_dir(name: str) -> Path:
    override = os.environ.get("FLOWER_SYNCER_DEVCLUSTER_DIR")
    if override:
        return Path(override).expanduser()
    return cache_root() / "devcluster" / name


def print_status(info: dict[str, Any], out: IO[str]) -> None:
    w = out.write
    w(f"state dir:  {info['state_dir']}\n")
    if not info["processes"]:
        w("devcluster is not running\n")
        return
    w(f"running:    {'yes' if info['running'] else 'NO'}\n")
    if "server" in info:
        w(f"server:     {info['server']}  (readyz: {'ok' if info.get('readyz') else 'failing'})\n")
    w(f"kubeconfig: {info['kubeconfig']}\n")
    if info.get("versions"):
        w("versions:   " + ", ".join(f"{k} {v}" for k, v in info["versions"].items()) + "\n")
    if info.get("startup_seconds") is not None:
        w(f"startup:    {info['startup_seconds']}s (started {info['started_at']})\n")
    if "nodes" in info:
        w(f"nodes:      {info['nodes']['ready']}/{info['nodes']['total']} Ready\n")
    w(f"{'component':<26}{'pid':>8}  {'state':<8}{'RSS MiB':>9}\n")
    for name, proc in info["processes"].items():
        w(f"{name:<26}{proc['pid']:>8}  {'running' if proc['alive'] else 'dead':<8}{proc['rss_mib']:>9.1f}\n")
    w(f"{'total RSS':<42}{info['rss_total_mib']:>9.1f}\n")


def main(argv: Sequence[str] | None = None) -> int:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--name", default="default", help="cluster name (state dir ~/.cache/flower-syncer/devcluster/NAME)"
    )
    common.add_argument(
        "--state-dir",
        type=Path,
        help="state directory (default: $FLOWER_SYNCER_DEVCLUSTER_DIR or ~/.cache/flower-syncer/devcluster/NAME)",
    )
    common.add_argument(
        "--bin-dir",
        type=Path,
        help="binaries (default: $FLOWER_SYNCER_BIN_DIR or ~/.cache/flower-syncer/bin/<kubernetes version>)",
    )
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    sub = parser.add_subparsers(dest="command", required=True)
    p_build = sub.add_parser("build", parents=[common], help="build the pinned binaries (idempotent)")
    p_build.add_argument("--force", action="store_true", help="rebuild even if up to date")
    p_up = sub.add_parser("up", parents=[common], help="start the cluster (idempotent)")
    p_up.add_argument("--cpu-nodes", type=int, default=4)
    p_up.add_argument("--nvidia-nodes", type=int, default=2, help="nodes with nvidia.com/gpu: 4")
    p_up.add_argument("--amd-nodes", type=int, default=1, help="nodes with amd.com/gpu: 2")
    p_up.add_argument("--timeout", type=float, default=90, help="seconds to wait for readiness")
    p_up.add_argument("--build", action="store_true", help="build missing binaries first")
    p_up.add_argument("--audit", action="store_true",
                      help="write an apiserver audit log of every write (logs/audit.log in the state dir)")
    p_up.add_argument("--real-nodes", type=int, default=0, choices=(0, 1), metavar="N",
                      help="real workers: containerd, kubelet, kube-proxy, CoreDNS in network/mount namespaces "
                           "of their own (needs root; images from tools/images.py). The fake GPU nodes stay, "
                           "tainted <vendor>/gpu=present:NoSchedule; there are no fake CPU nodes")
    p_up.add_argument("--controller-qps", type=float, default=None, metavar="QPS",
                      help="the controller-manager's API rate limit (its default: 20/s); raise it for "
                           "benchmarks that wait for many pods")
    p_down = sub.add_parser("down", parents=[common], help="stop the processes started by `up`")
    p_down.add_argument("--purge", action="store_true", help="also delete certificates, kubeconfigs and logs")
    p_status = sub.add_parser("status", parents=[common], help="processes, RSS, readiness (exit 1 if not up)")
    p_status.add_argument("--json", action="store_true")
    p_load = sub.add_parser("load-image", parents=[common],
                            help="import image archives (OCI or docker-archive) into the real node's containerd")
    p_load.add_argument("archives", nargs="+", type=Path, metavar="ARCHIVE")
    sub.add_parser("env", parents=[common], help="print export lines for KUBECONFIG and PATH")
    sub.add_parser("kubeconfig", parents=[common], help="print the kubeconfig path")
    args = parser.parse_args(argv)

    try:
        bin_dir = (args.bin_dir or default_bin_dir()).expanduser().resolve()
        state_dir = (args.state_dir or default_state_dir(args.name)).expanduser().resolve()
        cluster = Cluster(state_dir, bin_dir)
        if args.command == "build":
            build(bin_dir, force=args.force)
        elif args.command == "up":
            if args.build:
                build(bin_dir)
            nodes = default_nodes(args.cpu_nodes, args.nvidia_nodes, args.amd_nodes)
            if args.real_nodes:
                nodes = real_node_layout(nodes)
            cluster.up(nodes, timeout=args.timeout, audit=args.audit, controller_qps=args.controller_qps,
                       real_nodes=args.real_nodes)
        elif args.command == "down":
            cluster.down(purge=args.purge)
        elif args.command == "status":
            info = cluster.status()
            if args.json:
                print(json.dumps(info, indent=2))
            else:
                print_status(info, sys.stdout)
            return 0 if info["running"] else 1
        elif args.command == "load-image":
            state = cluster.load_state() or {}
            if not state.get("real_nodes") or not cluster.is_up():
                raise DevclusterError("no running cluster with a real node (up --real-nodes 1)")
            for record in state["real_nodes"]:
                realnode.import_images(realnode.node_from_record(record), args.archives)
            log(f"imported {', '.join(str(a) for a in args.archives)}")
        elif args.command == "env":
            print(f"export KUBECONFIG={cluster.kubeconfig}")
            print(f"export PATH={bin_dir}:$PATH")
        elif args.command == "kubeconfig":
            print(cluster.kubeconfig)
    except DevclusterError as err:
        print(f"devcluster {args.command}: error: {err}", file=sys.stderr)
        return 1
    except subprocess.CalledProcessError as err:
        print(f"devcluster {args.command}: error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
