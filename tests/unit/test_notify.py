"""Notifications (issue 13, item 2): generic (HMAC-signed), Slack- and Teams-compatible webhooks on
127.0.0.1, with severity and unit filters, retries with backoff and a dedup window."""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from syncer.identity import Unit
from syncer.observe.notify import SIGNATURE_HEADER, Notification, Notifier, Receiver, load_receivers
from tests.doubles import Sink

UNIT = Unit("federation", "flower", "fed")
OTHER = Unit("supernode", "edge", "pytorch")




@pytest.fixture
def sink() -> Iterator[Sink]:
    s = Sink()
    yield s
    s.server.shutdown()


def test_generic_payload_is_signed(sink: Sink) -> None:
    notifier = Notifier([Receiver("ops", "generic", sink.url, secret="hook-secret")])
    notifier.notify(Notification(UNIT, "error", "SyncFailed", "revision abc: 1 object(s) failed", "StatefulSet/x"))
    notifier.flush()
    (headers, body), = sink.requests
    expected = "sha256=" + hmac.new(b"hook-secret", body, hashlib.sha256).hexdigest()
    assert headers[SIGNATURE_HEADER] == expected
    got = json.loads(body)
    assert {k: got[k] for k in ("unit", "severity", "reason", "object")} == {
        "unit": "federation/flower/fed", "severity": "error", "reason": "SyncFailed", "object": "StatefulSet/x"}


def test_slack_and_teams_formats_and_filters(sink: Sink) -> None:
    receivers = [Receiver("chat", "slack", sink.url, severity="error"),
                 Receiver("teams", "msteams", sink.url, units=("federation/fed",))]
    notifier = Notifier(receivers)
    notifier.notify(Notification(UNIT, "info", "Synced", "revision abc: 2 configured"))  # teams only
    notifier.notify(Notification(OTHER, "error", "ConfigError", "values.yaml:3: bad"))  # slack only
    notifier.flush()
    bodies = sink.bodies()
    assert bodies[0]["@type"] == "MessageCard" and bodies[0]["title"] == "federation/flower/fed: Synced"
    assert bodies[1] == {"text": ":warning: *supernode/edge/pytorch: ConfigError*\nvalues.yaml:3: bad"}
    assert len(bodies) == 2


def test_retries_with_backoff_then_delivers() -> None:
    sink = Sink(codes=[500, 503])
    try:
        notifier = Notifier([Receiver("ops", "generic", sink.url)], backoff=0.01)
        notifier.notify(Notification(UNIT, "error", "SyncFailed", "x"))
        notifier.flush()
        assert len(sink.requests) == 3 and notifier.delivered == 1
        refused = Sink(codes=[400])
        try:
            n2 = Notifier([Receiver("ops", "generic", refused.url)], backoff=0.01)
            n2.notify(Notification(UNIT, "error", "SyncFailed", "y"))
            n2.flush()
            assert len(refused.requests) == 1 and n2.failed == 1  # a 4xx is not retried
        finally:
            refused.server.shutdown()
    finally:
        sink.server.shutdown()


def test_a_flapping_unit_is_reported_once_per_window(sink: Sink) -> None:
    now = [0.0]
    notifier = Notifier([Receiver("ops", "generic", sink.url)], dedup_seconds=600, clock=lambda: now[0])
    for _ in range(10):
        notifier.notify(Notification(UNIT, "error", "SyncFailed", "same failure"))
    now[0] += 601
    notifier.notify(Notification(UNIT, "error", "SyncFailed", "same failure"))
    notifier.flush()
    assert len(sink.requests) == 2


def test_receivers_from_a_file_never_leak_urls(tmp_path: Path) -> None:
    (tmp_path / "url").write_text("https://hooks.example.com/services/T000/B000/XXXX\n")
    (tmp_path / "secret").write_text("s3cret\n")
    config = tmp_path / "notify.yaml"
    config.write_text("receivers:\n  - name: ops\n    type: slack\n    urlFile: " + str(tmp_path / "url")
                      + "\n    secretFile: " + str(tmp_path / "secret") + "\n    severity: error\n    units: [fed]\n")
    (r,) = load_receivers(config)
    assert (r.type, r.severity, r.units, r.secret) == ("slack", "error", ("fed",), "s3cret")
    assert "hooks.example.com" not in repr(r) and "s3cret" not in repr(r)
    config.write_text("receivers:\n  - name: bad\n    type: pager\n    urlFile: x\n")
    with pytest.raises(ValueError, match="receiver bad needs type"):
        load_receivers(config)
    twice = "  - name: ops\n    type: generic\n    urlFile: " + str(tmp_path / "url") + "\n"
    config.write_text("receivers:\n" + twice + twice)
    with pytest.raises(ValueError, match="receiver ops: the name is used twice"):
        load_receivers(config)


def test_stop_sends_what_is_queued(sink: Sink) -> None:
    notifier = Notifier([Receiver("ops", "generic", sink.url)])
    for i in range(3):
        notifier.notify(Notification(UNIT, "error", "SyncFailed", f"failure {i}"))
    notifier.start()
    notifier.stop(timeout=10)
    assert [b["message"] for b in sink.bodies()] == ["failure 0", "failure 1", "failure 2"]
    assert notifier.delivered == 3
