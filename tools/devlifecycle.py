"""One devcluster's lifecycle: its state directory, processes (etcd, kube-apiserver, controllers,
kwok, a real node's daemons), `up`, `down` and `status`, and access to its API."""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import devlink
import devpki
import devprocs
import devstorage
import realnode
from devbuild import KWOK_STAGES_NAME, STAMP_NAME, binaries_ready
from devnodes import KWOK_ANNOTATION, NodeSpec, node_manifest, ready_nodes
from devprocs import free_port, http_ok, is_our_process, rss_kib, wait_for
from devutil import DevclusterError, cache_root, drop_if_only_lock, fmt_secs, log, purge_cluster_files, step

TOOLS_DIR = Path(__file__).resolve().parent
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


def default_state_dir(name: str) -> Path:
    override = os.environ.get("FLOWER_SYNCER_DEVCLUSTER_DIR")
    if override:
        return Path(override).expanduser()
    return cache_root() / "devcluster" / name


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
        """The control plane, its add-ons (the local provisioner) and a real node's daemons."""
        return COMPONENTS + tuple((state or {}).get("addons", ())) + tuple((state or {}).get("node_components", ()))

    def is_up(self) -> bool:
        state = self.load_state()
        if not state or set(self.running_pids(state)) != set(self.components(state)):
            return False
        return self._readyz()

    # ---- API access (admin client certificate) -----------------------------------------------

    def ssl_context(self) -> ssl.SSLContext:
        return devpki.admin_ssl_context(self.pki)

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
        return devprocs.api_request(self.server_url() + path, self.ssl_context(), method, body, timeout=timeout,
                                    content_type=content_type)

    def api_get(self, path: str, *, timeout: float = 10) -> Any:
        status, payload = self.api_request("GET", path, timeout=timeout)
        if status != 200:
            raise DevclusterError(f"GET {path}: HTTP {status}: {payload}")
        return payload

    # ---- certificates and kubeconfigs (devpki.py) ------------------------------------------------

    def ensure_pki(self, extra_sans: Sequence[str] = ()) -> None:
        devpki.ensure_pki(self.pki, extra_sans)

    def leaf(self, name: str, subject: str, usage: str, sans: list[str], ca: str = "ca") -> None:
        devpki.leaf(self.pki, name, subject, usage, sans, ca)

    def write_kubeconfig(self, path: Path, user: str, port: int, host: str = "127.0.0.1") -> None:
        devpki.write_kubeconfig(self.pki, path, user, port, host)

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
        with step(f"StorageClass {devstorage.STORAGE_CLASS_NAME} (default) and its local provisioner"):
            status, payload = self.api_request("POST", "/apis/storage.k8s.io/v1/storageclasses",
                                               devstorage.STORAGE_CLASS)
            if status not in (201, 409):
                raise DevclusterError(f"creating the StorageClass: HTTP {status}: {payload}")
            shutil.rmtree(devstorage.volumes_dir(sd), ignore_errors=True)  # the last cluster's volumes
            state["addons"] = ["local-provisioner"]
            self._spawn(state, "local-provisioner", [str(TOOLS_DIR / "devstorage.py"), f"--state-dir={sd}"],
                        binary=sys.executable)
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
        return names <= ready_nodes(payload)

    def down(self, purge: bool = False) -> None:
        with self.locked():
            stopped = self._stop()
            if purge:
                purge_cluster_files(self.state_dir, devstorage.volumes_dir(self.state_dir))
        if purge:  # nothing of the cluster is left but its lock: the folder goes too
            drop_if_only_lock(self.state_dir)
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
            for problem in devlink.unlink_all(self.state_dir, record["netns"]):
                log(f"warning: could not remove the real node's {problem}")
            net = realnode.node_from_record(record)
            daemons = {n: alive[n] for n in realnode.DAEMONS if n in alive}
            for problem in realnode.stop_node(net, daemons):
                log(f"warning: could not remove the real node's {problem}")
            stopped += daemons
        for group in (("local-provisioner", "kwok", "kube-scheduler", "kube-controller-manager"), ("kube-apiserver",),
                      ("etcd",)):
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
            {**{k: r[k] for k in ("name", "netns", "host_if", "host_ip", "node_ip", "cgroup_root", "dir")},
             "link_address": devlink.link_address(r["index"])}  # where linked clusters reach it (`link`)
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
