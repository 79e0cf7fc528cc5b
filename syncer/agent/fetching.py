"""The source thread: fetch when asked (a commit seen, a push webhook, a resync) or at the poll
interval, back off after a failure, and post what came of it to the agent's event queue. It
never loads or syncs anything; the dispatcher does (agent.py)."""

from __future__ import annotations

import queue
import random
import threading
import time
from collections.abc import Callable

from syncer.agent.messages import Event, FetchFailed, RevisionFetched
from syncer.agent.state import AgentOptions, Source
from syncer.source.refs import SourceError

POLL_JITTER = 0.1  # each poll waits the interval +/- 10 %


def poll_delay(interval: float) -> float:
    """How long the source thread waits for the next poll: `interval` +/- POLL_JITTER."""
    return interval * random.uniform(1 - POLL_JITTER, 1 + POLL_JITTER)


class Fetcher:
    """`run` is the source thread; `wanted.set()` asks it for a fetch now. `busy` is true from the
    start of a fetch until its outcome is in the event queue."""

    def __init__(self, source: Source, options: AgentOptions, events: queue.Queue[Event], stop: threading.Event,
                 report: Callable[[str, BaseException], str]) -> None:
        self.source = source
        self.options = options
        self.events = events
        self.stop = stop
        self.report = report  # a bug in the fetch: its diagnostic text (Supervisor.report)
        self.wanted = threading.Event()
        self.busy = False

    def run(self) -> None:
        """Fetch when asked or at the poll interval, with +/-10 % jitter so that many agents do not
        poll a server in step. After a failed fetch the next one waits with exponential backoff,
        unless something asks for a fetch first: a push after a Git outage is applied at once."""
        backoff = self.options.fetch_backoff
        wait = poll_delay(self.options.poll_interval)
        while not self.stop.is_set():
            self.wanted.wait(wait)
            if self.stop.is_set():
                return
            self.wanted.clear()
            seen = time.monotonic()
            self.busy = True
            try:
                checkout = self.source.fetch()
            except Exception as exc:  # the last good revision stays applied; a bug is reported like an outage
                error = exc if isinstance(exc, SourceError) else SourceError(
                    "invalid", f"the fetch failed: {self.report('fetching', exc)}")
                self.events.put(FetchFailed(error))
                self.busy = False  # after the outcome is queued: never idle in between
                wait, backoff = backoff, min(backoff * 2, self.options.fetch_backoff_max)
                continue
            backoff = self.options.fetch_backoff
            wait = poll_delay(self.options.poll_interval)
            self.events.put(RevisionFetched(checkout, seen))
            self.busy = False
