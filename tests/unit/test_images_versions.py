"""tools/images.py builds the Flower versions the e2e suite pins and every version config/examples
names, so `tools/demo --real` never asks the real node for an image nobody built."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))

from images import FLWR_ENV, FLWR_VERSIONS, NO_RUNTIME_INSTALL_ENV, default_versions, example_versions, flwr_env

from tests.e2e.apps import FLWR, OLD_FLWR


def test_the_examples_versions_are_read_from_federations_and_chart_values(tmp_path: Path) -> None:
    (tmp_path / "federations").mkdir()
    (tmp_path / "federations" / "f.yaml").write_text(
        "spec:\n  superlink:\n    image: flwr/superlink:1.42.0\n    superexecImage: flwr/superexec:1.42.0\n"
        "  supernodes:\n    image: docker.io/flwr/supernode:1.37.0\n"
        "    pools:\n      - images: {supernode: my/app:2.0.0}\n")
    (tmp_path / "supernodes" / "r").mkdir(parents=True)
    (tmp_path / "supernodes" / "r" / "values.yaml").write_text(
        "supernode:\n  image:\n    registry: docker.io\n    repository: flwr/supernode\n    tag: \"1.26.0\"\n"
        "other:\n  image:\n    repository: busybox\n    tag: 1.36.1\n")
    assert example_versions(tmp_path) == ["1.26.0", "1.37.0", "1.42.0"]


def test_the_default_build_covers_the_e2e_suite_and_the_examples() -> None:
    versions = default_versions()
    assert {FLWR, OLD_FLWR} <= set(versions)
    assert set(FLWR_VERSIONS) | set(example_versions()) == set(versions)
    assert versions == sorted(versions, key=lambda v: tuple(int(n) for n in v.split(".")))


def test_only_releases_that_install_app_dependencies_get_the_switch_off() -> None:
    # A SuperLink runs `uv sync` before each ServerApp from 1.32 (when the variable appeared); the
    # images of older releases keep the environment, and so the cache key, they always had.
    assert NO_RUNTIME_INSTALL_ENV not in flwr_env("1.26.0")
    assert flwr_env("1.26.0") == FLWR_ENV
    assert flwr_env("1.32.0") == flwr_env("1.42.0") == (*FLWR_ENV, NO_RUNTIME_INSTALL_ENV)


def test_the_cache_check_asks_for_the_keys_the_build_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """tools/test's table says `cached` from images.all_cached: it must ask for the very keys
    build_flwr looks up (it once left out the bytecode mode and said `cold` on every warm run)."""
    import images

    monkeypatch.setattr(images, "images_dir", lambda: tmp_path)
    monkeypatch.setattr(images, "DEBIAN_SUITE", "x")
    monkeypatch.setattr(images, "_key", lambda *parts: "base key" if parts[0] == "base" else "|".join(parts))
    base = tmp_path / "debian-x.layer.tar"  # built, as both functions see it
    base.touch()
    base.with_suffix(".stamp").write_text("base key")
    monkeypatch.setattr(images, "build_base", lambda force=False: base)
    asked: dict[str, list[str]] = {"build": [], "check": []}

    def cached(into: str) -> Callable[[str, str], Path]:
        def record(name: str, key: str) -> Path:
            if name.startswith("flwr-"):
                asked[into].append(key)
            return tmp_path / f"{name}.oci.tar"
        return record

    for version in (OLD_FLWR, FLWR):  # before and after the release whose environment adds a variable
        monkeypatch.setattr(images, "_cached", cached("build"))
        images.build_flwr(version)
        monkeypatch.setattr(images, "_cached", cached("check"))
        assert images.all_cached([version])
    assert asked["check"] == asked["build"] and len(asked["build"]) == 2
