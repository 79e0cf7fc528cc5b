"""Push webhooks: authenticate a delivery and read which ref it is about. Pure functions, no I/O.

Providers, told apart by their headers:

- GitHub (``X-GitHub-Event``): ``X-Hub-Signature-256: sha256=<HMAC-SHA256 of the body, hex>``. ``ping``
  events are accepted (ref None). JSON bodies, or form-encoded ones with a ``payload`` field.
- GitLab (``X-Gitlab-Event`` or ``X-Gitlab-Token``): ``X-Gitlab-Token`` equals the secret.
- generic (anything else, e.g. Gitea/Forgejo, Bitbucket or a CI script): ``X-Hub-Signature-256`` as for
  GitHub, or ``Authorization: Bearer <secret>``. The body may be anything; ref/after are read when it is
  JSON.

Secrets and signatures are compared in constant time. An empty secret rejects every delivery.

Replays: `delivery_id` reads the provider's delivery id (``X-GitHub-Delivery``; GitLab's
``Idempotency-Key`` or ``X-Gitlab-Event-UUID``; Gitea/Forgejo/Gogs ``X-*-Delivery``, Bitbucket
``X-Request-UUID``, or a generic ``X-Delivery-Id``), and a `ReplayGuard` remembers the ids it
accepted for a window, so the same delivery twice causes one fetch. Only authenticated deliveries
are remembered (an unauthenticated one cannot burn an id). GitHub's and Gitea's signatures do not
cover the headers, so this stops redeliveries and replays of a captured request as sent, not an
attacker who changes the id; either way a delivery only ever triggers a fetch of the remote.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import parse_qs

MAX_BODY_BYTES = 1 << 20
REPLAY_WINDOW = 600.0  # seconds a delivery id is remembered
MAX_REMEMBERED = 10_000  # delivery ids remembered at most (the oldest are forgotten first)
MAX_DELIVERY_ID = 200  # a longer "id" is not one: not remembered

# where each provider puts its delivery id, most specific first
DELIVERY_HEADERS: dict[str, tuple[str, ...]] = {
    "github": ("x-github-delivery",),
    "gitlab": ("idempotency-key", "x-gitlab-event-uuid"),
    "generic": ("x-gitea-delivery", "x-forgejo-delivery", "x-gogs-delivery", "x-github-delivery",
                "x-request-uuid", "x-delivery-id", "idempotency-key"),
}

Provider = Literal["github", "gitlab", "generic"]


class WebhookRejected(Exception):
    """The delivery is not authentic or not acceptable; ``reason`` is safe to log and to answer with."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class PushEvent:
    provider: Provider
    ref: str | None
    after: str | None
    delivery: str | None = None  # the provider's delivery id, when it sent one


def delivery_id(provider: Provider, headers: Mapping[str, str]) -> str | None:
    """The delivery id of a request from `provider`, or None (none sent, or not a plausible id)."""
    h = {k.lower(): v for k, v in headers.items()}
    for name in DELIVERY_HEADERS[provider]:
        value = h.get(name, "").strip()
        if value:
            return value if len(value) <= MAX_DELIVERY_ID and value.isprintable() else None
    return None


class ReplayGuard:
    """Remembers accepted delivery ids for `window` seconds (at most `capacity` of them).
    Thread-safe; the clock is injectable for tests."""

    def __init__(self, window: float = REPLAY_WINDOW, capacity: int = MAX_REMEMBERED,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.window = window
        self.capacity = capacity
        self._clock = clock
        self._seen: OrderedDict[tuple[str, str], float] = OrderedDict()  # oldest first
        self._lock = threading.Lock()

    def first_time(self, event: PushEvent) -> bool:
        """True, and the id is remembered, unless the same provider sent this id within the window.
        An event without an id is always a first time."""
        if event.delivery is None or self.window <= 0:
            return True
        key = (event.provider, event.delivery)
        with self._lock:
            now = self._clock()
            while self._seen and (len(self._seen) >= self.capacity
                                  or next(iter(self._seen.values())) <= now - self.window):
                self._seen.popitem(last=False)
            if key in self._seen:
                return False
            self._seen[key] = now
            return True


def _same(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode("utf-8", "surrogateescape"), b.encode("utf-8", "surrogateescape"))


def _hub_signature_ok(signature: str, body: bytes, secret: str) -> bool:
    algo, sep, digest = signature.strip().partition("=")
    if not sep or algo.lower() != "sha256":
        return False
    expected = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return _same(expected, digest.strip().lower())


def verify(headers: Mapping[str, str], body: bytes, secret: str) -> PushEvent:
    """Authenticate one delivery and return what it says; raises WebhookRejected."""
    if not secret:
        raise WebhookRejected("no webhook secret is configured")
    if len(body) > MAX_BODY_BYTES:
        raise WebhookRejected(f"body larger than {MAX_BODY_BYTES} bytes")
    h = {k.lower(): v for k, v in headers.items()}
    if "x-github-event" in h:
        signature = h.get("x-hub-signature-256")
        if not signature:
            raise WebhookRejected("missing X-Hub-Signature-256 header")
        if not _hub_signature_ok(signature, body, secret):
            raise WebhookRejected("bad X-Hub-Signature-256 signature")
        if h["x-github-event"].strip().lower() == "ping":
            return PushEvent("github", None, None, delivery_id("github", h))
        return _event("github", _github_payload(h, body), h)
    if "x-gitlab-event" in h or "x-gitlab-token" in h:
        token = h.get("x-gitlab-token")
        if not token:
            raise WebhookRejected("missing X-Gitlab-Token header")
        if not _same(token, secret):
            raise WebhookRejected("bad X-Gitlab-Token")
        return _event("gitlab", _json(body, required=True), h)
    signature = h.get("x-hub-signature-256")
    authorization = h.get("authorization", "")
    if signature:
        if not _hub_signature_ok(signature, body, secret):
            raise WebhookRejected("bad X-Hub-Signature-256 signature")
    elif authorization:
        scheme, _, value = authorization.strip().partition(" ")
        if scheme.lower() != "bearer" or not _same(value.strip(), secret):
            raise WebhookRejected("bad Authorization header")
    else:
        raise WebhookRejected("missing signature (X-Hub-Signature-256, X-Gitlab-Token or Authorization: Bearer)")
    return _event("generic", _json(body, required=False), h)


def _github_payload(h: Mapping[str, str], body: bytes) -> Any:
    if h.get("content-type", "").split(";")[0].strip().lower() == "application/x-www-form-urlencoded":
        try:
            fields = parse_qs(body.decode("utf-8"), strict_parsing=False)
        except UnicodeDecodeError:
            raise WebhookRejected("body is not UTF-8") from None
        payload = fields.get("payload")
        if not payload:
            raise WebhookRejected("form body without a payload field")
        return _json(payload[0].encode(), required=True)
    return _json(body, required=True)


def _json(body: bytes, *, required: bool) -> Any:
    try:
        return json.loads(body) if body else None
    except (ValueError, UnicodeDecodeError, RecursionError):  # RecursionError: nested too deeply
        if required:
            raise WebhookRejected("body is not JSON") from None
        return None


def _event(provider: Provider, payload: Any, h: Mapping[str, str]) -> PushEvent:
    delivery = delivery_id(provider, h)
    if not isinstance(payload, dict):
        return PushEvent(provider, None, None, delivery)
    ref, after = payload.get("ref"), payload.get("after")
    return PushEvent(provider, ref if isinstance(ref, str) and ref else None,
                     after if isinstance(after, str) and after else None, delivery)
