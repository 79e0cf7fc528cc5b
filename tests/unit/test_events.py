"""Kubernetes Events (issue 13, item 2): what a sync reports, posted like client-go's recorder
(aggregated into a series, rate-limited per object), on the in-memory API server."""

from __future__ import annotations

from pathlib import Path

from syncer.agent.reporting import sync_events
from syncer.agent.state import AgentOptions
from syncer.agent.wiring import build_agent
from syncer.cluster.events import BURST, Event, EventRecorder
from syncer.engine.changeset import Action, Cause, Change, UnitResult
from syncer.engine.live import LiveState
from syncer.identity import ObjectRef, Unit
from syncer.observe.metrics import Metrics
from syncer.observe.notify import Notifier, Receiver
from syncer.render.repo import render_repo
from syncer.repo.loader import load_repo
from tests.builders import NS, pool, write
from tests.doubles import NoSource, Sink
from tests.fakekube import FakeApiServer, FakeKube

UNIT = Unit("federation", NS, "fed")
STS = ObjectRef("StatefulSet", NS, "fed-supernode-a")


def events(server: FakeApiServer) -> list[dict[str, object]]:
    return [o for (kind, _, _), o in sorted(server.objects.items()) if kind == "events.k8s.io/Event"]


def test_what_a_sync_reports() -> None:
    result = UnitResult(UNIT, changes=[
        Change(STS, Action.CONFIGURED, drift=True),
        Change(ObjectRef("Service", NS, "fed-superlink"), Action.CREATED),
        Change(ObjectRef("Deployment", NS, "old"), Action.DELETED),
        Change(ObjectRef("ConfigMap", NS, "x"), Action.UNCHANGED)])
    reported = sync_events(UNIT, result, known=set(), revision="0123456789abcdef")
    assert [(e.regarding.kind, e.reason) for e in reported] == [
        ("StatefulSet", "DriftCorrected"), ("ConfigMap", "Pruned"), ("ConfigMap", "Synced")]
    assert reported[-1].note == "revision 0123456789ab: 1 configured, 1 created, 1 deleted"
    assert sync_events(UNIT, UnitResult(UNIT, changes=[Change(STS, Action.UNCHANGED)]), set(), "r") == []
    failed = UnitResult(UNIT, changes=[Change(STS, Action.FAILED, "fields owned by kubectl", cause=Cause.CONFLICT)])
    assert [(e.regarding, e.type, e.reason) for e in sync_events(UNIT, failed, set(), "r")] == [
        (STS, "Warning", "Conflict"), (ObjectRef("ConfigMap", NS, "flower-syncer.federation.fed"), "Warning",
                                       "SyncFailed")]
    # the cause decides, not the words: a refusal whose text says "conflict" is no Conflict event
    worded = UnitResult(UNIT, changes=[Change(STS, Action.FAILED, "Conflict: conflict", cause=Cause.API_ERROR)])
    assert [e.reason for e in sync_events(UNIT, worded, set(), "r")] == ["SyncFailed"]


def test_repeats_become_a_series_and_floods_are_cut() -> None:
    server = FakeApiServer()
    server.add_namespace(NS)
    now = [0.0]
    recorder = EventRecorder(FakeKube(server), "agent-0", clock=lambda: now[0])
    same = Event(STS, "Normal", "DriftCorrected", "Apply", "put back")
    for _ in range(5):
        recorder.post(same)
    posted = events(server)
    assert len(posted) == 1 and posted[0]["series"]["count"] == 5  # type: ignore[index]
    assert posted[0]["reportingController"] == "flower-syncer" and posted[0]["regarding"]["kind"] == "StatefulSet"  # type: ignore[index]
    for i in range(BURST + 10):  # a flapping object: distinct notes, so no series
        recorder.post(Event(STS, "Normal", "DriftCorrected", "Apply", f"put back #{i}"))
    assert len(events(server)) == BURST  # the burst, then nothing until the bucket refills
    now[0] += 3600
    recorder.post(Event(STS, "Normal", "DriftCorrected", "Apply", "an hour later"))
    assert len(events(server)) == BURST + 1


def test_the_agent_reports_a_sync_on_the_units_inventory(tmp_path: Path) -> None:
    server = FakeApiServer()
    server.add_namespace(NS)
    kube = FakeKube(server)
    recorder = EventRecorder(kube, "agent-0")
    sink = Sink()
    notifier = Notifier([Receiver("ops", "generic", sink.url)])
    agent = build_agent(kube, NoSource(), Metrics(), AgentOptions(), recorder, notifier)
    state = load_repo(write(tmp_path / "repo", pools=pool("a")))
    agent.installer.install(state, render_repo(state), "0123456789abcdef")
    agent.loaded.set()
    agent.cache.state = LiveState.load(kube, None)
    agent.cache.synced.set()
    agent.leading.set()
    agent.work.add(UNIT)
    assert agent.drain() == 1
    recorder.flush()
    reported = events(server)
    assert [(e["reason"], e["regarding"]["name"]) for e in reported] == [  # type: ignore[index]
        ("Synced", "flower-syncer.federation.fed")]
    assert str(reported[0]["note"]).startswith("revision 0123456789ab: ")
    notifier.flush()  # and the same news went to the receivers
    assert [(b["unit"], b["reason"]) for b in sink.bodies()] == [(UNIT.id, "Synced")]
    sink.server.shutdown()
