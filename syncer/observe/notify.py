"""Notifications (Flux's notification-controller is the model): what the agent reports as
Kubernetes Events is also posted to receivers configured for the agent:

- `generic`: JSON `{"unit", "severity", "reason", "message", "object", "time"}`, signed with
  HMAC-SHA256 in `X-Flower-Syncer-Signature: sha256=<hex>` when a secret is given;
- `slack`: a Slack-compatible incoming webhook (`{"text": ...}`, also Mattermost, Rocket.Chat);
- `msteams`: a Microsoft Teams-compatible incoming webhook (a MessageCard).

Each receiver filters by severity (`info` passes everything, `error` only warnings) and by unit
selectors. Posts happen on a background thread, are retried with exponential backoff, and the same
message for the same unit within `dedup_seconds` is sent once, so a flapping unit cannot flood a
channel. Webhook URLs and secrets come from files and are never logged.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import queue
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import structlog

from syncer.identity import Unit, unit_matches

log = structlog.get_logger("syncer.notify")

ReceiverType = Literal["generic", "slack", "msteams"]
SIGNATURE_HEADER = "X-Flower-Syncer-Signature"


@dataclass(frozen=True)
class Notification:
    unit: Unit
    severity: Literal["info", "error"]
    reason: str
    message: str
    object: str = ""  # Kind/namespace/name when about one object


@dataclass(frozen=True)
class Receiver:
    name: str
    type: ReceiverType
    url: str = field(repr=False)
    secret: str = field(default="", repr=False)
    severity: Literal["info", "error"] = "info"
    units: tuple[str, ...] = ()  # selectors; empty: every unit

    def wants(self, n: Notification) -> bool:
        if self.severity == "error" and n.severity != "error":
            return False
        return not self.units or any(unit_matches(n.unit, s) for s in self.units)


def load_receivers(path: Path) -> list[Receiver]:
    """Receivers from a YAML file: `receivers: [{name, type, urlFile, secretFile?, severity?, units?}]`.
    Raises ValueError with a message that names the receiver, never its URL or secret."""
    from syncer.yamldoc import load_documents

    docs, problems = load_documents(path.read_text(), str(path))
    if problems or not docs or not isinstance(docs[0].data, dict):
        raise ValueError(f"{path}: not a notification config ({problems[0].render() if problems else 'empty'})")
    out = []
    for i, r in enumerate(docs[0].data.get("receivers") or []):
        name = str(r.get("name") or f"receivers[{i}]") if isinstance(r, dict) else f"receivers[{i}]"
        if not isinstance(r, dict) or r.get("type") not in ("generic", "slack", "msteams") or not r.get("urlFile"):
            raise ValueError(f"{path}: receiver {name} needs type (generic, slack or msteams) and urlFile")
        if r.get("severity", "info") not in ("info", "error"):
            raise ValueError(f"{path}: receiver {name}: severity is info or error")
        try:
            url = Path(str(r["urlFile"])).read_text().strip()
            secret = Path(str(r["secretFile"])).read_text().strip() if r.get("secretFile") else ""
        except OSError as exc:
            raise ValueError(f"{path}: receiver {name}: cannot read its URL or secret file: {exc.strerror}") from None
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"{path}: receiver {name}: the URL file must hold an http(s) URL")
        out.append(Receiver(name, r["type"], url, secret, r.get("severity", "info"),
                            tuple(str(u) for u in r.get("units") or ())))
    return out


def payload(receiver: Receiver, n: Notification, now: float) -> dict[str, Any]:
    when = datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    title = f"{n.unit.id}: {n.reason}"
    if receiver.type == "slack":
        icon = ":warning:" if n.severity == "error" else ":white_check_mark:"
        return {"text": f"{icon} *{title}*\n{n.message}"}
    if receiver.type == "msteams":
        return {"@type": "MessageCard", "@context": "https://schema.org/extensions", "summary": title,
                "themeColor": "D70000" if n.severity == "error" else "2DC72D", "title": title, "text": n.message}
    return {"unit": n.unit.id, "severity": n.severity, "reason": n.reason, "message": n.message,
            "object": n.object, "time": when}


class Notifier:
    """Delivers notifications to receivers; `notify` never blocks and never raises."""

    def __init__(self, receivers: Sequence[Receiver], *, dedup_seconds: float = 600.0, attempts: int = 4,
                 backoff: float = 1.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.receivers = list(receivers)
        self.dedup_seconds = dedup_seconds
        self.attempts = attempts
        self.backoff = backoff
        self._clock = clock
        self._queue: queue.Queue[tuple[Receiver, Notification] | None] = queue.Queue(1000)
        self._sent: dict[tuple[str, str, str, str], float] = {}  # (receiver, unit, reason, message) -> when
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.delivered = 0
        self.failed = 0

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="notify", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout)

    def notify(self, n: Notification) -> None:
        now = self._clock()
        for r in self.receivers:
            if not r.wants(n):
                continue
            key = (r.name, n.unit.id, n.reason, n.message)
            with self._lock:
                last = self._sent.get(key)
                if last is not None and now - last < self.dedup_seconds:
                    continue  # the same news, again: once per window
                self._sent[key] = now
            try:
                self._queue.put_nowait((r, n))
            except queue.Full:
                self.failed += 1

    def flush(self) -> None:
        """Deliver everything queued now, on this thread (tests, and without start())."""
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return
            if item is not None:
                self.deliver(*item)

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            self.deliver(*item)

    def deliver(self, r: Receiver, n: Notification) -> bool:
        body = json.dumps(payload(r, n, time.time()), sort_keys=True).encode()
        headers = {"Content-Type": "application/json", "User-Agent": "flower-syncer"}
        if r.secret:
            headers[SIGNATURE_HEADER] = "sha256=" + hmac.new(r.secret.encode(), body, hashlib.sha256).hexdigest()
        delay = self.backoff
        for attempt in range(1, self.attempts + 1):
            try:
                req = urllib.request.Request(r.url, data=body, headers=headers, method="POST")
                with urllib.request.urlopen(req, timeout=10) as resp:
                    if resp.status < 300:
                        self.delivered += 1
                        return True
            except urllib.error.HTTPError as exc:
                if 400 <= exc.code < 500 and exc.code != 429:
                    break  # the receiver refuses this message: retrying will not help
            except (urllib.error.URLError, OSError):
                pass
            if attempt < self.attempts:
                time.sleep(delay)
                delay *= 2
        self.failed += 1
        log.warning("notification not delivered", receiver=r.name, reason=n.reason, unit=n.unit.id)
        return False
