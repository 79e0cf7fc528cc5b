"""The agent's watch-fed status: the same report as `flower-syncer status` lists, kept current by
events, without a request per round. A stand-in client answers LISTs from a set of objects and
plays changes to it as watch events (with the field selector of bound pods applied)."""

from __future__ import annotations

import copy
import functools
import random
import threading
from collections.abc import Callable, Iterator
from typing import Any, cast

import pytest

from syncer.cluster.client import ApiError, Kube
from syncer.identity import MANAGED_SELECTOR
from syncer.observe.status import BOUND_PODS_FIELDS, StatusReport, Target, collect_status
from syncer.observe.status_cache import StatusCache
from tests.conftest import wait_until
from tests.unit.statuskit import (
    FED,
    GPU_SEL,
    REL,
    REL_LABELS,
    SUPERLINK_SEL,
    UNIT_LABELS,
    FakeKube,
    as_kube,
    fed_objects,
    pod,
    sts,
)

Obj = dict[str, Any]
NODES = [{"kind": "Node", "metadata": {"name": f"gpu-nvidia-{i}"},
          "status": {"allocatable": {"nvidia.com/gpu": "4", "cpu": "8"}}} for i in range(2)]


def _bound(o: Obj) -> bool:
    return bool(o["spec"].get("nodeName")) and o["status"].get("phase") not in ("Succeeded", "Failed")


class WatchedKube:
    """Objects by (kind, namespace, name); `emit` changes one as the API server does: the change
    takes the next resourceVersion and reaches every watch that sees it, including a watch opened
    later from an earlier resourceVersion (a reflector resumes each stream where the previous one
    stopped, so a change made between two streams is not lost). An object leaving a watch's
    selection is DELETED for it. Streams end after 0.05 s without an event (the reflector resumes
    them). `hold()` keeps new streams from opening until `release()`: the gap between two streams
    that a busy machine widens. Cluster-wide kinds in `forbidden` answer 403."""

    def __init__(self, objects: list[Obj], forbidden: frozenset[str] = frozenset()) -> None:
        self.objects = {self._key(o): copy.deepcopy(o) for o in objects}
        self.forbidden = forbidden
        self.history: list[tuple[int, Obj | None, Obj | None]] = []  # resourceVersion, before, after
        self.lists = 0
        self.streams = 0  # open now
        self.held = False
        self.changed = threading.Condition()

    @staticmethod
    def _key(o: Obj) -> tuple[str, str, str]:
        return o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]

    def _rv(self) -> int:
        return self.history[-1][0] if self.history else 1

    def _newer(self, rv: int) -> bool:
        return self._rv() > rv

    def _sees(self, kind: str, ns: str | None, labels: str | None, fields: str | None, o: Obj | None) -> bool:
        if o is None or o["kind"] != kind or (ns is not None and o["metadata"].get("namespace") != ns):
            return False
        if labels == MANAGED_SELECTOR and o["metadata"].get("labels", {}).get(
                "app.kubernetes.io/managed-by") != "flower-syncer":
            return False
        return fields != BOUND_PODS_FIELDS or _bound(o)

    def _refuse(self, kind: str, ns: str | None) -> None:
        if ns is None and kind in self.forbidden:
            raise ApiError(403, "Forbidden", f'{kind.lower()}s is forbidden: cannot list at the cluster scope')

    def list(self, kind: str, namespace: str | None = None, *, labels: str | None = None, fields: str | None = None,
             metadata_only: bool = False, each: Callable[[Obj], Obj] | None = None,
             page_size: int = 5000) -> tuple[list[Obj], str]:
        self._refuse(kind, namespace)
        with self.changed:
            self.lists += 1
            items = [copy.deepcopy(o) for o in self.objects.values() if self._sees(kind, namespace, labels, fields, o)]
            rv = self._rv()
        return [each(o) if each else o for o in items], str(rv)

    def watch(self, kind: str, namespace: str | None, *, labels: str | None = None, fields: str | None = None,
              resource_version: str = "", timeout_seconds: int = 300,
              metadata_only: bool = False) -> Iterator[Obj]:
        self._refuse(kind, namespace)
        with self.changed:
            self.changed.wait_for(lambda: not self.held)
            since = int(resource_version) if resource_version else self._rv()
            self.streams += 1
        try:
            while True:
                with self.changed:
                    if not self.changed.wait_for(functools.partial(self._newer, since), timeout=0.05):
                        return  # the stream ends; the reflector resumes it from the last event's version
                    news = [h for h in self.history if h[0] > since]
                for rv, before, after in news:
                    since = rv
                    saw, sees = (self._sees(kind, namespace, labels, fields, o) for o in (before, after))
                    if sees or saw:
                        obj = copy.deepcopy(after if sees else before)
                        obj["metadata"]["resourceVersion"] = str(rv)
                        yield {"type": "DELETED" if not sees else "MODIFIED" if saw else "ADDED", "object": obj}
        finally:
            with self.changed:
                self.streams -= 1

    def emit(self, obj: Obj | None, *, delete: tuple[str, str, str] | None = None) -> None:
        """Store `obj` (or delete the object `delete` names) and tell the watches."""
        with self.changed:
            key = delete or self._key(cast(Obj, obj))
            before = self.objects.pop(key, None)
            if obj is not None:
                self.objects[key] = copy.deepcopy(obj)
            self.history.append((self._rv() + 1, before, copy.deepcopy(obj)))
            self.changed.notify_all()

    def hold(self) -> None:
        with self.changed:
            self.held = True

    def release(self) -> None:
        with self.changed:
            self.held = False
            self.changed.notify_all()


@pytest.fixture
def stop() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()


def started(kube: WatchedKube, stop: threading.Event) -> StatusCache:
    cache = StatusCache(cast(Kube, kube), namespaces=None)
    cache.start(stop)
    assert cache.synced.wait(10)
    return cache


def listed_report(objects: list[Obj], targets: list[Target]) -> StatusReport:
    """What `flower-syncer status` reports from LISTs of the same objects."""
    fake = FakeKube(lambda: [o for o in objects if o["kind"] != "Node"])
    return collect_status(as_kube(fake), targets)


TARGETS = [Target(FED, None, "abc", True)]


def test_the_cache_reports_what_the_listing_status_reports() -> None:
    for objects in (fed_objects(), fed_objects(ready=1, pod_problem="CrashLoopBackOff"),
                    fed_objects(pod_problem="Unschedulable", deleting=True)):
        stop = threading.Event()
        try:
            report = started(WatchedKube([*objects, *NODES]), stop).report(TARGETS)
        finally:
            stop.set()
        assert report.to_dict() == listed_report(objects, TARGETS).to_dict()


def test_events_change_the_report_without_listing_again(stop: threading.Event) -> None:
    kube = WatchedKube([*fed_objects(), *NODES])
    cache = started(kube, stop)
    lists = kube.lists
    before = cache.report(TARGETS)
    assert before.units[0].ready and before.gpus is not None
    assert {(n.node, n.used) for n in before.gpus.nodes} == {("gpu-nvidia-0", 1), ("gpu-nvidia-1", 1)}

    # a SuperNode starts crash-looping: the pool's problem and readiness follow
    kube.emit(pod("fed-supernode-gpu-1", {**GPU_SEL, **UNIT_LABELS}, gpus=1, node="gpu-nvidia-1",
                  problem="CrashLoopBackOff"))
    gpu = wait_until("the problem reported", lambda: next(
        (p for p in cache.report(TARGETS).units[0].pools if p.problem is not None), None), timeout=10)
    assert gpu.pool == "gpu" and gpu.problem is not None and gpu.problem.reason == "CrashLoopBackOff"

    # a pod that finished holds no GPU any more (its bound-pods watch sees it leave)
    done = pod("fed-supernode-gpu-0", {**GPU_SEL, **UNIT_LABELS}, gpus=1)
    done["status"]["phase"] = "Succeeded"
    kube.emit(done)
    wait_until("the GPU freed", lambda: {(n.node, n.used) for n in cache.report(TARGETS).gpus.nodes}  # type: ignore[union-attr]
               == {("gpu-nvidia-0", 0), ("gpu-nvidia-1", 1)} or None, timeout=10)

    # the workload deleted: the pool is gone from the report
    kube.emit(None, delete=("StatefulSet", "flower", "fed-supernode-gpu"))
    wait_until("the pool gone", lambda: [p.pool for p in cache.report(TARGETS).units[0].pools] == ["superlink"]
               or None, timeout=10)

    # a node drops its GPUs
    kube.emit({**NODES[1], "status": {"allocatable": {"cpu": "8"}}})
    wait_until("the node's GPUs gone", lambda: {(n.node, n.allocatable) for n in cache.report(TARGETS).gpus.nodes}  # type: ignore[union-attr]
               == {("gpu-nvidia-0", 4), ("gpu-nvidia-1", 0)} or None, timeout=10)
    assert kube.lists == lists, "every change came from a watch; nothing was listed again"


def test_a_change_made_between_two_watch_streams_reaches_the_report(stop: threading.Event) -> None:
    """Each watch stream is resumed from the resourceVersion the previous one reached, and the
    server replays what changed since: a change made while no stream is open (a gap a busy machine
    widens) still reaches the report. (A stand-in that dropped such changes made this file's tests
    fail one run in three on a busy machine.)"""
    kube = WatchedKube([*fed_objects(), *NODES])
    cache = started(kube, stop)
    kube.hold()
    try:
        wait_until("every watch stream ended", lambda: kube.streams == 0 or None, timeout=10)
        kube.emit(pod("fed-supernode-gpu-1", {**GPU_SEL, **UNIT_LABELS}, gpus=1, node="gpu-nvidia-1",
                      problem="CrashLoopBackOff"))
        assert all(p.problem is None for p in cache.report(TARGETS).units[0].pools), "no stream was open"
    finally:
        kube.release()
    gpu = wait_until("the problem reported", lambda: next(
        (p for p in cache.report(TARGETS).units[0].pools if p.problem is not None), None), timeout=10)
    assert gpu.pool == "gpu" and gpu.problem is not None and gpu.problem.reason == "CrashLoopBackOff"


def test_without_cluster_wide_permission_the_gpu_table_says_so_and_pools_still_report(
        stop: threading.Event) -> None:
    kube = WatchedKube([*fed_objects(), *NODES], forbidden=frozenset({"Node", "Pod"}))
    cache = StatusCache(cast(Kube, kube), namespaces=["flower"])
    cache.start(stop)
    assert cache.synced.wait(10), "a forbidden cluster-wide read does not keep the cache from being synced"
    report = cache.report(TARGETS)
    assert report.units[0].ready and [p.pool for p in report.units[0].pools] == ["superlink", "gpu"]
    assert report.gpus is not None and report.gpus.nodes == []
    assert report.gpus.error.startswith("cannot read nodes and pods cluster-wide: ")


def test_only_labelled_objects_and_gpu_holders_are_kept(stop: threading.Event) -> None:
    stranger = pod("other-0", {"app": "other"}, gpus=2, node="gpu-nvidia-0")
    cpu_only = pod("other-1", {"app": "other"}, node="gpu-nvidia-0")
    kube = WatchedKube([*fed_objects(), *NODES, stranger, cpu_only])
    cache = started(kube, stop)
    sizes = cache.sizes()
    assert sizes == {"workloads": 2, "pods": 3, "nodes": 2, "gpuPods": 3}, sizes
    gpus = cache.report(TARGETS).gpus
    assert gpus is not None and {(n.node, n.used) for n in gpus.nodes} == {("gpu-nvidia-0", 3), ("gpu-nvidia-1", 1)}


def test_after_every_change_the_report_is_what_listing_reports(stop: threading.Event) -> None:
    """The cache works a unit's pools out again only when its objects or its target changed: over a
    sequence of changes (pods failing, recovering, deleted, moving to another unit; a workload's
    readiness, its deletion and return; a target's manifest replaced), each report through the cache
    still equals a report from fresh LISTs of the same objects. A cache that missed a change would
    keep reporting the old pools, and the wait below would time out."""
    rng = random.Random(20261126)
    objects = {WatchedKube._key(o): o for o in fed_objects()}
    gpu_sts = objects[("StatefulSet", "flower", "fed-supernode-gpu")]
    kube = WatchedKube([*objects.values(), *NODES])
    cache = started(kube, stop)
    pods = [k for k in objects if k[0] == "Pod"]
    manifest = copy.deepcopy(gpu_sts)
    targets = [Target(FED, None, "abc", True), Target(REL, None, "abc", True),
               Target(FED, {("StatefulSet", "fed-superlink"): None, ("StatefulSet", "fed-supernode-gpu"): manifest,
                            ("StatefulSet", "fed-supernode-cpu"): sts("fed-supernode-cpu", {}, {})}, "abc", True)]

    def change() -> None:
        nonlocal manifest
        what = rng.choice(("problem", "delete", "move", "ready", "workload", "target"))
        key = rng.choice(pods)
        name = key[2]
        labels = {**GPU_SEL, **UNIT_LABELS} if "gpu" in name else {**SUPERLINK_SEL, **UNIT_LABELS}
        if what == "problem":
            obj = pod(name, labels, problem=rng.choice(("", "CrashLoopBackOff", "ImagePullBackOff")))
        elif what == "move":  # its labels now name the release: it leaves the federation's pods
            obj = pod(name, {**labels, **REL_LABELS})
        elif what == "ready":
            obj = {**gpu_sts, "status": {**gpu_sts["status"], "readyReplicas": rng.randint(0, 2)}}
            key = WatchedKube._key(obj)
        elif what in {"workload", "delete"}:
            if what == "workload":
                key = WatchedKube._key(gpu_sts)
            if key in objects:
                del objects[key]
                kube.emit(None, delete=key)
                return
            obj = gpu_sts if what == "workload" else pod(name, labels)
        else:  # the target's manifest: an equal copy, then one that asks for another number of replicas
            manifest = {**manifest, "spec": {**manifest["spec"], "replicas": rng.choice((2, 2, 3))}}
            targets[2].workloads[("StatefulSet", "fed-supernode-gpu")] = manifest  # type: ignore[index]
            return
        objects[key] = obj
        kube.emit(obj)

    for step in range(60):
        cache.report(targets)  # what the memo holds, from before the change
        change()
        expected = listed_report(list(objects.values()), targets).to_dict()
        wait_until(f"step {step}: the cached report matches a fresh listing",
                   functools.partial(_matches, cache, targets, expected), timeout=10)


def _matches(cache: StatusCache, targets: list[Target], expected: dict[str, Any]) -> bool | None:
    return cache.report(targets).to_dict() == expected or None
