"""`kubectl get flowerunits`: one FlowerUnit per unit, its status written by the leader.

A FlowerUnit (`flowerunits.flower-syncer.io`, charts/flower-syncer/crds/) is the agent's own
object, not rendered from Git: it is created when a unit is first seen, its status subresource is
patched when the unit's state changes (never when nothing changed: an unchanged repository makes
no write), and it is deleted once the unit is gone from Git and pruned. The printer columns show
READY (Synced and Healthy), STATUS (the message), REVISION and AGE, as Flux's Kustomizations do,
and with `-o wide` the reasons of Synced and Healthy, as Argo CD's SYNC STATUS/HEALTH STATUS. Its
`flower-syncer.io/requestedAt` annotation is a reconcile request (see reconcile_request.py).

Writes are the agent's own (not impersonated: a tenant's ServiceAccount need not know FlowerUnits)
and go through the write fence, so only the leader makes them. They are paced (WRITE_RATE a
second, a unit whose readiness changed first), so that thousands of units changing at once (the
first start, pods starting) never crowd out the applies. Without the CRD the agent works as
before and says once what to install.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import structlog

from syncer.agent.reconcile_request import ANN_REQUESTED_AT, MAX_REQUESTED_AT, ReconcileRequests
from syncer.cluster.client import ApiError, ClusterUnreachable, Kube, path_for
from syncer.cluster.fence import Fenced
from syncer.cluster.reflector import Reflector
from syncer.identity import ANN_RELEASE_HOLD, LABEL_REPOSITORY, Unit
from syncer.shared_strings import share_strings

if TYPE_CHECKING:
    from syncer.agent.agent import Agent

log = structlog.get_logger("syncer.agent")

KIND = "FlowerUnit"
CRD_NAME = "flowerunits.flower-syncer.io"
MISSING_CRD = (f"the CustomResourceDefinition {CRD_NAME} is not installed, so `kubectl get flowerunits` and "
               f"reconcile requests by annotation are off: install it with `kubectl apply -f "
               f"charts/flower-syncer/crds/` (the Helm chart installs it)")
ROUND_INTERVAL = 5.0  # seconds between rounds when nothing asks for one (config errors, leadership)
ROUND_GAP = 1.0  # seconds at most between two rounds that were asked for (see `gap_after`)
ROUND_SHARE = 0.1  # of the agent's time, at most, in rounds: a busy agent asks for one after every unit it syncs
WRITE_RATE = 10.0  # FlowerUnit writes a second at most, in bursts of up to WRITE_BURST (see `_budget`)
WRITE_BURST = 20.0
MESSAGE_LIMIT = 512
MERGE_PATCH = "application/merge-patch+json"
MAX_RELEASE_HOLD = 64  # characters of a release-hold value kept: an RFC 3339 time is 20 to 35
SLIM_METADATA = ("name", "namespace", "uid", "resourceVersion", "labels", "annotations")


def object_name(unit: Unit) -> str:
    return f"{unit.kind}.{unit.name}"


def unit_status(state: Mapping[str, Any]) -> dict[str, Any]:
    """THE adapter from the agent's state to a FlowerUnit's status: one value of
    `Agent.unit_conditions()` in (`ready`, `revision`, the Synced and Healthy conditions), `.status`
    out, without times (the writer keeps those). Ready is both: True when Synced and Healthy;
    Unknown while it may still get there (not synced yet, rolling out, no status round yet); else
    False, with the reason and message of the condition that is not met, Synced first.
    `lastAppliedRevision` is given only while Synced (otherwise the one recorded stays)."""
    conditions = {c["type"]: dict(c) for c in state.get("conditions") or []}
    synced = conditions.get("Synced") or {"type": "Synced", "status": "False", "reason": "Pending", "message": ""}
    healthy = conditions.get("Healthy") or {"type": "Healthy", "status": "False", "reason": "Unknown", "message": ""}
    revision = str(state.get("revision") or "")
    if state.get("ready"):
        ready, reason = "True", "Healthy"
        message = f"applied revision {revision[:12]}" + (f"; {healthy['message']}" if healthy.get("message") else "")
    else:
        blocking = synced if synced["status"] != "True" else healthy
        waiting = blocking["reason"] in ("Pending", "Progressing", "Unknown")
        ready, reason, message = "Unknown" if waiting else "False", blocking["reason"], blocking.get("message", "")
    out: dict[str, Any] = {"conditions": [{"type": "Ready", "status": ready, "reason": reason,
                                           "message": _short(message)},
                                          *({**c, "message": _short(c.get("message", ""))} for c in (synced, healthy))]}
    if synced["status"] == "True":
        out["lastAppliedRevision"] = revision
    return out


def _short(message: str) -> str:
    return message if len(message) <= MESSAGE_LIMIT else message[:MESSAGE_LIMIT - 1] + "…"


def _untimed(status: Mapping[str, Any]) -> dict[str, Any]:
    conditions = [{k: v for k, v in c.items() if k != "lastTransitionTime"} for c in status.get("conditions") or []]
    out = {**status, "conditions": conditions}
    if isinstance(status.get("flower"), Mapping):
        out["flower"] = {k: v for k, v in status["flower"].items() if k != "checkedAt"}
    return out


def replacing(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """A merge patch that turns `old` into `new`: what `new` lacks is set to null (removed)."""
    out: dict[str, Any] = {key: None for key in old if key not in new}
    for key, value in new.items():
        before = old.get(key)
        out[key] = replacing(before, value) if isinstance(value, Mapping) and isinstance(before, Mapping) else value
    return out


def with_times(desired: dict[str, Any], observed: Mapping[str, Any], now: str) -> dict[str, Any]:
    """`desired` with each condition's lastTransitionTime: the observed one while the condition's
    status, reason and message stay, else `now`."""
    before = {c.get("type"): c for c in observed.get("conditions") or []}
    out = []
    for cond in desired["conditions"]:
        old = before.get(cond["type"])
        same = old is not None and all(old.get(k) == cond[k] for k in ("status", "reason", "message"))
        out.append({**cond, "lastTransitionTime": old.get("lastTransitionTime", now) if same and old else now})
    timed = {**desired, "conditions": out}
    if isinstance(desired.get("flower"), Mapping):  # checkedAt: since when the agent sees it so
        was = observed.get("flower")
        seen: Mapping[str, Any] = was if isinstance(was, Mapping) else {}
        same = {k: v for k, v in seen.items() if k != "checkedAt"} == desired["flower"]
        timed["flower"] = {**desired["flower"], "checkedAt": seen.get("checkedAt", now) if same else now}
    return timed


class FlowerUnits:
    """Watches the FlowerUnits (the reconcile trigger) and writes their status (leader only)."""

    def __init__(self, agent: Agent, kube: Kube, *, namespaces: list[str] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.agent = agent
        self.kube = kube  # the agent's own rights, fenced
        self.namespaces = namespaces
        self.clock = clock
        self.objects: dict[Unit, dict[str, Any]] = {}  # as last seen or written, slim (see `slim`)
        self.missing = ""  # why FlowerUnits cannot be used (the CRD is not installed); "" when they can
        self.requests = ReconcileRequests(agent.events.put, agent.leading.is_set, self.mine)
        self.listed = threading.Event()
        self._pending = 1 if namespaces is None else len(namespaces)
        self._wanted = threading.Event()
        self._lock = threading.Lock()
        self._warned: set[str] = set()
        self._tokens = WRITE_BURST  # the write budget (see `_budget`)
        self._refilled = clock()
        agent.on_unit_synced.append(lambda _unit: self.kick())

    def start(self, stop: threading.Event) -> None:
        spawn = self.agent.supervisor.spawn
        watched: list[str | None] = list(self.namespaces) if self.namespaces else [None]
        for ns in watched:
            spawn(f"watch-{KIND}", functools.partial(self.reflector(ns).run, stop))
        spawn("flowerunits", functools.partial(self._loop, stop))

    def reflector(self, namespace: str | None) -> Reflector:
        return Reflector(self.kube, KIND, namespace, functools.partial(self.replace, namespace), self.event,
                         transform=slim, listed=self._listed, failed=self.failed)

    def kick(self) -> None:
        self._wanted.set()

    def mine(self, unit: Unit, obj: Mapping[str, Any] | None = None) -> bool:
        """Whether the FlowerUnit of `unit` (`obj`, as seen) is this agent's to write and to take
        requests from: labelled with this repository's name, and the unit not recorded by another
        repository or by another source under that name (its inventory). Another repository's, or
        a squatter's of the same name, is never written and its requests never acted on."""
        agent = self.agent
        if not agent.loaded.is_set():
            return False
        plan = agent.installed.plan
        if obj is not None and not plan.owns((obj.get("metadata", {}).get("labels") or {}).get(LABEL_REPOSITORY, "")):
            return False
        inv = agent.cache.state.inventories.get(unit)
        return inv is None or plan.owns_record(inv.repository, inv.source, in_git=True)

    # -- the watch --------------------------------------------------------------------------------

    def _listed(self) -> None:
        with self._lock:
            self._pending -= 1
            if self._pending <= 0:
                self.listed.set()

    def failed(self, exc: Exception) -> None:
        if isinstance(exc, ApiError) and exc.not_found:
            if not self.missing:
                log.error("FlowerUnits unavailable", error=MISSING_CRD)
            self.missing = MISSING_CRD

    def replace(self, namespace: str | None, items: list[dict[str, Any]]) -> None:
        if self.missing:
            log.info("FlowerUnits available: the CustomResourceDefinition is installed", crd=CRD_NAME)
            self.missing = ""
        fresh = {u: slim(o) for o in items if (u := _unit_of(o)) is not None}
        with self._lock:
            for unit in [u for u in self.objects if namespace is None or u.namespace == namespace]:
                if unit not in fresh:
                    del self.objects[unit]
            self.objects.update(fresh)
        for unit, obj in fresh.items():
            self.requests.seen(unit, obj)
            self.agent.holds.release_seen(unit, obj)

    def event(self, kind_of_event: str, obj: dict[str, Any]) -> None:
        unit = _unit_of(obj)
        if unit is None:
            return
        with self._lock:
            if kind_of_event == "DELETED":
                self.objects.pop(unit, None)
                return
            self.objects[unit] = obj = slim(obj)
        self.agent.holds.release_seen(unit, obj)  # flower-syncer.io/release-hold (agent.holding)
        if self.requests.seen(unit, obj):
            self.kick()

    # -- the writer -------------------------------------------------------------------------------

    def _loop(self, stop: threading.Event) -> None:
        while not stop.is_set():
            self._wanted.wait(ROUND_INTERVAL)
            self._wanted.clear()
            if stop.is_set():
                return
            started = time.monotonic()
            self.agent.supervisor.guard("writing FlowerUnits", self.write_round, quiet=(Fenced, ClusterUnreachable))
            stop.wait(gap_after(time.monotonic() - started))  # what asked meanwhile is one round after the gap

    def _budget(self) -> float:
        """The writes this round may make. FlowerUnits are a view of the agent's state, written
        beside the objects the agent applies: at most WRITE_RATE a second (a controller's default
        client rate is 20) in bursts of WRITE_BURST, so that thousands of units turning Healthy
        while their pods start, or all of them created at the agent's first start, never crowd out
        the applies of a commit. What waits is written in a later round, with the state of then."""
        now = self.clock()
        self._tokens = min(WRITE_BURST, self._tokens + max(0.0, now - self._refilled) * WRITE_RATE)
        self._refilled = now
        return self._tokens

    def write_round(self) -> int:
        """Bring every FlowerUnit in line with its unit's state; returns the writes made (0 when
        nothing changed). Leader only, once the first revision is loaded and the FlowerUnits listed."""
        agent = self.agent
        if self.missing or not (agent.leading.is_set() and agent.loaded.is_set() and self.listed.is_set()
                                and agent.cache.synced.is_set()):  # inventories listed: nothing deleted early
            return 0
        writes = 0
        with self._lock:
            seen = dict(self.objects)
        for unit, obj in seen.items():  # requests made while another replica led, or before we listed
            self.requests.seen(unit, obj)
        inventories = agent.cache.state.inventories
        plan = agent.installed.plan
        rows = {u: r for u, r in agent.unit_conditions().items()
                if (self.namespaces is None or u.namespace in self.namespaces)
                and (plan.in_git(u) or u in inventories)  # in Git (loaded or not), or not pruned yet
                and self.mine(u, seen.get(u))}
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.clock()))
        budget = self._budget()
        wanted: list[tuple[int, Unit, dict[str, Any] | None, dict[str, Any]]] = []
        for unit, row in rows.items():
            observed = seen.get(unit)
            desired = unit_status(row)
            recorded = ((observed or {}).get("status") or {}).get("lastAppliedRevision")
            if "lastAppliedRevision" not in desired and recorded:
                desired["lastAppliedRevision"] = recorded
            handled = self.requests.handled(unit, observed)
            if handled:
                desired["lastHandledReconcileAt"] = handled
            flower = agent.flower.recorded(unit) if agent.flower is not None and unit.kind == "federation" else None
            if flower is not None:  # SuperNodes connected and runs, for `flower-syncer status` (agent.flower_watch)
                desired["flower"] = flower
            elif "flower" in ((observed or {}).get("status") or {}):
                desired["flower"] = None  # no longer known (e.g. --flower-health off): the merge patch removes it
            before = (observed or {}).get("status") or {}
            if observed is not None and _untimed(before) == _untimed(desired):
                continue  # nothing to write
            wanted.append((_urgency(observed, desired), unit, observed, desired))
        for _, unit, observed, desired in sorted(wanted, key=lambda w: (w[0], w[1].id)):
            if writes >= budget:
                break
            try:
                writes += self._write(unit, observed, desired, now)
            except ApiError as exc:  # one unit's FlowerUnit never holds up the others'
                if not exc.not_found:  # 404: its namespace is not there yet (made by its first sync)
                    self._warn(unit, exc)
        for unit, obj in seen.items():
            if unit not in rows and self.mine(unit, obj) and writes < budget:
                try:
                    writes += self._delete(unit, obj)
                except ApiError as exc:  # one unit's FlowerUnit never holds up the others'
                    if not exc.not_found:
                        self._warn(unit, exc)
        self._tokens -= writes
        if writes >= budget:
            self.kick()  # the rest in the next round, after the gap
        return writes

    def _write(self, unit: Unit, observed: dict[str, Any] | None, desired: dict[str, Any], now: str) -> int:
        writes = 0
        if observed is None:
            manifest = {"apiVersion": "flower-syncer.io/v1alpha1", "kind": KIND,
                        "metadata": {"name": object_name(unit), "namespace": unit.namespace,
                                     "labels": {**unit.labels(), LABEL_REPOSITORY: self.agent.repository}}}
            try:
                observed = self.kube.create(manifest)
            except ApiError as exc:
                if not exc.conflict:
                    raise
                observed = self.kube.get(KIND, unit.namespace, object_name(unit))  # made by another leader
                if observed is None:
                    return 0
            else:
                writes += 1
            if _untimed(observed.get("status") or {}) == _untimed(desired):  # another leader's, up to date
                self._remember(unit, observed)
                return writes
        before = observed.get("status") or {}  # differs from desired: write_round passes only those
        status = with_times(desired, before, now)
        body = dict(status)
        if isinstance(status.get("flower"), Mapping) and isinstance(before.get("flower"), Mapping):
            body["flower"] = replacing(before["flower"], status["flower"])  # a whole new answer, not merged in
        patched = self.kube.request("PATCH", path_for(KIND, unit.namespace, object_name(unit), "status"),
                                    body={"status": body}, content_type=MERGE_PATCH)
        self._remember(unit, patched if isinstance(patched, dict) else {**observed, "status": status})
        log.debug("FlowerUnit status written", unit=unit.id, ready=status["conditions"][0]["status"],
                  reason=status["conditions"][0]["reason"])
        return writes + 1

    def _warn(self, unit: Unit, exc: ApiError) -> None:
        if str(exc) not in self._warned:  # the same refusal (RBAC, say) is logged once
            self._warned.add(str(exc))
            log.warning("cannot write the unit's FlowerUnit", unit=unit.id, error=str(exc))

    def _delete(self, unit: Unit, obj: dict[str, Any]) -> int:
        self.kube.delete(KIND, unit.namespace, obj["metadata"]["name"], uid=obj["metadata"].get("uid"))
        with self._lock:
            self.objects.pop(unit, None)
        self.requests.forget(unit)
        log.info("FlowerUnit deleted: its unit is gone from Git and pruned", unit=unit.id)
        return 1

    def _remember(self, unit: Unit, obj: dict[str, Any]) -> None:
        obj = slim(obj)
        with self._lock:
            current = self.objects.get(unit)
            if current is None or _rv(obj) >= _rv(current):
                self.objects[unit] = obj


def gap_after(took: float) -> float:
    """Seconds to wait after a round that took `took`: rounds take at most ROUND_SHARE of the
    time (a round grows with the units, and the agent asks for one after every unit it syncs),
    and never wait more than ROUND_GAP; a short round over a few units waits little, so a
    reconcile request is recorded as soon as its sync is done."""
    return min(ROUND_GAP, max(0.0, took) * (1 / ROUND_SHARE - 1))


def _urgency(observed: Mapping[str, Any] | None, desired: Mapping[str, Any]) -> int:
    """Which FlowerUnits a round writes first when it cannot write them all: 0, what somebody
    waits for changed: a condition's status or reason (a commit synced or failed, a unit turned
    Ready), the revision applied, a reconcile request handled; 1, the FlowerUnit is not there
    yet; 2, only messages or the Flower figures changed (pods starting one by one)."""
    if observed is None:
        return 1

    def key(status: Mapping[str, Any]) -> tuple[Any, ...]:
        return (status.get("lastAppliedRevision"), status.get("lastHandledReconcileAt"),
                *((c.get("type"), c.get("status"), c.get("reason")) for c in status.get("conditions") or []))

    return 0 if key(observed.get("status") or {}) != key(desired) else 2


def slim(obj: dict[str, Any]) -> dict[str, Any]:
    """What the writer reads of a FlowerUnit: its name, namespace, uid, resourceVersion, labels,
    its reconcile request (reconcile_request.ANN_REQUESTED_AT, at most MAX_REQUESTED_AT + 1
    characters), its hold release (identity.ANN_RELEASE_HOLD, a timestamp: at most MAX_RELEASE_HOLD
    characters) and status. Its managedFields (most of a FlowerUnit's size), other annotations
    and the rest are not kept: one is held per unit for the agent's life. Idempotent; the watch
    slims what it lists (its transform), so a listing of whole FlowerUnits is never held either."""
    meta = obj.get("metadata") or {}
    kept = {k: meta[k] for k in SLIM_METADATA if k in meta}
    if "annotations" in kept:  # only the two requests, bounded: a tenant's annotations are not held whole
        annotations = kept["annotations"] or {}
        requested, release = annotations.get(ANN_REQUESTED_AT), annotations.get(ANN_RELEASE_HOLD)
        kept["annotations"] = {
            **({ANN_REQUESTED_AT: requested[:MAX_REQUESTED_AT + 1]} if isinstance(requested, str) else {}),
            **({ANN_RELEASE_HOLD: release[:MAX_RELEASE_HOLD]} if isinstance(release, str) else {})}
    return share_strings({"metadata": kept, **({"status": obj["status"]} if "status" in obj else {})})


def _rv(obj: Mapping[str, Any]) -> int:
    try:
        return int(obj.get("metadata", {}).get("resourceVersion", "0"))
    except ValueError:
        return 0


def _unit_of(obj: Mapping[str, Any]) -> Unit | None:
    meta = obj.get("metadata") or {}
    unit = Unit.from_labels(meta.get("namespace", ""), meta.get("labels"))
    # only the object of that name is the unit's: another one with copied labels is not ours
    return unit if unit is not None and meta.get("name") == object_name(unit) else None
