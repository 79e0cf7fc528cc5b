"""Flower-level health against real SuperLinks and SuperNodes of both Control API transports
(issue 27, item 1): Flower 1.26 (gRPC Control) and 1.42 (Control over HTTPS), each with TLS and
--enable-supernode-auth on 127.0.0.1, asked through the agent's own probe (agent.flower_probe,
the CA read from a Secret as in the cluster). Two SuperNode releases' keys are registered: both
come online and are matched to their release by key; one is killed and turns offline (Flower
marks it so once its heartbeat lapses, about 50 s); a Flower app that fails on purpose shows as a
failed run with its message, and as a RunFailed Event once."""

from __future__ import annotations

import base64
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from syncer.agent.flower_probe import FlowerProbe
from syncer.agent.flower_watch import FlowerWatch
from syncer.cluster.events import Event
from syncer.identity import Unit
from syncer.models.nodeauth import parse_key
from syncer.observe.flower_health import FlowerHealth
from syncer.observe.status import PoolStatus, UnitStatus
from syncer.plan import ExpectedPool, FlowerTarget
from tests.conftest import wait_until
from tests.integration.superlinks import INSTALL_SECONDS, SuperLink, stop

APP = Path(__file__).resolve().parent.parent / "fixtures" / "failing-app"
FED = Unit("federation", "flower", "fed")
SITES = ("site-a", "site-b")


@pytest.fixture(params=["1.26.0", "1.42.0"])
def superlink(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SuperLink]:
    link = SuperLink(tmp_path, request.param)
    if request.param in INSTALL_SECONDS:
        print(f"\ncold set-up of flwr=={request.param}: {INSTALL_SECONDS[request.param]:.0f} s")
    yield link
    stop(link.proc)


def keypair(tmp_path: Path, name: str) -> tuple[Path, str]:
    """An OpenSSH ECDSA key pair, as ssh-keygen writes it: (private key file, public key line)."""
    path = tmp_path / name
    subprocess.run(["ssh-keygen", "-q", "-t", "ecdsa", "-N", "", "-C", f"{name}@site", "-f", str(path)], check=True)
    return path, (tmp_path / f"{name}.pub").read_text().strip()


class CaSecret:
    """The one read the probe makes of the cluster: the federation's CA Secret."""

    def __init__(self, ca: bytes) -> None:
        self.ca = ca

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any]:
        assert (kind, namespace, name) == ("Secret", "flower", "fed-superlink-ca")
        return {"data": {"ca.crt": base64.b64encode(self.ca).decode()}}


def flwr_run(link: SuperLink, app: Path, home: Path) -> str:
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(f'[superlink]\ndefault = "t"\n\n[superlink.t]\naddress = "{link.address}"\n'
                                      f'root-certificates = "{link.tmp / "ca.crt"}"\n')
    work = home / "app"
    shutil.copytree(app, work)
    proc = subprocess.run([str(link.bin / "flwr"), "run", str(work), "t"], capture_output=True, text=True,
                          timeout=180, env={**link.env, "FLWR_HOME": str(home)}, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_supernodes_come_and_go_and_a_failed_run_shows_its_message(superlink: SuperLink, tmp_path: Path) -> None:
    keys = {site: keypair(tmp_path, site) for site in SITES}
    pems = {}
    for site, (_, public) in keys.items():
        key, _ = parse_key(public)
        assert key is not None
        pems[site] = key.pem
    target = FlowerTarget(superlink.address, "http" if superlink.http else "grpc", "fed-superlink-ca", tuple(
        ExpectedPool(f"supernode/flower/{site}", "supernode", 1, frozenset({pems[site].strip()})) for site in SITES),
        node_auth=True)
    events: list[Event] = []
    probe = FlowerProbe(CaSecret(superlink.ca), interval=0.5)  # type: ignore[arg-type]
    watch = FlowerWatch(probe, lambda unit, event: events.append(event), time.monotonic)
    pods_ready = UnitStatus(FED.id, pools=[PoolStatus("superlink", "StatefulSet", "fed-superlink", 1, 1,
                                                      healthy=True)])

    def health() -> FlowerHealth:
        """One status round, as the agent's runner makes it: the round, then the checks it chose start."""
        answer = watch.round({FED: target}, [pods_ready])[FED]
        watch.finish_round(own=0.0, flower=0.0)
        return answer

    def pools() -> dict[str, tuple[int, int, int]]:
        h = health()
        return {p.unit.rsplit("/", 1)[1]: (p.online, p.offline, p.registered) for p in h.pools} if h.reachable \
            else {}

    nodes: dict[str, subprocess.Popen[bytes]] = {}
    try:
        from syncer.cluster.control_transports import connect

        api = connect(superlink.address, target.transport, superlink.ca)
        try:
            for site in SITES:
                api.register(pems[site])
        finally:
            api.close()
        wait_until("both registered, none connected", lambda: pools() == dict.fromkeys(SITES, (0, 0, 1)), timeout=30)
        started = time.monotonic()
        for site in SITES:
            nodes[site] = superlink.supernode(keys[site][0], tmp_path / f"{site}.log")
        wait_until("both online", lambda: pools() == dict.fromkeys(SITES, (1, 0, 0)), timeout=60)
        print(f"\n{superlink.version}: both SuperNodes online after {time.monotonic() - started:.1f} s")
        h = health()
        assert h.connected == "2/2" and h.unmatched == 0
        assert all(p.matched_by == "publicKey" for p in h.pools)

        # a run that fails on purpose: failed, with the SuperLink's message, and one Event
        flwr_run(superlink, APP, tmp_path / "flwr")
        failed = wait_until("the run failed", lambda: health().last_failure, timeout=150)
        print(f"{superlink.version}: failure message {failed.details!r}")
        assert health().runs.get("failed") == 1 and failed.details
        if superlink.http:  # 1.42 reports the ServerApp's exception; 1.26 only that the run's heartbeat stopped
            assert "FAILING-APP fails on purpose" in failed.details
        assert [e.reason for e in events if e.reason == "RunFailed"] == ["RunFailed"]
        health()
        assert [e.reason for e in events if e.reason == "RunFailed"] == ["RunFailed"]  # once

        # a SuperNode killed (no goodbye): offline once its heartbeat lapses
        os.killpg(nodes["site-b"].pid, signal.SIGKILL)
        nodes["site-b"].wait()
        killed = time.monotonic()
        wait_until("site-b offline", lambda: pools() == {"site-a": (1, 0, 0), "site-b": (0, 1, 0)}, timeout=150,
                   interval=1.0)
        print(f"{superlink.version}: a killed SuperNode offline after {time.monotonic() - killed:.1f} s")
        assert health().connected == "1/2"
        assert [e.reason for e in events if e.reason == "SuperNodesLost"] == ["SuperNodesLost"]
        assert "supernode/flower/site-b: 0/1 SuperNodes connected" in next(
            e.note for e in events if e.reason == "SuperNodesLost")
    finally:
        for proc in nodes.values():
            stop(proc)
        probe.close()
