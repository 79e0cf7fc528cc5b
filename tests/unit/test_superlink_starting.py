"""A federation whose key registration fails only because its SuperLink does not answer yet (it is
starting) is retried every status round, however often its own pods' events made it fail in the
meantime; any other failure keeps the usual backoff up to 5 minutes. (A cross-site e2e run saw
the hub's registration back off to 300 s while its SuperLink started: the site's key was never
registered within the test.)"""

from __future__ import annotations

from pathlib import Path

import pytest
from structlog.testing import capture_logs

from syncer.agent.state import AgentOptions
from syncer.agent.syncing import SUPERLINK_STARTING_RETRY
from syncer.agent.wiring import build_agent
from syncer.cluster.flower_control import ControlErrorCode
from syncer.engine.changeset import Cause, UnitResult
from syncer.engine.keyresult import KeyOutcome, NodeKeyResult
from syncer.identity import Unit
from syncer.observe.metrics import Metrics
from tests.builders import NS, federation, install, pool, repo_at
from tests.doubles import NoSource
from tests.fakekube import FakeKube

FED = Unit("federation", NS, "fed")


def keys_failed(*codes: ControlErrorCode) -> NodeKeyResult:
    return NodeKeyResult(KeyOutcome.FAILED, "fed-superlink:9093", "http", errors=tuple("x" for _ in codes),
                         error_codes=codes)


@pytest.mark.parametrize(("codes", "longest"), [
    ((ControlErrorCode.UNAVAILABLE,), SUPERLINK_STARTING_RETRY),  # starting: every status round
    ((ControlErrorCode.UNAVAILABLE, ControlErrorCode.KEY_IN_USE), 300.0),  # a key needs a fix in Git
    ((ControlErrorCode.TLS,), 300.0),  # a wrong CA does not clear by itself
])
def test_retries_while_the_superlink_starts_stay_short(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        codes: tuple[ControlErrorCode, ...], longest: float) -> None:
    agent = build_agent(FakeKube(), NoSource(), Metrics(), AgentOptions())
    agent.cache.synced.set()  # as once its watches listed the cluster
    install(agent, repo_at(tmp_path, {"federations/fed.yaml": federation("fed", pool("a"))}), "0" * 40)

    def sync_unit(*_args: object) -> UnitResult:
        result = UnitResult(FED, node_keys=keys_failed(*codes))
        result.fail(Cause.NODE_KEYS, "cannot list the SuperLink's SuperNodes: connection refused")
        return result

    monkeypatch.setattr(agent.engine, "sync_unit", sync_unit)
    with capture_logs() as logs:
        for _ in range(12):  # the pods' events make it sync (and fail) again and again
            agent.syncs.sync(FED)
    delays = [e["retry_in"] for e in logs if e["event"] == "unit failed; retrying"]
    assert len(delays) == 12 and max(delays) == longest
