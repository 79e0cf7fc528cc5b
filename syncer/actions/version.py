"""`version`: flower-syncer's own version, and those of the cluster and the running agent when
they can be reached (each part independent: one unreachable does not hide the others)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from syncer import __version__
from syncer.cluster.client import ApiError, ClusterUnreachable, Kube


@dataclass(frozen=True)
class VersionResult:
    client: str = __version__
    cluster: str = ""
    agent: str = ""
    errors: dict[str, str] = field(default_factory=dict)  # part -> why it is missing

    def to_dict(self) -> dict[str, Any]:
        return {"client": self.client, "cluster": self.cluster or None, "agent": self.agent or None,
                "errors": self.errors}


def cluster_version(kube: Kube) -> str:
    info = kube.request("GET", "/version", timeout=10)
    return str(info.get("gitVersion", "")) if isinstance(info, dict) else ""


def agent_version(base_url: str, token: str | None, timeout: float = 5.0) -> str:
    """The version a running agent reports on GET /api/v1/status."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    request = urllib.request.Request(base_url.rstrip("/") + "/api/v1/status", headers=headers)
    with urllib.request.urlopen(request, timeout=timeout) as resp:
        payload = json.loads(resp.read() or b"{}")
    return str(payload.get("version", "")) if isinstance(payload, dict) else ""


def versions(kube: Kube | None, agent_url: str | None, token: str | None) -> VersionResult:
    errors: dict[str, str] = {}
    cluster = agent = ""
    if kube is not None:
        try:
            cluster = cluster_version(kube)
        except (ClusterUnreachable, ApiError) as exc:
            errors["cluster"] = str(exc)
    if agent_url is not None:
        try:
            agent = agent_version(agent_url, token)
        except urllib.error.HTTPError as exc:
            errors["agent"] = f"the agent at {agent_url} answered {exc.code}"
        except (urllib.error.URLError, OSError, ValueError) as exc:
            errors["agent"] = f"cannot reach the agent at {agent_url}: {exc}"
    return VersionResult(cluster=cluster, agent=agent, errors=errors)
