"""Apply one desired object with server-side apply, deciding first whether anything changed.

The decision, cheapest first:
1. Unchanged without a request: the live object carries the fingerprint of this desired object and
   our field set is exactly the one recorded when we applied it (another manager changing one of
   our fields takes it out of that set).
2. Otherwise a server-side dry-run shows what applying would do; equal to live -> unchanged.
3. Otherwise apply. Imperative edits (`kubectl edit`, `kubectl scale`: Update operations) are
   drift and are overwritten; a field owned by another *applier* is a conflict, reported unless
   the unit allows forcing. An immutable-field change recreates the object only where allowed.
"""

from __future__ import annotations

import difflib
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from syncer.cluster.client import FIELD_MANAGER, RESOURCES, ApiError, Kube
from syncer.engine.canary import CanaryNote, CanarySpec, Step
from syncer.engine.changeset import Action, Cause, Change
from syncer.engine.disruption import Disruption, selected_workloads, target_ports, workload_change
from syncer.engine.holds import Gate
from syncer.engine.inventory import Entry
from syncer.engine.normalize import (
    managed_fields_hash,
    mask_secret_pair,
    strip_server_fields,
)
from syncer.engine.ownership import adoption_blocker
from syncer.engine.rollout import Rollouts
from syncer.engine.superlink_state import KEPT_CLAIM, kept_claim, switch
from syncer.identity import ANN_APPLIED_HASH, ANN_SOURCE, Manifest, ObjectRef
from syncer.plan import Policy
from syncer.render.common import to_yaml
from syncer.render.superlink_state import state_mode

_CONFLICT_MANAGER = re.compile(r'conflict with "([^"]+)"')
_IMMUTABLE = ("field is immutable", "updates to statefulset spec for fields other than",
              "Forbidden: may not be changed", "spec.selector: Invalid value")


class ApplyError(Exception):
    """Applying one object failed for a reason the engine acts on; `detail` says it without the
    object's name (the change entry names the object), `hint` what to do about it, `cause` why for
    the change entry. It wraps the API's answer it was made from (`error`, also `__cause__`)."""

    cause: Cause
    hint: str = ""

    def __init__(self, ref: ObjectRef, detail: str, error: ApiError | None = None) -> None:
        self.ref = ref
        self.detail = detail
        self.error = error
        super().__init__(f"{ref}: {detail}")


class ConflictError(ApplyError):
    """Fields of the object are owned by another applier."""

    cause = Cause.CONFLICT
    hint = "let flower-syncer take these fields with --force-conflicts or the unit's forceConflicts policy"

    def __init__(self, ref: ObjectRef, fields: list[tuple[str, str]], error: ApiError | None = None) -> None:
        self.fields = fields  # (field path, manager)
        listed = ", ".join(f"{f} (owned by {m!r})" for f, m in fields)
        super().__init__(ref, f"conflict: {listed}", error)


class ImmutableFieldError(ApplyError):
    """The change touches a field the API server does not let change in place."""

    cause = Cause.IMMUTABLE_FIELD
    hint = ("allow recreating it with the unit's allowRecreate policy (flower-syncer.io/allow-recreate: \"true\"), "
            "or delete it by hand")

    def __init__(self, ref: ObjectRef, error: ApiError) -> None:
        super().__init__(ref, f"immutable field changed: {error.message}", error)


# What serves the custom kinds flower-syncer renders, by API group: what to install when it is missing.
_PROVIDERS = {
    "cert-manager.io": "cert-manager (https://cert-manager.io/docs/installation/; `tools/demo --with cert-manager` "
                       "runs it in the demo)",
    "monitoring.coreos.com": "the Prometheus Operator",
    "flower-syncer.io": "the chart's CRDs (charts/flower-syncer/crds)",
}


class MissingKindError(ApplyError):
    """The API server does not serve the object's kind: its CustomResourceDefinition is missing."""

    cause = Cause.MISSING_CRD

    def __init__(self, ref: ObjectRef, api_version: str, error: ApiError) -> None:
        group = api_version.rpartition("/")[0] or "core"
        plural = RESOURCES[ref.kind].plural if ref.kind in RESOURCES else ref.kind.lower() + "s"
        self.crd = f"{plural}.{group}"
        provider = _PROVIDERS.get(group)
        self.hint = (f"install {provider} in the cluster, or remove the {ref.kind} from Git" if provider else
                     f"install the operator that provides {ref.kind} ({api_version}) in the cluster, or remove "
                     f"the {ref.kind} from Git")
        super().__init__(ref, f"the cluster has no {ref.kind} kind ({api_version}): the CustomResourceDefinition "
                              f"{self.crd} is not installed", error)


def is_immutable(exc: ApiError) -> bool:
    """The API server refused a change of a field it does not let change in place. The API has no
    reason of its own for it, so this reads the server's text: the one place that does (like
    fluxcd/pkg/ssa's IsImmutableError); everything after decides on `ImmutableFieldError`."""
    return exc.invalid and any(marker in exc.message for marker in _IMMUTABLE)


@dataclass
class Outcome:
    change: Change
    entry: Entry | None  # what the inventory should record (None: keep the old entry)
    error: ApiError | None = None  # the API's answer when the request failed
    disruption: Disruption | None = None  # what the change does (or would do) to running pods
    held: bool = False  # it would stop pods and the unit's gate held it: the live object stays as it is
    canary: CanaryNote | None = None  # a canary pool's rollout: started, waiting, passed or failed (engine.canary)

    @property
    def namespace_missing(self) -> bool:
        """The object's namespace does not exist (deleted out of band, or being deleted)."""
        err = self.error
        if err is None:
            return False
        if err.not_found:
            return err.details.get("kind") == "namespaces"
        return err.forbidden and err.reason == "Forbidden" and "because it is being terminated" in err.message


BOOKKEEPING_ANNOTATIONS = (ANN_APPLIED_HASH, ANN_SOURCE)  # flower-syncer's own; never what a user changed


def _for_people(obj: dict[str, Any] | None) -> dict[str, Any] | None:
    """`obj` without server-set fields and flower-syncer's bookkeeping annotations."""
    if not obj:
        return None
    out = strip_server_fields(obj)
    meta = out.get("metadata") or {}
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k not in BOOKKEEPING_ANNOTATIONS}
    if "annotations" in meta:
        meta = {**meta, "annotations": annotations} if annotations else {
            k: v for k, v in meta.items() if k != "annotations"}
        out = {**out, "metadata": meta}
    return out


def unified_diff(ref: ObjectRef, live: dict[str, Any] | None, desired: dict[str, Any] | None) -> str:
    before, after = mask_secret_pair(_for_people(live), _for_people(desired))
    a = to_yaml([before]).splitlines(keepends=True)[1:] if before else []
    b = to_yaml([after]).splitlines(keepends=True)[1:] if after else []
    return "".join(difflib.unified_diff(a, b, f"live/{ref}", f"desired/{ref}", n=3))


class Applier:
    def __init__(self, kube: Kube, *, dry_run: bool, with_diff: bool, gate: Gate | None = None,
                 rollouts: Rollouts | None = None, unit_objects: Sequence[Manifest] = ()) -> None:
        self.kube = kube
        self.unit_objects = unit_objects  # the unit's desired objects: the workloads its Services select
        self.rollouts = rollouts  # canary pools (engine.rollout); None: a pool rolls whole
        self.dry_run = dry_run
        self.with_diff = with_diff
        self.gate = gate  # asked before a change that stops running pods (engine.holds); None: never held

    def _held(self, ref: ObjectRef, disruption: Disruption | None, diff: str = "", drift: bool = False
              ) -> Outcome | None:
        """The outcome of a change the gate holds (its live object stays, its inventory entry too);
        None when it goes ahead."""
        if disruption is None or self.gate is None or not disruption.stops_pods():
            return None
        why = self.gate(disruption)
        if why is None:
            return None
        return Outcome(Change(ref, Action.SKIPPED, f"held: {why}", diff, drift), None, disruption=disruption,
                       held=True)

    def _held_with_pods(self, ref: ObjectRef, live: dict[str, Any], preview: dict[str, Any], diff: str,
                        drift: bool) -> Outcome | None:
        """A Service whose target ports change follows the pods it selects: a new Flower release
        moves the SuperLink's ports, and while the restart of the SuperLink is held its running pod
        still listens on the old ones, so the Service keeps them too (SuperNodes reconnecting and
        the agent reading the runs would find nothing there). Asked only when the target ports
        change: one read and one dry-run of each selected workload."""
        if ref.kind != "Service" or self.gate is None or target_ports(live) == target_ports(preview):
            return None
        for workload in selected_workloads(preview, self.unit_objects):
            wref = ObjectRef.of(workload)
            try:
                wlive = self.kube.get(wref.kind, wref.namespace, wref.name)
                if wlive is None:
                    continue
                wpreview, _ = self._server_apply(wref, workload, force=True, dry_run=True)
            except (ApiError, ApplyError):  # the workload's own apply says what is wrong with it
                continue
            held = self._held(wref, workload_change(wref, wlive, wpreview))
            if held is not None:
                why = held.change.message.removeprefix("held: ")
                return Outcome(Change(ref, Action.SKIPPED, f"held with {wref.kind} {wref.name}, whose pods still "
                                      f"listen on the old ports: {why}", diff, drift), None, held=True)
        return None

    @staticmethod
    def known_unchanged(desired: Manifest, live: dict[str, Any] | None, recorded: Entry | None) -> Outcome | None:
        """The no-request check (step 1); None when the server must be asked."""
        digest = desired["metadata"]["annotations"][ANN_APPLIED_HASH]
        if (live is not None and recorded is not None and recorded.applied == digest
                and live["metadata"].get("annotations", {}).get(ANN_APPLIED_HASH) == digest
                and managed_fields_hash(live, FIELD_MANAGER) == recorded.fields):
            return Outcome(Change(ObjectRef.of(desired), Action.UNCHANGED), recorded)
        return None

    def apply(self, desired: Manifest, live: dict[str, Any] | None, recorded: Entry | None,
              policy: Policy, force_conflicts: bool) -> Outcome:
        ref = ObjectRef.of(desired)
        digest = desired["metadata"]["annotations"][ANN_APPLIED_HASH]
        quick = self.known_unchanged(desired, live, recorded)
        if quick is not None:
            return quick
        force = force_conflicts or policy.force_conflicts
        try:
            return self._apply(ref, desired, live, digest, force, policy)
        except ApplyError as exc:
            return Outcome(Change(ref, Action.FAILED, f"{exc.detail}; {exc.hint}", cause=exc.cause), None)
        except ApiError as exc:
            hint = ("; the API server's RBAC refused it (writes are made as the ServiceAccount the admin's "
                    "policy names for this repository)" if exc.forbidden and self.kube.impersonate else "")
            return Outcome(Change(ref, Action.FAILED, f"{exc.reason}: {exc.message}{hint}",
                                  cause=Cause.of_status(exc.status)), None, exc)

    def _apply(self, ref: ObjectRef, desired: Manifest, live: dict[str, Any] | None, digest: str, force: bool,
               policy: Policy) -> Outcome:
        if live is None:
            # Not in the snapshot of labelled objects: most likely new. Apply straight away (one
            # request); HTTP 201 tells a create from an existing object without our labels.
            if force:  # never by force over a Secret, Helm's objects or the agent's own: look first
                blocker = adoption_blocker(self.kube.get(ref.kind, ref.namespace, ref.name))
                if blocker:
                    return Outcome(Change(ref, Action.FAILED, f"not adopted: {blocker}, and forceConflicts never "
                                          "takes such objects over; rename the object in Git, or remove the "
                                          "existing one by hand if flower-syncer is to own it",
                                          cause=Cause.OTHER_MANAGER), None)
            if self.dry_run:
                preview, created = self._server_apply(ref, desired, force=force, dry_run=True)
                if created:
                    diff = unified_diff(ref, None, preview) if self.with_diff else ""
                    return Outcome(Change(ref, Action.CREATED, "would create", diff), None)
                live = self.kube.get(ref.kind, ref.namespace, ref.name)
            else:
                result, created = self._server_apply(ref, desired, force=force, dry_run=False)
                diff = unified_diff(ref, None, result) if self.with_diff and created else ""
                return Outcome(Change(ref, Action.CREATED if created else Action.CONFIGURED,
                                      "" if created else "adopted an existing object", diff),
                               Entry(digest, managed_fields_hash(result, FIELD_MANAGER)))
            if live is None:
                return Outcome(Change(ref, Action.CREATED, "would create"), None)
        else:
            # the snapshot holds metadata only; compare against the whole, current object
            live = self.kube.get(ref.kind, ref.namespace, ref.name)
            if live is None:  # deleted since the snapshot
                return self._apply(ref, desired, None, digest, force, policy)
        spec = CanarySpec.of(desired) if self.rollouts is not None else None
        if spec is None or self.rollouts is None:
            return self._over(ref, desired, live, digest, force, policy)
        plan = self.rollouts.plan(ref, desired, live, spec)
        if plan.failed and plan.note is not None:  # the rest of the pool keeps the last good revision
            return Outcome(Change(ref, Action.FAILED, f"canary failed: {plan.note.message}; the rest "
                                  "stays on its revision until a new commit", cause=Cause.CANARY_FAILED), None,
                           canary=plan.note)
        started = plan.note is not None and plan.note.step is Step.STARTED
        out = self._over(ref, plan.desired, live, plan.desired["metadata"]["annotations"][ANN_APPLIED_HASH], force,
                         policy, promote=plan.promote, canary=plan.canary if started else None, rolls=plan.restarts)
        if out.held or out.change.failed():
            return out
        out.canary = plan.note
        refused: list[str] = []
        if not self.dry_run and plan.kick and out.change.action is Action.CONFIGURED:
            refused = self.rollouts.kick(ref, plan.desired, plan.kick)
        elif plan.stuck and not self.dry_run and (plan.stuck_now or out.change.action is Action.CONFIGURED):
            refused = self.rollouts.replace(ref.namespace or "", plan.stuck)
        if refused:
            out.change = Change(ref, out.change.action, "; ".join(filter(None, [
                out.change.message, "pods of the canary not replaced: " + ", ".join(refused)])),
                out.change.diff, out.change.drift)
        return out

    def _over(self, ref: ObjectRef, desired: Manifest, live: dict[str, Any], digest: str, force: bool,
              policy: Policy, *, promote: Disruption | None = None, canary: int | None = None,
              rolls: bool = False) -> Outcome:
        """Apply `desired` over the existing `live` object (the whole of it, just read)."""
        try:
            preview, took_over = self._preview(ref, desired, live, force)
        except ImmutableFieldError:
            kept = kept_claim(desired, live)
            if kept is not None:  # a SuperLink's state volume changed in Git: the existing one stays
                out = self._apply(ref, kept, live, digest, force, policy)
                if not out.change.failed():
                    c = out.change
                    out.change = Change(ref, c.action, "; ".join(filter(None, [c.message, KEPT_CLAIM])), c.diff,
                                        c.drift)
                return out
            if switch(desired, live):  # Git asks for the SuperLink's state elsewhere: recreated, once
                disruption = workload_change(ref, live, desired, recreate=True)
                held = self._held(ref, disruption)
                if held is not None:  # recreating it stops the runs in progress like any restart
                    return held
                outcome = self._recreate(ref, desired, live, digest, "its state moves (flower-syncer.io/superlink-"
                                         f"state: {state_mode(desired)}); the state it had is not carried over")
                outcome.disruption = disruption
                return outcome
            if not policy.allow_recreate:
                raise
            disruption = workload_change(ref, live, desired, recreate=True)
            held = self._held(ref, disruption)
            if held is not None:
                return held
            outcome = self._recreate(ref, desired, live, digest)
            outcome.disruption = disruption
            return outcome
        same = strip_server_fields(preview) == strip_server_fields(live)
        if same:
            return Outcome(Change(ref, Action.UNCHANGED), Entry(digest, managed_fields_hash(live, FIELD_MANAGER)))
        drift = live["metadata"].get("annotations", {}).get(ANN_APPLIED_HASH) == digest
        diff = unified_diff(ref, live, preview) if self.with_diff else ""
        disruption = workload_change(ref, live, preview, rolls=rolls) or promote
        if disruption is not None and canary is not None:
            disruption = replace(disruption, canary=canary)
        held = self._held(ref, disruption, diff, drift) or self._held_with_pods(ref, live, preview, diff, drift)
        if held is not None:
            return held
        message = ""
        if took_over:
            message = "reverted changes by " + ", ".join(sorted(took_over))
        if self.dry_run:
            return Outcome(Change(ref, Action.CONFIGURED, message or "would configure", diff, drift), None,
                           disruption=disruption)
        result, _ = self._server_apply(ref, desired, force=force or bool(took_over), dry_run=False)
        return Outcome(Change(ref, Action.CONFIGURED, message, diff, drift),
                       Entry(digest, managed_fields_hash(result, FIELD_MANAGER)), disruption=disruption)

    def _preview(self, ref: ObjectRef, desired: Manifest, live: dict[str, Any],
                 force: bool) -> tuple[dict[str, Any], set[str]]:
        """Server-side dry-run; returns the would-be object and the imperative editors we override."""
        try:
            return self._server_apply(ref, desired, force=force, dry_run=True)[0], set()
        except ConflictError as exc:
            appliers = _appliers(live)
            blocking = [(f, m) for f, m in exc.fields if m in appliers]
            if blocking:
                raise ConflictError(ref, blocking, exc.error) from exc.error
            editors = {m for _, m in exc.fields}
            return self._server_apply(ref, desired, force=True, dry_run=True)[0], editors

    def _server_apply(self, ref: ObjectRef, desired: Manifest, *, force: bool,
                      dry_run: bool) -> tuple[dict[str, Any], bool]:
        try:
            return self.kube.apply_status(desired, force=force, dry_run=dry_run)
        except ApiError as exc:
            if exc.conflict and exc.reason == "Conflict":
                raise ConflictError(ref, _conflicting_fields(exc), exc) from exc
            if is_immutable(exc):
                raise ImmutableFieldError(ref, exc) from exc
            if exc.unserved:
                raise MissingKindError(ref, str(desired.get("apiVersion", "")), exc) from exc
            raise

    def _recreate(self, ref: ObjectRef, desired: Manifest, live: dict[str, Any], digest: str,
                  why: str = "an immutable field changed") -> Outcome:
        if self.dry_run:
            return Outcome(Change(ref, Action.RECREATED, f"would delete and recreate ({why})"), None)
        self.kube.delete(ref.kind, ref.namespace, ref.name, propagation="Background",
                         uid=live["metadata"].get("uid"))
        deadline = time.monotonic() + 60
        while self.kube.get(ref.kind, ref.namespace, ref.name) is not None:
            if time.monotonic() > deadline:
                return Outcome(Change(ref, Action.FAILED, "deleted for recreation, but it is still there "
                                      "after 60 s (finalizers?)", cause=Cause.RECREATE_TIMEOUT), None)
            time.sleep(0.2)
        result, _ = self._server_apply(ref, desired, force=True, dry_run=False)
        return Outcome(Change(ref, Action.RECREATED, f"recreated: {why}"),
                       Entry(digest, managed_fields_hash(result, FIELD_MANAGER)))


def _appliers(live: dict[str, Any]) -> set[str]:
    """Managers that own fields of the object through server-side apply (not imperative updates)."""
    return {m.get("manager", "") for m in live.get("metadata", {}).get("managedFields", [])
            if m.get("operation") == "Apply" and m.get("manager") != FIELD_MANAGER}


def _conflicting_fields(exc: ApiError) -> list[tuple[str, str]]:
    out = []
    for cause in exc.details.get("causes", []) or []:
        match = _CONFLICT_MANAGER.search(cause.get("message", ""))
        out.append((cause.get("field", "?"), match.group(1) if match else "?"))
    if not out:
        out.append(("?", "?"))
    return out
