"""SOPS end to end on the local control plane (issue 12): a commit with an encrypted Secret
manifest and an encrypted values file; the agent (with the key) applies them, the Secret's data is
the plaintext, and the agent's log, `flower-syncer diff` and `status` never show it. A key rotated
in place (old and new in the key folder, then the old removed) never fails a sync."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from syncer.cluster.client import Kube
from tests.conftest import REPO, KubeCluster, wait_until
from tests.integration.agents import AgentProc, Repos
from tests.sops_cli import SECRET, new_key, sops_encrypt

pytestmark = pytest.mark.cluster

PLAIN = "hunter2-very-secret"
VALUES = "tls:\n  enabled: false\nsupernode:\n  env:\n    - name: API_KEY\n      value: api-key-plaintext-42\n"


def test_encrypted_files_are_applied_and_never_shown(repos: Repos, start_agent: Callable[..., AgentProc],
                                                     kube_cluster: KubeCluster, namespace: str,
                                                     tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys.mkdir()
    old_pub = new_key(keys / "old.agekey")
    kube = Kube.from_kubeconfig(kube_cluster.kubeconfig)
    work = tmp_path / "enc"
    work.mkdir()
    repos.commit({"supernodes/edge/values.yaml": sops_encrypt(VALUES, work, old_pub),
                  "supernodes/edge/secrets.yaml": sops_encrypt(SECRET, work, old_pub)}, "encrypted")
    agent = start_agent(str(repos.bare), "--decryption-key-file", str(keys))
    secret = wait_until("the Secret applied", lambda: kube.get("Secret", namespace, "edge-credentials"),
                        log=agent.log)
    assert base64.b64decode(secret["data"]["password"]).decode() == PLAIN

    # rotation: the new key joins the folder, the files are re-encrypted for it, the old key goes
    new_pub = new_key(keys / "new.agekey")
    rotated = SECRET.replace(PLAIN, PLAIN + "-rotated")
    rev = repos.commit({"supernodes/edge/secrets.yaml": sops_encrypt(rotated, work, new_pub),
                        "supernodes/edge/values.yaml": sops_encrypt(VALUES, work, new_pub)}, "rotate")
    (keys / "old.agekey").unlink()
    wait_until("the rotated value applied", lambda: base64.b64decode(
        (kube.get("Secret", namespace, "edge-credentials") or {}).get("data", {}).get("password", "")).decode()
        == PLAIN + "-rotated", log=agent.log)
    wait_until("revision loaded", lambda: agent.metric("flower_syncer_source_revision_info", revision=rev) == 1,
               log=agent.log)
    unit = f"supernode/{namespace}/edge"
    assert (agent.metric("flower_syncer_sync_total", unit=unit, result="failed") or 0) == 0

    env = {**os.environ, "KUBECONFIG": kube_cluster.kubeconfig}
    shown = [agent.log.read_text(), agent.get("/api/v1/status")[1].decode(), agent.get("/metrics")[1].decode()]
    for args in (["diff", str(repos.work), "--decryption-key-file", str(keys)],
                 ["status", str(repos.work), "--decryption-key-file", str(keys), "-o", "json"]):
        out = subprocess.run([sys.executable, "-m", "syncer", *args], capture_output=True, text=True, env=env,
                             check=False)
        assert out.returncode in (0, 1), out.stderr
        shown += [out.stdout, out.stderr]
    json.loads(shown[-2])  # status -o json is still JSON
    for text in shown:
        for plain in (PLAIN, PLAIN + "-rotated", "api-key-plaintext-42"):
            assert plain not in text


def test_a_new_unit_that_cannot_be_decrypted_shows_in_plain_status_and_kubectl_get(
        repos: Repos, start_agent: Callable[..., AgentProc], kube_cluster: KubeCluster, namespace: str,
        tmp_path: Path) -> None:
    """Issue 26: a new unit encrypted for a key the agent lacks never loads, so it has no inventory;
    the leader writes its Synced condition (Decryption, naming the file) on its FlowerUnit, and
    plain `flower-syncer status` (no DIR: the cluster's view) lists it and exits 1."""
    crd = REPO / "charts" / "flower-syncer" / "crds" / "flowerunits.yaml"
    kube_cluster.kubectl("apply", "-f", str(crd))
    kube_cluster.kubectl("wait", "--for=condition=Established", "crd/flowerunits.flower-syncer.io", "--timeout=60s")
    keys = tmp_path / "keys"
    keys.mkdir()
    new_key(keys / "agent.agekey")
    other = new_key(tmp_path / "someone-elses.agekey")
    work = tmp_path / "enc"
    work.mkdir()
    agent = start_agent(str(repos.bare), "--decryption-key-file", str(keys))
    repos.commit({"supernodes/locked/values.yaml": sops_encrypt(VALUES, work, other)}, "a unit for another key")
    unit = f"supernode/{namespace}/locked"
    env = {**os.environ, "KUBECONFIG": kube_cluster.kubeconfig}

    def plain_status() -> tuple[subprocess.CompletedProcess[str], dict[str, Any]] | None:
        out = subprocess.run([sys.executable, "-m", "syncer", "status", "-o", "json"], capture_output=True,
                             text=True, env=env, check=False)
        units = {u["unit"]: u for u in json.loads(out.stdout)["units"]} if out.stdout.strip() else {}
        return (out, units[unit]) if unit in units else None

    out, row = wait_until("the unit that never loaded in plain status", plain_status, timeout=60, interval=0.5,
                          log=agent.log)
    assert out.returncode == 1, out.stderr
    synced = row["conditions"][0]
    assert (synced["type"], synced["status"], synced["reason"]) == ("Synced", "False", "Decryption"), row
    assert "supernodes/locked/values.yaml" in synced["message"]
    text = subprocess.run([sys.executable, "-m", "syncer", "status", "--unit", "locked"], capture_output=True,
                          text=True, env=env, check=False)
    assert text.returncode == 1 and "locked" in text.stdout and "Decryption" in text.stdout, text.stdout
    table = kube_cluster.kubectl("get", "flowerunits", "-n", namespace, "-o", "wide").stdout
    (line,) = [ln for ln in table.splitlines() if ln.startswith("supernode.locked ")]
    assert "False" in line and "Decryption" in line, table
    assert "api-key-plaintext-42" not in out.stdout + text.stdout + table + agent.log.read_text()
