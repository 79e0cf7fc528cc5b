"""Keep the SuperNode keys a SuperLink admits equal to Git: register the keys a Federation lists,
unregister the ones it registered itself and no longer lists.

Only keys this federation registered are ever unregistered: the node ids it registered are
recorded on its inventory (`OwnedKeys`), so a second federation on the same SuperLink, or a key an
operator registered by hand with `flwr supernode register`, is left alone (and counted as
`foreign`). A key that is listed but was registered by someone else is admitted, not claimed.

Flower never admits a key again once it was unregistered from a SuperLink ("Public key already in
use"): such a key is reported, with the fix (a new key pair), not retried forever in silence.

A registration whose answer never came (the call's deadline, a dropped connection) may have
registered the key all the same: its digest is recorded as `pending`, and when the SuperLink
lists that key later it is this federation's own, so dropping it from Git unregisters it.

The SuperLink is a server the tenant runs, and this runs on a sync worker: each call has
KEY_CALL_TIMEOUT seconds, all of one federation's calls KEY_DEADLINE (syncer.cluster.tenant_calls
bounds every byte), so a silent or trickling SuperLink holds a worker that long at most. And the
agent's key registrations run within a `Share` of its sync workers (`worker_share`): a quarter of
them per namespace, all but one in all. A federation whose namespace has its share registering
keys is not asked this time (`KeyOutcome.WAITING`: the sync is otherwise done, and the agent's next
status round, every 10 s, asks for its keys again), so one tenant's slow SuperLinks never hold every
worker, and other tenants' units keep syncing. A list of
SuperNodes cut at its limit (flower_control.MAX_NODES) changes nothing: keys are neither registered
nor unregistered on a partial list.
"""

from __future__ import annotations

import base64
import hashlib
import time
from collections.abc import Sequence

from syncer.cluster.control_transports import connect
from syncer.cluster.flower_control import (
    MAX_NODES,
    UNREGISTERED,
    ControlApi,
    ControlApiError,
    ControlErrorCode,
)
from syncer.cluster.tenant_calls import Share
from syncer.engine.changeset import UnitResult
from syncer.engine.inventory import OwnedKeys
from syncer.engine.keyresult import KeyOutcome, NodeKeyResult
from syncer.identity import Manifest, Unit
from syncer.plan import NodeAuth, UnitPlan

__all__ = ["ControlApi", "key_digest", "reconcile", "sync_node_keys", "sync_planned_keys", "worker_share"]

KEY_CALL_TIMEOUT = 5.0  # seconds per Control API call of key registration, all of it
KEY_DEADLINE = 20.0  # seconds all of one federation's key registration may hold its sync worker
# a register call that failed this way may have reached the SuperLink: its answer is what was lost
_UNANSWERED = frozenset({ControlErrorCode.DEADLINE, ControlErrorCode.UNAVAILABLE})


def worker_share(workers: int) -> Share:
    """Key registrations running at once on `workers` sync workers: a quarter of them per
    namespace (at least one), all but one in all (at least one)."""
    return Share(per_tenant=workers // 4, total=workers - 1)


def key_digest(pem: bytes) -> str:
    return "sha256:" + hashlib.sha256(pem.strip()).hexdigest()


def reconcile(api: ControlApi, keys: Sequence[tuple[str, bytes]], owned: OwnedKeys | None = None, *,
              unregister: bool = True) -> NodeKeyResult:
    """Register `keys` ((label, PEM), Git's list); unregister the active keys that `owned` says
    this federation registered and Git no longer lists (not while `unregister` is False: the
    SuperNodes that use them are held, engine.holds). `owned` recorded for another address
    counts for nothing."""
    here = owned is not None and owned.address == api.address
    mine = dict(owned.nodes) if owned is not None and here else {}
    pending = set(owned.pending) if owned is not None and here else set()
    errors: list[str] = []
    codes: list[ControlErrorCode] = []

    def fail(message: str, code: ControlErrorCode) -> None:
        errors.append(message)
        codes.append(code)

    try:
        nodes = api.list_nodes()
    except ControlApiError as exc:
        fail(f"cannot list the SuperLink's SuperNodes: {exc}", exc.code)
        return NodeKeyResult(KeyOutcome.FAILED, api.address, api.transport, errors=tuple(errors),
                             error_codes=tuple(codes))
    if nodes.truncated:
        fail(f"the SuperLink lists more than {MAX_NODES} SuperNodes (or an answer too large to decode whole): "
             "no key is registered or unregistered on a partial list", ControlErrorCode.TOO_LARGE)
        return NodeKeyResult(KeyOutcome.FAILED, api.address, api.transport, errors=tuple(errors),
                             error_codes=tuple(codes))
    active = {n.public_key.strip(): n for n in nodes if n.status != UNREGISTERED}
    retired = {n.public_key.strip() for n in nodes if n.status == UNREGISTERED}
    # forget what is no longer active (unregistered since, by anyone): never ours to touch again
    mine = {node_id: digest for node_id, digest in mine.items()
            if any(n.node_id == node_id and key_digest(pem) == digest for pem, n in active.items())}
    for pem, n in active.items():  # a registration cut before its answer went through after all
        digest = key_digest(pem)
        if digest in pending:
            mine[n.node_id] = digest
            pending.discard(digest)
    # compared without the trailing newline, registered exactly as cryptography writes PEM: the
    # SuperLink matches a connecting SuperNode's key byte for byte against what was registered
    wanted = {pem.strip(): (label, pem) for label, pem in keys}
    admitted, registered, unregistered, foreign = 0, [], [], 0
    for pem, (label, exact) in wanted.items():
        if pem in active:
            admitted += 1
        elif pem in retired:
            fail(f"key {label} was unregistered from this SuperLink before, and Flower never admits it again: "
                 "make a new key pair for that SuperNode and list its public key", ControlErrorCode.KEY_IN_USE)
        else:
            try:
                node_id = api.register(exact)
            except ControlApiError as exc:
                if exc.code in _UNANSWERED:
                    pending.add(key_digest(pem))
                if exc.code is ControlErrorCode.KEY_IN_USE:
                    fail(f"cannot register key {label}: the SuperLink has it already, registered by another "
                         "account or unregistered before (Flower never admits it again): make a new key pair for "
                         "that SuperNode and list its public key", exc.code)
                else:
                    fail(f"cannot register key {label}: {exc.detail}", exc.code)
                continue
            registered.append(label)
            mine[node_id] = key_digest(pem)
            pending.discard(key_digest(pem))
            admitted += 1
    for pem, node in sorted(active.items(), key=lambda kv: kv[1].node_id):
        if pem in wanted:
            continue
        if mine.get(node.node_id) != key_digest(pem):
            foreign += 1
            continue
        if not unregister:  # still ours, unregistered once the hold ends
            continue
        try:
            api.unregister(node.node_id)
        except ControlApiError as exc:
            fail(f"cannot unregister SuperNode {node.node_id}: {exc.detail}", exc.code)
            continue
        unregistered.append(node.node_id)
        del mine[node.node_id]
    # a pending key that neither Git nor the SuperLink lists any more was never registered: forgotten
    pending &= {key_digest(pem) for pem in wanted}
    outcome = KeyOutcome.FAILED if errors else KeyOutcome.CHANGED if registered or unregistered else KeyOutcome.IN_STEP
    return NodeKeyResult(outcome, api.address, api.transport, admitted, tuple(registered), tuple(unregistered),
                         foreign, tuple(errors), tuple(codes),
                         OwnedKeys(api.address, tuple(sorted(mine.items())), tuple(sorted(pending))))


def sync_node_keys(auth: NodeAuth, unit: Unit, desired: list[Manifest], res: UnitResult,
                   owned: OwnedKeys | None = None, share: Share | None = None, *, unregister: bool = True) -> None:
    """Register a federation's SuperNode keys with its SuperLink (and unregister the ones it
    registered that left Git), over TLS with the CA flower-syncer copied for the SuperNodes
    (filled by this sync in `desired`); the outcome and errors go into `res`. With a `share`, only
    when the unit's namespace has a place in it (else the outcome is WAITING, and nothing is asked)."""
    copy = next((m for m in desired if m["kind"] == "Secret" and m["metadata"]["name"] == auth.ca_secret), {})
    ca = (copy.get("data") or {}).get("ca.crt") or ""
    if not ca:
        res.errors.append(f"cannot register SuperNode keys yet: Secret {unit.namespace}/{auth.ca_secret} "
                          "has no ca.crt")
        return
    if share is not None and not share.take(unit.namespace):
        res.node_keys = NodeKeyResult(KeyOutcome.WAITING, auth.address, auth.transport)
        return
    try:
        result = _registered(auth, unit, ca, res, owned, unregister)
    finally:
        if share is not None:
            share.give_back(unit.namespace)
    if result is None:
        return
    res.node_keys = result
    res.errors.extend(result.errors)


def _registered(auth: NodeAuth, unit: Unit, ca: str, res: UnitResult, owned: OwnedKeys | None,
                unregister: bool) -> NodeKeyResult | None:
    """The keys reconciled at the Control API (None when it cannot be dialled: `res` says why)."""
    try:
        client = connect(auth.address, auth.transport, base64.b64decode(ca), timeout=KEY_CALL_TIMEOUT,
                         deadline=time.monotonic() + KEY_DEADLINE)
    except ControlApiError as exc:
        res.errors.append(f"cannot register SuperNode keys: {exc}")
        return None
    except (ValueError, OSError) as exc:  # a CA that is not PEM: ssl refuses it
        res.errors.append(f"cannot register SuperNode keys: the CA in Secret {unit.namespace}/{auth.ca_secret} "
                          f"is not usable ({type(exc).__name__})")
        return None
    try:
        return reconcile(client, auth.keys, owned, unregister=unregister)
    finally:
        client.close()


def sync_planned_keys(planned: UnitPlan, desired: list[Manifest], res: UnitResult, recorded: OwnedKeys | None,
                      dry_run: bool, share: Share | None = None) -> OwnedKeys | None:
    """The engine's step after a unit's objects are applied: register its SuperNode keys when it
    has node authentication (not in a dry run, not after a failure). Returns what to record on its
    inventory as the keys it registered (`recorded` when nothing new is known)."""
    if planned.node_auth is None or dry_run or not res.ok:
        return recorded
    # while a restart of the unit waits for runs, its SuperNodes still run with their old keys: a
    # key Git dropped is unregistered when the hold ends, not under a SuperNode in a round
    sync_node_keys(planned.node_auth, planned.unit, desired, res, recorded, share, unregister=not res.is_held())
    return res.node_keys.owned if res.node_keys is not None and res.node_keys.owned is not None else recorded
