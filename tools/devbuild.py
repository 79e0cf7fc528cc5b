"""Building the devcluster's pinned binaries (Kubernetes, etcd, kwok, helm, CoreDNS) from the Go
modules in tools/gobuild and tools/coredns into ~/.cache/flower-syncer/bin/<version>/, and checking
them: `devcluster.py build`. Standard library only."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from devutil import DevclusterError, cache_root, ensure_apt_packages, fmt_secs, log, step

TOOLS_DIR = Path(__file__).resolve().parent
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
