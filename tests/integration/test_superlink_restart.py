"""What `--database` keeps across a SuperLink restart, with real Flower processes of both transport
eras (1.26 gRPC, 1.42 HTTP): a TLS SuperLink with SuperNode authentication, its state in SQLite as
flower-syncer renders it (docs/superlink-state.md), a key registered through the Control API and
its SuperNode online. The SuperLink is stopped and started again on the same file: the SuperNode is
online again under the same node id without anyone registering its key again (no resync); in
memory the SuperLink knows no node at all afterwards (the key is forgotten). Prints the time from
the restart to online."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from syncer.cluster.control_transports import connect
from syncer.cluster.flower_control import ControlApiError, RegisteredNode
from syncer.models.nodeauth import parse_keys
from tests.conftest import wait_until
from tests.integration.superlinks import SuperLink, stop
from tests.nodeauth import keypair


def _nodes(link: SuperLink) -> list[RegisteredNode] | None:
    try:
        api = connect(link.address, "http" if link.http else "grpc", link.ca, timeout=5)
    except (ControlApiError, OSError):
        return None
    try:
        return api.list_nodes()
    except (ControlApiError, OSError):
        return None
    finally:
        api.close()


def _online(link: SuperLink) -> set[int]:
    return {n.node_id for n in _nodes(link) or [] if n.status == "online"}


@pytest.mark.parametrize("version", ["1.26.0", "1.42.0"])
@pytest.mark.parametrize("persistent", [True, False], ids=["database", "memory"])
def test_a_restarted_superlink_keeps_its_registered_keys_only_with_a_database(
        tmp_path: Path, version: str, persistent: bool) -> None:
    link = SuperLink(tmp_path, version, database=tmp_path / "state.db" if persistent else None)
    node = None
    try:
        key, public = keypair(tmp_path, "site")
        api = connect(link.address, "http" if link.http else "grpc", link.ca)
        try:
            node_id = api.register(parse_keys(public)[0][0].pem)
        finally:
            api.close()
        node = link.supernode(key, tmp_path / "supernode.log", retries=0)  # retries for ever
        wait_until("the SuperNode online", lambda: _online(link) == {node_id}, timeout=120, interval=0.5,
                   log=tmp_path / "supernode.log")
        started = time.monotonic()
        link.restart()
        if persistent:
            wait_until("the SuperNode online again, same node id", lambda: _online(link) == {node_id},
                       timeout=180, interval=0.5, log=link.log)
            sys.stderr.write(f"Flower {version}: SuperLink restarted on its database -> SuperNode online again "
                             f"(no new registration) in {time.monotonic() - started:.1f}s\n")
        else:  # in memory: the key is gone; its SuperNode is refused until someone registers it again
            wait_until("the SuperLink answering", lambda: _nodes(link) is not None, timeout=60, interval=0.5)
            assert _nodes(link) == []
    finally:
        if node is not None:
            stop(node)
        stop(link.proc)
