"""Leader election against a real API server: one leader, failover, release, lost leases, skew.

Most tests use short timings (lease 3 s, renew 1 s, retry 0.5 s); the failover test uses the
defaults, because "a dead leader is replaced in under 20 s" is a promise about them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from syncer.cluster.client import ApiError, ClusterUnreachable, Kube, path_for
from syncer.cluster.lease import LeaderElector, micro_time
from tests.conftest import KubeCluster
from tests.conftest import wait_until as shared_wait_until

pytestmark = pytest.mark.cluster

LEASE = "flower-syncer"


@dataclass(frozen=True)
class Timing:
    lease_duration: float = 15.0
    renew_period: float = 5.0
    retry_period: float = 2.0


DEFAULT = Timing()
FAST = Timing(lease_duration=3.0, renew_period=1.0, retry_period=0.5)


class FlakyKube(Kube):
    """A real client whose requests can be cut off, like a network partition: refused at once
    ("refused") or never answered until the request's timeout ("black-hole")."""

    broken = ""

    def request_status(self, method: str, path: str, **kwargs: Any) -> tuple[Any, int]:
        if self.broken == "black-hole":
            time.sleep(kwargs.get("timeout", 30))
        if self.broken:
            raise ClusterUnreachable("test: the API server is unreachable")
        return super().request_status(method, path, **kwargs)


class Candidate:
    def __init__(self, kube: Kube, namespace: str, identity: str, *, timing: Timing = DEFAULT,
                 wall_clock: Callable[[], float] = time.time) -> None:
        self.identity = identity
        self.started: list[float] = []  # monotonic times of on_started_leading
        self.stopped: list[float] = []
        self.elector = LeaderElector(
            kube, namespace, LEASE, identity, wall_clock=wall_clock,
            on_started_leading=lambda: self.started.append(time.monotonic()),
            on_stopped_leading=lambda: self.stopped.append(time.monotonic()),
            lease_duration=timing.lease_duration, renew_period=timing.renew_period, retry_period=timing.retry_period)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.elector.run, args=(self.stop,), name=f"elector-{identity}",
                                       daemon=True)

    def start(self) -> Candidate:
        self.thread.start()
        return self

    def kill(self) -> None:
        """Stop taking part without releasing the Lease (as if the process died)."""
        self.stop.set()
        self.thread.join(10)
        assert not self.thread.is_alive()

    @property
    def leading(self) -> bool:
        """Holding the write fence, with on_started_leading called (the elector opens the fence
        just before it calls back, so a test that waited on the fence alone could find `started`
        still empty)."""
        return self.elector.fence.holds() and len(self.started) > len(self.stopped)



@pytest.fixture
def candidates() -> Iterator[list[Candidate]]:
    running: list[Candidate] = []
    yield running
    for c in running:
        c.stop.set()
    for c in running:
        c.thread.join(10)


def start(running: list[Candidate], kube: Kube, namespace: str, identity: str, **kwargs: Any) -> Candidate:
    c = Candidate(kube, namespace, identity, **kwargs).start()
    running.append(c)
    return c



def wait_until(predicate: Callable[[], bool], timeout: float) -> float:
    """Seconds it took until `predicate()` (via conftest's wait_until); fails after `timeout`."""
    begin = time.monotonic()
    shared_wait_until("the condition", predicate, timeout=timeout, interval=0.02)
    return time.monotonic() - begin


def reads_more(c: Candidate, n: int = 2) -> Callable[[], bool]:
    """True once `c` has read the Lease `n` more times than now: it has seen what is there now."""
    target = c.elector.reads + n
    return lambda: c.elector.reads >= target


def holder(kube: Kube, namespace: str) -> str:
    lease = kube.get("Lease", namespace, LEASE)
    assert lease is not None
    return str(lease["spec"].get("holderIdentity") or "")


def test_two_candidates_exactly_one_leader(kube: Kube, namespace: str, candidates: list[Candidate]) -> None:
    a = start(candidates, kube, namespace, "agent-a", timing=FAST)
    b = start(candidates, kube, namespace, "agent-b", timing=FAST)
    wait_until(lambda: a.leading or b.leading, 5)
    deadline = time.monotonic() + 2.5  # a few renewals
    while time.monotonic() < deadline:
        assert a.leading != b.leading
        time.sleep(0.05)
    leader, follower = (a, b) if a.leading else (b, a)
    assert len(leader.started) == 1 and leader.stopped == []
    assert follower.started == []
    assert holder(kube, namespace) == leader.identity
    lease = kube.get("Lease", namespace, LEASE)
    assert lease is not None
    assert lease["spec"]["leaseDurationSeconds"] == 3
    assert lease["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "flower-syncer"


def test_dead_leader_is_replaced_within_20s_with_default_timings(kube: Kube, namespace: str,
                                                                 candidates: list[Candidate]) -> None:
    a = start(candidates, kube, namespace, "agent-a")
    wait_until(lambda: a.leading, 5)
    b = start(candidates, kube, namespace, "agent-b")
    wait_until(reads_more(b, 1), 5)  # b has seen a's lease
    assert not b.leading
    lease = kube.get("Lease", namespace, LEASE)
    assert lease is not None
    a.kill()  # no release
    killed = time.monotonic()
    assert holder(kube, namespace) == "agent-a"
    took = wait_until(lambda: b.leading, 20)
    last_renew = kube.get("Lease", namespace, LEASE)
    assert last_renew is not None
    assert last_renew["spec"]["holderIdentity"] == "agent-b"
    assert last_renew["spec"]["leaseTransitions"] == 1
    assert took < 20
    # ... and not before a's lease could have expired: at least lease_duration - retry_period after
    # a's last renewal (a acquired or renewed at most renew_period before it was killed)
    assert b.started[0] - killed >= 15.0 - 2.0 - 5.0


def test_release_hands_over_within_the_retry_period(kube: Kube, namespace: str,
                                                    candidates: list[Candidate]) -> None:
    a = start(candidates, kube, namespace, "agent-a", timing=FAST)
    wait_until(lambda: a.leading, 5)
    b = start(candidates, kube, namespace, "agent-b", timing=FAST)
    wait_until(reads_more(b, 1), 5)
    assert not b.leading
    assert a.elector.release() is True
    released = time.monotonic()
    assert not a.leading and len(a.stopped) == 1
    assert a.stopped[0] <= released
    took = wait_until(lambda: b.leading, 3)
    assert took <= FAST.retry_period + 0.5
    assert holder(kube, namespace) == "agent-b"
    # a released: it never tries to lead again (release() is final), so it does not come back
    assert len(a.started) == 1 and not a.leading
    assert a.elector.release() is False  # not ours any more: left alone
    assert holder(kube, namespace) == "agent-b"


def test_leader_whose_lease_is_replaced_stops_leading(kube: Kube, namespace: str,
                                                      candidates: list[Candidate]) -> None:
    a = start(candidates, kube, namespace, "agent-a", timing=FAST)
    wait_until(lambda: a.leading, 5)
    b = start(candidates, kube, namespace, "agent-b", timing=FAST)
    # someone replaces the Lease with their own (kubectl replace), held for a minute
    while True:
        lease = kube.get("Lease", namespace, LEASE)
        assert lease is not None
        now = micro_time(time.time())
        lease["spec"] = {"holderIdentity": "intruder", "leaseDurationSeconds": 60, "acquireTime": now,
                         "renewTime": now}
        try:
            kube.request("PUT", path_for("Lease", namespace, LEASE), body=lease)
            break
        except ApiError as exc:  # a renewed it meanwhile
            assert exc.conflict
    took = wait_until(lambda: bool(a.stopped), FAST.renew_period + 1.0)
    assert not a.leading
    assert took <= FAST.renew_period + 1.0
    wait_until(reads_more(a), 5)
    wait_until(reads_more(b), 5)  # both have seen the intruder's Lease since
    assert not a.leading and not b.leading
    assert len(a.started) == 1 and b.started == []
    assert holder(kube, namespace) == "intruder"


@pytest.mark.parametrize("failure", ["refused", "black-hole"])
def test_leader_cut_off_from_the_api_stops_before_anyone_takes_over(kube_cluster: KubeCluster, kube: Kube,
                                                                    namespace: str, candidates: list[Candidate],
                                                                    failure: str) -> None:
    flaky = FlakyKube.from_kubeconfig(kube_cluster.kubeconfig)
    assert isinstance(flaky, FlakyKube)
    a = start(candidates, flaky, namespace, "agent-a", timing=FAST)
    wait_until(lambda: a.leading, 5)
    b = start(candidates, kube, namespace, "agent-b", timing=FAST)
    wait_until(reads_more(b, 1), 5)
    flaky.broken = failure
    cut = time.monotonic()
    wait_until(lambda: bool(a.stopped), 4)
    # renewals failed for renew_deadline (2 s) at most since the last good one (<= 1 s before the cut)
    assert a.stopped[0] - cut <= 2.0 + 0.3
    wait_until(lambda: b.leading, 6)
    assert b.started[0] > a.stopped[0]  # never two leaders
    # back online, a sees b's lease and stays a follower
    flaky.broken = ""
    wait_until(reads_more(a), 10)  # back online, a has read b's Lease since
    assert not a.leading and len(a.started) == 1
    assert holder(kube, namespace) == "agent-b"


def test_clock_skew_does_not_make_a_live_leader_look_dead(kube: Kube, namespace: str,
                                                          candidates: list[Candidate]) -> None:
    a = start(candidates, kube, namespace, "agent-a", timing=FAST)
    wait_until(lambda: a.leading, 5)
    # b's wall clock runs 2.5 s ahead: by its clock a's renewTime always looks almost expired
    b = start(candidates, kube, namespace, "agent-b", wall_clock=lambda: time.time() + 2.5, timing=FAST)
    c = start(candidates, kube, namespace, "agent-c", wall_clock=lambda: time.time() - 3600, timing=FAST)
    end = time.monotonic() + 4.0
    while time.monotonic() < end:
        assert a.leading and not b.leading and not c.leading
        time.sleep(0.05)
    a.kill()
    killed = time.monotonic()
    # a clock an hour behind never sees the lease expire by renewTime; it still takes over, timed
    # on its own monotonic clock (or b does)
    took = wait_until(lambda: b.leading or c.leading, 3.0 + 0.5 + 1.5)
    assert took >= 3.0 - 0.5 - 1.0  # not before a's lease ran out (a renewed <= 1 s before it died)
    assert b.leading != c.leading
    assert holder(kube, namespace) in ("agent-b", "agent-c")
    assert killed < min(b.started + c.started)


def test_abandoned_lease_is_taken_at_once_and_a_fresh_one_is_waited_for(kube: Kube, namespace: str,
                                                                        candidates: list[Candidate]) -> None:
    old = micro_time(time.time() - 3600)
    kube.create({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                 "metadata": {"name": LEASE, "namespace": namespace},
                 "spec": {"holderIdentity": "ghost", "leaseDurationSeconds": 3, "acquireTime": old,
                          "renewTime": old, "leaseTransitions": 4}})
    a = start(candidates, kube, namespace, "agent-a", timing=FAST)
    assert wait_until(lambda: a.leading, 2) < 1.0
    lease = kube.get("Lease", namespace, LEASE)
    assert lease is not None
    assert lease["spec"]["holderIdentity"] == "agent-a"
    assert lease["spec"]["leaseTransitions"] == 5
    a.kill()

    # a lease renewed just now by someone we never saw renew: wait a whole lease duration
    kube.delete("Lease", namespace, LEASE)
    now = micro_time(time.time())
    kube.create({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                 "metadata": {"name": LEASE, "namespace": namespace},
                 "spec": {"holderIdentity": "ghost", "leaseDurationSeconds": 3, "acquireTime": now,
                          "renewTime": now}})
    created = time.monotonic()
    b = start(candidates, kube, namespace, "agent-b", timing=FAST)
    wait_until(lambda: b.leading, 3.0 + 0.5 + 1.5)
    assert b.started[0] - created >= 3.0


def test_invalid_timings_are_refused(kube: Kube) -> None:
    def noop() -> None:
        return None

    with pytest.raises(ValueError, match=r"safety margin .* must be more than retry_period"):
        LeaderElector(kube, "ns", LEASE, "x", lease_duration=3, renew_period=1, retry_period=1.5,
                      on_started_leading=noop, on_stopped_leading=noop)
    with pytest.raises(ValueError, match="renew_period"):
        LeaderElector(kube, "ns", LEASE, "x", lease_duration=15, renew_period=10, retry_period=2,
                      on_started_leading=noop, on_stopped_leading=noop)
    with pytest.raises(ValueError, match="identity"):
        LeaderElector(kube, "ns", LEASE, "", on_started_leading=noop, on_stopped_leading=noop)
