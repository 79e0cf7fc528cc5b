"""`tools/demo` as a newcomer runs it (issue 26): up with Prometheus on a cluster of its own (fake
nodes), the hints naming this demo, `env` that puts the CLI on it, `status` green, then
`down --purge` that leaves nothing behind. Its own name (`t-<pid>`), so its cluster, directory
and ports are its own; the `default` cluster is never touched."""

from __future__ import annotations

import os
import re
import subprocess
import urllib.request
import zlib
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.cluster

DEMO = REPO / "tools" / "demo"
NAME = f"t-{os.getpid()}"
CACHE = Path(os.environ.get("FLOWER_SYNCER_CACHE", Path.home() / ".cache" / "flower-syncer"))


def demo(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("FLOWER_SYNCER_DEVCLUSTER_DIR", "FLOWER_SYNCER_DEMO_DIR", "FLOWER_SYNCER_DEMO_PORT")}
    return subprocess.run([str(DEMO), *args], capture_output=True, text=True, timeout=timeout, env=env, check=False)


def exports(text: str) -> dict[str, str]:
    """What `eval "$(tools/demo env)"` sets, as bash evaluates it."""
    shown = subprocess.run(["bash", "-c", f"{text}\nenv -0"], capture_output=True, text=True, check=True).stdout
    return dict(item.split("=", 1) for item in shown.split("\0") if "=" in item)


def gone(pid: int) -> bool:
    """Exited (a zombie waits for this container's init to reap it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0] in ("Z", "X")
    except OSError:
        return True


def test_help_and_a_demo_that_does_not_exist() -> None:
    shown = demo("--help")
    assert shown.returncode == 0 and "set -euo" not in shown.stdout
    assert shown.stdout.rstrip().endswith("(with --real\nthe API server listens on the host end of the real node's "
                                          "veth, 10.201.<n>.1).")
    missing = demo("--name", "nosuch-demo", "logs")
    assert missing.returncode == 1 and "there is no demo named nosuch-demo" in missing.stderr
    assert not (CACHE / "demo-nosuch-demo").exists() and not (CACHE / "devcluster" / "nosuch-demo").exists()
    assert demo("--name", "Bad_Name").returncode == 2


def test_ports_are_derived_per_name_and_never_shared(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(REPO / "tools"))
    monkeypatch.setenv("FLOWER_SYNCER_CACHE", str(tmp_path))
    import demo as demo_cli  # tools/demo.py

    first = demo_cli.derived_port("alpha", tmp_path / "demo-alpha")
    assert first == demo_cli.derived_port("alpha", tmp_path / "demo-alpha")  # the same name: the same port
    assert demo_cli.derived_port("demo", tmp_path / "demo") == 9190
    (tmp_path / "demo-alpha").mkdir()
    (tmp_path / "demo-alpha" / "port").write_text(f"{first}\n")
    clash = next(n for n in (f"n{i}" for i in range(10_000))  # a name whose port alpha already has
                 if 9200 + 10 * (zlib.crc32(n.encode()) % 80) == first)
    assert demo_cli.derived_port(clash, tmp_path / f"demo-{clash}") != first


def test_up_env_status_and_down_purge_on_a_cluster_of_its_own() -> None:
    state, own = CACHE / "devcluster" / NAME, CACHE / f"demo-{NAME}"
    try:
        up = demo("--name", NAME, "--with", "prometheus", timeout=600)
        assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
        hints = up.stdout.split("it keeps running. Try:", 1)[1]
        mentions = hints.split("tools/demo")[1:]  # env, --decryption-key, logs, down, down --purge
        assert len(mentions) >= 5 and all(m.startswith(f" --name {NAME} ") for m in mentions), hints
        assert "Synced" in up.stdout and "demo ready in" in up.stdout

        env = exports(demo("--name", NAME, "env").stdout)
        assert env["KUBECONFIG"] == str(state / "kubeconfig")
        port = (own / "port").read_text().strip()
        assert env["FLOWER_SYNCER_LISTEN"] == f"127.0.0.1:{port}" and port != "9190"
        status = subprocess.run(["flower-syncer", "status", "--no-headers"], capture_output=True, text=True,
                                env=env, timeout=60, check=False)
        assert status.returncode == 0, status.stdout + status.stderr
        assert "federation/flower/federation-statefulset" in status.stdout
        flowerunits = subprocess.run(["kubectl", "get", "flowerunits", "-n", "flower"], capture_output=True,
                                     text=True, env=env, check=False)
        assert "federation.federation-statefulset" in flowerunits.stdout, flowerunits.stderr
        prometheus = (own / "prometheus-url").read_text().strip()
        with urllib.request.urlopen(f"{prometheus}/api/v1/rules", timeout=5) as resp:
            assert b"FlowerSyncer" in resp.read()  # the project's alert rules are loaded
        pids = [int((own / "pids" / f"{p}.pid").read_text().split()[0]) for p in ("agent", "prometheus")]
    finally:
        down = demo("--name", NAME, "down", "--purge", timeout=120)
    assert down.returncode == 0, down.stdout + down.stderr
    assert "removed:" in down.stdout and str(state) in down.stdout and str(own) in down.stdout
    assert re.search(r"MB|KB|GB", down.stdout)
    assert not state.exists() and not own.exists()
    assert all(gone(pid) for pid in pids)
    again = demo("--name", NAME, "down", "--purge")
    assert again.returncode == 0 and "there is no demo named" in again.stdout

