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

import pytest

from syncer.cluster.client import Kube
from tests.conftest import KubeCluster, wait_until
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
