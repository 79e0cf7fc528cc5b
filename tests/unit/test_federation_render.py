"""Federation rendering: the operator README's examples render what the operator would create
(names, labels, containers, args, ports, GPUs, node config), minus its known defects."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from syncer.render.common import to_yaml
from tests.flower_parse import parse_node_config
from tests.unit.helpers import FIXTURES, container, render_federation_text

OPERATOR = FIXTURES / "operator"
ALL_EXAMPLES = sorted(OPERATOR.glob("*.yaml"))


def render(name: str) -> dict[tuple[str, str], Any]:
    return render_federation_text((OPERATOR / name).read_text())


@pytest.mark.parametrize("path", ALL_EXAMPLES, ids=[p.stem for p in ALL_EXAMPLES])
def test_every_operator_example_renders_deterministically(path: Path) -> None:
    first = to_yaml(render_federation_text(path.read_text()).values())
    second = to_yaml(render_federation_text(path.read_text()).values())
    assert first == second
    assert "managed-by: flower-syncer" in first


def test_quickstart_objects_names_and_labels() -> None:
    objs = render("quickstart.yaml")
    assert sorted(objs) == [
        ("NetworkPolicy", "my-federation-superlink"),
        ("NetworkPolicy", "my-federation-supernodes"),
        ("Service", "my-federation-superlink"),
        ("Service", "my-federation-supernode-default"),
        ("StatefulSet", "my-federation-superlink"),
        ("StatefulSet", "my-federation-supernode-default"),
    ]
    pool = objs[("StatefulSet", "my-federation-supernode-default")]
    assert pool["spec"]["replicas"] == 2
    assert pool["spec"]["serviceName"] == "my-federation-supernode-default"
    selector = pool["spec"]["selector"]["matchLabels"]
    assert selector == {
        "app.kubernetes.io/name": "supernode",
        "app.kubernetes.io/instance": "my-federation",
        "app.kubernetes.io/component": "pool-default",
        "flower.flwr.ai/pool": "default",
    }
    labels = pool["metadata"]["labels"]
    assert labels["app.kubernetes.io/managed-by"] == "flower-syncer"
    assert labels["flower-syncer.io/unit"] == "my-federation"
    assert pool["metadata"]["annotations"]["flower-syncer.io/source"] == "federations/test.yaml"
    # the pods carry the selector and our identity labels
    pod_labels = pool["spec"]["template"]["metadata"]["labels"]
    assert selector.items() <= pod_labels.items()
    assert pod_labels["flower-syncer.io/unit"] == "my-federation"


def test_superlink_subprocess_args_ports_and_service() -> None:
    objs = render("statefulset.yaml")
    sl = objs[("StatefulSet", "federation-statefulset-superlink")]
    assert sl["spec"]["replicas"] == 1
    assert sl["spec"]["serviceName"] == "federation-statefulset-superlink"
    c = container(sl, "superlink")
    assert c["image"] == "flwr/superlink:1.25.0"
    # the state (runs, nodes, keys) in SQLite on a volume: a new SuperLink's default (test_superlink_state.py)
    assert c["args"] == ["--isolation=subprocess", "--insecure", "--database=/app/state/state.db",
                         "--health-server-address=0.0.0.0:8081"]
    assert [(p["name"], p["containerPort"]) for p in c["ports"]] == [("fleet", 9092), ("control", 9093),
                                                                      ("health", 8081)]
    assert c["livenessProbe"]["grpc"] == c["readinessProbe"]["grpc"] == {"port": 8081}
    assert c["resources"] == {"requests": {"memory": "256Mi", "cpu": "100m"},
                              "limits": {"memory": "512Mi", "cpu": "500m"}}
    assert len(sl["spec"]["template"]["spec"]["containers"]) == 1
    svc = objs[("Service", "federation-statefulset-superlink")]
    assert svc["spec"]["type"] == "ClusterIP"
    assert [(p["name"], p["port"], p["targetPort"]) for p in svc["spec"]["ports"]] == [
        ("fleet", 9092, 9092), ("control", 9093, 9093)]
    assert svc["spec"]["selector"] == sl["spec"]["selector"]["matchLabels"]


def test_pool_statefulset_gets_a_headless_governing_service() -> None:
    objs = render("statefulset.yaml")
    headless = objs[("Service", "federation-statefulset-supernode-default")]
    assert headless["spec"]["clusterIP"] == "None"
    pool = objs[("StatefulSet", "federation-statefulset-supernode-default")]
    assert headless["spec"]["selector"] == pool["spec"]["selector"]["matchLabels"]


def test_daemonset_mode_has_no_replicas_and_no_headless_service() -> None:
    objs = render("daemonset.yaml")
    ds = objs[("DaemonSet", "federation-daemonset-supernode-default")]
    assert "replicas" not in ds["spec"]
    assert "serviceName" not in ds["spec"]
    assert ("Service", "federation-daemonset-supernode-default") not in objs
    c = container(ds, "supernode")
    assert c["args"] == ["--superlink=federation-daemonset-superlink:9092", "--isolation=subprocess", "--insecure",
                         "--health-server-address=0.0.0.0:8081"]
    assert c["resources"]["limits"] == {"memory": "1Gi", "cpu": "1000m"}


def test_process_mode_sidecars() -> None:
    objs = render("process.yaml")
    sl = objs[("StatefulSet", "federation-process-superlink")]
    names = [c["name"] for c in sl["spec"]["template"]["spec"]["containers"]]
    assert names == ["superlink", "superexec-serverapp"]
    assert [p["name"] for p in container(sl, "superlink")["ports"]] == ["fleet", "control", "serverappio", "health"]
    assert container(sl, "superexec-serverapp")["args"] == [
        "--plugin-type=serverapp", "--appio-api-address=localhost:9091", "--insecure",
        "--health-server-address=0.0.0.0:8082"]
    svc = objs[("Service", "federation-process-superlink")]
    assert [p["name"] for p in svc["spec"]["ports"]] == ["fleet", "control", "serverappio"]
    pool = objs[("StatefulSet", "federation-process-supernode-default")]
    sn = container(pool, "supernode")
    assert sn["args"] == ["--superlink=federation-process-superlink:9092", "--isolation=process", "--insecure",
                          "--clientappio-api-address=0.0.0.0:9094",
                          "--health-server-address=0.0.0.0:8081"]
    assert sn["ports"] == [{"name": "clientappio", "containerPort": 9094, "protocol": "TCP"},
                           {"name": "health", "containerPort": 8081, "protocol": "TCP"}]
    ce = container(pool, "superexec-clientapp")
    assert ce["ports"] == [{"name": "health-exec", "containerPort": 8082, "protocol": "TCP"}]
    assert ce["livenessProbe"]["grpc"] == {"port": 8082}
    assert ce["image"] == "flwr/superexec:1.25.0"
    assert ce["args"] == ["--plugin-type=clientapp", "--appio-api-address=localhost:9094", "--insecure",
                          "--health-server-address=0.0.0.0:8082"]


def test_pool_image_override() -> None:
    objs = render("multipools.yaml")
    assert container(objs[("DaemonSet", "federation-multipools-supernode-pool-a")], "supernode")["image"] == \
        "flwr/supernode:1.25.0"
    assert container(objs[("DaemonSet", "federation-multipools-supernode-pool-b")], "supernode")["image"] == \
        "flwr/supernode:1.24.0"


def test_gpu_resources_go_on_supernode_in_subprocess_mode() -> None:
    objs = render("mixed-gpu.yaml")
    cpu = container(objs[("StatefulSet", "mixed-gpu-supernode-cpu-only")], "supernode")
    assert "resources" not in cpu
    nv = container(objs[("StatefulSet", "mixed-gpu-supernode-nvidia-gpus")], "supernode")
    assert nv["resources"] == {"limits": {"nvidia.com/gpu": "1"}, "requests": {"nvidia.com/gpu": "1"}}
    amd = container(objs[("StatefulSet", "mixed-gpu-supernode-amd-gpus")], "supernode")
    assert amd["resources"] == {"limits": {"amd.com/gpu": "1"}, "requests": {"amd.com/gpu": "1"}}
    mixed = container(objs[("StatefulSet", "mixed-gpu-supernode-gpu-pool")], "supernode")
    assert mixed["resources"]["limits"] == {"cpu": "4000m", "memory": "8Gi", "nvidia.com/gpu": "1"}
    assert mixed["resources"]["requests"] == {"cpu": "1000m", "memory": "2Gi", "nvidia.com/gpu": "1"}


def test_gpu_resources_go_on_superexec_in_process_mode() -> None:
    objs = render("resources-process.yaml")
    pool = objs[("StatefulSet", "resources-supernode-default")]
    assert "nvidia.com/gpu" not in container(pool, "supernode")["resources"]["limits"]
    ce = container(pool, "superexec-clientapp")
    assert ce["resources"]["limits"] == {"memory": "512Mi", "cpu": "500m", "nvidia.com/gpu": "1"}
    sl = objs[("StatefulSet", "resources-superlink")]
    assert container(sl, "superexec-serverapp")["resources"]["limits"] == {"memory": "256Mi", "cpu": "200m"}


def test_gpu_mount_all() -> None:
    objs = render("mountall.yaml")
    nv = objs[("DaemonSet", "mountall-supernode-all-gpus")]
    assert nv["spec"]["template"]["spec"]["runtimeClassName"] == "nvidia"
    sn = container(nv, "supernode")
    assert {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"} in sn["env"]
    assert "resources" not in sn  # mountAll requests no extended resource
    amd = objs[("DaemonSet", "mountall-supernode-all-amd")]
    spec = amd["spec"]["template"]["spec"]
    assert {v["name"]: v["hostPath"] for v in spec["volumes"]} == {
        "dev-kfd": {"path": "/dev/kfd", "type": "CharDevice"},
        "dev-dri": {"path": "/dev/dri", "type": "Directory"}}
    sn = container(amd, "supernode")
    assert sn["securityContext"] == {"privileged": True}
    assert [m["mountPath"] for m in sn["volumeMounts"]] == ["/dev/kfd", "/dev/dri"]
    assert {"name": "ROCR_VISIBLE_DEVICES", "value": "all"} in sn["env"]


def test_volumes_mounts_and_claim_templates() -> None:
    objs = render("volumes.yaml")
    sl = objs[("StatefulSet", "federation-with-storage-superlink")]
    assert [v["name"] for v in sl["spec"]["template"]["spec"]["volumes"]] == ["model-storage", "tls-certs"]
    assert [m["mountPath"] for m in container(sl, "superlink")["volumeMounts"]] == ["/models", "/etc/ssl/flower",
                                                                                   "/app/state"]
    assert [c["metadata"]["name"] for c in sl["spec"]["volumeClaimTemplates"]] == ["superlink-state"]
    assert [m["mountPath"] for m in container(sl, "superexec-serverapp")["volumeMounts"]] == ["/app/models"]
    pool = objs[("StatefulSet", "federation-with-storage-supernode-training-pool")]
    assert [m["mountPath"] for m in container(pool, "superexec-clientapp")["volumeMounts"]] == [
        "/app/data", "/app/scratch", "/app/config"]
    vct = objs[("StatefulSet", "federation-with-storage-supernode-default")]
    assert vct["spec"]["volumeClaimTemplates"] == [{
        "metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }]
    # without superexecVolumeMounts the sidecar gets the SuperNode's mounts
    assert container(vct, "superexec-clientapp")["volumeMounts"] == [{"name": "data", "mountPath": "/data"}]


def test_static_node_config_is_one_plain_argument() -> None:
    objs = render("static-nodeconfig.yaml")
    c = container(objs[("StatefulSet", "static-config-supernode-default")], "supernode")
    assert "command" not in c
    assert c["args"][-1] == '--node-config=batch-size=32 dataset="cifar10" learning-rate="0.01"'
    assert parse_node_config(c["args"][-1].split("=", 1)[1]) == {
        "batch-size": 32, "dataset": "cifar10", "learning-rate": "0.01"}


def run_wrapper(c: dict[str, Any], env: dict[str, str], tmp_path: Path) -> list[str]:
    """Run the container's command with a real /bin/sh, with a stand-in `flower-supernode` that
    prints its argv one per NUL-terminated line; returns what Flower would receive."""
    fake = tmp_path / "flower-supernode"
    fake.write_text(f"#!{sys.executable}\nimport sys\nsys.stdout.write('\\0'.join(sys.argv[1:]))\n")
    fake.chmod(0o755)
    argv = [*c["command"], *c["args"]]
    assert argv[0] == "/bin/sh"
    full_env = {"PATH": f"{tmp_path}:{os.environ['PATH']}", **env}
    out = subprocess.run(argv, env=full_env, capture_output=True, text=True, check=True).stdout
    return out.split("\0")


@pytest.mark.skipif(shutil.which("sh") is None, reason="needs a POSIX shell")
def test_statefulset_node_config_matches_the_operator_docs(tmp_path: Path) -> None:
    # Operator README: "Pod 2: --node-config 'name="client_default_2" num-partitions=4 partition-id=2'"
    objs = render("nodeconfig.yaml")
    pool = objs[("StatefulSet", "partitioned-training-supernode-default")]
    c = container(pool, "supernode")
    env_names = [e["name"] for e in c["env"]]
    assert env_names == ["POD_NAME", "FLOWER_NODE_NAME"]
    for index in range(4):
        argv = run_wrapper(c, {"POD_NAME": f"partitioned-training-supernode-default-{index}",
                               "FLOWER_NODE_NAME": "node-a"}, tmp_path)
        assert argv[:3] == ["--superlink=partitioned-training-superlink:9092", "--isolation=subprocess",
                            "--insecure"]
        assert argv[-2] == "--node-config"
        assert argv[-1] == f'name="client_default_{index}" num-partitions=4 partition-id={index}'
        assert parse_node_config(argv[-1]) == {"name": f"client_default_{index}", "num-partitions": 4,
                                               "partition-id": index}


@pytest.mark.skipif(shutil.which("sh") is None, reason="needs a POSIX shell")
def test_daemonset_node_config_uses_the_node_name(tmp_path: Path) -> None:
    objs = render("nodeconfig-daemonset.yaml")
    c = container(objs[("DaemonSet", "edge-federation-supernode-edge")], "supernode")
    argv = run_wrapper(c, {"POD_NAME": "edge-federation-supernode-edge-x7k2p", "FLOWER_NODE_NAME": "gpu-node-1"},
                       tmp_path)
    assert parse_node_config(argv[-1]) == {"name": "client_gpu-node-1", "node-id": "gpu-node-1", "pool": "edge"}


@pytest.mark.skipif(shutil.which("sh") is None, reason="needs a POSIX shell")
def test_hostile_extra_args_and_values_reach_flower_verbatim(tmp_path: Path) -> None:
    # The operator pastes these into `sh -c` unquoted; here each stays one argument.
    text = (OPERATOR / "nodeconfig.yaml").read_text().replace(
        "        images: {}\n",
        "        images: {}\n        extraArgs: [\"--max-retries=3; rm -rf /\", \"$(id)\", \"a b\"]\n", 1)
    text = text.replace('name: "client_{pool}_{index}"', "name: \"it's $(id) `x` {index}\"")
    objs = render_federation_text(text)
    c = container(objs[("StatefulSet", "partitioned-training-supernode-default")], "supernode")
    argv = run_wrapper(c, {"POD_NAME": "partitioned-training-supernode-default-3", "FLOWER_NODE_NAME": "n"},
                       tmp_path)
    assert argv[3:6] == ["--max-retries=3; rm -rf /", "$(id)", "a b"]
    assert parse_node_config(argv[-1])["name"] == "it's $(id) `x` 3"


def test_supernodes_dial_the_configured_grpc_port() -> None:
    text = (OPERATOR / "quickstart.yaml").read_text().replace(
        "      type: ClusterIP\n", "      type: NodePort\n      ports:\n        grpc: 30092\n", 1)
    objs = render_federation_text(text)
    svc = objs[("Service", "my-federation-superlink")]
    assert svc["spec"]["type"] == "NodePort"
    assert svc["spec"]["ports"][0] == {"name": "fleet", "port": 30092, "targetPort": 9092, "protocol": "TCP"}
    c = container(objs[("StatefulSet", "my-federation-supernode-default")], "supernode")
    assert c["args"][0] == "--superlink=my-federation-superlink:30092"


ENV_DOC = """
apiVersion: flwr.exalsius.ai/v1
kind: Federation
metadata: {name: envs}
spec:
  mode: StatefulSet
  isolationMode: subprocess
  superlink: {image: flwr/superlink:1.25.0}
  supernodes:
    image: flwr/supernode:1.25.0
    env:
      - {name: A, value: base-a}
      - {name: B, value: base-b}
      - {name: C, value: base-c}
    pools:
      - name: p
        replicas: 1
        env:
          - {name: Z, value: pool-z}
          - {name: B, value: pool-b}
          - {name: Y, value: pool-y}
        podTemplate:
          metadata:
            labels: {team: ml, app.kubernetes.io/name: hijack}
            annotations: {prometheus.io/scrape: "true"}
          spec:
            nodeSelector: {disk: ssd}
            priorityClassName: high
            terminationGracePeriodSeconds: 5
            imagePullSecrets: [{name: regcred}]
            initContainers: [{name: fetch, image: busybox}]
"""


def test_env_merge_is_ordered_and_pool_wins() -> None:
    for _ in range(5):  # the operator's order changes between reconciles; ours never does
        objs = render_federation_text(ENV_DOC)
        c = container(objs[("StatefulSet", "envs-supernode-p")], "supernode")
        assert [(e["name"], e["value"]) for e in c["env"]] == [
            ("A", "base-a"), ("B", "pool-b"), ("C", "base-c"), ("Z", "pool-z"), ("Y", "pool-y")]


def test_pod_template_merge() -> None:
    objs = render_federation_text(ENV_DOC)
    tmpl = objs[("StatefulSet", "envs-supernode-p")]["spec"]["template"]
    assert tmpl["metadata"]["labels"]["team"] == "ml"
    assert tmpl["metadata"]["labels"]["app.kubernetes.io/name"] == "supernode"  # ours win
    assert tmpl["metadata"]["annotations"] == {"prometheus.io/scrape": "true"}
    spec = tmpl["spec"]
    assert spec["nodeSelector"] == {"disk": "ssd"}
    assert spec["priorityClassName"] == "high"
    assert spec["terminationGracePeriodSeconds"] == 5
    assert spec["imagePullSecrets"] == [{"name": "regcred"}]
    assert spec["initContainers"] == [{"name": "fetch", "image": "busybox"}]
    assert [c["name"] for c in spec["containers"]] == ["supernode"]


def test_rendered_manifests_share_no_mutable_state_with_the_model() -> None:
    from tests.unit.helpers import load_federation

    model, _ = load_federation(ENV_DOC)
    assert model is not None
    from syncer.identity import Unit
    from syncer.render.common import RenderContext
    from syncer.render.federation import render_federation

    ctx = RenderContext(Unit("federation", "ns", "envs"), "f.yaml")
    first = render_federation(model, ctx)
    for m in first:
        for c in m["spec"].get("template", {}).get("spec", {}).get("containers", []):
            for e in c.get("env", []):
                e["value"] = "mutated"
    again = render_federation(model, ctx)
    c = next(m for m in again if m["kind"] == "StatefulSet" and m["metadata"]["name"] == "envs-supernode-p")
    assert container(c, "supernode")["env"][0]["value"] == "base-a"
