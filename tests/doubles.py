"""Test doubles shared by test modules (which never import each other): an HTTP receiver that
records what it is sent, an AgentAPI that answers without an agent, NoSource, the agent's
source when a test never fetches, and Clock, a clock the test moves."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

from syncer.source.git import Checkout
from syncer.source.webhook import PushEvent


class Clock:
    """A clock for code that takes one (`clock=`): it says `now`, which the test sets or moves."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Sink:
    """An HTTP receiver on 127.0.0.1 that records requests; answers `codes` in turn, then 200."""

    def __init__(self, codes: list[int] | None = None) -> None:
        self.requests: list[tuple[dict[str, str], bytes]] = []
        self.codes = list(codes or [])
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                sink.requests.append((dict(self.headers), body))
                self.send_response(sink.codes.pop(0) if sink.codes else 200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def bodies(self) -> list[dict[str, object]]:
        return [json.loads(b) for _, b in self.requests]


class FakeAPI:
    def __init__(self) -> None:
        self.events: list[PushEvent] = []
        self.resyncs: list[str | None] = []

    def healthy(self) -> bool:
        return True

    def ready(self) -> tuple[bool, str]:
        return True, ""

    def status(self) -> dict[str, Any]:
        return {"ready": True}

    def resync(self, unit: str | None, wait: bool, timeout: float) -> dict[str, Any]:
        self.resyncs.append(unit)
        return {"ok": True}

    def webhook(self, event: PushEvent) -> None:
        self.events.append(event)


class NoSource:
    """The agent's `Source` for a test that never fetches: fetching fails the test."""

    def __init__(self, name: str = "test") -> None:
        self.name = name

    def describe(self) -> str:
        return self.name

    def fetch(self) -> Checkout:
        raise AssertionError(f"the test's source {self.name!r} was asked to fetch")
