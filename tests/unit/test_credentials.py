"""The agent follows its kubeconfig (issue 9, "Also"): a rotated token or a new API server port is
picked up without a restart; a broken file in between keeps the client that works."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from syncer.cluster.client import Kube
from syncer.cluster.credentials import Credentials

KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "https://127.0.0.1:{port}", insecure-skip-tls-verify: true}}}}]
users: [{{name: u, user: {{token: {token}}}}}]
contexts: [{{name: x, context: {{cluster: c, user: u}}}}]
current-context: x
"""


def write_config(path: Path, port: int, token: str, mtime: int) -> None:
    path.write_text(KUBECONFIG.format(port=port, token=token))
    os.utime(path, ns=(mtime, mtime))  # a distinct modification time, however fast the test runs


def test_a_changed_kubeconfig_is_read_again(tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    write_config(path, 6443, "first-token", 1_000_000_000)
    kube = Kube.from_kubeconfig(str(path))
    assert kube.credentials is not None
    kube.credentials._check_every = 0.0
    assert kube.api.configuration.host == "https://127.0.0.1:6443"
    assert kube.api.configuration.api_key["BearerToken"].endswith("first-token")
    write_config(path, 7443, "second-token", 2_000_000_000)  # new port, rotated token
    assert kube.api.configuration.host == "https://127.0.0.1:7443"
    assert kube.api.configuration.api_key["BearerToken"].endswith("second-token")
    fenced = kube.fenced(object())  # type: ignore[arg-type]
    assert fenced.api is kube.api  # clones share the credentials


def test_a_broken_kubeconfig_keeps_the_last_good_client(tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    write_config(path, 6443, "t", 1_000_000_000)
    kube = Kube.from_kubeconfig(str(path))
    assert kube.credentials is not None
    kube.credentials._check_every = 0.0
    path.write_text("clusters: [")  # half-written
    assert kube.api.configuration.host == "https://127.0.0.1:6443"
    write_config(path, 8443, "t", 3_000_000_000)
    assert kube.api.configuration.host == "https://127.0.0.1:8443"


def test_files_are_looked_at_no_more_than_once_per_interval(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_text("1")
    now = [0.0]
    loads: list[str] = []

    def load() -> Any:
        loads.append(path.read_text())
        return loads[-1]

    creds = Credentials(load, [path], check_every=1.0, clock=lambda: now[0])
    os.utime(path, ns=(5, 5))
    path.write_text("2")
    assert creds.current() == "1"  # too soon to look
    now[0] = 1.5
    assert creds.current() == "2"
    assert creds.current() == "2" and loads == ["1", "2"] and creds.reloads == 1
