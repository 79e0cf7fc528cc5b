"""Every Flower release's own argument parsers, cached for the compatibility test
(tests/integration/test_flower_compat.py).

    python3 tools/flower_releases.py fetch    download what is missing (the only step that uses the registry)
    python3 tools/flower_releases.py path     print the cache directory

Instead of one virtualenv per release (23 installs of Flower and its dependencies), the cache holds
ONE dependency set, a virtualenv with the newest release (`flwr==NEWEST`), and each release's
`flwr` wheel unpacked on its own (`pip download --no-deps`); a release's parsers are imported by
that interpreter with PYTHONPATH set to the unpacked wheel (tools/flower_parse_commands.py). Every
release from 1.20.0 imports its parsers that way (checked for 1.20.0 ... 1.42.0 and the nightly).

The dependency set is a whole install of flwr==NEWEST: the tests that run that release's SuperLink,
SuperNode or `flwr` CLI (tests/integration/superlinks.py's flower_bin) use it too, rather than a second
install of the same release.

Layout under ~/.cache/flower-syncer/flower/ (FLOWER_SYNCER_CACHE overrides the root):
    deps-<NEWEST>/            virtualenv with flwr==<NEWEST> and its dependencies
    releases/<version>/       an unpacked flwr wheel (flwr/, *.dist-info), `.complete` when done
    wheels/                   the downloaded wheels
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

NEWEST = "1.42.0"
RELEASES = [f"1.{minor}.0" for minor in range(20, 43)]  # every minor release 1.20 ... NEWEST
NIGHTLY = "1.43.0.dev20261026"  # flwr-nightly, pinned so the matrix is reproducible
ALL = [*RELEASES, NIGHTLY]


def cache_root() -> Path:
    base = Path(os.environ.get("FLOWER_SYNCER_CACHE", Path.home() / ".cache" / "flower-syncer"))
    return base / "flower"


def deps_python() -> Path:
    return cache_root() / f"deps-{NEWEST}" / "bin" / "python"


def release_dir(version: str) -> Path:
    return cache_root() / "releases" / version


def ready(version: str) -> bool:
    return (release_dir(version) / ".complete").exists()


def missing() -> list[str]:
    """What `fetch` would still have to do ('deps' and/or versions)."""
    out = [] if (deps_python().parent.parent / ".complete").exists() else ["deps"]
    return out + [v for v in ALL if not ready(v)]


def _pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", *args], check=True)


def _fetch_release(version: str) -> None:
    if ready(version):
        return
    wheels = cache_root() / "wheels" / version
    wheels.mkdir(parents=True, exist_ok=True)
    requirement = f"flwr-nightly=={version}" if version == NIGHTLY else f"flwr=={version}"
    _pip("download", "--no-deps", "--pre", "-d", str(wheels), requirement)
    (wheel,) = sorted(wheels.glob("*.whl"))
    target = release_dir(version)
    shutil.rmtree(target, ignore_errors=True)
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(target)
    (target / ".complete").write_text(wheel.name + "\n")


def deps_bin() -> Path:
    """The bin directory of the dependency set's venv: flwr==NEWEST's own CLIs (flwr,
    flower-superlink, flower-supernode), which the Control API and e2e tests run for that release."""
    return deps_python().parent


def fetch_deps() -> None:
    """Make the dependency set's venv (flwr==NEWEST), unless it is complete."""
    venv = deps_python().parent.parent
    if (venv / ".complete").exists():
        return
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(deps_python()), "-m", "pip", "--disable-pip-version-check", "-q", "install",
                    f"flwr=={NEWEST}"], check=True)
    (venv / ".complete").write_text(f"flwr=={NEWEST}\n")


def fetch() -> None:
    start = time.monotonic()
    todo = missing()
    if not todo:
        print(f"Flower releases: all {len(ALL)} cached in {cache_root()}")
        return
    with ThreadPoolExecutor(max_workers=6) as pool:
        deps = pool.submit(fetch_deps) if "deps" in todo else None
        list(pool.map(_fetch_release, [v for v in todo if v != "deps"]))
        if deps is not None:
            deps.result()
    print(f"Flower releases: fetched {len(todo)} item(s) into {cache_root()} in {time.monotonic() - start:.0f}s")


def main() -> None:
    command = sys.argv[1] if len(sys.argv) > 1 else "fetch"
    if command == "fetch":
        fetch()
    elif command == "path":
        print(cache_root())
    else:
        sys.exit(f"usage: {sys.argv[0]} fetch|path")


if __name__ == "__main__":
    main()
