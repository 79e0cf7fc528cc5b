"""The official Kubernetes client without its generated API classes and models
(`syncer.cluster.official`): a client made from a kubeconfig loads none of them, code that asks for
the whole client still gets it, and a client laid out differently falls back to the whole import.
Each case runs in a fresh interpreter, which then reports what it found."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: not-a-real-token}}]
contexts: [{name: x, context: {cluster: c, user: u, namespace: team-a}}]
current-context: x
"""

# what a light client must not have loaded: the generated APIs and models, the packages only
# `kubernetes/__init__.py` imports (watch, stream's websockets, dynamic, leaderelection) and the
# helpers only `kubernetes.utils`'s does (its retry and keepalive modules are the REST layer's)
HEAVY = ("kubernetes.client.api.", "kubernetes.client.models.", "kubernetes.watch", "kubernetes.stream",
         "kubernetes.dynamic", "kubernetes.utils.create_from_yaml", "kubernetes.utils.metrics",
         "kubernetes.leaderelection", "kubernetes.informer", "websocket")

_PROBE = """
import json, sys
{before}
from syncer.cluster.client import Kube
kube = Kube.from_kubeconfig(sys.argv[1])
api = kube.api
out = {{"host": api.configuration.host, "auth": api.configuration.api_key.get("BearerToken") or
        api.configuration.api_key.get("authorization"),
        "modules": sorted(m for m in sys.modules if m == "kubernetes" or m.startswith(("kubernetes.", "websocket")))}}
{after}
print(json.dumps(out))
"""


def probe(tmp_path: Path, *, before: str = "", after: str = "") -> dict[str, object]:
    config = tmp_path / "kubeconfig"
    config.write_text(KUBECONFIG)
    done = subprocess.run([sys.executable, "-c", _PROBE.format(before=before, after=after), str(config)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return result


def heavy(modules: object) -> list[str]:
    assert isinstance(modules, list)
    return [m for m in modules if m.startswith(HEAVY)]


def test_a_client_from_a_kubeconfig_loads_no_generated_api_or_model(tmp_path: Path) -> None:
    out = probe(tmp_path)
    assert out["host"] == "https://127.0.0.1:6443"
    assert out["auth"] == "Bearer not-a-real-token"  # the kubeconfig loader ran: its user's token is set
    assert heavy(out["modules"]) == []
    assert "kubernetes.config.kube_config" in out["modules"]  # ... and it is the official one


def test_code_asking_for_the_whole_client_afterwards_still_gets_it(tmp_path: Path) -> None:
    out = probe(tmp_path, after="""
import kubernetes
from kubernetes import client, watch
from syncer.cluster import official
out["pod"] = client.V1Pod(metadata=client.V1ObjectMeta(name="p")).metadata.name
out["api"] = client.CoreV1Api.__name__
out["watch"] = watch.Watch.__name__
out["version"] = kubernetes.__version__
out["whole"] = [official.is_whole(kubernetes), official.is_whole(sys.modules["kubernetes.client"])]
out["same"] = client.ApiClient is type(api) and client.Configuration is type(api.configuration)
""")
    assert out["pod"] == "p"
    assert out["api"] == "CoreV1Api"
    assert out["watch"] == "Watch"
    assert isinstance(out["version"], str) and out["version"]
    assert out["whole"] == [True, True]
    assert out["same"] is True  # one class of each, not a second copy of the modules


def test_a_client_imported_whole_before_is_used_as_it_is(tmp_path: Path) -> None:
    out = probe(tmp_path, before="import kubernetes", after="""
from syncer.cluster import official
out["whole"] = official.is_whole(sys.modules["kubernetes"])
""")
    assert out["whole"] is True
    assert out["host"] == "https://127.0.0.1:6443"


@pytest.mark.parametrize("moved", ["Configuration", "ApiClient"])
def test_a_client_laid_out_differently_is_imported_whole(tmp_path: Path, moved: str) -> None:
    """A name the loaders import from `kubernetes.client` no longer where it was: the light import
    fails, is undone, and the usual import takes over (only the saving is lost)."""
    out = probe(tmp_path, before=f"""
from syncer.cluster import official
official.CLIENT_NAMES = {{**official.CLIENT_NAMES, {moved!r}: "no_such_module"}}
""")
    assert out["host"] == "https://127.0.0.1:6443"
    assert out["auth"] == "Bearer not-a-real-token"
    assert "kubernetes.watch" in out["modules"]  # the whole package's __init__ ran
