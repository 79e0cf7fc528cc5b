"""What a real API server answers for a kind it does not serve, and how flower-syncer reads it
(issue 26): `ApiError.unserved` for an unknown group or an unknown resource of a served group
(a CustomResourceDefinition not installed), never for a missing object or namespace, which the
apply path handles otherwise (tests/unit/test_federation_tls.py has the whole sync)."""

from __future__ import annotations

import pytest

from syncer.cluster.client import ApiError, Kube

pytestmark = pytest.mark.cluster

APPLY = "application/apply-patch+yaml"
WIDGET = {"apiVersion": "widgets.example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}


def answer(kube: Kube, method: str, path: str, body: object = None) -> ApiError:
    with pytest.raises(ApiError) as caught:
        kube.request(method, path, body=body, query={"fieldManager": "test"} if method == "PATCH" else None,
                     content_type=APPLY if method == "PATCH" else "application/json")
    return caught.value


def test_a_kind_the_server_does_not_serve_is_told_from_a_missing_object(kube: Kube, namespace: str) -> None:
    unknown_group = answer(kube, "PATCH", f"/apis/widgets.example.com/v1/namespaces/{namespace}/widgets/w", WIDGET)
    assert unknown_group.not_found and unknown_group.unserved, vars(unknown_group)
    unknown_resource = answer(kube, "PATCH", f"/apis/apps/v1/namespaces/{namespace}/widgets/w",
                              {**WIDGET, "apiVersion": "apps/v1"})
    assert unknown_resource.not_found and unknown_resource.unserved, vars(unknown_resource)

    missing_object = answer(kube, "GET", f"/api/v1/namespaces/{namespace}/configmaps/nosuch")
    assert missing_object.not_found and not missing_object.unserved, vars(missing_object)
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}
    missing_namespace = answer(kube, "PATCH", "/api/v1/namespaces/nosuch-ns-26/configmaps/c", config_map)
    assert missing_namespace.not_found and not missing_namespace.unserved, vars(missing_namespace)
