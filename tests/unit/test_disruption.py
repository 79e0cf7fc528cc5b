"""Plan before apply (engine.disruption): which changes of a sync restart pods, and whose; what
`diff` and `sync --dry-run` say of it. Pure functions on objects, then the engine on FakeKube."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from syncer import printers
from syncer.actions.disruption import runs_at_stake, with_runs
from syncer.engine.disruption import Effect, changed_paths, config_changes, workload_change
from syncer.engine.sync import SyncReport
from syncer.identity import LABEL_COMPONENT, LABEL_POOL, ObjectRef
from syncer.render.repo import plan_repo, render_repo
from syncer.repo.loader import load_repo
from tests.builders import NS, federation, pool, sync, write
from tests.fakekube import FakeApiServer, FakeKube


def _sts(component: str = "superlink", pool_name: str = "", image: str = "flwr/superlink:1.25.0",
         replicas: int = 1, strategy: str = "RollingUpdate") -> dict[str, Any]:
    labels = {LABEL_COMPONENT: component, **({LABEL_POOL: pool_name} if pool_name else {})}
    return {"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "fed-superlink", "namespace": NS, "labels": labels},
            "spec": {"replicas": replicas, "updateStrategy": {"type": strategy},
                     "template": {"metadata": {"labels": dict(labels)},
                                  "spec": {"containers": [{"name": "superlink", "image": image,
                                                           "args": ["--insecure"]}],
                                           "volumes": [{"name": "tls", "secret": {"secretName": "fed-tls"}}]}}}}


REF = ObjectRef("StatefulSet", NS, "fed-superlink")


def test_a_changed_pod_template_restarts_the_superlink_and_names_the_field() -> None:
    live, desired = _sts(), _sts(image="flwr/superlink:1.26.0")
    d = workload_change(REF, live, desired)
    assert d is not None and d.effect is Effect.RESTARTS and d.superlink and d.stops_pods()
    assert d.paths == ("spec.containers[superlink].image",)
    assert d.describe() == "restarts the SuperLink (pod template: spec.containers[superlink].image)"


def test_a_pool_restart_counts_its_supernodes() -> None:
    live = _sts("pool-gpu", "gpu", replicas=4)
    desired = copy.deepcopy(live)
    desired["spec"]["template"]["spec"]["containers"][0]["args"] = ["--insecure", "--max-retries=3"]
    d = workload_change(REF, live, desired)
    assert d is not None and d.subject() == "pool gpu (4 SuperNodes)"


@pytest.mark.parametrize("change", ["replicas", "labels", "ondelete", "new"])
def test_changes_outside_the_pod_template_restart_nothing(change: str) -> None:
    live = _sts("pool-gpu", "gpu")
    desired = copy.deepcopy(live)
    if change == "replicas":
        desired["spec"]["replicas"] = 5
    elif change == "labels":
        desired["metadata"]["labels"]["team"] = "x"
    elif change == "ondelete":
        desired["spec"]["updateStrategy"]["type"] = "OnDelete"
        live["spec"]["updateStrategy"]["type"] = "OnDelete"
        desired["spec"]["template"]["spec"]["containers"][0]["image"] = "other"
    assert workload_change(REF, None if change == "new" else live, desired) is None


def test_a_recreate_always_restarts() -> None:
    d = workload_change(REF, _sts(), _sts(), recreate=True)
    assert d is not None and d.effect is Effect.RECREATES and d.stops_pods()


def test_a_mounted_secret_takes_effect_at_the_next_restart_and_an_unmounted_one_says_nothing() -> None:
    found = config_changes([ObjectRef("Secret", NS, "fed-tls"), ObjectRef("Secret", NS, "other"),
                            ObjectRef("Service", NS, "fed-tls")], [_sts()])
    assert [(d.ref.name, d.effect, d.mounted_by, d.stops_pods()) for d in found] == [
        ("fed-tls", Effect.NEXT_RESTART, ("the SuperLink",), False)]


def test_changed_paths_are_bounded_and_name_containers() -> None:
    a = {"spec": {"containers": [{"name": "x", "image": "1", "args": []}], "volumes": []}, "metadata": {}}
    b = {"spec": {"containers": [{"name": "x", "image": "2", "args": ["a"]}], "volumes": [{}]},
         "metadata": {"annotations": {"k": "v"}}}
    assert changed_paths(a, b, limit=3) == ("metadata.annotations", "spec.containers[x].args",
                                            "spec.containers[x].image")


# -- the engine: what a dry-run reports ----------------------------------------------------------

@pytest.fixture
def kube() -> FakeKube:
    api = FakeApiServer()
    api.add_namespace(NS)
    return FakeKube(api)


def _disruptions(report: SyncReport) -> list[str]:
    return [d.describe() for u in report.units for d in u.disruptions]


def test_a_dry_run_says_which_workloads_restart(kube: FakeKube, tmp_path: Path) -> None:
    repo = write(tmp_path, pools=pool("a", 2) + pool("gpu", 4))
    assert sync(kube, repo).ok
    text = federation("fed", pools=pool("a", 3) + pool("gpu", 4),
                      superlink="    extraArgs: [--fab-state-dir=/tmp]\n")
    (repo / "federations" / "fed.yaml").write_text(text)
    report = sync(kube, repo, dry_run=True)
    assert report.ok and report.changed
    said = _disruptions(report)
    # the SuperLink's args changed: a restart; pool a only scales (3 replicas): no restart; gpu unchanged
    assert said == ["restarts the SuperLink (pod template: spec.containers[superlink].args)"], said
    unit = report.to_dict()["units"][0]
    assert unit["disruptions"][0]["superlink"] is True and unit["disruptions"][0]["stopsPods"] is True


def test_a_pool_image_change_restarts_that_pool_only(kube: FakeKube, tmp_path: Path) -> None:
    repo = write(tmp_path, pools=pool("a", 2) + pool("gpu", 4))
    assert sync(kube, repo).ok
    text = federation("fed", pools=pool("a", 2) + pool("gpu", 4)).replace(
        "      - name: gpu\n", "      - name: gpu\n        env: [{name: X, value: '1'}]\n")
    (repo / "federations" / "fed.yaml").write_text(text)
    report = sync(kube, repo, dry_run=True)
    said = _disruptions(report)
    assert len(said) == 1 and said[0].startswith("restarts pool gpu (4 SuperNodes)"), said


def test_diff_text_ends_with_the_disruption_and_the_runs_at_stake(kube: FakeKube, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    repo = write(tmp_path)
    assert sync(kube, repo).ok
    (repo / "federations" / "fed.yaml").write_text(federation("fed", superlink="    extraArgs: [--x=1]\n"))
    report = sync(kube, repo, dry_run=True, with_diff=True)
    runs = {"federation/flower/fed": {"runs": "2 runs running"}}
    printers.print_diff(report, frozenset(), runs)
    out = capsys.readouterr().out
    assert out.splitlines()[-2:] == [
        "# disruption: what applying this does to running pods",
        "#   federation/flower/fed: restarts the SuperLink (pod template: spec.containers[superlink].args): "
        "2 runs running"]
    printers.print_report(report, runs=runs)
    assert "  ! restarts the SuperLink (pod template: spec.containers[superlink].args): 2 runs running" in (
        capsys.readouterr().out)


def test_a_diff_that_restarts_nothing_says_so(kube: FakeKube, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    repo = write(tmp_path, pools=pool("a", 1))
    assert sync(kube, repo).ok
    write(tmp_path, pools=pool("a", 2))  # more SuperNodes: the running ones stay
    printers.print_diff(sync(kube, repo, dry_run=True, with_diff=True), frozenset())
    assert capsys.readouterr().out.splitlines()[-1] == "# disruption: no change restarts pods"


def test_the_runs_at_stake_are_those_the_agent_recorded_on_the_federations_flowerunit(
        kube: FakeKube, tmp_path: Path) -> None:
    repo = write(tmp_path)
    assert sync(kube, repo).ok
    (repo / "federations" / "fed.yaml").write_text(federation("fed", superlink="    extraArgs: [--x=1]\n"))
    state = load_repo(repo)
    plan = plan_repo(state, render_repo(state))
    report = sync(kube, repo, dry_run=True)
    assert runs_at_stake(kube, report, plan)["federation/flower/fed"]["runs"].startswith("runs unknown")
    kube.apply({"apiVersion": "flower-syncer.io/v1alpha1", "kind": "FlowerUnit",
                "metadata": {"name": "federation.fed", "namespace": NS},
                "status": {"flower": {"reachable": True, "runs": {"running": 2, "starting": 1}}}}, force=True)
    at_stake = runs_at_stake(kube, report, plan)["federation/flower/fed"]
    assert at_stake == {"federation": "federation/flower/fed", "runs": "2 runs running, 1 starting",
                        "running": 2, "starting": 1}
    assert with_runs(report.to_dict(), {"federation/flower/fed": at_stake})["units"][0]["runsAtStake"] == at_stake


def test_a_pool_that_leaves_git_stops_its_supernodes(kube: FakeKube, tmp_path: Path) -> None:
    repo = write(tmp_path, pools=pool("a", 2) + pool("gpu", 4))
    assert sync(kube, repo).ok
    write(tmp_path, pools=pool("a", 2))
    report = sync(kube, repo, dry_run=True)
    assert [(d.effect, d.subject()) for u in report.units for d in u.disruptions] == [
        (Effect.REMOVES, "pool gpu")]
    assert report.units[0].disruptions[0].describe() == "removes pool gpu"


def test_the_cli_says_it_in_text_and_json(kube: FakeKube, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from syncer.cli import main

    repo = write(tmp_path)
    assert sync(kube, repo).ok
    (repo / "federations" / "fed.yaml").write_text(federation("fed", superlink="    extraArgs: [--x=1]\n"))
    monkeypatch.setattr("syncer.cli._connect", lambda args: kube)
    capsys.readouterr()
    assert main(["diff", str(repo), "-o", "json"]) == 1  # drift
    [unit] = json.loads(capsys.readouterr().out)["units"]
    assert unit["disruptions"][0]["summary"].startswith("restarts the SuperLink")
    assert unit["runsAtStake"]["runs"].startswith("runs unknown")
    assert main(["sync", str(repo), "--dry-run"]) == 0
    assert "  ! restarts the SuperLink (pod template: spec.containers[superlink].args): runs unknown" in (
        capsys.readouterr().out)
    monkeypatch.setattr("syncer.cluster.client.Kube.from_kubeconfig", lambda *a, **k: kube)
    kube.apply({"apiVersion": "flower-syncer.io/v1alpha1", "kind": "FlowerUnit",
                "metadata": {"name": "federation.fed", "namespace": NS}}, force=True)
    assert main(["resync", "--unit", "fed", "--release-hold"]) == 0
    assert "federation/flower/fed: holds begun by" in capsys.readouterr().out
    assert main(["resync", "--release-hold"]) == 2  # which unit?
