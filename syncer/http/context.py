"""What a request thread (syncer.http.handler) is given: the connection it serves and a read-only
view of the server's settings and collaborators, so that the handler never reaches back into the
event loop (syncer.http.server) that made them."""

from __future__ import annotations

import socket
from dataclasses import dataclass

from syncer.http.limits import AgentAPI, RateLimitedLog
from syncer.http.webview import Streams, ViewAPI
from syncer.observe.metrics import Metrics
from syncer.source.webhook import ReplayGuard


class Conn:
    """One client connection. Owned by the event loop while its request head arrives (and while it
    lingers before closing), by one request thread while a request is served."""

    __slots__ = ("addr", "buf", "closing", "deadline", "host", "keep", "limited", "registered", "scanned",
                 "sock")

    def __init__(self, sock: socket.socket, addr: tuple[str, int], limited: bool, deadline: float) -> None:
        self.sock = sock
        self.addr = addr
        self.host = addr[0]
        self.limited = limited  # over a connection limit: health probes only, then closed
        self.deadline = deadline
        self.buf = bytearray()
        self.scanned = 0  # where to resume the search for the end of the head
        self.closing = False
        self.registered = False
        self.keep = False


@dataclass(frozen=True)
class RequestContext:
    """The server's settings and collaborators a request needs; made once by `AgentServer`."""

    api: AgentAPI
    metrics: Metrics
    api_token: str | None
    webhook_secret: str | None
    protect_reads: bool  # /metrics and /api/v1/status need the API token too
    request_timeout: float
    replays: ReplayGuard
    rate_log: RateLimitedLog
    view: ViewAPI | None = None  # the web view (/ui/); None: its routes answer 404
    streams: Streams | None = None  # the web view's event streams
