"""What a server-side apply asks of the API server (on the in-memory API server)."""

from __future__ import annotations

from typing import Any

from tests.fakekube import FakeApiServer, FakeKube


class Recording(FakeKube):
    def __init__(self) -> None:
        super().__init__(FakeApiServer())
        self.server.add_namespace("flower")
        self.sent: list[tuple[str, dict[str, Any]]] = []

    def _send(self, method: str, path: str, params: list[tuple[str, Any]], headers: dict[str, str],
              body: Any, timeout: Any) -> Any:
        self.sent.append((method, dict(params)))
        return super()._send(method, path, params, headers, body, timeout)


def test_an_apply_names_its_manager_and_spares_the_server_a_strict_second_decode() -> None:
    kube = Recording()
    kube.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "flower"},
                "data": {"k": "v"}}, force=True)
    ((method, query),) = kube.sent
    assert method == "PATCH"
    assert query == {"fieldManager": "flower-syncer", "force": "true", "fieldValidation": "Ignore"}
    assert kube.server.get("ConfigMap", "flower", "c") is not None
