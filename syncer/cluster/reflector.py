"""List, then watch, one kind for as long as the agent runs: the loop every watch cache shares.

A `Reflector` reads one kind (in one namespace or all of them, by label and field selector) with a
LIST, hands the items to `replace`, then follows a watch from the list's resourceVersion, handing
every change to `event`. A watch the server ends is resumed where it stopped; one that expired
(410 Gone) is replaced by a fresh LIST; an error is retried with backoff (0.5 s doubling to 30 s)
and reported to `failed`, so an owner can tell "forbidden" from "not listed yet".

Objects pass through `transform` as they arrive (a page of a LIST, or one event), so a caller that
keeps only a few fields never holds a whole listing of whole objects.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog

from syncer.cluster.client import ApiError, ClusterUnreachable, Kube

log = structlog.get_logger("syncer.cluster.reflector")

Obj = dict[str, Any]
BACKOFF_START = 0.5
BACKOFF_MAX = 30.0
WATCH_TIMEOUT = 240  # seconds the server keeps one watch open before we resume it


@dataclass(frozen=True)
class Reflector:
    """One list+watch. `replace(items)` gets each full listing (transformed); `event(type, obj)`
    gets ADDED / MODIFIED / DELETED with the (transformed) object; `listed()` is called once,
    after the first listing was handed over; `failed(error)` on every failed LIST or watch."""

    kube: Kube
    kind: str
    namespace: str | None
    replace: Callable[[list[Obj]], None]
    event: Callable[[str, Obj], None]
    labels: str | None = None
    fields: str | None = None
    metadata_only: bool = False
    transform: Callable[[Obj], Obj] | None = None
    page_size: int = 5000
    listed: Callable[[], None] = lambda: None
    failed: Callable[[Exception], None] = lambda _exc: None
    optional: bool = False
    """A read the agent works without (e.g. cluster-wide, under namespaced permissions): a refusal
    (403) is logged once as information, not as a warning, and tried again every `max_backoff`."""
    max_backoff: float = BACKOFF_MAX

    def run(self, stop: threading.Event) -> None:
        """Until `stop` is set."""
        first = True
        backoff = BACKOFF_START
        last_error = ""
        while not stop.is_set():
            try:
                items, rv = self.kube.list(self.kind, self.namespace, labels=self.labels, fields=self.fields,
                                           metadata_only=self.metadata_only, each=self.transform,
                                           page_size=self.page_size)
                self.replace(items)
                if first:
                    first = False
                    self.listed()
                backoff, last_error = BACKOFF_START, ""
                while not stop.is_set():
                    rv = self._follow(rv, stop)
                    if not rv:
                        break  # expired: list again
            except (ApiError, ClusterUnreachable, OSError, ValueError) as exc:
                self.failed(exc)
                refused = self.optional and isinstance(exc, ApiError) and exc.forbidden
                if refused:
                    backoff = self.max_backoff
                # the same error again (a missing permission, a server down for a while) is logged once
                report = log.debug if str(exc) == last_error else log.info if refused else log.warning
                report("not permitted; going on without it" if refused else "watch failed; retrying",
                       kind=self.kind, namespace=self.namespace, error=str(exc), retry_in=backoff)
                last_error = str(exc)
                stop.wait(backoff)
                backoff = min(backoff * 2, self.max_backoff)

    def _follow(self, rv: str, stop: threading.Event) -> str:
        """Follow one watch stream; returns the resourceVersion to resume from ("" = list again)."""
        for event in self.kube.watch(self.kind, self.namespace, labels=self.labels, fields=self.fields,
                                     resource_version=rv, timeout_seconds=WATCH_TIMEOUT,
                                     metadata_only=self.metadata_only):
            if stop.is_set():
                return rv
            kind_of_event = str(event.get("type"))
            obj = event.get("object") or {}
            if kind_of_event == "ERROR":
                if obj.get("code") == 410:
                    return ""
                raise ApiError(int(obj.get("code", 500)), str(obj.get("reason", "")), str(obj.get("message", "")))
            rv = obj.get("metadata", {}).get("resourceVersion", rv)
            if kind_of_event == "BOOKMARK":
                continue
            obj.setdefault("kind", self.kind)
            self.event(kind_of_event, self.transform(obj) if self.transform is not None else obj)
        return rv
