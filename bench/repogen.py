"""The generated config repository the engine benchmarks sync: N federations of P pools (one
replica each, node config per replica) plus R SuperNode releases pointing at them."""

from __future__ import annotations

from pathlib import Path

HEAD = """\
apiVersion: flwr.exalsius.ai/v1
kind: Federation
metadata:
  name: {name}
spec:
  mode: StatefulSet
  isolationMode: subprocess
  superlink:
    image: flwr/superlink:{version}
{superlink}  supernodes:
    image: flwr/supernode:{version}
    pools:
"""
SMALL = "    resources: {requests: {cpu: 10m, memory: 16Mi}}\n"  # the SuperLink's, so that many fit
POOL = """\
      - name: pool-{p}
        replicas: 1
        images: {{}}
        supernodeResources: {{requests: {{cpu: 10m, memory: 16Mi}}}}
        nodeConfig: {{partition-id: "{{index}}", num-partitions: "{{replicas}}"}}
"""
RELEASE = """\
supernode:
  superlink: {{address: fed-{i}-superlink, port: 9092}}
  resources: {{requests: {{cpu: 10m, memory: 16Mi}}}}
tls:
  enabled: false
"""


def federation(name: str, pools: str, *, version: str = "1.25.0", superlink: str = "") -> str:
    """The benchmarks' Federation `name`: its `pools` (entries of spec.supernodes.pools, indented
    6 spaces), Flower `version`, and more lines of the SuperLink's section (indented 4)."""
    return HEAD.format(name=name, version=version, superlink=superlink) + pools


def make_repo(root: Path, namespace: str, feds: int, pools: int, releases: int) -> None:
    """Writes the repository into `root` (created), every unit in `namespace`."""
    (root / "federations").mkdir(parents=True)
    (root / "flower-syncer.yaml").write_text(f"name: {namespace}\ndefaultNamespace: {namespace}\n")
    for i in range(feds):
        text = federation(f"fed-{i}", "".join(POOL.format(p=p) for p in range(pools)), superlink=SMALL)
        (root / "federations" / f"fed-{i}.yaml").write_text(text)
    for i in range(releases):
        folder = root / "supernodes" / f"rel-{i}"
        folder.mkdir(parents=True)
        (folder / "values.yaml").write_text(RELEASE.format(i=i % max(feds, 1)))


def expected_pods(feds: int, pools: int, releases: int) -> int:
    """Pods the repository runs once every workload is scaled: a SuperLink per federation, one
    SuperNode per pool (one replica each) and per release."""
    return feds * (pools + 1) + releases


def nodes_for(pods: int) -> int:
    """kwok nodes enough for `pods` at the kubelet's default 110 pods a node (with headroom)."""
    return max(24, -(-pods // 100))
