"""The HTTP Control API client keeps the connection of a read (ListNodes) for the next read of
the same check (ListRuns): one TCP (and TLS) handshake per check instead of two. A kept connection
the server closed meanwhile is replaced (reads are safe to repeat); a write never reuses one."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from syncer.cluster.control_transports import HttpControl


class Counting(ThreadingHTTPServer):
    def __init__(self, protocol: str) -> None:
        self.connections = 0
        self.requests: list[str] = []
        self.drop = False  # close each connection after its answer, without saying so (an idle timeout)
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = protocol

            def setup(self) -> None:
                outer.connections += 1
                super().setup()

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length") or 0))
                outer.requests.append(self.path)
                body = b"\x08\x07" if self.path.endswith("register-node") else b""  # node_id = 7
                self.send_response(200)
                self.send_header("content-type", "application/protobuf")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                if outer.drop:
                    self.close_connection = True

            def log_message(self, *args: object) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)


@pytest.fixture(params=["HTTP/1.1", "HTTP/1.0"])
def server(request: pytest.FixtureRequest) -> Iterator[Counting]:
    s = Counting(request.param)
    threading.Thread(target=s.serve_forever, daemon=True).start()
    yield s
    s.shutdown()
    s.server_close()


def test_a_check_reads_over_one_connection_where_the_server_keeps_it(server: Counting) -> None:
    api = HttpControl(f"127.0.0.1:{server.server_address[1]}", None, timeout=5)
    try:
        assert api.list_nodes() == [] and api.list_runs() == []
        assert api.register(b"key") == 7
    finally:
        api.close()
    assert server.requests == ["/v1/control/list-nodes", "/v1/control/list-runs", "/v1/control/register-node"]
    keeps = server.RequestHandlerClass.protocol_version == "HTTP/1.1"
    assert server.connections == (2 if keeps else 3)  # the register always on a connection of its own


def test_a_kept_connection_the_server_closed_is_replaced(server: Counting) -> None:
    server.drop = True
    api = HttpControl(f"127.0.0.1:{server.server_address[1]}", None, timeout=5)
    try:
        assert api.list_nodes() == [] and api.list_runs() == [] and api.list_nodes() == []
    finally:
        api.close()
    assert server.requests == ["/v1/control/list-nodes", "/v1/control/list-runs", "/v1/control/list-nodes"]
    assert server.connections == 3

