"""Notifications (Flux's notification-controller is the model): what the agent reports as
Kubernetes Events is also posted to receivers configured for the agent:

- `generic`: JSON `{"unit", "severity", "reason", "message", "object", "time"}`, signed with
  HMAC-SHA256 in `X-Flower-Syncer-Signature: sha256=<hex>` when a secret is given;
- `slack`: a Slack-compatible incoming webhook (`{"text": ...}`, also Mattermost, Rocket.Chat);
- `msteams`: a Microsoft Teams-compatible incoming webhook (a MessageCard).

Each receiver filters by severity (`info` passes everything, `error` only warnings) and by unit
selectors. Posts happen on a worker thread per receiver, with a bounded queue (a slow receiver
drops its oldest notifications, counted, and never delays another), a timeout per POST and
retries with exponential backoff; the same message for the same unit within `dedup_seconds` is
sent once, so a flapping unit cannot flood a channel. Webhook URLs and secrets come from files and are never logged.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import http.client
import itertools
import json
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import structlog

from syncer.identity import Unit, unit_matches
from syncer.observe.families import CounterFamily, CounterRow, Family, FamilyCollector, GaugeFamily, GaugeRow

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
    out: list[Receiver] = []
    for i, r in enumerate(docs[0].data.get("receivers") or []):
        name = str(r.get("name") or f"receivers[{i}]") if isinstance(r, dict) else f"receivers[{i}]"
        if not isinstance(r, dict) or r.get("type") not in ("generic", "slack", "msteams") or not r.get("urlFile"):
            raise ValueError(f"{path}: receiver {name} needs type (generic, slack or msteams) and urlFile")
        if any(o.name == name for o in out):  # each receiver has its queue, worker and metrics by name
            raise ValueError(f"{path}: receiver {name}: the name is used twice; give each receiver its own")
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


DEFAULT_QUEUE = 100  # notifications waiting per receiver; over it the oldest is dropped (and counted)
DEFAULT_TIMEOUT = 10.0  # seconds for one POST (connect, send, answer)
OUTCOMES = ("delivered", "failed", "dropped")
Spawn = Callable[[str, Callable[[], None]], threading.Thread]


class _Lane:
    """One receiver's bounded queue, worked by a thread of its own: a receiver that never answers
    only delays itself, and when it falls behind, its oldest notifications are dropped."""

    def __init__(self, receiver: Receiver, size: int) -> None:
        self.receiver = receiver
        self.size = size
        self.items: deque[tuple[int, Notification]] = deque()
        self.cond = threading.Condition()
        self.closed = False
        self.thread: threading.Thread | None = None
        self.counts = dict.fromkeys(OUTCOMES, 0)

    def put(self, seq: int, n: Notification) -> bool:
        """Queue `n`; False when the oldest queued one had to be dropped to make room."""
        with self.cond:
            dropped = len(self.items) >= self.size
            if dropped:
                self.items.popleft()
                self.counts["dropped"] += 1
            self.items.append((seq, n))
            self.cond.notify()
            return not dropped

    def take(self) -> Notification | None:
        """The next notification; None once closed and empty (`Notifier.stop` bounds the drain)."""
        with self.cond:
            while not self.items and not self.closed:
                self.cond.wait()
            return self.items.popleft()[1] if self.items else None

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()


Lanes = list[tuple[str, "_Lane"]]  # a scrape's snapshot: (receiver, its lane), sorted


class Notifier(FamilyCollector[Lanes]):
    """Delivers notifications to receivers; `notify` never blocks and never raises. Each receiver
    has its own bounded queue and worker (see `_Lane`) and each POST its timeout, so one slow or
    silent receiver never delays another nor the agent. Also a Prometheus collector:
    ``flower_syncer_notifications_total{receiver, outcome}`` (delivered, failed, dropped) and
    ``flower_syncer_notification_queue{receiver}``."""

    def __init__(self, receivers: Sequence[Receiver], *, dedup_seconds: float = 600.0, attempts: int = 4,
                 backoff: float = 1.0, clock: Callable[[], float] = time.monotonic,
                 queue_size: int = DEFAULT_QUEUE, timeout: float = DEFAULT_TIMEOUT) -> None:
        super().__init__(_FAMILIES, lambda: sorted(self._lanes.items()))
        self.receivers = list(receivers)
        self.dedup_seconds = dedup_seconds
        self.attempts = attempts
        self.backoff = backoff
        self.timeout = timeout
        self._clock = clock
        self._lanes = {r.name: _Lane(r, queue_size) for r in self.receivers}
        self._seq = itertools.count()
        self._sent: dict[tuple[str, str, str, str], float] = {}  # (receiver, unit, reason, message) -> when
        self._lock = threading.Lock()
        self._stopping = threading.Event()

    @property
    def delivered(self) -> int:
        return sum(lane.counts["delivered"] for lane in self._lanes.values())

    @property
    def failed(self) -> int:
        return sum(lane.counts["failed"] for lane in self._lanes.values())

    @property
    def dropped(self) -> int:
        return sum(lane.counts["dropped"] for lane in self._lanes.values())

    def start(self, spawn: Spawn | None = None) -> None:
        """A worker per receiver; `spawn(name, loop)` starts each (the agent's supervisor), else a
        plain daemon thread."""
        for lane in self._lanes.values():
            loop = functools.partial(self._run, lane)
            name = f"notify-{lane.receiver.name}"
            if spawn is not None:
                lane.thread = spawn(name, loop)
            else:
                lane.thread = threading.Thread(target=loop, name=name, daemon=True)
                lane.thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Send what is queued within `timeout` (no retries), then leave the rest."""
        self._stopping.set()  # cuts retry waits short
        for lane in self._lanes.values():
            lane.close()
        deadline = time.monotonic() + timeout
        for lane in self._lanes.values():
            if lane.thread is not None:
                lane.thread.join(max(0.0, deadline - time.monotonic()))

    def notify(self, n: Notification) -> None:
        now = self._clock()
        seq = next(self._seq)
        for r in self.receivers:
            if not r.wants(n):
                continue
            key = (r.name, n.unit.id, n.reason, n.message)
            with self._lock:
                last = self._sent.get(key)
                if last is not None and now - last < self.dedup_seconds:
                    continue  # the same news, again: once per window
                self._sent[key] = now
                if len(self._sent) > 10_000:  # bounded memory: forget what left the window
                    self._sent = {k: t for k, t in self._sent.items() if now - t < self.dedup_seconds}
            if not self._lanes[r.name].put(seq, n):
                log.debug("notification queue full; dropped the oldest", receiver=r.name)

    def flush(self) -> None:
        """Deliver everything queued now, in the order notified, on this thread (tests, and
        without start())."""
        items: list[tuple[int, Receiver, Notification]] = []
        for lane in self._lanes.values():
            with lane.cond:
                items += [(seq, lane.receiver, n) for seq, n in lane.items]
                lane.items.clear()
        for _, r, n in sorted(items, key=lambda item: item[0]):
            self.deliver(r, n)

    def _run(self, lane: _Lane) -> None:
        while (n := lane.take()) is not None:
            try:
                self.deliver(lane.receiver, n)
            except Exception as exc:  # one bad notification never stops the receiver's worker
                lane.counts["failed"] += 1
                log.error("notification failed", receiver=lane.receiver.name, reason=n.reason, unit=n.unit.id,
                          error=f"{type(exc).__name__}: {exc}")

    def deliver(self, r: Receiver, n: Notification) -> bool:
        counts = self._lanes[r.name].counts if r.name in self._lanes else dict.fromkeys(OUTCOMES, 0)
        body = json.dumps(payload(r, n, time.time()), sort_keys=True).encode()
        headers = {"Content-Type": "application/json", "User-Agent": "flower-syncer"}
        if r.secret:
            headers[SIGNATURE_HEADER] = "sha256=" + hmac.new(r.secret.encode(), body, hashlib.sha256).hexdigest()
        delay = self.backoff
        for attempt in range(1, self.attempts + 1):
            try:
                req = urllib.request.Request(r.url, data=body, headers=headers, method="POST")
                with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                    if resp.status < 300:
                        counts["delivered"] += 1
                        return True
            except urllib.error.HTTPError as exc:
                if 400 <= exc.code < 500 and exc.code != 429:
                    break  # the receiver refuses this message: retrying will not help
            except (urllib.error.URLError, OSError, http.client.HTTPException):
                pass
            if attempt < self.attempts and self._stopping.wait(delay):
                break
            delay *= 2
        counts["failed"] += 1
        log.warning("notification not delivered", receiver=r.name, reason=n.reason, unit=n.unit.id)
        return False


_HELP_TOTAL = ("Notifications per receiver by outcome: delivered, failed (after the retries) or dropped (the "
               "receiver's queue was full: it is slower than the agent reports)")
_HELP_QUEUE = "Notifications waiting to be sent, per receiver"


def _totals(lanes: Lanes) -> Iterator[CounterRow]:
    for name, lane in lanes:
        for outcome in OUTCOMES:
            yield (name, outcome), float(lane.counts[outcome]), None


def _queued(lanes: Lanes) -> Iterator[GaugeRow]:
    for name, lane in lanes:
        yield (name,), float(len(lane.items))


_FAMILIES: tuple[Family[Lanes], ...] = (
    CounterFamily("flower_syncer_notifications", _HELP_TOTAL, ("receiver", "outcome"), _totals),
    GaugeFamily("flower_syncer_notification_queue", _HELP_QUEUE, ("receiver",), _queued),
)
