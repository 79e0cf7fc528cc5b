"""The list+watch loop: what reaches `replace` and `event`, resuming, re-listing after 410 Gone,
backing off and reporting errors. A scripted client: LISTs and watch streams from lists."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any, cast

import pytest

from syncer.cluster.client import ApiError, Kube
from syncer.cluster.reflector import Reflector

Obj = dict[str, Any]
Listing = list[Obj] | Exception
Script = list[Listing]


class ScriptedKube:
    """`list` answers from `listings` in turn; each `watch` call plays the next stream of `streams`
    (a list of events, or an exception to raise); a call after both are played sets `done`."""

    def __init__(self, listings: Script, streams: Script) -> None:
        self.listings = listings
        self.streams = streams
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.done = threading.Event()

    def list(self, kind: str, namespace: str | None = None, **kw: Any) -> tuple[list[Obj], str]:
        self.calls.append(("list", {"kind": kind, "namespace": namespace, **kw}))
        result = self._next(self.listings)
        if isinstance(result, Exception):
            raise result
        each: Callable[[Obj], Obj] | None = kw.get("each")
        for item in result:
            item["kind"] = kind
        return [each(o) if each else o for o in result], f"list-{len(self.calls)}"

    def watch(self, kind: str, namespace: str | None, **kw: Any) -> Iterator[Obj]:
        self.calls.append(("watch", {"kind": kind, "namespace": namespace, **kw}))
        result = self._next(self.streams)
        if isinstance(result, Exception):
            raise result
        yield from result

    def _next(self, script: Script) -> Listing:
        if not self.listings and not self.streams:
            self.done.set()
        return script.pop(0) if script else []


def obj(name: str, rv: str, **extra: Any) -> Obj:
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": rv}, **extra}


def run(kube: ScriptedKube, **kw: Any) -> tuple[list[Any], list[Exception]]:
    """Run a reflector until the script is played, returning what it handed over, in order."""
    seen: list[Any] = []
    errors: list[Exception] = []
    stop = threading.Event()
    reflector = Reflector(cast(Kube, kube), "Pod", "ns", lambda items: seen.append(("replace", items)),
                          lambda t, o: seen.append((t, o)), listed=lambda: seen.append("listed"),
                          failed=errors.append, **kw)
    thread = threading.Thread(target=reflector.run, args=(stop,), daemon=True)
    thread.start()
    assert kube.done.wait(10), "the reflector stopped before playing the script"
    stop.set()
    thread.join(60)
    assert not thread.is_alive()
    return seen, errors


def names(items: list[Obj]) -> list[str]:
    return [o["metadata"]["name"] for o in items]


def test_lists_then_follows_the_watch_from_the_lists_version_and_resumes_where_a_stream_ended() -> None:
    kube = ScriptedKube([[obj("a", "1")]], [
        [{"type": "ADDED", "object": obj("b", "5")}, {"type": "BOOKMARK", "object": obj("", "7")}],
        [{"type": "DELETED", "object": obj("a", "8")}],
    ])
    seen, errors = run(kube, labels="x=y", fields="spec.nodeName!=")
    assert seen[0][0] == "replace" and names(seen[0][1]) == ["a"]
    assert seen[1] == "listed"
    assert [(t, o["metadata"]["name"]) for t, o in seen[2:4]] == [("ADDED", "b"), ("DELETED", "a")]
    assert seen[2][1]["kind"] == "Pod"  # events carry the kind like listed items
    watches = [kw for verb, kw in kube.calls if verb == "watch"]
    assert watches[0]["resource_version"] == "list-1"
    assert watches[1]["resource_version"] == "7", "a bookmark moves the resume point without an event"
    assert all(kw["labels"] == "x=y" and kw["fields"] == "spec.nodeName!=" for _, kw in kube.calls)
    assert errors == []


def test_a_410_gone_lists_again_and_hands_over_the_fresh_listing_once_listed_was_said() -> None:
    kube = ScriptedKube([[obj("a", "1")], [obj("a", "1"), obj("c", "9")]], [
        [{"type": "ERROR", "object": {"code": 410, "reason": "Expired", "message": "too old"}}],
    ])
    seen, errors = run(kube)
    replaces = [names(s[1]) for s in seen if isinstance(s, tuple) and s[0] == "replace"]
    assert replaces == [["a"], ["a", "c"]]
    assert seen.count("listed") == 1
    assert errors == []


def test_errors_are_reported_and_retried() -> None:
    forbidden = ApiError(403, "Forbidden", "pods is forbidden")
    kube = ScriptedKube([forbidden, [obj("a", "1")]], [
        [{"type": "ERROR", "object": {"code": 500, "reason": "InternalError", "message": "boom"}}],
    ])
    seen, errors = run(kube)
    assert errors[0] is forbidden
    assert isinstance(errors[1], ApiError) and errors[1].status == 500
    assert seen[0][0] == "replace" and names(seen[0][1]) == ["a"]
    assert seen[1] == "listed", "listed only once a listing got through"


def test_transform_applies_to_listed_items_and_to_events() -> None:
    kube = ScriptedKube([[obj("a", "1", spec={"big": "x" * 100})]], [
        [{"type": "MODIFIED", "object": obj("a", "2", spec={"big": "y"})}],
    ])
    seen, _ = run(kube, transform=lambda o: {"name": o["metadata"]["name"], "kind": o["kind"]})
    assert seen[0] == ("replace", [{"name": "a", "kind": "Pod"}])
    assert seen[2] == ("MODIFIED", {"name": "a", "kind": "Pod"})


def test_a_watch_stream_that_breaks_midway_is_unreachable_so_watchers_retry_it() -> None:
    from urllib3.exceptions import HTTPError, ProtocolError

    from syncer.cluster.client import ClusterUnreachable, _stream

    class Broken:
        def stream(self, amount: int, decode_content: bool) -> Iterator[bytes]:
            yield b'{"type": "ADDED"}\n'
            raise ProtocolError("Response ended prematurely")

    chunks = _stream(Broken(), HTTPError)
    assert next(chunks) == b'{"type": "ADDED"}\n'
    with pytest.raises(ClusterUnreachable, match="the watch stream broke: Response ended prematurely"):
        next(chunks)


@pytest.mark.parametrize("optional, level", [(False, "warning"), (True, "info")])
def test_a_refused_optional_read_is_information_not_a_warning(optional: bool, level: str) -> None:
    from structlog.testing import capture_logs

    forbidden = ApiError(403, "Forbidden", "nodes is forbidden")
    kube = ScriptedKube([forbidden], [])
    with capture_logs() as logs:
        _, errors = run(kube, optional=optional, max_backoff=0.5)
    assert errors == [forbidden]
    assert [(e["log_level"], e["error"]) for e in logs if e["log_level"] != "debug"][:1] == \
        [(level, "403 Forbidden: nodes is forbidden")]
