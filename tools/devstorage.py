#!/usr/bin/env python3
"""The devcluster's volumes: a default StorageClass `standard` (WaitForFirstConsumer) and a small
provisioner for it, as kind ships rancher's local-path-provisioner. Standard library only.

`up` creates the StorageClass and starts this module as the component `local-provisioner`
(`python3 tools/devstorage.py --state-dir DIR`). For each PersistentVolumeClaim of the class
that the scheduler has given a node (`volume.kubernetes.io/selected-node`, set once a pod that
uses it is scheduled), it creates a directory `<state dir>/volumes/pvc-<uid>` (mode 0777: the
Flower images run as uid 49999, and a hostPath volume takes no fsGroup) and a hostPath
PersistentVolume bound to the claim and pinned to that node. The real node's kubelet shares the
host's file system, so the pod mounts the directory; a kwok node's pod never mounts it. When the
claim is deleted and the volume's reclaim policy is Delete (the class's), the volume is
`Released`: its directory and the PersistentVolume are deleted. Retain leaves both.

Watches on claims and volumes wake it; it also looks every 10 s. `down --purge` removes the
volumes directory, and each `up` starts without one (etcd starts empty too).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import ssl
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import devpki
import devprocs

STORAGE_CLASS_NAME = "standard"
PROVISIONER = "devcluster.flower-syncer.dev/local-path"
SELECTED_NODE = "volume.kubernetes.io/selected-node"
PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"
STORAGE_CLASS = {
    "apiVersion": "storage.k8s.io/v1",
    "kind": "StorageClass",
    "metadata": {"name": STORAGE_CLASS_NAME,
                 "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
    "provisioner": PROVISIONER,
    "reclaimPolicy": "Delete",
    "volumeBindingMode": "WaitForFirstConsumer",
}
RESYNC = 10.0


def volumes_dir(state_dir: Path) -> Path:
    return state_dir / "volumes"


def log(msg: str) -> None:
    print(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {msg}", flush=True)


class Provisioner:
    """One reconcile at a time: claims of the class without a volume get one; released volumes
    of ours with reclaim policy Delete are deleted with their directory."""

    def __init__(self, server: str, context: ssl.SSLContext, base: Path) -> None:
        self.server = server
        self.context = context
        self.base = base

    def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
        return devprocs.api_request(self.server + path, self.context, method, body)

    def reconcile(self) -> None:
        status, claims = self.request("GET", "/api/v1/persistentvolumeclaims")
        status_pv, volumes = self.request("GET", "/api/v1/persistentvolumes")
        if status != 200 or status_pv != 200:
            log(f"list failed: HTTP {status}/{status_pv}")
            return
        existing = {v["metadata"]["name"]: v for v in volumes["items"]}
        for claim in claims["items"]:
            if _wants_volume(claim) and f"pvc-{claim['metadata']['uid']}" not in existing:
                self.provision(claim)
        for volume in volumes["items"]:
            if _ours(volume) and volume.get("status", {}).get("phase") == "Released" \
                    and volume["spec"].get("persistentVolumeReclaimPolicy") == "Delete":
                self.delete(volume)

    def provision(self, claim: dict[str, Any]) -> None:
        meta = claim["metadata"]
        name = f"pvc-{meta['uid']}"
        node = meta["annotations"][SELECTED_NODE]
        path = self.base / name
        path.mkdir(parents=True, exist_ok=True)
        path.chmod(0o777)
        spec = claim["spec"]
        volume = {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": name, "annotations": {PROVISIONED_BY: PROVISIONER}},
            "spec": {
                "capacity": {"storage": ((spec.get("resources") or {}).get("requests") or {}).get("storage", "1Gi")},
                "accessModes": spec.get("accessModes") or ["ReadWriteOnce"],
                "volumeMode": spec.get("volumeMode") or "Filesystem",
                "persistentVolumeReclaimPolicy": STORAGE_CLASS["reclaimPolicy"],
                "storageClassName": STORAGE_CLASS_NAME,
                "hostPath": {"path": str(path), "type": "DirectoryOrCreate"},
                "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": meta["namespace"],
                             "name": meta["name"], "uid": meta["uid"]},
                "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}},
            },
        }
        status, answer = self.request("POST", "/api/v1/persistentvolumes", volume)
        if status in (201, 409):
            log(f"provisioned {name} for {meta['namespace']}/{meta['name']} on {node}: {path}")
        else:
            log(f"cannot create {name}: HTTP {status}: {answer}")

    def delete(self, volume: dict[str, Any]) -> None:
        name = volume["metadata"]["name"]
        path = Path((volume["spec"].get("hostPath") or {}).get("path", ""))
        if path.parent == self.base and path.name == name:  # never anything outside our directory
            shutil.rmtree(path, ignore_errors=True)
        status, answer = self.request("DELETE", f"/api/v1/persistentvolumes/{name}")
        if status in (200, 202, 404):
            log(f"deleted {name} and {path}")
        else:
            log(f"cannot delete {name}: HTTP {status}: {answer}")


def _wants_volume(claim: dict[str, Any]) -> bool:
    meta, spec = claim["metadata"], claim["spec"]
    return (claim.get("status", {}).get("phase") == "Pending" and not spec.get("volumeName")
            and spec.get("storageClassName") == STORAGE_CLASS_NAME and not meta.get("deletionTimestamp")
            and bool((meta.get("annotations") or {}).get(SELECTED_NODE)))


def _ours(volume: dict[str, Any]) -> bool:
    return (volume["metadata"].get("annotations") or {}).get(PROVISIONED_BY) == PROVISIONER


def _watch(server: str, context: ssl.SSLContext, path: str, wake: threading.Event) -> None:
    """Set `wake` at every event of a watch on `path`, for ever (reconnecting)."""
    while True:
        with contextlib.suppress(OSError, ValueError):
            url = f"{server}{path}?watch=1&timeoutSeconds=300"
            with urllib.request.urlopen(url, timeout=330, context=context) as stream:
                for line in stream:
                    if line.strip():
                        wake.set()
        time.sleep(1)


def run(state_dir: Path) -> None:
    state = json.loads((state_dir / "state.json").read_text())
    server = f"https://{state.get('host', '127.0.0.1')}:{state['ports']['apiserver']}"
    context = devpki.admin_ssl_context(state_dir / "pki")
    provisioner = Provisioner(server, context, volumes_dir(state_dir))
    wake = threading.Event()
    for path in ("/api/v1/persistentvolumeclaims", "/api/v1/persistentvolumes"):
        threading.Thread(target=_watch, args=(server, context, path, wake), daemon=True).start()
    log(f"local provisioner for StorageClass {STORAGE_CLASS_NAME}: volumes in {provisioner.base}")
    while True:
        wake.clear()
        try:
            provisioner.reconcile()
        except (OSError, ValueError, KeyError) as exc:
            log(f"reconcile failed: {type(exc).__name__}: {exc}")
        wake.wait(RESYNC)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--state-dir", type=Path, required=True, help="the devcluster's state directory")
    args = parser.parse_args(argv)
    with contextlib.suppress(KeyboardInterrupt):
        run(args.state_dir.resolve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
