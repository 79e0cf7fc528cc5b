#!/usr/bin/env python3
"""Build the real cert-manager controller from its Go module into
~/.cache/flower-syncer/cert-manager/<version>/ (once; later runs find it there), with its CRDs beside
it. The tests run it against the local control plane to issue a SuperLink's certificate, and check
that flower-syncer's TLS Federations and real Flower work with what it writes. Prints the binary's
path.

    python3 tools/build_cert_manager.py      # cold on 2 cores: ~5 min (Go proxy reachable)

Its CRDs are Helm templates; `kubectl_crd_paths()` writes copies that `kubectl apply -f` takes
(crds-kubectl/ beside them), which `tools/demo --with cert-manager` applies.

Why v1.11.5: from v1.12 on, cert-manager's binaries live in `cmd/*` modules of their own, which
the Go module proxy does not serve (404 for every tag), and the controller's wiring is in
`internal/` packages that nothing outside the module may import. v1.11.5 still has
`cmd/controller` in the root module. Its go.mod has a replace directive, so `go install pkg@v`
refuses it: it is built from a small wrapper module that repeats the directive.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

VERSION = "v1.11.5"
MODULE = "github.com/cert-manager/cert-manager"
PACKAGE = f"{MODULE}/cmd/controller"
GO_MOD = f"""\
module flower-syncer.dev/certmanager

go 1.19

require {MODULE} {VERSION}

replace github.com/miekg/dns v1.1.41 => github.com/miekg/dns v1.1.34
"""
TOOLS_GO = f'//go:build tools\n\npackage tools\n\nimport _ "{PACKAGE}"\n'
CRDS = ("certificates", "certificaterequests", "issuers", "clusterissuers", "orders", "challenges")


def home() -> Path:
    base = Path(os.environ.get("FLOWER_SYNCER_CACHE", Path.home() / ".cache" / "flower-syncer"))
    return base / "cert-manager" / VERSION


def binary_path() -> Path:
    return home() / "cert-manager-controller"


def crd_paths() -> list[Path]:
    return [home() / "crds" / f"crd-{name}.yaml" for name in CRDS]


def kubectl_crd_paths() -> list[Path]:
    """The CRDs as `kubectl apply -f` takes them. The module's deploy/crds files are Helm templates
    (`app: '{{ template "cert-manager.name" . }}'` labels, `{{- include ...}}` lines), which
    kubectl rejects; these copies carry the labels the chart would render, and nothing else
    changes. Written beside the templates on first use (needs PyYAML, the project's dependency)."""
    import yaml

    out = []
    for path in crd_paths():
        target = home() / "crds-kubectl" / path.name
        if not target.exists() or target.stat().st_mtime < path.stat().st_mtime:
            crd = yaml.safe_load(path.read_text())
            crd["metadata"]["labels"] = {"app": "cert-manager", "app.kubernetes.io/name": "cert-manager",
                                         "app.kubernetes.io/instance": "cert-manager",
                                         "app.kubernetes.io/version": VERSION}
            target.parent.mkdir(exist_ok=True)
            target.write_text(yaml.safe_dump(crd, sort_keys=False))
        out.append(target)
    return out


def _go(args: list[str], cwd: Path) -> str:
    env = {**os.environ, "GOFLAGS": "-mod=mod", "GOTOOLCHAIN": "local", "CGO_ENABLED": "0"}
    proc = subprocess.run(["go", *args], cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout + proc.stderr)
        raise SystemExit(f"building cert-manager {VERSION} failed: go {' '.join(args)}")
    return proc.stdout


def build() -> Path:
    binary = binary_path()
    stamp = home() / ".build-stamp"
    want = f"{PACKAGE}@{VERSION}"
    if binary.exists() and stamp.exists() and stamp.read_text().strip() == want and all(
            p.exists() for p in crd_paths()):
        return binary
    src = home() / "src"
    src.mkdir(parents=True, exist_ok=True)
    (src / "go.mod").write_text(GO_MOD)
    (src / "tools.go").write_text(TOOLS_GO)
    _go(["mod", "tidy"], src)
    _go(["build", "-o", str(binary), PACKAGE], src)
    module_dir = Path(_go(["list", "-m", "-f", "{{.Dir}}", MODULE], src).strip())
    (home() / "crds").mkdir(exist_ok=True)
    for path in crd_paths():
        shutil.copyfile(module_dir / "deploy" / "crds" / path.name, path)
    stamp.write_text(want + "\n")
    return binary


if __name__ == "__main__":
    built = build()
    kubectl_crd_paths()
    print(built)
