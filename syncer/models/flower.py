"""Flower's deployment interface per release: the one place that knows which flags, ports,
transports and probes a Flower version has. Add a release here and both renderers follow.

Every line below was read from the `flwr` wheels' own argument parsers and server code
(1.20.0 ... 1.42.0 and flwr-nightly 1.43.0.dev20261026), not from documentation:

- 1.21 all: `--health-server-address` (gRPC `grpc.health.v1`, plain text); `flower-superexec`
  replaces `flwr-clientapp`/`flwr-serverapp`; `--control-api-address` (`--exec-api-address` deprecated).
- 1.23 SuperLink `--enable-supernode-auth`; SuperNode `--auth-supernode-public-key` deprecated.
- 1.30 SuperExec `--root-certificates`.
- 1.35 SuperLink: `--serverappio-api-address` refused; the ServerApp (Runtime) API is HTTP on
  `--host` (default 127.0.0.1) and `--port` (default 8000), with `GET`/`HEAD /health`; gRPC Fleet
  (9092) and Control (9093) unchanged. SuperNode: `--clientappio-api-address` refused; its ClientApp
  API is HTTP on `--host` (default 127.0.0.1) and `--port` (default 9094), with `/health`.
- 1.36 SuperExec `--runtime-api-address` replaces `--appio-api-address` (a hidden alias that warns).
- 1.37 SuperLink: Control API over HTTP on `--host`/`--port` (gRPC Control only with the internal
  `FLWR_INTERNAL_GRPC_CONTROL_API=1`); `--control-api-address` deprecated, `--exec-api-address`
  removed; `--ssl-*` also cover the Runtime API (before: plain HTTP unless `--appio-ssl-*`); the
  SuperExec a SuperLink starts dials `127.0.0.1:<port>` with the CA of `--ssl-ca-certfile`, so the
  server certificate needs the IP SAN 127.0.0.1. SuperNode: `--ssl-*` for its ClientApp API
  (plain HTTP without them).
- 1.38 SuperExec `--plugin-type` hidden, no longer required, ignored with a warning.
- 1.40 SuperLink: Fleet API over HTTP on `--host`/`--port` (gRPC Fleet only with the internal
  `FLWR_INTERNAL_GRPC_FLEET_API=1`); `--fleet-api-type/--fleet-api-address` deprecated. SuperNode:
  `--grpc-rere/--grpc-adapter` removed, HTTP only, `--superlink` defaults to `127.0.0.1:8000`.
- 1.43 all: the gRPC Fleet and Control services and the gRPC health service removed (release
  notes; the nightly wheel of 2026-10-26 still has them).

The Flower version of an image is read from its tag (`1.42.0`, `v1.37.1`, `1.26.0-py3.11-ubuntu24.04`,
`...:1.42.0@sha256:...`). A tag that names no version (`latest`, a pure digest, a private build)
takes the version written in Git (`flower-syncer.io/flower-version` on a Federation, `image.flowerVersion`
in a SuperNode release's values), else it is taken as the newest known release and a warning says so.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Literal

Version = tuple[int, int]
Transport = Literal["grpc", "http"]
Component = Literal["superlink", "supernode", "superexec"]
FlagSeverity = Literal["error", "warning"]

OLDEST: Version = (1, 20)  # the oldest release flower-syncer renders for (the charts' examples)
NEWEST: Version = (1, 42)  # the newest release the package registry serves as a final release
LATEST_KNOWN: Version = (1, 43)  # the newest (nightly) release whose wheels flower-syncer was read against

ANN_FLOWER_VERSION = "flower-syncer.io/flower-version"  # on a Federation: the version of images whose tag says none

HEALTH_SINCE: Version = (1, 21)  # --health-server-address (gRPC health)
HEALTH_UNTIL: Version = (1, 43)  # ... removed with the other gRPC services
SUPEREXEC_SINCE: Version = (1, 21)  # flower-superexec
PUBLIC_KEY_OPTIONAL_SINCE: Version = (1, 23)  # --auth-supernode-public-key deprecated and ignored
AUTH_SINCE: Version = (1, 23)  # --enable-supernode-auth with keys registered through the Control API
SUPEREXEC_TLS_SINCE: Version = (1, 30)  # flower-superexec --root-certificates
HTTP_RUNTIME_SINCE: Version = (1, 35)  # ServerApp/ClientApp API over HTTP on --host/--port, GET /health
RUNTIME_API_FLAG_SINCE: Version = (1, 36)  # flower-superexec --runtime-api-address
HTTP_CONTROL_SINCE: Version = (1, 37)  # Control API over HTTP; --ssl-* cover the Runtime API; IP SAN 127.0.0.1
PLUGIN_TYPE_IGNORED_SINCE: Version = (1, 38)  # flower-superexec --plugin-type ignored with a warning
HTTP_FLEET_SINCE: Version = (1, 40)  # Fleet API over HTTP; SuperNodes speak HTTP only

# Flower's default ports.
SERVERAPPIO_GRPC_PORT = 9091
FLEET_GRPC_PORT = 9092
CONTROL_GRPC_PORT = 9093
CLIENTAPPIO_PORT = 9094  # gRPC before 1.35, HTTP (the SuperNode's --port default) from 1.35
SUPERLINK_HTTP_PORT = 8000  # the SuperLink's --port default (1.35+)
HEALTH_PATH = "/health"

# ASCII digits only: `\d` would read `1.٤٢` (Arabic-Indic digits) as 1.42
_VERSION = re.compile(r"^v?([0-9]+)\.([0-9]+)(?:\.[0-9]+)?")
_EXPLICIT = re.compile(r"^v?([0-9]+)\.([0-9]+)(?:\.[0-9]+)?(?:[.+-][0-9A-Za-z.+-]*)?\Z")


@dataclass(frozen=True)
class FlowerInterface:
    """What one Flower release accepts and serves, as the renderers need it."""

    version: Version
    assumed: bool
    """True when no version was known and the newest release was taken (a warning is due)."""

    @property
    def label(self) -> str:
        return f"{self.version[0]}.{self.version[1]}"

    def _since(self, since: Version) -> bool:
        return self.version >= since

    def beside(self, server: FlowerInterface) -> FlowerInterface:
        """This interface next to the server it talks to (a SuperExec beside its SuperNode, a pool
        beside its SuperLink): when its own version is unknown and the server's is known, it is
        taken to be the server's release, not the newest; still `assumed`, so the warning is given."""
        if self.assumed and not server.assumed:
            return FlowerInterface(server.version, assumed=True)
        return self

    # --- executables and flags -------------------------------------------------------------

    @property
    def health_server(self) -> bool:
        """`--health-server-address` (a gRPC health service that always says SERVING)."""
        return HEALTH_SINCE <= self.version < HEALTH_UNTIL

    @property
    def superexec(self) -> bool:
        return self._since(SUPEREXEC_SINCE)

    @property
    def public_key_optional(self) -> bool:
        return self._since(PUBLIC_KEY_OPTIONAL_SINCE)

    @property
    def supernode_auth(self) -> bool:
        return self._since(AUTH_SINCE)

    @property
    def http_runtime(self) -> bool:
        """The ServerApp/ClientApp (Runtime) APIs are HTTP on `--host`/`--port`, with GET /health;
        `--serverappio-api-address`/`--clientappio-api-address` are refused."""
        return self._since(HTTP_RUNTIME_SINCE)

    @property
    def superexec_address_flag(self) -> str:
        return "--runtime-api-address" if self._since(RUNTIME_API_FLAG_SINCE) else "--appio-api-address"

    @property
    def plugin_type(self) -> bool:
        """Whether flower-superexec still uses `--plugin-type` (ignored with a warning from 1.38)."""
        return not self._since(PLUGIN_TYPE_IGNORED_SINCE)

    @property
    def superexec_tls(self) -> bool:
        """flower-superexec can verify a TLS server (`--root-certificates`)."""
        return self._since(SUPEREXEC_TLS_SINCE)

    @property
    def superlink_runtime_tls(self) -> bool:
        """The SuperLink's `--ssl-*` also make its Runtime (ServerApp) API TLS."""
        return self._since(HTTP_CONTROL_SINCE)

    @property
    def loopback_ip_san(self) -> bool:
        """The SuperExec a TLS SuperLink starts (and our sidecar) dials 127.0.0.1: the server
        certificate needs the IP SAN 127.0.0.1."""
        return self._since(HTTP_CONTROL_SINCE)

    @property
    def supernode_runtime_tls_flags(self) -> bool:
        """flower-supernode has `--ssl-*` for its ClientApp API (unused: the API is plain HTTP without them)."""
        return self._since(HTTP_CONTROL_SINCE)

    # --- transports and ports ---------------------------------------------------------------

    @property
    def control_transport(self) -> Transport:
        return "http" if self._since(HTTP_CONTROL_SINCE) else "grpc"

    @property
    def fleet_transport(self) -> Transport:
        return "http" if self._since(HTTP_FLEET_SINCE) else "grpc"

    @property
    def serverappio_port(self) -> int:
        """The SuperLink container port of the ServerApp (Runtime) API."""
        return SUPERLINK_HTTP_PORT if self.http_runtime else SERVERAPPIO_GRPC_PORT

    @property
    def control_port(self) -> int:
        """The SuperLink container port of the Control API (`flwr`, key registration)."""
        return SUPERLINK_HTTP_PORT if self.control_transport == "http" else CONTROL_GRPC_PORT

    @property
    def fleet_port(self) -> int:
        """The SuperLink container port of the Fleet API (what SuperNodes dial)."""
        return SUPERLINK_HTTP_PORT if self.fleet_transport == "http" else FLEET_GRPC_PORT

    @property
    def http_health(self) -> bool:
        """GET /health on the SuperLink's and the SuperNode's HTTP port."""
        return self.http_runtime

    def superlink_ports(self, process: bool) -> list[tuple[str, int]]:
        """(API, container port) the SuperLink serves, in a fixed order: fleet, control, and the
        ServerApp API in process isolation (in subprocess isolation it stays inside the pod)."""
        out = [("fleet", self.fleet_port), ("control", self.control_port)]
        if process:
            out.append(("serverappio", self.serverappio_port))
        return out

    # --- deprecated and removed flags --------------------------------------------------------

    def flag_problems(self, component: Component) -> dict[str, tuple[FlagSeverity, str]]:
        """flag -> (severity, what this release does with it) for the flags it refuses ("error")
        or warns about ("warning")."""
        table: dict[str, tuple[FlagSeverity, str]] = {}
        for since, until, comp, flag, severity, what in _FLAG_TABLE:
            if comp == component and self.version >= since and (until is None or self.version < until):
                table[flag] = (severity, what)
        return table


# (since, until or None, component, flag, severity, what Flower does), from the parsers.
_FLAG_TABLE: list[tuple[Version, Version | None, Component, str, FlagSeverity, str]] = [
    ((1, 21), (1, 37), "superlink", "--exec-api-address", "warning",
     "deprecated since 1.21 (use --control-api-address)"),
    ((1, 37), None, "superlink", "--exec-api-address", "error", "removed in 1.37"),
    ((1, 23), None, "supernode", "--auth-supernode-public-key", "warning",
     "deprecated since 1.23 and ignored (the public key is derived from the private key)"),
    ((1, 23), None, "superlink", "--auth-list-public-keys", "error",
     "parsed, but the SuperLink exits at start-up since 1.23 (register keys through the Control API)"),
    ((1, 27), None, "superlink", "--flwr-dir", "error", "removed in 1.27"),
    ((1, 27), None, "supernode", "--flwr-dir", "error", "removed in 1.27"),
    ((1, 27), None, "superexec", "--flwr-dir", "error", "removed in 1.27"),
    ((1, 29), None, "superlink", "--storage-dir", "error", "removed in 1.29"),
    ((1, 33), None, "superlink", "--fleet-api-num-workers", "error", "removed in 1.33 (REST Fleet transport gone)"),
    ((1, 33), None, "supernode", "--rest", "error", "removed in 1.33 (REST Fleet transport gone)"),
    ((1, 35), None, "superlink", "--serverappio-api-address", "error",
     "refused since 1.35: the ServerApp API is HTTP on --host and --port"),
    ((1, 35), None, "supernode", "--clientappio-api-address", "error",
     "refused since 1.35: the ClientApp API is HTTP on --host and --port"),
    ((1, 36), None, "superexec", "--appio-api-address", "warning",
     "deprecated since 1.36 (use --runtime-api-address)"),
    ((1, 37), None, "superlink", "--control-api-address", "warning",
     "deprecated since 1.37: the Control API is HTTP on --host and --port"),
    ((1, 37), None, "superlink", "--executor", "error", "removed in 1.37"),
    ((1, 37), None, "superlink", "--executor-config", "error", "removed in 1.37"),
    ((1, 37), None, "superlink", "--appio-ssl-certfile", "error", "refused since 1.37: --ssl-* cover every API"),
    ((1, 37), None, "superlink", "--appio-ssl-keyfile", "error", "refused since 1.37: --ssl-* cover every API"),
    ((1, 37), None, "superlink", "--appio-ssl-ca-certfile", "error", "refused since 1.37: --ssl-* cover every API"),
    ((1, 37), None, "supernode", "--appio-ssl-certfile", "warning", "deprecated since 1.37 (use --ssl-certfile)"),
    ((1, 37), None, "supernode", "--appio-ssl-keyfile", "warning", "deprecated since 1.37 (use --ssl-keyfile)"),
    ((1, 37), None, "supernode", "--appio-ssl-ca-certfile", "warning",
     "deprecated since 1.37 (use --ssl-ca-certfile)"),
    ((1, 38), None, "superexec", "--plugin-type", "warning", "ignored since 1.38"),
    ((1, 40), None, "superlink", "--fleet-api-type", "warning", "deprecated since 1.40: the Fleet API is HTTP"),
    ((1, 40), None, "superlink", "--fleet-api-address", "warning",
     "deprecated since 1.40: the Fleet API is HTTP on --host and --port"),
    ((1, 40), None, "supernode", "--grpc-rere", "error", "removed in 1.40: SuperNodes speak HTTP only"),
    ((1, 40), None, "supernode", "--grpc-adapter", "error", "removed in 1.40: SuperNodes speak HTTP only"),
    ((1, 43), None, "superlink", "--health-server-address", "error", "removed in 1.43 with the gRPC health service"),
    ((1, 43), None, "supernode", "--health-server-address", "error", "removed in 1.43 with the gRPC health service"),
    ((1, 43), None, "superexec", "--health-server-address", "error", "removed in 1.43 with the gRPC health service"),
]


def fleet_skew(supernode: FlowerInterface, superlink: FlowerInterface) -> str:
    """Why a SuperNode of one release cannot join a SuperLink of another ('' when it can).

    The boundary is the Fleet transport: SuperNodes before 1.40 speak gRPC (`--grpc-rere`), from 1.40
    HTTP only; SuperLinks before 1.40 serve the Fleet API over gRPC only, from 1.40 over HTTP only
    (gRPC only with the internal FLWR_INTERNAL_GRPC_FLEET_API=1). Observed with real processes (see
    tests/integration/test_flower_skew.py): 1.42 SuperNode -> 1.26 SuperLink and 1.26 SuperNode -> 1.42 SuperLink
    never connect; pairs within one era do."""
    if supernode.fleet_transport == superlink.fleet_transport:
        return ""
    return (f"the SuperNode speaks {supernode.fleet_transport.upper()} to the Fleet API, the SuperLink serves "
            f"it over {superlink.fleet_transport.upper()} (Flower moved the Fleet API to HTTP in 1.40)")


def runtime_skew(superexec: FlowerInterface, server: FlowerInterface, *, tls: bool) -> str:
    """Why a SuperExec of one release cannot use the Runtime (ServerApp/ClientApp) API of a
    SuperLink or SuperNode of another ('' when it can): gRPC before 1.35, HTTP from 1.35; from 1.37
    a TLS SuperLink's Runtime API is TLS, which SuperExec verifies from 1.30 (`--root-certificates`)."""
    if superexec.http_runtime != server.http_runtime:
        speaks = "HTTP" if superexec.http_runtime else "gRPC"
        serves = "HTTP" if server.http_runtime else "gRPC"
        return f"the SuperExec speaks {speaks}, the server's Runtime API is {serves} (HTTP from Flower 1.35)"
    if tls and server.superlink_runtime_tls and not superexec.superexec_tls:
        return "the Runtime API is TLS and this SuperExec cannot verify a TLS server (--root-certificates, 1.30+)"
    return ""


def parse_version(text: str) -> Version | None:
    """(major, minor) from a tag such as `1.42.0`, `v1.37.1` or `1.26.0-py3.11-ubuntu24.04`."""
    match = _VERSION.match(text)
    return (int(match.group(1)), int(match.group(2))) if match else None


def explicit_version(text: str) -> Version | None:
    """(major, minor) from a version written in Git (`1.42.0`, `1.43`, `1.43.0.dev20261026`);
    None when the text is not a version."""
    match = _EXPLICIT.match(text.strip())
    return (int(match.group(1)), int(match.group(2))) if match else None


def image_tag(image: str) -> str:
    """The tag of an image reference (`registry:5000/flwr/superlink:1.42.0@sha256:...` -> `1.42.0`);
    '' for a pure digest or no tag."""
    last = image.split("@", 1)[0].rsplit("/", 1)[-1]
    return last.split(":", 1)[1] if ":" in last else ""


def image_version(image: str) -> Version | None:
    """(major, minor) of an image reference; None for `latest`, a digest, a private build or no tag."""
    return parse_version(image_tag(image))


def flower_interface(version: Version | None) -> FlowerInterface:
    """The interface of a release; an unknown version is the newest known release (assumed)."""
    if version is None:
        return FlowerInterface(NEWEST, assumed=True)
    return FlowerInterface(version, assumed=False)


@functools.lru_cache(maxsize=1024)  # pure, and asked per unit at every revision: a repository has few tags
def interface_of_tag(tag: str, explicit: str = "") -> FlowerInterface:
    """The tag's version, else the explicit one, else the newest (assumed)."""
    return flower_interface(parse_version(tag) or explicit_version(explicit))


@functools.lru_cache(maxsize=1024)
def interface_of_image(image: str, explicit: str = "") -> FlowerInterface:
    return interface_of_tag(image_tag(image), explicit)


def unknown_release(iface: FlowerInterface) -> str:
    """Why the release of an image (read from its tag or written in Git) is not one flower-syncer
    knows: '' for OLDEST to LATEST_KNOWN (and for an assumed one, warned about on its own)."""
    if iface.assumed or OLDEST <= iface.version <= LATEST_KNOWN:
        return ""
    return (f"Flower {iface.label} is not a release flower-syncer knows ({OLDEST[0]}.{OLDEST[1]} to "
            f"{LATEST_KNOWN[0]}.{LATEST_KNOWN[1]}): its flags, ports and probes are guessed as those of the "
            f"nearest known release, and may be wrong")


def assumed_message(image: str, where: str) -> tuple[str, str]:
    """(message, hint) of the warning for an image whose Flower version is not known."""
    return (f"image {image!r} names no Flower version; it is rendered for Flower "
            f"{NEWEST[0]}.{NEWEST[1]}, the newest known release",
            f"use a versioned tag such as 1.42.0, or write the version in {where}")
