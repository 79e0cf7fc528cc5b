"""A restart waits for the runs of real SuperLinks of both Control API eras (issue 40): Flower
1.26 (gRPC Control) and 1.42 (Control over HTTPS POST), each with TLS on 127.0.0.1, no Kubernetes.

A run is submitted with the release's own `flwr run` (tests/fixtures/e2e-app, whose ServerApp waits
for three SuperNodes: none connects, so the run stays in progress). The agent's own path reads it:
the real FlowerProbe with the real connector (the CA from the federation's `<fed>-superlink-ca`
Secret, in a FakeKube), FlowerWatch's status round, and agent.holding.Holds' gate, which engine.holds
decides: the SuperLink's restart is held naming the run. `flwr stop` stops it: the next answer has
no run in progress and the restart goes ahead (NoActiveRuns, RolloutResumed "the runs ended").

Found with 1.26.0 and 1.42.0 (the statuses are Flower's common.constant Status and SubStatus, the
same strings in both releases, which run_state maps alike): both list a run `pending` (until the
SuperLink's SuperExec takes it: not held, nothing runs yet), then `starting` (held from here), then
`running` once its ServerApp process waits for nodes; a stopped run is `finished`/`stopped` in both.
1.42's SuperLink installs an app's dependencies at each run (`uv sync`, from PyPI) unless told not
to: the test starts it with --disable-runtime-dependency-installation (the app's numpy is there)."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest

from syncer.agent.flower_probe import FlowerProbe
from syncer.agent.flower_watch import FlowerWatch
from syncer.agent.holding import Holds
from syncer.cluster.events import Event
from syncer.engine.disruption import Disruption, Effect
from syncer.engine.holds import HoldSettings, Why, decide
from syncer.identity import ObjectRef, Unit
from syncer.observe.flower_health import FlowerHealth, run_state
from syncer.plan import FlowerTarget, Plan, Policy, UnitPlan
from tests.conftest import wait_until
from tests.fakekube import FakeKube
from tests.integration.superlinks import INSTALL_SECONDS, SuperLink, stop

VERSIONS = ["1.26.0", "1.42.0"]
APP = Path(__file__).resolve().parents[1] / "fixtures" / "e2e-app"
NS = "flower"
FED = Unit("federation", NS, "fed")
CA_SECRET = "fed-superlink-ca"
SUPERLINK = Disruption(ObjectRef("StatefulSet", NS, "fed-superlink"), Effect.RESTARTS, "superlink", "superlink", 1)
HOUR = HoldSettings(3600.0)


@pytest.fixture(params=VERSIONS)
def superlink(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SuperLink]:
    began = time.monotonic()
    http = tuple(int(p) for p in str(request.param).split(".")[:2]) >= (1, 37)
    link = SuperLink(tmp_path, request.param, extra=["--disable-runtime-dependency-installation"] if http else [])
    if request.param in INSTALL_SECONDS:
        print(f"\ncold set-up of flwr=={request.param}: {INSTALL_SECONDS[request.param]:.0f} s")
    print(f"\nSuperLink {request.param} serving in {time.monotonic() - began:.1f} s")
    yield link
    stop(link.proc)


class Flwr:
    """The `flwr` CLI of the SuperLink's release, with a connection `t` to its Control API over TLS."""

    def __init__(self, link: SuperLink, tmp: Path) -> None:
        self.link, self.home = link, tmp / "cli-home"
        self.home.mkdir()
        (self.home / "config.toml").write_text(
            f'[superlink]\ndefault = "t"\n\n[superlink.t]\naddress = "{link.address}"\n'
            f'root-certificates = "{tmp / "ca.crt"}"\n')
        self.app = tmp / "app"
        shutil.copytree(APP, self.app)

    def __call__(self, *args: str) -> dict[str, object]:
        proc = subprocess.run([str(self.link.bin / "flwr"), *args, "--format", "json"], capture_output=True, text=True,
                              timeout=120, check=False, env={**self.link.env, "FLWR_HOME": str(self.home)})
        assert proc.returncode == 0, f"flwr {' '.join(args)}: {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
        out: dict[str, object] = json.loads(proc.stdout)
        assert out.get("success") is True, out
        return out


class Agent:
    """What the agent does with one federation whose SuperLink is `link`: FlowerWatch's status
    rounds over the real FlowerProbe, and Holds' gate before a restart of the SuperLink."""

    def __init__(self, link: SuperLink) -> None:
        kube = FakeKube()
        kube.server.add_namespace(NS)
        kube.create({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": CA_SECRET, "namespace": NS},
                     "data": {"ca.crt": base64.b64encode(link.ca).decode()}})
        self.target = FlowerTarget(link.address, "http" if link.http else "grpc", CA_SECRET)
        # interval 0: each round asks again once the last check answered (the agent: 30 s)
        self.probe = FlowerProbe(kube, interval=0.0, cluster_dns=True)
        self.events: list[Event] = []
        self.watch = FlowerWatch(self.probe, lambda unit, event: self.events.append(event), time.monotonic)
        self.holds = Holds(lambda unit, event: self.events.append(event), lambda unit, delay: None,
                           lambda: self.watch)
        self.plan = cast(Plan, SimpleNamespace(flower={FED: self.target}))
        self.planned = cast(UnitPlan, SimpleNamespace(unit=FED, policy=Policy()))
        self.seen: list[str] = []  # the run states the rounds read, in order, each once

    def round(self) -> FlowerHealth:
        health = self.watch.round({FED: self.target}, [])[FED]
        self.watch.finish_round(0.0, 0.0)  # starts the check the round chose
        answer = self.probe.answer_for(FED, self.target)
        for run in (answer.runs if answer is not None else None) or ():
            state = f"{run.status}/{run.sub_status}" if run.sub_status else run.status
            if not self.seen or self.seen[-1] != state:
                self.seen.append(state)
        return health

    def answered(self, state: str = "") -> FlowerHealth | None:
        """A round's health, once the SuperLink answered (and lists a run `state`, when given)."""
        health = self.round()
        return health if health.reachable and (not state or health.runs.get(state)) else None

    def restart(self) -> str | None:
        """The gate's answer for a restart of the SuperLink: why it is held, or None (it goes ahead)."""
        return self.holds.gate(self.planned, self.plan, None)(SUPERLINK)

    def close(self) -> None:
        self.probe.close()


def test_a_restart_waits_for_the_run_and_goes_ahead_once_it_is_stopped(superlink: SuperLink,
                                                                        tmp_path: Path) -> None:
    flwr, agent = Flwr(superlink, tmp_path), Agent(superlink)
    try:
        idle = wait_until("the first answer", agent.answered, timeout=30, interval=0.2, log=superlink.log)
        assert idle.active == () and agent.restart() is None  # no run: a restart goes ahead
        began = time.monotonic()
        run_id = int(str(flwr("run", str(flwr.app), "t")["run-id"]))
        submitted = time.monotonic() - began

        def in_progress(*states: str) -> FlowerHealth | None:
            health = agent.round()
            assert health.runs.get("failed", 0) == 0, f"the run failed: {health.last_failure}\n" + \
                superlink.log.read_text(errors="replace")[-3000:]
            return health if any(health.runs.get(s) for s in states) else None

        # a run starting or running: the restart is held, naming it
        health = wait_until("the agent reading the run in progress", lambda: in_progress("starting", "running"),
                            timeout=60, interval=0.2, log=superlink.log)
        read = time.monotonic() - began
        assert [r.run_id for r in health.active] == [run_id], health.active
        first = run_state(health.active[0])
        held = agent.restart()
        assert held is not None and f"run {run_id} {first}" in held, held
        decision = agent.holds.held[FED]
        assert decision.hold and decision.why is Why.RUNS_ACTIVE and decision.runs == (run_id,), decision
        runs = agent.holds.runs(FED, agent.plan)
        assert decide([SUPERLINK], runs, HOUR, now=time.time()).runs == (run_id,)

        # its ServerApp waits for SuperNodes: running, and still held
        health = wait_until("the run running", lambda: in_progress("running"), timeout=60, interval=0.2,
                            log=superlink.log)
        assert [r.run_id for r in health.active] == [run_id]
        held = agent.restart()
        assert held is not None and f"run {run_id} running" in held, held
        running = time.monotonic() - began

        # stopped: the next answer has no run in progress, and the restart goes ahead
        flwr("stop", str(run_id), "t")
        stopped = wait_until("the agent reading the run stopped", lambda: agent.answered("stopped"), timeout=30,
                             interval=0.2, log=superlink.log)
        assert stopped.active == () and stopped.runs.get("running", 0) == stopped.runs.get("starting", 0) == 0
        runs = agent.holds.runs(FED, agent.plan)
        assert runs.known and runs.active == ()
        decision = decide([SUPERLINK], runs, HOUR, now=time.time(), held_since=decision.since)
        assert not decision.hold and decision.why is Why.NO_RUNS, decision
        assert agent.restart() is None and FED not in agent.holds.held
        resumed = [e for e in agent.events if e.reason == "RolloutResumed"]
        assert len(resumed) == 1 and resumed[0].note.startswith("the runs ended"), agent.events
        assert agent.seen[-1] == "finished/stopped" and "running" in agent.seen, agent.seen
        sys.stderr.write(f"\nFlower {superlink.version} ({superlink.transport}): run {run_id} states read "
                         f"{' -> '.join(agent.seen)}; flwr run {submitted:.1f} s, held ({first}) at {read:.1f} s, "
                         f"running at {running:.1f} s, go-ahead {time.monotonic() - began:.1f} s after submitting\n")
    finally:
        agent.close()
