"""syncer.models.flower: versions read from image references, and the release boundaries (each
checked against the wheels' parsers and server code, see the module docstring)."""

from __future__ import annotations

import pytest

from syncer.models.flower import (
    NEWEST,
    SUPERLINK_HTTP_PORT,
    explicit_version,
    flower_interface,
    image_tag,
    image_version,
    interface_of_image,
)


@pytest.mark.parametrize(("image", "version"), [
    ("flwr/superlink:1.42.0", (1, 42)),
    ("flwr/superexec:1.26.0-py3.11-ubuntu24.04", (1, 26)),
    ("flwr/supernode:v1.37.1", (1, 37)),
    ("flwr/superlink:1.42.0@sha256:" + "a" * 64, (1, 42)),
    ("registry:5000/flwr/supernode:1.20.0-py3.11", (1, 20)),
    ("flwr/superlink@sha256:" + "a" * 64, None),
    ("flwr/superlink:latest", None),
    ("flwr/superlink", None),
    ("registry.example.com/team/flower:build-7", None),
    ("registry:5000/flwr/superlink", None),
])
def test_version_from_image(image: str, version: tuple[int, int] | None) -> None:
    assert image_version(image) == version


def test_tag_of_a_reference_with_registry_port_and_digest() -> None:
    assert image_tag("registry:5000/flwr/superlink:1.42.0@sha256:" + "b" * 64) == "1.42.0"
    assert image_tag("registry:5000/flwr/superlink@sha256:" + "b" * 64) == ""


def test_explicit_version_wins_only_when_the_tag_names_none() -> None:
    assert interface_of_image("flwr/superlink:latest", "1.26.0").version == (1, 26)
    assert not interface_of_image("flwr/superlink:latest", "1.26.0").assumed
    assert interface_of_image("flwr/superlink:1.37.0", "1.26.0").version == (1, 37)
    assumed = interface_of_image("flwr/superlink:latest")
    assert assumed.version == NEWEST and assumed.assumed
    assert explicit_version("1.43.0.dev20261026") == (1, 43)
    assert explicit_version("v1.42") == (1, 42)
    assert explicit_version("one-point-four") is None


def test_transport_eras() -> None:
    eras = {v: flower_interface((1, v)) for v in (20, 26, 34, 35, 36, 37, 39, 40, 42, 43)}
    assert [i.control_transport for i in eras.values()] == ["grpc"] * 5 + ["http"] * 5
    assert [i.fleet_transport for i in eras.values()] == ["grpc"] * 7 + ["http"] * 3
    assert [i.http_runtime for i in eras.values()] == [False] * 3 + [True] * 7
    assert [i.health_server for i in eras.values()] == [False] + [True] * 8 + [False]
    assert eras[26].superlink_ports(process=True) == [("fleet", 9092), ("control", 9093), ("serverappio", 9091)]
    assert eras[35].superlink_ports(process=True) == [("fleet", 9092), ("control", 9093),
                                                      ("serverappio", SUPERLINK_HTTP_PORT)]
    assert eras[37].superlink_ports(process=False) == [("fleet", 9092), ("control", SUPERLINK_HTTP_PORT)]
    assert eras[42].superlink_ports(process=False) == [("fleet", 8000), ("control", 8000)]
    assert eras[35].superexec_address_flag == "--appio-api-address"
    assert eras[36].superexec_address_flag == "--runtime-api-address"
    assert eras[37].plugin_type and not flower_interface((1, 38)).plugin_type
    assert not eras[36].loopback_ip_san and eras[37].loopback_ip_san


def test_flag_table_per_release() -> None:
    assert "--clientappio-api-address" not in flower_interface((1, 34)).flag_problems("supernode")
    assert flower_interface((1, 35)).flag_problems("supernode")["--clientappio-api-address"][0] == "error"
    assert flower_interface((1, 42)).flag_problems("superexec")["--plugin-type"][0] == "warning"
    assert flower_interface((1, 39)).flag_problems("superlink").get("--fleet-api-type") is None
    assert flower_interface((1, 40)).flag_problems("superlink")["--fleet-api-type"][0] == "warning"
