"""Real Flower SuperLinks and SuperNodes as processes on 127.0.0.1, with TLS and
--enable-supernode-auth, for the Control API tests.

Flower 1.26.0 comes with the dev extras (beside the test's interpreter). The newest release
(tools/flower_releases.py's NEWEST, 1.42.0) is the compatibility test's dependency set, which
`tools/flower_releases.py fetch` installs (tools/test runs it first): one install of it, not two.
Other releases are installed once, by the set-up of the test that asks for them, into a virtualenv of
their own under ~/.cache/flower-syncer/flwr/<version> (`pip install flwr==<version>`: the only registry
access); later runs reuse it. A missing prerequisite skips, and with CI=true fails."""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.conftest import IN_CI, wait_until
from tests.integration.gitservers import free_port
from tests.nodeauth import certificates

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))
import flower_releases  # noqa: E402

DEV = "1.26.0"  # the dev extras' flwr
CACHE = Path(os.environ.get("FLOWER_SYNCER_CACHE", Path.home() / ".cache" / "flower-syncer")) / "flwr"
INSTALL_SECONDS: dict[str, float] = {}  # cold installs made by this run, for the report


def missing(message: str) -> None:
    if IN_CI:
        pytest.fail(message)
    pytest.skip(message)


def flower_bin(version: str) -> Path:
    """The bin directory holding flower-superlink and flower-supernode of Flower `version`."""
    if version == DEV:
        here = Path(sys.executable).parent
        if not (here / "flower-superlink").exists():
            missing(f"flower-superlink is not installed beside {sys.executable} (pip install -e '.[dev]')")
        return here
    newest = version == flower_releases.NEWEST
    venv = flower_releases.deps_bin().parent if newest else CACHE / version
    done = venv / ".complete"  # written last: a venv without it is an interrupted install
    if done.exists():
        return venv / "bin"
    CACHE.mkdir(parents=True, exist_ok=True)
    with (CACHE / f".{version}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another test process may be installing it
        if done.exists():
            return venv / "bin"
        started = time.monotonic()
        if newest:
            try:
                flower_releases.fetch_deps()
            except subprocess.CalledProcessError as exc:
                missing(f"cannot install flwr=={version} with tools/flower_releases.py: {exc}")
            INSTALL_SECONDS[version] = time.monotonic() - started
            return venv / "bin"
        shutil.rmtree(venv, ignore_errors=True)
        try:
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True, timeout=300)
            subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--disable-pip-version-check",
                            f"flwr=={version}"], check=True, capture_output=True, timeout=1200)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
            shutil.rmtree(venv, ignore_errors=True)
            missing(f"cannot install flwr=={version} into {venv}: {exc}")
        done.write_text(f"flwr=={version}\n")
        INSTALL_SECONDS[version] = time.monotonic() - started
    return venv / "bin"


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


class SuperLink:
    """A SuperLink of Flower `version` with TLS (a CA made here) and SuperNode authentication.
    Before 1.37 its Control API is gRPC on a port of its own; from 1.37 it is HTTP on --port,
    which serves the Fleet API too from 1.40. With `database`, its state is in that SQLite file
    (--database), and `restart` starts it again on the same ports and file. `extra`: more flags."""

    def __init__(self, tmp: Path, version: str = DEV, database: Path | None = None,
                 extra: Sequence[str] = ()) -> None:
        self.version = version
        self.bin = flower_bin(version)
        self.ca, cert, key = certificates()
        for name, data in (("ca.crt", self.ca), ("tls.crt", cert), ("tls.key", key)):
            (tmp / name).write_bytes(data)
        self.tls = {"ca.crt": self.ca, "tls.crt": cert, "tls.key": key}
        self.tmp = tmp
        self.log = tmp / f"superlink-{version}.log"
        self.env = {**os.environ, "PATH": f"{self.bin}:{os.environ['PATH']}", "FLWR_HOME": str(tmp / "flwr-home")}
        tls = [f"--ssl-ca-certfile={tmp / 'ca.crt'}", f"--ssl-certfile={tmp / 'tls.crt'}",
               f"--ssl-keyfile={tmp / 'tls.key'}", "--enable-supernode-auth"]
        self.http = tuple(int(p) for p in version.split(".")[:2]) >= (1, 37)
        if self.http:
            port = free_port()
            self.fleet = self.control = port
            args, ready = ["--host=127.0.0.1", f"--port={port}"], "Uvicorn running"
        else:
            self.fleet, self.control = free_port(), free_port()
            args = [f"--fleet-api-address=127.0.0.1:{self.fleet}", f"--control-api-address=127.0.0.1:{self.control}",
                    f"--serverappio-api-address=127.0.0.1:{free_port()}"]
            ready = "Starting Fleet API"
        self.args = [*tls, *args, *([f"--database={database}"] if database is not None else []), *extra]
        self.ready = ready
        self.start()

    def start(self) -> None:
        begun = self.log.stat().st_size if self.log.exists() else 0  # this start's lines only
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen([str(self.bin / "flower-superlink"), *self.args], stdout=out,
                                         stderr=subprocess.STDOUT, env=self.env, start_new_session=True)
        wait_until(f"the SuperLink {self.version}", lambda: self.ready in self.log.read_bytes()[begun:].decode(
            errors="replace") or self.proc.poll() is not None, timeout=90, log=self.log)
        assert self.proc.poll() is None, self.log.read_text()

    def restart(self) -> None:
        stop(self.proc)
        self.start()

    @property
    def transport(self) -> str:
        return "http" if self.http else "grpc"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.control}"

    def supernode(self, key: Path, log: Path, retries: int = 1) -> subprocess.Popen[bytes]:
        own = ["--host=127.0.0.1", f"--port={free_port()}"] if self.http else \
            [f"--clientappio-api-address=127.0.0.1:{free_port()}"]
        return subprocess.Popen(
            [str(self.bin / "flower-supernode"), f"--superlink=127.0.0.1:{self.fleet}",
             f"--root-certificates={self.tmp / 'ca.crt'}", f"--auth-supernode-private-key={key}", *own,
             f"--max-retries={retries}"],
            stdout=log.open("wb"), stderr=subprocess.STDOUT, env=self.env, start_new_session=True)

    def refused(self, log: Path) -> bool:
        """Whether a SuperNode (logging to `log`) was refused for its key: before 1.40 the
        SuperNode says so, from 1.40 (Fleet over HTTP) the SuperLink does."""
        message = "No SuperNode found with the given public key"
        return message in log.read_text(errors="replace") or (
            self.http and message in self.log.read_text(errors="replace"))
