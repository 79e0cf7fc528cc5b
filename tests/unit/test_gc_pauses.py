"""The garbage collector's pauses: timed through gc.callbacks, served as a histogram, slow ones queued."""

from __future__ import annotations

import gc

from prometheus_client import CollectorRegistry

from syncer.observe.gc_pauses import METRIC, GCPauses
from tests.doubles import Clock


def sample(registry: CollectorRegistry, suffix: str, generation: str, le: str | None = None) -> float | None:
    labels = {"generation": generation} if le is None else {"generation": generation, "le": le}
    return registry.get_sample_value(METRIC + suffix, labels)


def test_a_pause_lands_in_its_bucket_and_a_slow_one_is_queued() -> None:
    clock = Clock(100.0)
    pauses = GCPauses(slow=0.1, clock=clock)
    registry = CollectorRegistry()
    registry.register(pauses)
    pauses._callback("start", {"generation": 2})
    clock.now += 0.3
    pauses._callback("stop", {"generation": 2, "collected": 7})
    pauses._callback("start", {"generation": 0})
    clock.now += 0.002
    pauses._callback("stop", {"generation": 0, "collected": 0})

    assert sample(registry, "_count", "2") == 1
    assert abs((sample(registry, "_sum", "2") or 0) - 0.3) < 1e-9
    assert sample(registry, "_bucket", "2", "0.25") == 0
    assert sample(registry, "_bucket", "2", "0.5") == 1
    assert sample(registry, "_bucket", "2", "+Inf") == 1
    assert sample(registry, "_bucket", "0", "0.001") == 0
    assert sample(registry, "_bucket", "0", "0.005") == 1
    assert sample(registry, "_count", "1") == 0

    slow = pauses.next_slow(timeout=0)
    assert slow is not None and slow.generation == 2 and slow.collected == 7 and abs(slow.seconds - 0.3) < 1e-9
    assert pauses.next_slow(timeout=0) is None  # the fast one was only counted


def test_a_pause_on_a_bucket_bound_counts_in_that_bucket() -> None:
    clock = Clock(100.0)
    pauses = GCPauses(clock=clock)
    registry = CollectorRegistry()
    registry.register(pauses)
    pauses._callback("start", {"generation": 1})
    clock.now += 0.5
    pauses._callback("stop", {"generation": 1})
    assert sample(registry, "_bucket", "1", "0.5") == 1  # Prometheus buckets are "less or equal"


def test_installed_it_times_real_collections_and_uninstalled_it_stops() -> None:
    registry = CollectorRegistry()
    pauses = GCPauses()
    registry.register(pauses)
    with pauses:
        assert pauses._callback in gc.callbacks
        gc.collect(2)
        gc.collect(2)
    assert pauses._callback not in gc.callbacks
    assert sample(registry, "_count", "2") == 2
    gc.collect(2)
    assert sample(registry, "_count", "2") == 2


def test_a_collection_already_running_when_installed_is_not_counted() -> None:
    pauses = GCPauses(clock=Clock(100.0))
    pauses._callback("stop", {"generation": 2})
    registry = CollectorRegistry()
    registry.register(pauses)
    assert sample(registry, "_count", "2") == 0
