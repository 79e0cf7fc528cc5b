"""Where the agent's news goes: a Kubernetes Event for operators and a notification for the
receivers that want it (webhooks, Slack, Teams), the leader's only. What each Event says is made
by the pure constructors of agent.reporting; this posts them."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

from syncer.cluster.events import Event, EventRecorder
from syncer.identity import Unit
from syncer.observe.notify import Notification, Notifier

Guard = Callable[[str, Callable[[], Any]], Any]  # Supervisor.guard: a failure is logged, never raised


class Reporter:
    def __init__(self, leading: threading.Event, guard: Guard, recorder: EventRecorder | None = None,
                 notifier: Notifier | None = None) -> None:
        self.leading = leading
        self.guard = guard
        self.recorder = recorder  # Kubernetes Events for operators; None: none are posted
        self.notifier = notifier  # webhooks (generic, Slack, Teams); None: none

    def report(self, unit: Unit, event: Event) -> None:
        """A Kubernetes Event, and a notification to the receivers that want it (leader only)."""
        if not self.leading.is_set():
            return
        if self.recorder is not None:  # a failure to report never fails what is reported
            self.guard("posting an Event", functools.partial(self.recorder.record, event))
        if self.notifier is not None:
            about = "" if event.regarding.kind == "ConfigMap" else str(event.regarding)
            note = Notification(unit, "error" if event.type == "Warning" else "info", event.reason, event.note, about)
            self.guard("notifying", functools.partial(self.notifier.notify, note))
