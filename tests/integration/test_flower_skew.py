"""Which SuperNode can join which SuperLink, with real Flower processes (plain processes on
127.0.0.1, --insecure, no Kubernetes): the boundary behind syncer.models.flower.fleet_skew.

Each release runs from the cache of tools/flower_releases.py (its wheel on PYTHONPATH over the shared
dependency set). The SuperNode dials the port the rendered Service routes its Fleet port to for that
SuperLink release (gRPC 9092 before 1.40, the HTTP port from 1.40). Observed (2026-11-26):
- 1.26 SuperLink <- 1.26 / 1.35 / 1.39 SuperNodes: activated; 1.42 SuperNode: "Connection attempt
  failed" until it gives up (it speaks HTTP to a gRPC port);
- 1.42 SuperLink <- 1.26 / 1.39 SuperNodes: UNAVAILABLE (no gRPC Fleet without the internal
  FLWR_INTERNAL_GRPC_FLEET_API=1); 1.40 / 1.42 SuperNodes: activated;
- 1.39 SuperLink <- 1.42 SuperNode on the HTTP port: `404 Not Found` for /v1/fleet/register-node
  (1.35-1.39 serve the Runtime/Control API over HTTP, not the Fleet API).
So the boundary is the Fleet transport (1.40), both ways; within an era the releases talk.
Also: GET /health answers on the API port of a 1.42 SuperLink and SuperNode (what the probes ask).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from syncer.models.flower import fleet_skew, flower_interface, parse_version
from tests.conftest import wait_until

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))
import flower_releases  # noqa: E402

PAIRS = [  # (SuperLink, SuperNode)
    ("1.26.0", "1.42.0"),
    ("1.42.0", "1.26.0"),
    ("1.39.0", "1.40.0"),
    ("1.40.0", "1.42.0"),
    ("1.26.0", "1.39.0"),
]
SUPERLINK = ("import sys\ntry:\n    from flwr.superlink.cli import flower_superlink as main\nexcept ImportError:\n"
             "    from flwr.server.app import run_superlink as main\nmain()")
SUPERNODE = "from flwr.supernode.cli import flower_supernode as main\nmain()"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _wait_listening(proc: subprocess.Popen[bytes], port: int, what: str, log: Path | None = None) -> None:
    """Until `proc` (`what`) accepts connections on `port`; fails at once when it exited."""
    def check() -> bool:
        if proc.poll() is not None:
            tail = log.read_text(errors="replace")[-3000:] if log is not None else ""
            raise AssertionError(f"{what} exited ({proc.returncode}) before listening on {port}\n{tail}")
        return _listening(port)

    wait_until(f"{what} listening on 127.0.0.1:{port}", check, timeout=90, interval=0.2, log=log)


def _run(superlink: str, supernode: str, tmp: Path) -> bool:
    """Whether a SuperNode of `supernode` gets activated by a SuperLink of `superlink`."""
    link = flower_interface(parse_version(superlink))
    node = flower_interface(parse_version(supernode))
    fleet, control, http, runtime, node_api = (_free_port() for _ in range(5))
    home = tmp / f"{superlink}-{supernode}"
    home.mkdir()
    py = str(flower_releases.deps_python())

    def env(version: str) -> dict[str, str]:
        return {**os.environ, "PYTHONPATH": str(flower_releases.release_dir(version)), "FLWR_HOME": str(home)}

    link_args = ["--insecure", "--isolation", "process", f"--fleet-api-address=127.0.0.1:{fleet}",
                 f"--control-api-address=127.0.0.1:{control}"]
    link_args += ["--host=127.0.0.1", f"--port={http}"] if link.http_runtime else \
        [f"--serverappio-api-address=127.0.0.1:{runtime}"]
    dial = http if link.fleet_transport == "http" else fleet
    node_args = ["--insecure", "--isolation", "process", f"--superlink=127.0.0.1:{dial}", "--max-retries=3",
                 "--max-wait-time=20"]
    node_args += ["--host=127.0.0.1", f"--port={node_api}"] if node.http_runtime else \
        [f"--clientappio-api-address=127.0.0.1:{node_api}"]
    link_log = home / "superlink.log"
    with link_log.open("w") as out:
        server = subprocess.Popen([py, "-c", SUPERLINK, *link_args], env=env(superlink), stdout=out,
                                  stderr=subprocess.STDOUT)
    client: subprocess.Popen[bytes] | None = None
    try:
        _wait_listening(server, dial, f"SuperLink {superlink}", link_log)
        with (home / "supernode.log").open("w") as out:
            client = subprocess.Popen([py, "-c", SUPERNODE, *node_args], env=env(supernode), stdout=out,
                                      stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if "Activated node" in link_log.read_text():
                return True
            if client.poll() is not None:  # gave up
                return "Activated node" in link_log.read_text()
            time.sleep(0.2)
        raise AssertionError(f"{superlink} <- {supernode}: neither activated nor gave up in 90 s")
    finally:
        for proc in (client, server):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


def test_supernodes_join_superlinks_of_their_fleet_transport_era_only(tmp_path: Path) -> None:
    todo = flower_releases.missing()
    if todo:
        message = f"Flower releases not cached ({', '.join(todo[:4])}): run python3 tools/flower_releases.py fetch"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    with ThreadPoolExecutor(max_workers=2) as pool:
        joined = list(pool.map(lambda pair: _run(pair[0], pair[1], tmp_path), PAIRS))
    observed = dict(zip(PAIRS, joined, strict=True))
    predicted = {(sl, sn): not fleet_skew(flower_interface(parse_version(sn)), flower_interface(parse_version(sl)))
                 for sl, sn in PAIRS}
    assert observed == predicted
    assert observed == {("1.26.0", "1.42.0"): False, ("1.42.0", "1.26.0"): False, ("1.39.0", "1.40.0"): False,
                        ("1.40.0", "1.42.0"): True, ("1.26.0", "1.39.0"): True}


def test_health_lives_on_the_api_port_of_a_1_42_superlink_and_supernode(tmp_path: Path) -> None:
    """What the rendered probes ask (GET /health on the API port, models/flower.py) is what a real
    Flower 1.42 answers: 200 from the HTTP server that serves the APIs, and nothing once it is gone."""
    import urllib.error
    import urllib.request

    if flower_releases.missing():
        if os.environ.get("CI") == "true":
            pytest.fail("Flower releases not cached: run python3 tools/flower_releases.py fetch")
        pytest.skip("Flower releases not cached: run python3 tools/flower_releases.py fetch")
    py = str(flower_releases.deps_python())
    env = {**os.environ, "PYTHONPATH": str(flower_releases.release_dir("1.42.0")), "FLWR_HOME": str(tmp_path)}
    http, node_port = _free_port(), _free_port()
    procs = [subprocess.Popen([py, "-c", SUPERLINK, "--insecure", "--isolation=process", "--host=0.0.0.0",
                               f"--port={http}"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    try:
        _wait_listening(procs[0], http, "SuperLink 1.42.0")
        procs.append(subprocess.Popen([py, "-c", SUPERNODE, "--insecure", "--isolation=process",
                                       f"--superlink=127.0.0.1:{http}", "--host=0.0.0.0", f"--port={node_port}"],
                                      env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        _wait_listening(procs[1], node_port, "SuperNode 1.42.0")
        for port in (http, node_port):
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as response:
                assert response.status == 200
    finally:
        for proc in reversed(procs):
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    with pytest.raises(urllib.error.URLError):  # the API is gone: so is its health
        urllib.request.urlopen(f"http://127.0.0.1:{http}/health", timeout=2)
