"""The agent's own ServiceAccount, which no pod rendered from Git may run as: read from the
in-cluster token (its `sub` claim, `system:serviceaccount:<namespace>:<name>`). Outside a cluster
(or with a token that does not say), the chart's name `flower-syncer` in every namespace."""

from __future__ import annotations

import base64
import binascii
import json
from pathlib import Path

from syncer.render.podrules import AgentAccount

TOKEN_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")
_PREFIX = "system:serviceaccount:"


def agent_account(token_file: Path = TOKEN_FILE) -> AgentAccount:
    """The ServiceAccount whose token `token_file` holds; the chart's default when unreadable."""
    try:
        token = token_file.read_text(errors="replace").strip()
    except OSError:
        return AgentAccount()
    account = account_of_token(token)
    return account if account is not None else AgentAccount()


def account_of_token(token: str) -> AgentAccount | None:
    """The ServiceAccount a (not verified: it is our own) ServiceAccount JWT names, or None."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        payload = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (binascii.Error, ValueError):
        return None
    sub = payload.get("sub") if isinstance(payload, dict) else None
    if not isinstance(sub, str) or not sub.startswith(_PREFIX):
        return None
    namespace, _, name = sub.removeprefix(_PREFIX).partition(":")
    return AgentAccount(name, namespace) if namespace and name else None
