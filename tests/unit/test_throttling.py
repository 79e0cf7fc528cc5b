"""429 Too Many Requests (API Priority and Fairness queues full): the client waits the Retry-After
the server names, holds back every other request meanwhile, and tries again; the server did not
act on a 429, so a write is sent again too. On the in-memory API server, with a fake clock."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from syncer.cluster import client
from syncer.cluster.client import THROTTLE_MAX_WAIT, THROTTLE_RETRIES, ApiError
from syncer.cluster.fence import WriteFence
from tests.fakekube import FakeApiServer, FakeKube

SECRET: dict[str, Any] = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "flower"},
                          "data": {"k": "dg=="}}


class Clock:
    """time.monotonic and time.sleep for the client: sleeping moves the clock, and is recorded."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []
        self.moves = True  # False: sleeping leaves the clock where it is (as for a thread woken early)

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(round(seconds, 6))
        if self.moves:
            self.now += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(client.time, "monotonic", fake.monotonic)
    monkeypatch.setattr(client.time, "sleep", fake.sleep)
    return fake


def fake_kube() -> FakeKube:
    server = FakeApiServer()
    server.add_namespace("flower")
    return FakeKube(server)


def test_a_write_turned_away_is_sent_again_after_the_retry_after_the_server_names(clock: Clock) -> None:
    kube = fake_kube()
    kube.server.throttle = ["2", "0.5"]
    kube.apply(SECRET)
    assert kube.server.get("Secret", "flower", "s") is not None
    assert kube.throttled == 2
    assert clock.sleeps == [2.0, 0.5]


def test_every_request_on_the_connection_holds_back_until_the_retry_after_ends(clock: Clock) -> None:
    kube = fake_kube()
    clock.moves = False  # so the Retry-After is still ahead when the next request starts
    kube.server.throttle = ["3"]
    kube.apply(SECRET)
    assert clock.sleeps == [3.0]
    other_thread = kube.fenced(WriteFence.open())  # the engine's threads share the connection so
    assert other_thread.get("Secret", "flower", "s") is not None  # no 429 of its own, and yet it waited
    assert clock.sleeps == [3.0, 3.0]
    clock.now += 3
    kube.get("Secret", "flower", "s")
    assert clock.sleeps == [3.0, 3.0]  # the hold is over


@pytest.mark.parametrize(("header", "waited"), [(None, 1.0), ("3600", THROTTLE_MAX_WAIT), ("-5", 0.0),
                                                 ("Wed, 25 Nov 2026 07:00:00 GMT", 1.0)])
def test_a_missing_or_odd_retry_after_waits_a_bounded_time(clock: Clock, header: str | None, waited: float) -> None:
    kube = fake_kube()
    kube.server.throttle = [header]
    kube.apply(SECRET)
    assert clock.sleeps == ([waited] if waited else [])


def test_a_request_still_turned_away_after_the_retries_fails_with_the_429(clock: Clock) -> None:
    kube = fake_kube()
    kube.server.throttle = ["0.1"] * (THROTTLE_RETRIES + 1)
    with pytest.raises(ApiError) as err:
        kube.apply(SECRET)
    assert err.value.status == 429
    assert kube.server.get("Secret", "flower", "s") is None
    assert kube.throttled == THROTTLE_RETRIES
    assert len(clock.sleeps) == THROTTLE_RETRIES


def test_a_sync_reports_how_often_it_was_throttled(clock: Clock, tmp_path: Path) -> None:
    from tests.builders import sync, write

    kube = fake_kube()
    kube.server.throttle = [None, "0.5"]  # the snapshot's first LISTs (sent from several threads)
    report = sync(kube, write(tmp_path))
    assert report.ok and report.throttled == 2 and report.to_dict()["throttled"] == 2
