"""Keep the SuperNode keys a SuperLink admits equal to Git: register the keys a Federation lists,
unregister the ones it no longer lists (also keys someone registered by hand with
`flwr supernode register`: drift on the SuperLink's side is corrected too).

Flower never admits a key again once it was unregistered from a SuperLink ("Public key already in
use"): such a key is reported, with the fix (a new key pair), not retried forever in silence.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from syncer.cluster.flower_control import UNREGISTERED, ControlApiError, ControlClient, RegisteredNode
from syncer.engine.changeset import UnitResult
from syncer.identity import Manifest, Unit
from syncer.plan import NodeAuth


class ControlApi(Protocol):
    def list_nodes(self) -> list[RegisteredNode]: ...
    def register(self, public_key: bytes) -> int: ...
    def unregister(self, node_id: int) -> None: ...


@dataclass
class KeyReport:
    admitted: int = 0  # keys of Git registered with the SuperLink now
    registered: list[str] = field(default_factory=list)  # labels registered by this sync
    unregistered: list[int] = field(default_factory=list)  # node ids whose keys left Git
    errors: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.registered or self.unregistered)

    def to_dict(self) -> dict[str, Any]:
        return {"admitted": self.admitted, "registered": self.registered, "unregistered": self.unregistered,
                "errors": self.errors}


def reconcile(api: ControlApi, keys: Sequence[tuple[str, bytes]]) -> KeyReport:
    """Register `keys` ((label, PEM), Git's list) and unregister every other active key."""
    report = KeyReport()
    try:
        nodes = api.list_nodes()
    except ControlApiError as exc:
        report.errors.append(f"cannot list the SuperLink's SuperNodes: {exc}")
        return report
    active = {n.public_key.strip(): n for n in nodes if n.status != UNREGISTERED}
    retired = {n.public_key.strip() for n in nodes if n.status == UNREGISTERED}
    # compared without the trailing newline, registered exactly as cryptography writes PEM: the
    # SuperLink matches a connecting SuperNode's key byte for byte against what was registered
    wanted = {pem.strip(): (label, pem) for label, pem in keys}
    for pem, (label, exact) in wanted.items():
        if pem in active:
            report.admitted += 1
        elif pem in retired:
            report.errors.append(f"key {label} was unregistered from this SuperLink before, and Flower never "
                                 "admits it again: make a new key pair for that SuperNode and list its public key")
        else:
            try:
                api.register(exact)
            except ControlApiError as exc:
                report.errors.append(f"cannot register key {label}: {exc.detail}")
                continue
            report.registered.append(label)
            report.admitted += 1
    for pem, node in sorted(active.items(), key=lambda kv: kv[1].node_id):
        if pem not in wanted:
            try:
                api.unregister(node.node_id)
            except ControlApiError as exc:
                report.errors.append(f"cannot unregister SuperNode {node.node_id}: {exc.detail}")
                continue
            report.unregistered.append(node.node_id)
    return report


def sync_node_keys(auth: NodeAuth, unit: Unit, desired: list[Manifest], res: UnitResult) -> None:
    """Register a federation's SuperNode keys with its SuperLink (and unregister the rest), over
    TLS with the CA flower-syncer copied for the SuperNodes (filled by this sync in `desired`);
    the outcome and errors go into `res`."""
    copy = next((m for m in desired if m["kind"] == "Secret" and m["metadata"]["name"] == auth.ca_secret), {})
    ca = (copy.get("data") or {}).get("ca.crt") or ""
    if not ca:
        res.errors.append(f"cannot register SuperNode keys yet: Secret {unit.namespace}/{auth.ca_secret} "
                          "has no ca.crt")
        return
    client = ControlClient(auth.address, base64.b64decode(ca))
    try:
        report = reconcile(client, auth.keys)
    finally:
        client.close()
    res.node_keys = report.to_dict()
    res.errors.extend(report.errors)
