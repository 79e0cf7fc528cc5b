"""Resync requests that wait for an answer (`flower-syncer resync --wait`, the API's `wait`): each
is a `Waiter`, answered as its fetch fails, its revision is installed (which units it waits for)
and those units sync. The API's thread asks (`request`); the dispatcher answers, so the waiters'
list is only ever changed on the dispatcher's thread."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from syncer.agent.messages import Event, FetchRequested, ResyncRequested, Waiter
from syncer.engine.changeset import Cause, UnitResult
from syncer.identity import Unit, unit_matches


class Resyncs:
    def __init__(self, post: Callable[[Event], None], leading: threading.Event) -> None:
        self.post = post  # onto the agent's event queue
        self.leading = leading
        self.waiters: list[Waiter] = []

    def request(self, unit: str | None, wait: bool, timeout: float, *, known: bool) -> dict[str, Any]:
        """A resync of `unit` (None: every unit; `known`: it names a unit of ours already), answered
        at once, once fetched, or once synced (`wait`)."""
        if not self.leading.is_set():
            # a standby fetches but never syncs: waiting here would only time out
            self.post(FetchRequested("resync"))
            return {"accepted": False, "done": False,
                    "error": "this agent is a standby, not the Lease holder: send the request to the leader "
                             "(the standby only fetched)"}
        # an unknown unit may come with this fetch: then even without `wait`, answer once it is installed
        waiter = Waiter(selector=unit) if wait or not known else None
        self.post(ResyncRequested(unit, waiter))
        if waiter is None:
            return {"accepted": True}
        if not wait:
            waiter.fetched.wait(timeout)
            return {"accepted": True, "unknownUnit": waiter.unknown_unit, "error": waiter.error}
        if not waiter.done.wait(timeout):
            return {"accepted": True, "done": False, "error": f"not finished within {timeout:.0f}s"}
        return {"accepted": True, "done": True, "revision": waiter.revision, "error": waiter.error,
                "unknownUnit": waiter.unknown_unit, "units": waiter.answer()}

    # -- the dispatcher's answers ----------------------------------------------------------------------

    def add(self, waiter: Waiter) -> None:
        self.waiters.append(waiter)

    def fetch_failed(self, error: str) -> None:
        """No revision came of the fetch: whoever waits for one hears why."""
        for waiter in [w for w in self.waiters if w.units is None]:
            waiter.finish(error)
            self.waiters.remove(waiter)

    def fetched(self, revision: str, ours: Callable[[], set[Unit]]) -> set[Unit]:
        """`revision` is installed: each request waiting for it now waits for the units of ours it
        names (none: it is answered). Returns the units to sync."""
        wanted: set[Unit] = set()
        for waiter in [w for w in self.waiters if w.units is None]:
            # this repository's units only: another repository's are neither synced nor reported here
            units = ours()
            if waiter.selector:
                units = {u for u in units if unit_matches(u, waiter.selector)}
                if not units:
                    waiter.unknown_unit = True
                    waiter.finish(f"no unit matches {waiter.selector!r}")
                    self.waiters.remove(waiter)
                    continue
            waiter.units = set(units)
            waiter.revision = revision
            waiter.fetched.set()
            wanted |= units
        return wanted

    def synced(self, unit: Unit, result: UnitResult) -> None:
        for waiter in list(self.waiters):
            if waiter.units is not None and unit in waiter.units:
                waiter.units.discard(unit)
                waiter.results[unit.id] = result
                if not waiter.units:
                    waiter.done.set()
                    self.waiters.remove(waiter)

    def crashed(self, unit: Unit, text: str) -> None:
        """Handling the unit's sync failed: whoever waits for the unit hears about it."""
        for waiter in list(self.waiters):
            if waiter.units is not None and unit in waiter.units:
                waiter.units.discard(unit)
                failed = waiter.results[unit.id] = UnitResult(unit)
                failed.fail(Cause.CRASHED, text)
                if not waiter.units:
                    waiter.finish()
                    self.waiters.remove(waiter)

    def request_failed(self, waiter: Waiter, text: str) -> None:
        waiter.finish(f"the resync request failed: {text}")
        if waiter in self.waiters:
            self.waiters.remove(waiter)
