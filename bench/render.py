#!/usr/bin/env python3
"""Render benchmark: 1,000 federations of 4 pools each plus 1,000 SuperNode releases.

Prints, for each phase, the time, objects per second and the process's peak RSS:
  load      YAML text -> validated models (what `validate` does per file)
  render    validated models -> manifests (the pure renderers)
  serialise manifests -> YAML (what `render` prints)
Target: rendering the 1,000 federations in under 1 s on this machine.

    python3 bench/render.py [--federations N] [--releases N]
"""

from __future__ import annotations

import argparse
import gc
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from syncer.identity import Unit
from syncer.models.base import validate_document
from syncer.models.federation import Federation
from syncer.models.settings import RepoSettings, SyncPolicy
from syncer.models.supernode import SuperNodeValues
from syncer.render.common import to_yaml
from syncer.render.repo import render_repo
from syncer.repo.state import LoadedUnit, RepoState
from syncer.yamldoc import load_documents

FEDERATION = """\
apiVersion: flwr.exalsius.ai/v1
kind: Federation
metadata:
  name: fed-{i}
spec:
  mode: StatefulSet
  isolationMode: process
  superlink:
    image: flwr/superlink:1.25.0
    superexecImage: flwr/superexec:1.25.0
    resources: {{requests: {{cpu: 100m, memory: 256Mi}}}}
    env: [{{name: FLWR_LOG_LEVEL, value: INFO}}]
  supernodes:
    image: flwr/supernode:1.25.0
    env: [{{name: A, value: "1"}}]
    pools:
"""
POOL = """\
      - name: pool-{p}
        replicas: 3
        images: {{superexecClientApp: flwr/superexec:1.25.0}}
        supernodeResources: {{requests: {{cpu: 200m, memory: 512Mi}}}}
        env: [{{name: B, value: "2"}}]
        gpu: {{enabled: {gpu}, vendor: nvidia, count: 1}}
        nodeConfig: {{partition-id: "{{index}}", num-partitions: "{{replicas}}", dataset: cifar10}}
        podTemplate: {{spec: {{nodeSelector: {{pool: p{p}}}, tolerations: [{{key: gpu, operator: Exists}}]}}}}
"""
RELEASE = """\
supernode:
  replicas: 2
  isolationMode: process
  superlink: {{address: fed-{i}-superlink, port: 9092}}
  node: {{config: {{partition-id: {i}, num-partitions: 1000, lr: 0.01, name: "r{i}"}}}}
  image: {{registry: registry.example.com, repository: flwr/supernode, tag: 1.25.0}}
superexec:
  enabled: true
tls:
  enabled: false
"""


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def phase(name: str, objects: int, seconds: float) -> None:
    rate = objects / seconds if seconds else float("inf")
    print(f"{name:<28} {seconds * 1000:9.1f} ms  {objects:7d} objects  {rate:11,.0f} objects/s  "
          f"peak RSS {rss_mib():7.1f} MiB")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--federations", type=int, default=1000)
    ap.add_argument("--releases", type=int, default=1000)
    args = ap.parse_args()
    fed_texts = [FEDERATION.format(i=i) + "".join(POOL.format(p=p, gpu="true" if p == 3 else "false")
                                                 for p in range(4)) for i in range(args.federations)]
    rel_texts = [RELEASE.format(i=i) for i in range(args.releases)]
    print(f"flower-syncer render benchmark: {args.federations} federations x 4 pools, "
          f"{args.releases} SuperNode releases (python {sys.version.split()[0]})")

    gc.collect()
    t = time.perf_counter()
    feds = []
    for i, text in enumerate(fed_texts):
        docs, _ = load_documents(text, f"federations/f{i}.yaml")
        model, diags = validate_document(Federation, docs[0])
        assert model is not None, diags
        feds.append(model)
    phase("load+validate federations", len(feds), time.perf_counter() - t)

    t = time.perf_counter()
    rels = []
    for i, text in enumerate(rel_texts):
        docs, _ = load_documents(text, f"supernodes/r{i}/values.yaml")
        model, diags = validate_document(SuperNodeValues, docs[0])
        assert model is not None, diags
        rels.append(model)
    phase("load+validate releases", len(rels), time.perf_counter() - t)

    def repo(units: list[LoadedUnit]) -> RepoState:
        return RepoState(root=Path(), settings=RepoSettings(), units=units)

    fed_units = [LoadedUnit(Unit("federation", "bench", f.name), f"federations/f{i}.yaml", 1, f, SyncPolicy())
                 for i, f in enumerate(feds)]
    rel_units = [LoadedUnit(Unit("supernode", "bench", f"r{i}"), f"supernodes/r{i}/values.yaml", 1, r, SyncPolicy())
                 for i, r in enumerate(rels)]
    t = time.perf_counter()
    fed_objs = render_repo(repo(fed_units)).manifests()
    fed_s = time.perf_counter() - t
    phase("render federations", len(fed_objs), fed_s)

    t = time.perf_counter()
    rel_objs = render_repo(repo(rel_units)).manifests()
    phase("render releases", len(rel_objs), time.perf_counter() - t)

    t = time.perf_counter()
    text = to_yaml(fed_objs + rel_objs)
    phase("serialise YAML", len(fed_objs) + len(rel_objs), time.perf_counter() - t)
    print(f"YAML output: {len(text) / 1e6:.1f} MB")
    verdict = "PASS" if fed_s < 1.0 else "FAIL"
    print(f"target: render 1,000 federations in < 1 s: {fed_s:.3f} s -> {verdict}")
    return 0 if fed_s < 1.0 or args.federations != 1000 else 1


if __name__ == "__main__":
    sys.exit(main())
