"""Leader election on a `coordination.k8s.io/v1` Lease, with the semantics of client-go's
leaderelection package.

- A candidate takes the Lease when it is free (no holder) or expired, by updating it with the
  `metadata.resourceVersion` it read (or creating it): of two candidates at once, one write wins
  and the other gets 409 Conflict (or AlreadyExists) and stays a follower.
- The leader renews every `renew_period`. When renewals keep failing for `renew_deadline`
  (`lease_duration - safety_margin`, by default 2/3 of it) it stops leading
  (`on_stopped_leading`) and the caller must stop writing, before any follower can consider the
  Lease expired. The elector's `WriteFence` (syncer.cluster.fence) closes at that deadline even if
  the election thread is stuck or the process paused: every write checks it.
- Expiry: a Lease is expired when its record (holder, renewTime, ...) has not changed for its own
  `leaseDurationSeconds`. That is timed on the follower's monotonic clock from when it saw the
  record change, so skewed wall clocks cannot make a live leader look dead; the Lease's
  `renewTime` only places the change more precisely within the last poll interval (never more
  than `retry_period` earlier than it was seen), and at first sight a `renewTime` older than two
  lease durations (by the wall clock, so up to one duration of skew is tolerated) counts as
  expired at once. A follower takes over a dead leader's Lease within
  `lease_duration + retry_period` of its last renewal (17 s with the defaults).
- `release()` (on SIGTERM) stops leading and clears `holderIdentity`, so a follower takes over at
  its next try (within `retry_period`).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import structlog

from syncer.cluster.client import ApiError, ClusterUnreachable, Kube, path_for
from syncer.cluster.fence import WriteFence
from syncer.identity import LABEL_MANAGED_BY, MANAGED_BY

log = structlog.get_logger("syncer.lease")


class _DeadlinePassed(Exception):
    """No time left to renew before the renew deadline."""

API_VERSION = "coordination.k8s.io/v1"
# A Lease first seen with a renewTime this many lease durations old is expired at once.
STALE_AT_FIRST_SIGHT = 2.0


@dataclass(frozen=True)
class Record:
    """The Lease's spec fields that matter; a change of any of them is a sign of life."""

    holder: str
    duration: int  # leaseDurationSeconds
    renew_time: str
    acquire_time: str
    transitions: int

    @classmethod
    def of(cls, lease: dict[str, Any]) -> Record:
        spec = lease.get("spec") or {}
        return cls(str(spec.get("holderIdentity") or ""), _int(spec.get("leaseDurationSeconds")),
                   str(spec.get("renewTime") or ""), str(spec.get("acquireTime") or ""),
                   _int(spec.get("leaseTransitions")))


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def micro_time(at: float) -> str:
    """A Kubernetes MicroTime (RFC 3339 with microseconds, UTC)."""
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(value: str) -> float | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


class LeaderElector:
    """Runs the election for `identity` on the Lease `namespace/name` until `run`'s stop event.

    The callbacks run on the election thread: `on_started_leading` should start the leader's work
    and return; `on_stopped_leading` must make the caller stop writing before it returns.
    """

    def __init__(self, kube: Kube, namespace: str, name: str, identity: str, *, lease_duration: float = 15.0,
                 renew_period: float = 5.0, retry_period: float = 2.0, safety_margin: float | None = None,
                 on_started_leading: Callable[[], None], on_stopped_leading: Callable[[], None],
                 fence: WriteFence | None = None,
                 clock: Callable[[], float] = time.monotonic, wall_clock: Callable[[], float] = time.time) -> None:
        if not identity:
            raise ValueError("leader election needs a non-empty identity")
        if min(lease_duration, renew_period, retry_period) <= 0:
            raise ValueError("lease_duration, renew_period and retry_period must be positive")
        margin = lease_duration / 3 if safety_margin is None else safety_margin
        self.renew_deadline = lease_duration - margin
        # A follower may place a renewal up to retry_period early (see the module docstring); the
        # leader must have stopped by then.
        if margin <= retry_period:
            raise ValueError(f"the safety margin ({margin:g}s; default lease_duration / 3) must be more than "
                             f"retry_period ({retry_period:g}s)")
        if renew_period >= self.renew_deadline:
            raise ValueError(f"renew_period ({renew_period:g}s) must be less than lease_duration - safety margin "
                             f"({self.renew_deadline:g}s)")
        self.kube = kube
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_period = renew_period
        self.retry_period = retry_period
        self.on_started_leading = on_started_leading
        self.on_stopped_leading = on_stopped_leading
        # what every write of the caller checks: open until renewed_at + renew_deadline
        self.fence = fence if fence is not None else WriteFence(clock=clock)
        self.fence.valid_for = self.renew_deadline
        self._clock = clock
        self._wall = wall_clock
        self._lock = threading.RLock()  # one election step (or release) at a time
        self._leading = False
        self._renewed_at = 0.0  # monotonic time our last successful write was sent
        self._lease: dict[str, Any] | None = None  # the Lease as we last read or wrote it
        self._observed: Record | None = None
        self._observed_at = 0.0  # monotonic time the observed record changed (best estimate)
        self._polled_at: float | None = None  # monotonic time of the previous read
        self.reads = 0  # Lease reads so far: what a test waits on instead of sleeping
        self._released = False
        self._failing = False  # the last request failed (log the first failure of a streak loudly)
        self.problem = ""  # why this candidate can never lead as things are (e.g. no such namespace); "" if none

    # -- public ----------------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Take part in the election until `stop` is set (or `release()`); stops leading on the way out."""
        log.info("leader election started", lease=f"{self.namespace}/{self.name}", identity=self.identity)
        try:
            while not stop.is_set() and not self._released:
                with self._lock:
                    if self._released:
                        break
                    delay = self._lead_step() if self._leading else self._follow_step()
                stop.wait(delay)
        finally:
            with self._lock:
                if self._leading:
                    self._stop_leading("election stopped")

    def release(self) -> bool:
        """Stop leading and give the Lease up (holderIdentity ""), so another candidate takes it at
        once. No more attempts to lead afterwards. True if the Lease was ours and is now free."""
        with self._lock:
            self._released = True
            if self._leading:
                self._stop_leading("released")
            try:
                lease = self._read(timeout=5.0)
                if lease is None or Record.of(lease).holder != self.identity:
                    return False
                now = micro_time(self._wall())
                lease.setdefault("spec", {}).update({"holderIdentity": "", "leaseDurationSeconds": 1, "renewTime": now,
                                      "acquireTime": now})
                self._write(lease, timeout=5.0)
            except (ApiError, ClusterUnreachable) as exc:
                log.warning("could not release the leader lease; it expires by itself", error=str(exc))
                return False
            log.info("leader lease released", lease=f"{self.namespace}/{self.name}")
            return True

    # -- steps (under the lock); each returns the seconds to wait before the next ----------------

    def _follow_step(self) -> float:
        try:
            self._try_acquire(timeout=max(1.0, self.renew_deadline))
            self._failing = False
        except (ApiError, ClusterUnreachable) as exc:
            if not (isinstance(exc, ApiError) and exc.conflict):  # a conflict is a lost race, no error
                self._note_error("leader election attempt failed", exc)
        if self._leading:
            return max(0.0, self._renewed_at + self.renew_period - self._clock())
        return self.retry_period

    def _lead_step(self) -> float:
        left = self._renewed_at + self.renew_deadline - self._clock()
        if left <= 0:
            self._stop_leading("could not renew the lease in time")
            return self.retry_period
        try:
            renewed = self._renew(deadline=self._renewed_at + self.renew_deadline)
            self._failing = False
        except (ApiError, ClusterUnreachable, _DeadlinePassed) as exc:
            renewed = False
            self._note_error("leader lease renewal failed", exc)
        if not self._leading:  # someone else holds the Lease
            return self.retry_period
        if renewed:
            return max(0.0, self._renewed_at + self.renew_period - self._clock())
        left = self._renewed_at + self.renew_deadline - self._clock()
        if left <= 0:
            self._stop_leading("could not renew the lease in time")
            return self.retry_period
        return min(self.retry_period, left)

    # -- the protocol ------------------------------------------------------------------------------

    def _try_acquire(self, timeout: float) -> None:
        lease = self._read(timeout)
        if lease is None:
            self._create(timeout)
            return
        now = self._clock()
        rec = self._observe(lease, now)
        if rec.holder and rec.holder != self.identity and not self._expired(now):
            return
        self._take(lease, rec, timeout)

    def _renew(self, deadline: float) -> bool:
        """Renew from the Lease we last wrote; on a conflict, read it and look again. Every request
        ends by `deadline` (monotonic), so losing the Lease is noticed in time."""
        lease = self._lease
        if lease is not None:
            try:
                self._take(lease, Record.of(lease), self._left(deadline))
                return True
            except ApiError as exc:
                if not (exc.conflict or exc.not_found):
                    raise
        lease = self._read(self._left(deadline))
        if lease is None:
            return self._create(self._left(deadline))
        now = self._clock()
        rec = self._observe(lease, now)
        if rec.holder and rec.holder != self.identity and not self._expired(now):
            self._stop_leading(f"the lease is held by {rec.holder}")
            return False
        self._take(lease, rec, self._left(deadline))
        return True

    def _left(self, deadline: float) -> float:
        left = deadline - self._clock()
        if left <= 0.01:
            raise _DeadlinePassed("the renew deadline passed")
        return left

    def _take(self, lease: dict[str, Any], rec: Record, timeout: float) -> None:
        """Write ourselves as holder with the read resourceVersion (409 if it changed meanwhile)."""
        now = micro_time(self._wall())
        ours = rec.holder == self.identity
        body = {**lease, "spec": {
            **(lease.get("spec") or {}),
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self._duration_seconds(),
            "renewTime": now,
            "acquireTime": rec.acquire_time if ours and rec.acquire_time else now,
            "leaseTransitions": rec.transitions if ours else rec.transitions + 1,
        }}
        sent = self._clock()
        try:
            written = self._write(body, timeout)
        except ApiError as exc:
            if exc.conflict:
                log.debug("leader election: lease changed meanwhile", lease=f"{self.namespace}/{self.name}")
            raise
        self._succeeded(written, sent)

    def _create(self, timeout: float) -> bool:
        now = micro_time(self._wall())
        body = {
            "apiVersion": API_VERSION, "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace, "labels": {LABEL_MANAGED_BY: MANAGED_BY}},
            "spec": {"holderIdentity": self.identity, "leaseDurationSeconds": self._duration_seconds(),
                     "acquireTime": now, "renewTime": now, "leaseTransitions": 0},
        }
        sent = self._clock()
        try:
            created: dict[str, Any] = self.kube.request("POST", path_for("Lease", self.namespace), body=body,
                                                        timeout=timeout)
        except ApiError as exc:
            if exc.conflict:  # AlreadyExists: another candidate created it first
                return False
            if exc.not_found and exc.details.get("kind") == "namespaces":
                self._cannot_lead(f"the namespace {self.namespace!r} of the leader-election Lease does not exist, so "
                                  "this agent can never lead and syncs nothing: create it, or set lease_namespace "
                                  "(--lease-namespace) to the agent's own namespace")
            raise
        self._succeeded(created, sent)
        return True

    def _cannot_lead(self, why: str) -> None:
        if why != self.problem:
            log.error("leader election cannot succeed", lease=f"{self.namespace}/{self.name}", error=why)
        self.problem = why

    def _succeeded(self, lease: dict[str, Any], sent: float) -> None:
        """Our write (sent at monotonic `sent`) landed: we hold the Lease, renewed no earlier than `sent`."""
        self._lease = lease
        self._observed = Record.of(lease)
        self._observed_at = sent
        self._polled_at = self._clock()  # the record was ours at least until now
        self._renewed_at = sent
        self.problem = ""
        self.fence.renewed(sent)
        if not self._leading:
            self._leading = True
            log.info("became the leader", lease=f"{self.namespace}/{self.name}", identity=self.identity)
            self._callback(self.on_started_leading)

    def _stop_leading(self, why: str) -> None:
        self._leading = False
        self._lease = None
        self.fence.lost(f"stopped leading: {why}")
        log.warning("stopped leading", lease=f"{self.namespace}/{self.name}", reason=why)
        self._callback(self.on_stopped_leading)

    def _callback(self, fn: Callable[[], None]) -> None:
        try:
            fn()
        except Exception:
            log.exception("leader election callback failed", callback=getattr(fn, "__name__", repr(fn)))

    def _note_error(self, what: str, exc: Exception) -> None:
        if self._failing:
            log.debug(what, error=str(exc))
        else:
            log.warning(what, lease=f"{self.namespace}/{self.name}", error=str(exc))
        self._failing = True

    # -- observation and expiry ------------------------------------------------------------------

    def _observe(self, lease: dict[str, Any], now: float) -> Record:
        """Note the Lease as read by `now` (monotonic, after the response): when its record changed."""
        self.reads += 1
        rec = Record.of(lease)
        if rec != self._observed:
            renewed = parse_time(rec.renew_time)
            age = max(0.0, self._wall() - renewed) if renewed is not None else 0.0
            if self._observed is None or self._polled_at is None:
                # first sight: only a clearly stale renewTime counts (tolerates skew up to a duration)
                stale = STALE_AT_FIRST_SIGHT * self._lease_seconds(rec)
                age = age if age > stale else 0.0
            else:
                # it changed after our previous read: never place it earlier than that
                age = min(age, now - self._polled_at)
            self._observed = rec
            self._observed_at = now - age
        self._polled_at = now
        if rec.holder != self.identity:
            self._lease = None
        return rec

    def _expired(self, now: float) -> bool:
        if self._observed is None:
            return True
        return now - self._observed_at > self._lease_seconds(self._observed)

    def _lease_seconds(self, rec: Record) -> float:
        return float(rec.duration) if rec.duration > 0 else self.lease_duration

    def _duration_seconds(self) -> int:
        return max(1, math.ceil(self.lease_duration))

    # -- requests ----------------------------------------------------------------------------------

    def _read(self, timeout: float) -> dict[str, Any] | None:
        try:
            lease: dict[str, Any] = self.kube.request("GET", path_for("Lease", self.namespace, self.name),
                                                      timeout=timeout)
        except ApiError as exc:
            if exc.not_found:
                return None
            raise
        if self.problem:  # there after all (another candidate made it and its namespace)
            log.info("leader election can succeed again", lease=f"{self.namespace}/{self.name}")
            self.problem = ""
        return lease

    def _write(self, lease: dict[str, Any], timeout: float) -> dict[str, Any]:
        written: dict[str, Any] = self.kube.request("PUT", path_for("Lease", self.namespace, self.name),
                                                    body=lease, timeout=timeout)
        return written
