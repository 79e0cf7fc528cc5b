"""SuperNode key registration against real SuperLinks of both Control API transports (issue 24,
item 4): Flower 1.26 (gRPC Control) and 1.42 (Control over HTTPS POST), each with TLS and
--enable-supernode-auth on 127.0.0.1. Registration, unregistration and "Public key already in
use" behave the same on both; a SuperNode of that release with a registered key is admitted and
one with an unregistered key refused; a federation unregisters only the keys it registered.
(No Kubernetes here; tests/integration/test_node_auth.py syncs a Federation end to end.)"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from syncer.cluster.control_transports import connect
from syncer.cluster.flower_control import ControlApi, ControlApiError, ControlErrorCode, Transport
from syncer.engine.keyresult import KeyOutcome
from syncer.engine.nodekeys import reconcile
from syncer.models.flower import flower_interface
from syncer.models.nodeauth import parse_key
from tests.conftest import wait_until
from tests.integration.superlinks import INSTALL_SECONDS, SuperLink, stop
from tests.nodeauth import keypair

VERSIONS = ["1.26.0", "1.42.0"]


@pytest.fixture(params=VERSIONS)
def superlink(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SuperLink]:
    link = SuperLink(tmp_path, request.param)
    if request.param in INSTALL_SECONDS:
        print(f"\ncold set-up of flwr=={request.param}: {INSTALL_SECONDS[request.param]:.0f} s")
    yield link
    stop(link.proc)


def client(link: SuperLink) -> ControlApi:
    transport: Transport = "http" if link.http else "grpc"
    return connect(link.address, transport, link.ca)


def test_the_version_switch_picks_the_transport_each_superlink_speaks(superlink: SuperLink) -> None:
    major, minor = (int(p) for p in superlink.version.split(".")[:2])
    assert flower_interface((major, minor)).control_transport == superlink.transport
    api = client(superlink)
    try:
        assert api.list_nodes() == [] and api.list_runs() == []
    finally:
        api.close()
    other: Transport = "grpc" if superlink.http else "http"
    wrong = connect(superlink.address, other, superlink.ca, timeout=5)
    try:
        with pytest.raises(ControlApiError) as caught:
            wrong.list_nodes()
    finally:
        wrong.close()
    assert caught.value.code in (ControlErrorCode.UNAVAILABLE, ControlErrorCode.TLS, ControlErrorCode.NOT_CONTROL_API,
                                 ControlErrorCode.DEADLINE)


def test_keys_are_registered_admitted_unregistered_and_never_admitted_again(superlink: SuperLink,
                                                                             tmp_path: Path) -> None:
    keys = {name: keypair(tmp_path, name) for name in ("site-a", "site-b", "stranger", "by-hand")}

    def pem(name: str) -> bytes:
        key, _ = parse_key(keys[name][1])
        assert key is not None
        return key.pem

    api = client(superlink)
    try:
        first = reconcile(api, [("a", pem("site-a")), ("b", pem("site-b"))])
        assert first.outcome is KeyOutcome.CHANGED and first.registered == ("a", "b") and first.admitted == 2
        assert first.transport == superlink.transport and first.owned is not None and len(first.owned.nodes) == 2

        # a SuperNode of this release with a registered key is admitted; one with any other key refused
        admitted = superlink.supernode(keys["site-a"][0], tmp_path / "site-a.log")
        refused = superlink.supernode(keys["stranger"][0], tmp_path / "stranger.log")
        try:
            wait_until("site-a admitted", lambda: "SuperNode ID" in (tmp_path / "site-a.log").read_text(
                errors="replace"), timeout=60, log=tmp_path / "site-a.log")
            wait_until("the stranger refused", lambda: superlink.refused(tmp_path / "stranger.log"), timeout=60,
                       log=tmp_path / "stranger.log")
        finally:
            stop(admitted)
            stop(refused)
        assert "SuperNode ID" not in (tmp_path / "stranger.log").read_text(errors="replace")

        # in step: no change; a key registered by hand is not this federation's to unregister
        hand = api.register(pem("by-hand"))
        again = reconcile(api, [("a", pem("site-a")), ("b", pem("site-b"))], first.owned)
        assert again.outcome is KeyOutcome.IN_STEP and again.foreign == 1 and again.owned == first.owned

        # "Public key already in use": a typed code, the same over both transports
        with pytest.raises(ControlApiError) as caught:
            api.register(pem("site-a"))
        assert caught.value.code is ControlErrorCode.KEY_IN_USE and caught.value.call == "RegisterNode"

        # site-b leaves Git: unregistered (it was ours); the hand-registered key stays
        gone = reconcile(api, [("a", pem("site-a"))], again.owned)
        assert gone.outcome is KeyOutcome.CHANGED and len(gone.unregistered) == 1 and gone.foreign == 1
        active = {n.node_id for n in api.list_nodes() if n.status != "unregistered"}
        assert hand in active and len(active) == 2

        # site-b back in Git: Flower never admits it again, said with the fix and a code
        back = reconcile(api, [("a", pem("site-a")), ("b", pem("site-b"))], gone.owned)
        assert back.outcome is KeyOutcome.FAILED and back.error_codes == (ControlErrorCode.KEY_IN_USE,)
        assert "never admits it again" in back.errors[0]

        with pytest.raises(ControlApiError) as missing:
            api.unregister(12345)
        assert missing.value.code is ControlErrorCode.NODE_NOT_FOUND
    finally:
        api.close()
