"""`resync`: ask a running agent, over its HTTP API, to fetch and sync now."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any


class AgentUnreachable(Exception):
    """Nothing answered at the agent's address."""


class AgentRefused(Exception):
    """The agent answered with an error status; `detail` is its message."""

    def __init__(self, status: int, detail: str) -> None:
        self.status = status
        self.detail = detail
        super().__init__(f"the agent answered {status}: {detail}")


@dataclass(frozen=True)
class UnitOutcome:
    unit: str
    ok: bool
    changes: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    skipped: str = ""


@dataclass(frozen=True)
class ResyncResult:
    accepted: bool
    done: bool  # False when not waited for, or not finished within the timeout
    revision: str = ""
    error: str = ""
    units: list[UnitOutcome] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.accepted and not self.error and all(u.ok for u in self.units)

    @classmethod
    def from_json(cls, payload: dict[str, Any], waited: bool) -> ResyncResult:
        units = [UnitOutcome(unit, bool(r.get("ok")), list(r.get("changes", [])), list(r.get("errors", [])),
                             str(r.get("skipped", "")))
                 for unit, r in sorted((payload.get("units") or {}).items())]
        return cls(bool(payload.get("accepted", True)), bool(payload.get("done", not waited)),
                   str(payload.get("revision", "")), str(payload.get("error") or ""), units, payload)


def resync(base_url: str, token: str | None, unit: str | None, *, wait: bool, timeout: float) -> ResyncResult:
    """POST /api/v1/resync. Raises AgentRefused (401, 404 for an unknown unit, 503 ...) or
    AgentUnreachable."""
    body = json.dumps({"unit": unit, "wait": wait, "timeout": timeout}).encode()
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    url = base_url.rstrip("/") + "/api/v1/resync"
    request = urllib.request.Request(url, data=body, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout + 10) as resp:
            payload = json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as exc:
        raw = exc.read().decode("utf-8", "replace")[:300]
        try:
            detail = str(json.loads(raw).get("error", raw))
        except (ValueError, AttributeError):
            detail = raw
        raise AgentRefused(exc.code, detail) from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise AgentUnreachable(f"cannot reach the agent at {base_url}: {exc}") from None
    return ResyncResult.from_json(payload if isinstance(payload, dict) else {}, wait)
