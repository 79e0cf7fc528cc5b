#!/usr/bin/env python3
"""Container images for the devcluster's real nodes, built here without a registry or a Docker engine.

No container registry is reachable from these machines, so every image a real node runs is built
locally and imported into the node's containerd:

- ``docker.io/flwr/superlink:<v>``, ``docker.io/flwr/supernode:<v>``, ``docker.io/flwr/superexec:<v>``:
  the layout of Flower's own images (``src/docker`` in the Flower repository): a Debian root
  filesystem (``debootstrap --variant=minbase bookworm``) with python3, a virtualenv at
  ``/python/venv`` holding the ``flwr`` wheel of that version and its dependencies from PyPI, the
  user ``app`` (uid/gid 49999), WORKDIR and HOME ``/app``, ``PYTHONUNBUFFERED=1`` and the
  entrypoints ``flower-superlink``, ``flower-supernode``, ``flower-superexec``. The three share one
  layer.
- ``registry.k8s.io/pause:3.10``: the sandbox image containerd asks for, a static ``pause`` built
  with gcc from ``tools/pause.c``.

Each image set is written as an OCI archive (``oci-layout``, ``index.json``, ``blobs/``) under
``~/.cache/flower-syncer/images/`` with a stamp keyed by the recipe, so it is built once.
``ctr images import`` reads it.

    python3 tools/images.py build [--flwr 1.25.0 ...]     # build (cached) and print the archives
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

TOOLS_DIR = Path(__file__).resolve().parent
ROOT = TOOLS_DIR.parent
sys.path.insert(0, str(TOOLS_DIR))

from devutil import DevclusterError, cache_root, ensure_apt_packages, fmt_secs, log, step  # noqa: E402

# Bump when the way the images are made changes, to force a rebuild.
IMAGE_RECIPE = "1"
DEBIAN_SUITE = "bookworm"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
DEBIAN_PACKAGES = ("python3", "python3-venv", "python3-pip", "ca-certificates", "libsqlite3-0")
# One release per transport era: 1.26.0 (every API gRPC; the e2e suite's old-era case), 1.37.0 (Control
# API over HTTP, Fleet still gRPC), 1.42.0 (the newest served release: every API over HTTP; the e2e suite
# and `tools/demo --real`). Besides these, `build` makes the versions config/examples name (example_versions).
FLWR_VERSIONS = ("1.26.0", "1.37.0", "1.42.0")
EXAMPLES_DIR = ROOT / "config" / "examples"
# An image reference of Flower's in the examples (`flwr/supernode:1.42.0`) or a chart's `tag:` next to
# `repository: flwr/...`.
_EXAMPLE_IMAGE = re.compile(r"flwr/super(?:link|node|exec):(\d+\.\d+\.\d+)\b")
_EXAMPLE_CHART_TAG = re.compile(
    r"repository:\s*[\"']?flwr/super(?:link|node|exec)[\"']?\s*\n\s*tag:\s*[\"']?(\d+\.\d+\.\d+)")
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
PYTHON_BASE_IMAGE = "localhost/flower-syncer-build/python:3.11-bookworm"
AGENT_IMAGE = "localhost/flower-syncer:dev"
BUILDAH_LEFTOVERS = (Path("/var/lib/containers"), Path("/run/containers"), Path("/etc/containers/networks"))
FLWR_USER = "49999:49999"
# What a layer leaves out: what the runtime mounts over, package caches and documentation.
LAYER_EXCLUDES = (
    "./proc/*", "./sys/*", "./dev/*", "./run/*", "./tmp/*", "./var/tmp/*",
    "./var/cache/apt/*", "./var/lib/apt/lists/*", "./var/log/*",
    "./usr/share/doc/*", "./usr/share/man/*", "./usr/share/info/*", "./usr/share/locale/*",
)
# Wheels only, for Debian bookworm's CPython 3.11 on glibc 2.36.
WHEEL_TARGET = (
    "--only-binary", ":all:", "--python-version", "3.11", "--implementation", "cp", "--abi", "cp311",
    *(arg for glibc in range(17, 37) for arg in ("--platform", f"manylinux_2_{glibc}_x86_64")),
    "--platform", "manylinux2014_x86_64", "--platform", "linux_x86_64",
)
FLWR_ENTRYPOINTS = {"superlink": "flower-superlink", "supernode": "flower-supernode", "superexec": "flower-superexec"}


@dataclass(frozen=True)
class ImageConfig:
    """One image of an archive: its name and the parts of the OCI config that matter here."""

    name: str
    entrypoint: list[str]
    user: str = ""
    workdir: str = "/"
    env: tuple[str, ...] = ("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",)


def images_dir() -> Path:
    return cache_root() / "images"


def _key(*parts: str) -> str:
    return hashlib.sha256("|".join((IMAGE_RECIPE, *parts)).encode()).hexdigest()[:16]


def _run(args: Sequence[str | Path], what: str, env: dict[str, str] | None = None) -> None:
    proc = subprocess.run([str(a) for a in args], capture_output=True, text=True, check=False, env=env)
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr)[-4000:]
        raise DevclusterError(f"{what} failed (exit {proc.returncode}):\n{tail}")


def _cached(name: str, key: str) -> Path | None:
    archive = images_dir() / f"{name}.oci.tar"
    try:
        stamp = json.loads((images_dir() / f"{name}.stamp.json").read_text())
    except (OSError, ValueError):
        return None
    return archive if stamp.get("key") == key and archive.exists() else None


def _save(name: str, key: str, work: Path, images: list[ImageConfig], layers: list[Path], started: float) -> Path:
    images_dir().mkdir(parents=True, exist_ok=True)
    archive = images_dir() / f"{name}.oci.tar"
    tmp = archive.with_suffix(".tmp")
    write_oci_archive(tmp, images, layers, work)
    tmp.replace(archive)
    stamp = {"key": key, "images": [i.name for i in images], "seconds": round(time.monotonic() - started, 1)}
    (images_dir() / f"{name}.stamp.json").write_text(json.dumps(stamp, indent=2) + "\n")
    return archive


# ---- OCI archives --------------------------------------------------------------------------------


def _blob(blobs: Path, data: bytes) -> tuple[str, int]:
    digest = hashlib.sha256(data).hexdigest()
    (blobs / digest).write_bytes(data)
    return f"sha256:{digest}", len(data)


def _file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_oci_archive(out: Path, images: list[ImageConfig], layers: list[Path], work: Path) -> None:
    """An OCI image layout as one tar: every image shares `layers` (uncompressed tars, in order)."""
    layout = work / "oci"
    blobs = layout / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    layer_descs = []
    diff_ids = []
    for layer in layers:
        digest = _file_digest(layer)
        os.link(layer, blobs / digest)  # same filesystem (the images cache); the archive copies it
        size = (blobs / digest).stat().st_size
        layer_descs.append(
            {"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": f"sha256:{digest}", "size": size}
        )
        diff_ids.append(f"sha256:{digest}")
    manifests = []
    for image in images:
        config = {
            "architecture": "amd64",
            "os": "linux",
            "config": {
                "Entrypoint": image.entrypoint,
                "Env": list(image.env),
                "WorkingDir": image.workdir,
                **({"User": image.user} if image.user else {}),
            },
            "rootfs": {"type": "layers", "diff_ids": diff_ids},
        }
        cdigest, csize = _blob(blobs, json.dumps(config, sort_keys=True).encode())
        manifest = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cdigest, "size": csize},
            "layers": layer_descs,
        }
        mdigest, msize = _blob(blobs, json.dumps(manifest, sort_keys=True).encode())
        manifests.append(
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": mdigest,
                "size": msize,
                "annotations": {
                    "io.containerd.image.name": image.name,
                    "org.opencontainers.image.ref.name": image.name.rsplit(":", 1)[1],
                },
            }
        )
    (layout / "oci-layout").write_text(json.dumps({"imageLayoutVersion": "1.0.0"}))
    (layout / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": manifests}, sort_keys=True))
    with tarfile.open(out, "w") as tar:
        for path in sorted(layout.rglob("*")):
            tar.add(path, arcname=str(path.relative_to(layout)), recursive=False)


def _layer_from_dir(root: Path, out: Path) -> None:
    """A layer tar of `root`: names sorted, owners numeric, mtimes clamped, so rebuilds compare."""
    args: list[str | Path] = ["tar", "-C", root, "--sort=name", "--numeric-owner", "--xattrs"]
    args += ["--mtime=2020-01-01 00:00:00Z", "--clamp-mtime"]
    args += [f"--exclude={pattern}" for pattern in LAYER_EXCLUDES]
    _run([*args, "-cf", out, "."], f"tar of {root}")


# ---- pause ---------------------------------------------------------------------------------------


def build_pause(force: bool = False) -> Path:
    key = _key("pause", (TOOLS_DIR / "pause.c").read_text())
    if not force and (cached := _cached("pause", key)):
        return cached
    started = time.monotonic()
    ensure_apt_packages({"gcc": "gcc"})
    with tempfile.TemporaryDirectory(prefix="pause-", dir=_scratch()) as tmp:
        work = Path(tmp)
        root = work / "root"
        root.mkdir()
        _run(["gcc", "-static", "-Os", "-s", "-o", root / "pause", TOOLS_DIR / "pause.c"], "gcc pause.c")
        _layer_from_dir(root, work / "layer.tar")
        image = ImageConfig(name=PAUSE_IMAGE, entrypoint=["/pause"], user="65535:65535", env=())
        return _save("pause", key, work, [image], [work / "layer.tar"], started)


# ---- Flower --------------------------------------------------------------------------------------


def _scratch() -> Path:
    path = images_dir() / "scratch"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _chroot(root: Path, script: str) -> None:
    """Run `script` in `root` with /proc and /dev mounted, in a mount namespace that dies with it."""
    inner = (f"mount -t proc proc {root}/proc && mount --rbind /dev {root}/dev && "
             f"exec chroot {root} /bin/sh -ec '{script}'")
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root", "LANG": "C.UTF-8"}
    _run(["unshare", "--mount", "--propagation", "private", "sh", "-ec", inner], f"chroot: {script}", env=env)


def build_base(force: bool = False) -> Path:
    """The Debian layer every Flower image starts from (cached: the only part that needs apt)."""
    layer = images_dir() / f"debian-{DEBIAN_SUITE}.layer.tar"
    key = _key("base", DEBIAN_SUITE, *DEBIAN_PACKAGES)
    stamp = layer.with_suffix(".stamp")
    if not force and layer.exists() and stamp.exists() and stamp.read_text() == key:
        return layer
    ensure_apt_packages({"debootstrap": "debootstrap"})
    stamp.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="base-", dir=_scratch()) as tmp:
        root = Path(tmp) / "root"
        try:
            with step(f"debootstrap {DEBIAN_SUITE} (minbase + {', '.join(DEBIAN_PACKAGES)}; cold ~1-2 min)"):
                _run(
                    ["debootstrap", "--variant=minbase", f"--include={','.join(DEBIAN_PACKAGES)}",
                     DEBIAN_SUITE, root, DEBIAN_MIRROR],
                    "debootstrap",
                )
        finally:  # debootstrap mounts /proc and /sys in the target; a failed run may leave them
            subprocess.run(["umount", "--recursive", "--lazy", root / "proc", root / "sys"], capture_output=True,
                           check=False)
        _layer_from_dir(root, Path(tmp) / "layer.tar")
        (Path(tmp) / "layer.tar").replace(layer)
    stamp.write_text(key)
    return layer


FLWR_ENV = (
    "PATH=/python/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "PYTHONUNBUFFERED=1", "PYTHONDONTWRITEBYTECODE=1", "PYTHONIOENCODING=UTF-8",
    "LANG=C.UTF-8", "LC_ALL=C.UTF-8", "HOME=/app",
)
# From 1.32 a SuperLink in subprocess isolation runs `uv sync` for the app's dependencies before each
# ServerApp, which needs a package index; the real node has no network, so every run would fail (exit
# code 608, "Runtime installation of app dependencies failed"; seen with 1.42.0 in a network namespace
# with loopback only). The e2e app needs only numpy, a dependency of flwr, already in the venv. This
# variable (1.32+) turns it off, as an air-gapped site would (or `--disable-runtime-dependency-installation`);
# Flower's published images leave it unset. SuperNodes and SuperExecs install nothing unless told to.
NO_RUNTIME_INSTALL_SINCE = (1, 32)
NO_RUNTIME_INSTALL_ENV = "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1"


def flwr_env(version: str) -> tuple[str, ...]:
    """The environment of the images of `version`."""
    release = tuple(int(n) for n in version.split(".")[:2])
    return (*FLWR_ENV, NO_RUNTIME_INSTALL_ENV) if release >= NO_RUNTIME_INSTALL_SINCE else FLWR_ENV


# The venv's bytecode ships in the image, hash-based (valid whatever the files' clamped mtimes say):
# with PYTHONDONTWRITEBYTECODE=1 and no __pycache__, every Python process (the SuperLink, each
# SuperExec, each ServerApp and ClientApp) compiled flwr and its dependencies from source at every
# start: 4.7 CPU-s to import a ServerApp's modules in 1.42 instead of 2.6 (measured). Flower gives an app
# process 30 s from its task's claim to its first call (a constant); on a starved node the doubled
# start missed it: "Runtime task-token authentication failed", the run never started.
FLWR_BYTECODE = "bytecode=unchecked-hash"
COMPILE_VENV = "/python/venv/bin/python -m compileall -q -f -j 0 --invalidation-mode unchecked-hash /python/venv/lib"


def _flwr_key(version: str, base_key: str) -> str:
    """The cache key of the image of `version` on the base layer of `base_key`: what the environment
    adds is part of it (the images of releases without it keep theirs), and the bytecode's mode."""
    return _key(f"flwr-{version}", base_key, *flwr_env(version)[len(FLWR_ENV):], FLWR_BYTECODE)


def build_flwr(version: str, force: bool = False) -> Path:
    name = f"flwr-{version}"
    base = build_base()
    env = flwr_env(version)
    key = _flwr_key(version, base.with_suffix(".stamp").read_text())
    if not force and (cached := _cached(name, key)):
        return cached
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"{name}-", dir=_scratch()) as tmp:
        work = Path(tmp)
        root = work / "root"
        root.mkdir()
        with step(f"flwr=={version} and its dependencies from PyPI into /python/venv"):
            _run(["tar", "-C", root, "-xf", base], "unpack the base layer")
            wheels = root / "tmp" / "wheels"
            # The host's pip knows this machine's index and CA; it fetches wheels for the image's
            # CPython 3.11 on glibc 2.36 (whatever Python runs this), so the install inside needs no network.
            _run([sys.executable, "-m", "pip", "download", "-q", "-d", wheels, *WHEEL_TARGET, f"flwr=={version}"],
                 f"pip download flwr=={version}")
            _chroot(
                root,
                "python3 -m venv /python/venv; "
                f"/python/venv/bin/pip install -q --no-cache-dir --no-index --find-links /tmp/wheels flwr=={version}; "
                "/python/venv/bin/flower-superlink --help >/dev/null; "
                f"{COMPILE_VENV} || true; "  # a few shipped sources (templates) do not compile: never imported
                "groupadd --gid 49999 app; "
                "useradd --uid 49999 --gid 49999 --home-dir /app --no-create-home --shell /usr/sbin/nologin app; "
                "mkdir -p /app; chown app:app /app",
            )
        with step("layer"):
            # Only what the install added or changed goes on top of the base layer.
            paths = ["./python", "./app", *(f"./etc/{f}" for f in ("passwd", "group", "shadow", "gshadow"))]
            _run(["tar", "-C", root, "--sort=name", "--numeric-owner", "--mtime=2020-01-01 00:00:00Z",
                  "--clamp-mtime", "-cf", work / "flwr.tar", *paths], "tar of the venv")
            shutil.rmtree(root)
        images = [
            ImageConfig(name=f"docker.io/flwr/{component}:{version}", entrypoint=[command],
                        user=FLWR_USER, workdir="/app", env=env)
            for component, command in FLWR_ENTRYPOINTS.items()
        ]
        return _save(name, key, work, images, [base, work / "flwr.tar"], started)


# ---- the agent's own image, from the project's Dockerfile ---------------------------------------


def _python_base() -> Path:
    """The Dockerfile's base image (PYTHON_IMAGE) made here: Debian bookworm with its CPython 3.11
    and pip, the same base layer as the Flower images."""
    base = build_base()
    name = "python-base"
    key = _key(name, base.with_suffix(".stamp").read_text())
    if cached := _cached(name, key):
        return cached
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"{name}-", dir=_scratch()) as tmp:
        image = ImageConfig(name=PYTHON_BASE_IMAGE, entrypoint=["python3"])
        return _save(name, key, Path(tmp), [image], [base], started)


def _source_digest() -> str:
    h = hashlib.sha256()
    for path in sorted([ROOT / "Dockerfile", ROOT / "pyproject.toml", ROOT / "README.md",
                        *(ROOT / "syncer").rglob("*.py")]):
        h.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def build_agent(force: bool = False) -> Path:
    """flower-syncer's image from the project's Dockerfile, built with Debian's buildah (no Docker
    engine): `localhost/flower-syncer:dev`, as a docker-archive that `ctr images import` names."""
    base = _python_base()
    name = "agent"
    key = _key(name, _file_digest(base), _source_digest())
    archive = images_dir() / f"{name}.docker.tar"
    stamp = images_dir() / f"{name}.stamp.json"
    with contextlib.suppress(OSError, ValueError):
        if not force and archive.exists() and json.loads(stamp.read_text()).get("key") == key:
            return archive
    ensure_apt_packages({"buildah": "buildah"})
    started = time.monotonic()
    # buildah writes a blob-info cache and network lock files in fixed places whatever its --root;
    # what was not there before the build is removed after it.
    fresh = [path for path in BUILDAH_LEFTOVERS if not path.exists()]
    with contextlib.ExitStack() as cleanup, tempfile.TemporaryDirectory(prefix=f"{name}-", dir=_scratch()) as tmp:
        for path in fresh:
            cleanup.callback(shutil.rmtree, path, ignore_errors=True)
        work = Path(tmp)
        # A storage of its own, thrown away after: nothing lands in the host's /var/lib/containers.
        buildah = ["buildah", "--root", str(work / "storage"), "--runroot", str(work / "run")]
        # pip in the build reaches PyPI the way this machine's pip does (its CA bundle, its index);
        # Debian's pip needs break-system-packages to install outside a venv, as python:3.11-slim's does.
        cert = os.environ.get("PIP_CERT") or "/etc/ssl/certs/ca-certificates.crt"
        index = os.environ.get("PIP_INDEX_URL")
        (work / "pip.conf").write_text("[global]\ncert = /etc/ssl/certs/build-ca.crt\n"
                                       + (f"index-url = {index}\n" if index else "")
                                       + "[install]\nbreak-system-packages = true\n")
        try:
            with step(f"buildah: the base image {PYTHON_BASE_IMAGE}"):
                _run([*buildah, "pull", "-q", f"oci-archive:{base}"], "buildah pull")
                ids = subprocess.run([*buildah, "images", "-q"], capture_output=True, text=True, check=True)
                _run([*buildah, "tag", ids.stdout.split()[0], PYTHON_BASE_IMAGE], "buildah tag")
            with step(f"buildah bud Dockerfile -> {AGENT_IMAGE} (cold ~2 min: the wheels of every dependency)"):
                _run([*buildah, "bud", "--isolation", "chroot", "--pull-never", "--build-arg",
                      f"PYTHON_IMAGE={PYTHON_BASE_IMAGE}", "-v", f"{work / 'pip.conf'}:/etc/pip.conf:ro",
                      "-v", f"{cert}:/etc/ssl/certs/build-ca.crt:ro", "-t", AGENT_IMAGE, "-f",
                      str(ROOT / "Dockerfile"), str(ROOT)], "buildah bud")
                _run([*buildah, "push", "-q", AGENT_IMAGE, f"docker-archive:{work / 'agent.tar'}:{AGENT_IMAGE}"],
                     "buildah push")
        finally:  # buildah's overlay mounts live under the storage root
            subprocess.run(["umount", "--recursive", "--lazy", work / "storage" / "overlay"], capture_output=True,
                           check=False)
        (work / "agent.tar").replace(archive)
    stamp.write_text(json.dumps({"key": key, "images": [AGENT_IMAGE],
                                 "seconds": round(time.monotonic() - started, 1)}, indent=2) + "\n")
    return archive


def example_versions(examples: Path = EXAMPLES_DIR) -> list[str]:
    """The Flower versions whose images config/examples name (`tools/demo --real` runs them)."""
    found: set[str] = set()
    for path in sorted(examples.rglob("*.yaml")):
        text = path.read_text()
        found.update(_EXAMPLE_IMAGE.findall(text))
        found.update(_EXAMPLE_CHART_TAG.findall(text))
    return sorted(found, key=lambda v: tuple(int(n) for n in v.split(".")))


def default_versions() -> list[str]:
    """FLWR_VERSIONS and the examples' versions, oldest first."""
    return sorted({*FLWR_VERSIONS, *example_versions()}, key=lambda v: tuple(int(n) for n in v.split(".")))


def build_all(flwr_versions: Sequence[str] | None = None, force: bool = False) -> list[Path]:
    started = time.monotonic()
    archives = [build_pause(force)]
    build_base(force)
    for version in flwr_versions or default_versions():
        archives.append(build_flwr(version, force))
    log(f"images ready in {fmt_secs(time.monotonic() - started)}: {', '.join(a.name for a in archives)}")
    return archives


def all_cached(flwr_versions: Sequence[str] | None = None) -> bool:
    """Whether `build` would find every archive in the cache (nothing built, no root needed)."""
    layer = images_dir() / f"debian-{DEBIAN_SUITE}.layer.tar"
    stamp = layer.with_suffix(".stamp")
    base_key = _key("base", DEBIAN_SUITE, *DEBIAN_PACKAGES)
    if not (layer.exists() and stamp.exists() and stamp.read_text() == base_key):
        return False
    if not _cached("pause", _key("pause", (TOOLS_DIR / "pause.c").read_text())):
        return False
    for version in flwr_versions or default_versions():
        if not _cached(f"flwr-{version}", _flwr_key(version, base_key)):
            return False
    return True


def agent_cached() -> bool:
    """Whether `agent` would find the agent's archive for this source tree in the cache."""
    base = _cached("python-base", _key("python-base", _key("base", DEBIAN_SUITE, *DEBIAN_PACKAGES)))
    archive = images_dir() / "agent.docker.tar"
    if base is None or not archive.exists():
        return False
    try:
        stamp = json.loads((images_dir() / "agent.stamp.json").read_text())
    except (OSError, ValueError):
        return False
    return bool(stamp.get("key") == _key("agent", _file_digest(base), _source_digest()))


def image_names(archive: Path) -> list[str]:
    stamp = json.loads(archive.with_name(archive.name.replace(".oci.tar", ".stamp.json")).read_text())
    return list(stamp["images"])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build the images (cached) and print the archive paths")
    b.add_argument("--flwr", action="append", metavar="VERSION",
                   help=f"Flower versions (default {FLWR_VERSIONS} and those config/examples name)")
    b.add_argument("--force", action="store_true", help="rebuild even when the cache is current")
    a = sub.add_parser("agent", help=f"build {AGENT_IMAGE} from the Dockerfile with buildah; print the archive")
    a.add_argument("--force", action="store_true", help="rebuild even when the cache is current")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("images.py needs root (debootstrap, chroot)", file=sys.stderr)
        return 2
    try:
        if args.command == "agent":
            print(build_agent(args.force))
            return 0
        for archive in build_all(args.flwr, args.force):
            print(archive)
    except DevclusterError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
