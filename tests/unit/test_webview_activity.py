"""A unit page's activity (syncer.agent.activity): the next sync's changes from a real agent's
tables against FakeKube, with every Secret value and every encrypted file's plaintext redacted
exactly as `flower-syncer diff` redacts them; its Events, escaped; computed only on request and
kept briefly; and the event streams that read only what changed (syncer.http.webview)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from syncer.agent.activity import Activity, unit_activity
from syncer.agent.agent import Agent
from syncer.agent.messages import UnitSynced
from syncer.agent.state import AgentOptions
from syncer.agent.wiring import build_agent
from syncer.cluster.client import path_for
from syncer.cluster.events import Event, EventRecorder
from syncer.engine.live import LiveState
from syncer.http.pages import activity_html, unit_page
from syncer.http.webview import Follower, Snapshots
from syncer.identity import ObjectRef, Unit
from syncer.observe.metrics import Metrics
from syncer.observe.view import Changes, EventRow, PlannedChange, UnitActivity, UnitRow, UnitView
from syncer.secrets.sops import REDACTED
from tests.builders import NS, install, repo_at
from tests.doubles import NoSource
from tests.fakekube import FakeApiServer, FakeKube

EDGE = Unit("supernode", NS, "edge")
PASSWORD = "sunshine-password-42"
API_KEY = "top-secret-api-key-42"
VALUES = f"tls:\n  enabled: false\nsupernode:\n  env:\n    - name: API_KEY\n      value: {API_KEY}\n"
SECRET = ("apiVersion: v1\nkind: Secret\nmetadata:\n  name: edge-credentials\ntype: Opaque\nstringData:\n"
          f"  password: {PASSWORD}\n")
SCRIPT = "<script>alert(1)</script>"


def synced(agent: Agent) -> None:
    for unit in list(agent.installed.plan.units):
        agent.syncs.sync(unit)
    while not agent.events.empty():
        event = agent.events.get_nowait()
        if isinstance(event, UnitSynced):
            agent.handle(event)


@pytest.fixture
def encrypted(tmp_path: Path) -> tuple[Agent, FakeKube]:
    """An agent that applied a SuperNode release whose values and Secret are SOPS-encrypted."""
    import pyrage

    from tests.sops_writer import encrypt

    identity = pyrage.x25519.Identity.generate()
    key = tmp_path / "age.key"
    key.write_text(f"{identity}\n")
    server = FakeApiServer()
    server.add_namespace(NS)
    kube = FakeKube(server)
    agent = build_agent(kube, NoSource(), Metrics(), AgentOptions(decryption_key_files=(key,)))
    agent.cache.synced.set()
    agent.leading.set()
    root = repo_at(tmp_path / "r", {"supernodes/edge/values.yaml": encrypt(VALUES, str(identity.to_public())),
                                    "supernodes/edge/secrets.yaml": encrypt(SECRET, str(identity.to_public()))})
    install(agent, root, "r1")
    synced(agent)
    agent.cache.state = LiveState.load(kube, None)
    return agent, kube


def drift(kube: FakeKube) -> None:
    """Someone edits the Secret and the Deployment's env by hand."""
    kube.request("PATCH", path_for("Secret", NS, "edge-credentials"), body={"data": {"password": "Y2hhbmdlZA=="}},
                 content_type="application/merge-patch+json", query={"fieldManager": "kubectl-edit"})
    deployments = [o for o in kube.list("Deployment", NS)[0] if o["metadata"]["labels"].get("flower-syncer.io/unit")
                   == "edge"]
    assert deployments, "the release renders a Deployment"
    name = deployments[0]["metadata"]["name"]
    containers = deployments[0]["spec"]["template"]["spec"]["containers"]
    body = {"spec": {"template": {"spec": {"containers": [
        {"name": containers[0]["name"], "env": [{"name": "API_KEY", "value": "by-hand"}]}]}}}}
    kube.request("PATCH", path_for("Deployment", NS, name), body=body,
                 content_type="application/strategic-merge-patch+json", query={"fieldManager": "kubectl-edit"})


def test_the_next_syncs_diff_redacts_every_secret_value(encrypted: tuple[Agent, FakeKube]) -> None:
    agent, kube = encrypted
    before = unit_activity(agent, kube, EDGE)
    assert before.planned and before.changes == () and not before.plan_error
    drift(kube)
    agent.cache.state = LiveState.load(kube, None)  # as its watches would
    activity = unit_activity(agent, kube, EDGE)
    changed = {c.ref.split("/")[0]: c for c in activity.changes}
    assert activity.planned and {"Secret", "Deployment"} <= set(changed), activity
    assert "*** (before)" in changed["Secret"].diff and "*** (after)" in changed["Secret"].diff  # masked (engine)
    assert REDACTED in changed["Deployment"].diff and "by-hand" in changed["Deployment"].diff  # redacted (SOPS)
    html = activity_html(activity)
    for text in (repr(activity), html):
        assert PASSWORD not in text and API_KEY not in text
        assert "c3Vuc2hpbmUtcGFzc3dvcmQtNDI" not in text  # nor in base64
    assert "edge-credentials" in html


def test_events_are_read_newest_first_and_shown_as_text(encrypted: tuple[Agent, FakeKube]) -> None:
    agent, kube = encrypted
    recorder = EventRecorder(kube, "test")
    inv = ObjectRef("ConfigMap", NS, "flower-syncer.supernode.edge")
    recorder.post(Event(inv, "Warning", "SyncFailed", "Sync", f"first {SCRIPT}"))
    recorder.post(Event(ObjectRef("Secret", NS, "edge-credentials"), "Normal", "DriftCorrected", "Apply",
                        "put back", EDGE))
    recorder.post(Event(ObjectRef("Secret", NS, "other"), "Normal", "DriftCorrected", "Apply", "not edge's"))
    activity = unit_activity(agent, kube, EDGE)
    assert not activity.events_error, activity.events_error
    assert [e.reason for e in activity.events] == ["DriftCorrected", "SyncFailed"]  # newest first, its own only
    html = activity_html(activity)
    assert SCRIPT not in html and "first &lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_activity_is_computed_on_request_and_kept_until_the_unit_changes(encrypted: tuple[Agent, FakeKube]) -> None:
    agent, kube = encrypted
    now = [0.0]
    activity = Activity(agent, kube, ttl=5.0, clock=lambda: now[0])
    first = activity.of(EDGE)
    assert activity.of(EDGE) is first and activity.computed == 1  # a reload within the TTL
    agent.changes.touch(EDGE.id)  # the unit changed: computed again
    assert activity.of(EDGE) is not first and activity.computed == 2
    now[0] += 5.0
    activity.of(EDGE)
    assert activity.computed == 3


def test_an_event_or_diff_that_is_markup_is_text_on_the_page() -> None:
    row = UnitRow(unit=f"federation/{NS}/fed", repository="r", synced="Synced", synced_ok=True, healthy="Healthy",
                  healthy_ok=True)
    activity = UnitActivity(events=(EventRow("2026-11-28T21:00:00Z", "Warning", SCRIPT, SCRIPT, SCRIPT),),
                            changes=(PlannedChange(f"ConfigMap/{NS}/{SCRIPT}", "configured", SCRIPT,
                                                   f"+  note: {SCRIPT}\n", cut=True),), planned=True)
    page = unit_page(UnitView(row=row), actions=False, activity=activity)
    assert SCRIPT not in page
    assert page.count("&lt;script&gt;") == 7  # reason, object, note; ref (and its label), message, diff
    assert "flower-syncer diff</code> shows all of it" in page


class CountingView:
    """A view whose readings are counted, per unit asked."""

    def __init__(self, n: int) -> None:
        self.changes = Changes()
        self.units = {f"federation/ns/f{i}": UnitRow(f"federation/ns/f{i}", "r", "Synced", True, "Healthy", True)
                      for i in range(n)}
        self.asked: list[int] = []

    def rows(self, units: Any = None) -> list[UnitRow]:
        chosen = [r for u, r in self.units.items() if units is None or u in units]
        self.asked.append(len(chosen))
        return chosen

    def unit(self, unit: str) -> UnitView | None:
        return UnitView(self.units[unit]) if unit in self.units else None

    def activity(self, unit: str) -> UnitActivity | None:
        raise AssertionError("a stream never computes a unit's activity")

    def suspend(self, unit: str, suspended: bool) -> bool:
        return False

    def release_hold(self, unit: str) -> bool:
        return False


def test_a_look_without_change_reads_nothing_and_a_change_reads_its_unit_only() -> None:
    view = CountingView(200)
    snapshots = Snapshots(view)
    follower, other = Follower(snapshots, "overview", {}), Follower(snapshots, "overview", {})
    assert b'"tbody"' in follower.step() and b'"tbody"' in other.step()
    assert view.asked == [200]  # two pages, one reading
    for _ in range(5):
        assert follower.step() == b"" and other.step() == b""
    assert view.asked == [200]  # nothing changed: nothing read
    view.units["federation/ns/f7"] = UnitRow("federation/ns/f7", "r", "ConfigError", False, "Healthy", True,
                                             message=SCRIPT)
    view.changes.touch("federation/ns/f7")
    sent = follower.step()
    assert view.asked == [200, 1] and b'"rows"' in sent and b"federation/ns/f7" in sent
    assert b"federation/ns/f8" not in sent and SCRIPT.encode() not in sent
    view.changes.touch("federation/ns/f9")  # touched, but its row is the same: nothing to send
    assert other.step().count(b"data-unit=") == 1  # f7's row (new to this page), not f9's
    assert follower.step() == b""
    del view.units["federation/ns/f3"]  # a unit goes
    view.changes.touch("federation/ns/f3")
    snapshots.rows()
    assert "federation/ns/f3" not in {r.unit for r in snapshots.rows()[1]}


def test_a_unit_pages_stream_reads_its_unit_only_when_it_changed() -> None:
    view = CountingView(3)
    calls: list[str] = []
    read = view.unit

    def unit(u: str) -> UnitView | None:
        calls.append(u)
        return read(u)

    view.unit = unit  # type: ignore[method-assign]
    follower = Follower(Snapshots(view), "unit", {"id": "federation/ns/f1"})
    assert follower.step().startswith(b"event: unit")
    view.changes.touch("federation/ns/f2")  # another unit
    assert follower.step() == b"" and calls == ["federation/ns/f1"]
    view.changes.touch("federation/ns/f1")
    follower.step()
    assert calls == ["federation/ns/f1", "federation/ns/f1"]
