"""The devcluster's nodes: the fake CPU and GPU nodes kwok keeps Ready (their specs and Node
manifests), and the layout beside a real node. Standard library only."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

KWOK_ANNOTATION = "kwok.x-k8s.io/node"
DEVCLUSTER_LABEL = "devcluster.flower-syncer.dev/node-class"


@dataclass
class NodeSpec:
    name: str
    node_class: str
    cpu: str
    memory: str
    labels: dict[str, str]
    extended: dict[str, str] = field(default_factory=dict)
    taints: list[dict[str, str]] = field(default_factory=list)


def default_nodes(cpu_nodes: int = 4, nvidia_nodes: int = 2, amd_nodes: int = 1) -> list[NodeSpec]:
    zones = ("zone-a", "zone-b")
    nodes: list[NodeSpec] = []
    for i in range(cpu_nodes):
        nodes.append(
            NodeSpec(
                name=f"cpu-node-{i}",
                node_class="cpu",
                cpu="16",
                memory="64Gi",
                labels={"node.kubernetes.io/instance-type": "cpu-16x64"},
            )
        )
    for i in range(nvidia_nodes):
        nodes.append(
            NodeSpec(
                name=f"gpu-nvidia-{i}",
                node_class="gpu-nvidia",
                cpu="32",
                memory="256Gi",
                labels={
                    "node.kubernetes.io/instance-type": "gpu-a100x4",
                    "nvidia.com/gpu.present": "true",
                    "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB",
                    "nvidia.com/gpu.count": "4",
                    "nvidia.com/gpu.memory": "40960",
                    "nvidia.com/gpu.family": "ampere",
                },
                extended={"nvidia.com/gpu": "4"},
            )
        )
    for i in range(amd_nodes):
        nodes.append(
            NodeSpec(
                name=f"gpu-amd-{i}",
                node_class="gpu-amd",
                cpu="32",
                memory="256Gi",
                labels={
                    "node.kubernetes.io/instance-type": "gpu-mi210x2",
                    "amd.com/gpu.present": "true",
                    "amd.com/gpu.product-name": "AMD_Instinct_MI210",
                    "amd.com/gpu.family": "AI",
                    "amd.com/gpu.vram": "64G",
                    "amd.com/gpu.count": "2",
                },
                extended={"amd.com/gpu": "2"},
            )
        )
    for idx, node in enumerate(nodes):
        node.labels = {
            "kubernetes.io/hostname": node.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "topology.kubernetes.io/region": "local",
            "topology.kubernetes.io/zone": zones[idx % len(zones)],
            "type": "kwok",
            DEVCLUSTER_LABEL: node.node_class,
            **node.labels,
        }
    return nodes


def real_node_layout(nodes: list[NodeSpec]) -> list[NodeSpec]:
    """With a real node, the fake GPU nodes are tainted the way GPU node pools usually are
    (`<vendor>/gpu=present:NoSchedule`), so only pods that tolerate it (GPU pools) land there and
    everything else runs in containers on the real node; the fake CPU nodes are left out."""
    out = []
    for node in nodes:
        vendor = {"gpu-nvidia": "nvidia.com/gpu", "gpu-amd": "amd.com/gpu"}.get(node.node_class)
        if vendor:
            node.taints = [{"key": vendor, "value": "present", "effect": "NoSchedule"}]
            out.append(node)
    return out


def node_manifest(node: NodeSpec) -> dict[str, Any]:
    resources = {
        "cpu": node.cpu,
        "memory": node.memory,
        "pods": "110",
        "ephemeral-storage": "100Gi",
        **node.extended,
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": node.name, "labels": node.labels, "annotations": {KWOK_ANNOTATION: "fake"}},
        "spec": {"taints": node.taints} if node.taints else {},
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "nodeInfo": {"architecture": "amd64", "operatingSystem": "linux"},
        },
    }


def ready_nodes(node_list: dict[str, Any]) -> set[str]:
    """The names of a NodeList's nodes that are Ready without a node-lifecycle taint."""
    ready = set()
    for item in node_list.get("items", []):
        conds = {c["type"]: c["status"] for c in item.get("status", {}).get("conditions", [])}
        # the node lifecycle's taints (not-ready, unreachable); not the GPU taints of real_node_layout
        taints = [t for t in item.get("spec", {}).get("taints") or [] if t["key"].startswith("node.kubernetes.io/")]
        if conds.get("Ready") == "True" and not taints:
            ready.add(item["metadata"]["name"])
    return ready
