"""A SuperLink's state on a persistent volume (syncer.models.superlink_state, render.federation,
render.superlink_state): what Git sets, what is rendered, what is refused and where."""

from __future__ import annotations

from pathlib import Path

import pytest

from syncer.engine.changeset import Action, Change
from syncer.engine.sync import SyncReport
from syncer.render.superlink_state import in_memory
from tests.builders import NS, federation, sync, write
from tests.fakekube import FakeApiServer, FakeKube
from tests.unit.helpers import container, load_federation, render_federation_text

SL = ("StatefulSet", "fed-superlink")
TLS = ('"flower-syncer.io/superlink-tls-secret": fed-tls'
       ', "flower-syncer.io/control-api-from": flower-syncer')


def superlink(annotations: str = "", **kw: object) -> dict:
    return render_federation_text(federation(annotations=annotations, **kw))[SL]  # type: ignore[arg-type]


def test_a_new_superlink_keeps_its_state_on_a_volume_by_default() -> None:
    sl = superlink()
    assert sl["metadata"]["annotations"]["flower-syncer.io/superlink-state"] == "default"
    c = container(sl, "superlink")
    assert "--database=/app/state/state.db" in c["args"]
    assert {"name": "superlink-state", "mountPath": "/app/state"} in c["volumeMounts"]
    assert sl["spec"]["volumeClaimTemplates"] == [{"metadata": {"name": "superlink-state"}, "spec": {
        "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]
    # the volume outlives the StatefulSet unless Git says otherwise
    assert sl["spec"]["persistentVolumeClaimRetentionPolicy"] == {"whenDeleted": "Retain", "whenScaled": "Retain"}
    # writable by the images' uid/gid 49999 on volumes that honour fsGroup
    assert sl["spec"]["template"]["spec"]["securityContext"] == {"fsGroup": 49999,
                                                                 "fsGroupChangePolicy": "OnRootMismatch"}


@pytest.mark.parametrize("mode", ["StatefulSet", "DaemonSet"])
def test_size_class_and_retention_come_from_git_in_either_pool_mode(mode: str) -> None:
    # the SuperLink is a StatefulSet also when the pools are DaemonSets: persistence works there too
    pools = "      - name: a\n        images: {}\n" if mode == "DaemonSet" else ""
    text = federation(annotations='"flower-syncer.io/superlink-state": persistent, '
                      '"flower-syncer.io/superlink-state-size": 5Gi, '
                      '"flower-syncer.io/superlink-state-storage-class": fast-ssd, '
                      '"flower-syncer.io/superlink-state-retention": Delete', mode=mode, pools=pools)
    sl = render_federation_text(text)[SL]
    assert sl["metadata"]["annotations"]["flower-syncer.io/superlink-state"] == "persistent"
    (claim,) = sl["spec"]["volumeClaimTemplates"]
    assert claim["spec"]["resources"] == {"requests": {"storage": "5Gi"}}
    assert claim["spec"]["storageClassName"] == "fast-ssd"
    assert sl["spec"]["persistentVolumeClaimRetentionPolicy"]["whenDeleted"] == "Delete"


@pytest.mark.parametrize(("version", "isolation", "tls"), [
    ("1.25.0", "subprocess", False), ("1.26.0", "process", True), ("1.37.0", "process", False),
    ("1.42.0", "subprocess", True), ("1.42.0", "process", False)])
def test_the_in_memory_form_of_the_default_is_exactly_what_memory_renders(version: str, isolation: str,
                                                                          tls: bool) -> None:
    """What the engine applies to a SuperLink that already runs in memory (engine.superlink_state)
    must be byte for byte what `memory` renders, or an upgrade of flower-syncer would restart it."""
    extra: dict[str, object] = {"insecure": False} if tls else {}
    if isolation == "process":
        extra |= {"superlink": f"    superexecImage: flwr/superexec:{version}\n",
                  "pools": f"      - name: a\n        replicas: 1\n        images: {{superexecClientApp: "
                           f"flwr/superexec:{version}}}\n"}
    base = TLS if tls else ""
    default = superlink(base, version=version, isolation=isolation, **extra)
    memory = superlink(", ".join(filter(None, [base, '"flower-syncer.io/superlink-state": memory'])),
                       version=version, isolation=isolation, **extra)
    assert in_memory(default) == memory
    assert memory["metadata"]["annotations"]["flower-syncer.io/superlink-state"] == "memory"
    assert "volumeClaimTemplates" not in memory["spec"] and "securityContext" not in memory["spec"]["template"]["spec"]
    assert not any(a.startswith("--database") for a in container(memory, "superlink")["args"])


def test_own_claim_templates_stay_and_a_pod_security_context_in_git_wins() -> None:
    own = ("    volumeClaimTemplates:\n      - metadata: {name: models}\n"
           "        spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 2Gi}}}\n"
           "    podTemplate:\n      spec:\n        securityContext: {fsGroup: 1234}\n")
    sl = superlink(superlink=own)
    assert [c["metadata"]["name"] for c in sl["spec"]["volumeClaimTemplates"]] == ["models", "superlink-state"]
    assert sl["spec"]["template"]["spec"]["securityContext"] == {"fsGroup": 1234}
    kept = in_memory(sl)
    assert [c["metadata"]["name"] for c in kept["spec"]["volumeClaimTemplates"]] == ["models"]
    assert kept["spec"]["template"]["spec"]["securityContext"] == {"fsGroup": 1234}


def test_a_database_in_extra_args_is_left_to_the_user() -> None:
    sl = superlink(superlink='    extraArgs: ["--database=/data/mine.db"]\n')
    assert "flower-syncer.io/superlink-state" not in sl["metadata"]["annotations"]
    assert "volumeClaimTemplates" not in sl["spec"]
    assert [a for a in container(sl, "superlink")["args"] if a.startswith("--database")] == ["--database=/data/mine.db"]


@pytest.mark.parametrize(("annotations", "superlink_lines", "path", "words"), [
    ('"flower-syncer.io/superlink-state-size": lots', "",
     "metadata.annotations['flower-syncer.io/superlink-state-size']", "not a Kubernetes quantity"),
    ('"flower-syncer.io/superlink-state-size": "0"', "",
     "metadata.annotations['flower-syncer.io/superlink-state-size']", "more than nothing"),
    ('"flower-syncer.io/superlink-state-size": 500m', "",
     "metadata.annotations['flower-syncer.io/superlink-state-size']", "thousandths"),
    ('"flower-syncer.io/superlink-state-storage-class": Fast_SSD', "",
     "metadata.annotations['flower-syncer.io/superlink-state-storage-class']", "not a StorageClass name"),
    ('"flower-syncer.io/superlink-state-retention": Keep', "",
     "metadata.annotations['flower-syncer.io/superlink-state-retention']", "not a retention policy"),
    ('"flower-syncer.io/superlink-state": disk', "",
     "metadata.annotations['flower-syncer.io/superlink-state']", "not a setting"),
    ('"flower-syncer.io/superlink-state": persistent', '    extraArgs: ["--database", "/x.db"]\n',
     "metadata.annotations['flower-syncer.io/superlink-state']", "extraArgs pass --database"),
    ("", "    volumes: [{name: superlink-state, emptyDir: {}}]\n",
     "spec.superlink.volumes", "the volume flower-syncer keeps"),
])
def test_bad_settings_are_errors_naming_file_line_and_field(annotations: str, superlink_lines: str, path: str,
                                                            words: str) -> None:
    _, diags = load_federation(federation(annotations=annotations, superlink=superlink_lines))
    errors = [d for d in diags if d.severity == "error"]
    assert [(d.file, d.path) for d in errors] == [("federations/test.yaml", path)], [d.render() for d in diags]
    assert errors[0].line > 0 and words in errors[0].message and errors[0].hint


def test_settings_without_effect_in_memory_are_warnings() -> None:
    _, diags = load_federation(federation(annotations='"flower-syncer.io/superlink-state": memory, '
                                                      '"flower-syncer.io/superlink-state-size": 2Gi'))
    assert [(d.severity, d.path) for d in diags] == [
        ("warning", "metadata.annotations['flower-syncer.io/superlink-state-size']")]
    assert "in memory" in diags[0].message


# ---- the engine: upgrades and changes of mind (engine.superlink_state) ---------------------------


@pytest.fixture
def server() -> FakeApiServer:
    api = FakeApiServer()
    api.add_namespace(NS)
    return api


@pytest.fixture
def kube(server: FakeApiServer) -> FakeKube:
    return FakeKube(server)


def _change(report: SyncReport) -> Change:
    return next(c for u in report.units for c in u.changes if str(c.ref) == f"StatefulSet/{NS}/fed-superlink")


def _live(server: FakeApiServer) -> dict:
    live = server.get("StatefulSet", NS, "fed-superlink")
    assert live is not None
    return live


@pytest.mark.parametrize("before", ["memory", "unsaid"])
def test_a_superlink_in_memory_stays_so_when_git_leaves_the_choice(kube: FakeKube, server: FakeApiServer,
                                                                   tmp_path: Path, before: str) -> None:
    """An upgrade of flower-syncer (the live SuperLink rendered before it kept state says nothing)
    or Git dropping `memory` never restarts the SuperLink: its pod template stays as it is."""
    repo = write(tmp_path, annotations='"flower-syncer.io/superlink-state": memory')
    assert sync(kube, repo).ok
    if before == "unsaid":
        server.edit("StatefulSet", NS, "fed-superlink", {"metadata": {"annotations": {
            "flower-syncer.io/superlink-state": None}}}, manager="flower-syncer")
    template = _live(server)["spec"]["template"]
    write(repo)  # no annotation: the default
    report = sync(kube, repo)
    assert report.ok, report.to_dict()
    live = _live(server)
    assert live["spec"]["template"] == template and "volumeClaimTemplates" not in live["spec"]
    assert live["metadata"]["annotations"]["flower-syncer.io/superlink-state"] == "memory"
    assert sync(kube, repo).writes == 0  # and it stays so, without a write


def test_a_new_superlink_gets_its_volume(kube: FakeKube, server: FakeApiServer, tmp_path: Path) -> None:
    assert sync(kube, write(tmp_path)).ok
    live = _live(server)
    assert [c["metadata"]["name"] for c in live["spec"]["volumeClaimTemplates"]] == ["superlink-state"]
    assert live["metadata"]["annotations"]["flower-syncer.io/superlink-state"] == "default"


def test_git_asking_for_the_other_form_recreates_the_statefulset_once(kube: FakeKube, server: FakeApiServer,
                                                                      tmp_path: Path) -> None:
    repo = write(tmp_path, annotations='"flower-syncer.io/superlink-state": memory')
    assert sync(kube, repo).ok
    uid = _live(server)["metadata"]["uid"]
    write(repo, annotations='"flower-syncer.io/superlink-state": persistent')
    report = sync(kube, repo)
    change = _change(report)
    assert report.ok and change.action is Action.RECREATED and "superlink-state: persistent" in change.message
    live = _live(server)
    assert live["metadata"]["uid"] != uid and "volumeClaimTemplates" in live["spec"]
    assert sync(kube, repo).writes == 0
    write(repo, annotations='"flower-syncer.io/superlink-state": memory')  # and back, also only when asked
    assert _change(sync(kube, repo)).action is Action.RECREATED and "volumeClaimTemplates" not in _live(server)["spec"]


def test_a_new_size_keeps_the_existing_volume_and_says_why(kube: FakeKube, server: FakeApiServer,
                                                           tmp_path: Path) -> None:
    repo = write(tmp_path)
    assert sync(kube, repo).ok
    write(repo, annotations='"flower-syncer.io/superlink-state-size": 5Gi')
    report = sync(kube, repo)
    change = _change(report)
    assert report.ok and change.action is not Action.RECREATED and "cannot change" in change.message
    (claim,) = _live(server)["spec"]["volumeClaimTemplates"]
    assert claim["spec"]["resources"] == {"requests": {"storage": "1Gi"}}
    assert sync(kube, repo).writes == 0
