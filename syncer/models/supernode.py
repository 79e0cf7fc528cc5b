"""The Flower SuperNode Helm chart's values (`supernodes/<release>/values.yaml`), field for field.

Every parameter of the chart's documented values tables is here with its documented default, so a
values file only overrides what it names (nested mappings merge like Helm's values do). Additions
the tables imply: `global.imagePullSecrets`, `superexec.supernode.address`/`.port`, and the
Kubernetes types inside the values (env, volumes, affinity, ...) are checked field by field.

Names follow Helm's `fullname` rule (`release_names`), shared by the checks here and the renderer.
Checks that need the release name (the folder name) are in `SuperNodeValues.release_issues`;
`validate_values` runs both.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, ValidationError

from syncer.diagnostics import Diagnostic, FieldPath, did_you_mean, format_path
from syncer.models.base import StrictModel, validate_document
from syncer.models.k8s import Issue, K8sType, check_field
from syncer.models.names import (
    DNS1123_SUBDOMAIN,
    MAX_NAME,
    label_key_problem,
    label_value_problem,
    name_problem,
)
from syncer.models.nodeconfig import NodeConfigError, check_key, encode_typed
from syncer.yamldoc import YamlDoc

CHART_NAME = "flower-client"
DEFAULT_CA_SECRET = "flower-client-tls"
NODE_AUTH_SUFFIX = "node-auth"
CLIENTAPPIO_PORT = 9094

# Flower versions (from the image tag) where flags and executables appear.
HEALTH_SINCE = (1, 21)  # --health-server-address
SUPEREXEC_SINCE = (1, 21)  # flower-superexec
PUBLIC_KEY_OPTIONAL_SINCE = (1, 23)  # --auth-supernode-public-key deprecated and ignored

EnvList = Annotated[list[dict[str, Any]], K8sType("api.core.v1.EnvVar", list_of=True)]
Volumes = Annotated[list[dict[str, Any]], K8sType("api.core.v1.Volume", list_of=True)]
Mounts = Annotated[list[dict[str, Any]], K8sType("api.core.v1.VolumeMount", list_of=True)]
Resources = Annotated[dict[str, Any], K8sType("api.core.v1.ResourceRequirements")]
Tolerations = Annotated[list[dict[str, Any]], K8sType("api.core.v1.Toleration", list_of=True)]
Affinity = Annotated[dict[str, Any], K8sType("api.core.v1.Affinity")]
Lifecycle = Annotated[dict[str, Any], K8sType("api.core.v1.Lifecycle")]
PullSecrets = Annotated[list[dict[str, Any]], K8sType("api.core.v1.LocalObjectReference", list_of=True)]
RollingUpdate = Annotated[dict[str, Any], K8sType("api.apps.v1.RollingUpdateDeployment")]
MatchExpressions = Annotated[list[dict[str, Any]],
                             K8sType("api.core.v1.NodeSelectorRequirement", list_of=True)]
IngressRules = Annotated[list[dict[str, Any]],
                         K8sType("api.networking.v1.NetworkPolicyIngressRule", list_of=True)]
EgressRules = Annotated[list[dict[str, Any]],
                        K8sType("api.networking.v1.NetworkPolicyEgressRule", list_of=True)]
Port = Annotated[int, Field(ge=1, le=65535)]
NonNegative = Annotated[int, Field(ge=0)]
Positive = Annotated[int, Field(ge=1)]
PullPolicy = Literal["Always", "IfNotPresent", "Never"]
Preset = Literal["none", "soft", "hard"]

# Where each key of a component's `podSecurityContext` goes: Kubernetes accepts some only on the
# pod, some only on the container. Keys accepted on both go to the pod (the container inherits
# them), except runAsNonRoot, which the chart's defaults set on both.
POD_ONLY_SECURITY = frozenset({"fsGroup", "fsGroupChangePolicy", "seLinuxChangePolicy", "supplementalGroups",
                               "supplementalGroupsPolicy", "sysctls"})
CONTAINER_ONLY_SECURITY = frozenset({"allowPrivilegeEscalation", "capabilities", "privileged", "procMount",
                                     "readOnlyRootFilesystem"})
SHARED_SECURITY = frozenset({"appArmorProfile", "runAsGroup", "runAsNonRoot", "runAsUser", "seLinuxOptions",
                             "seccompProfile", "windowsOptions"})
BOTH_SECURITY = frozenset({"runAsNonRoot"})

# Volumes and mounts the renderer adds; user volumes must not reuse them.
WRITABLE_DIRS = (("tmp-flwr", "/app/.flwr"), ("tmp-cache", "/app/.cache"), ("tmp-config", "/app/.config"),
                 ("tmp-var-tmp", "/var/tmp"))
CA_VOLUME = "superlink-ca"
CA_MOUNT_DIR = "/app/certificates"
CA_KEY = "ca.crt"
NODE_AUTH_VOLUME = "node-auth"
NODE_AUTH_MOUNT_DIR = "/app/node-auth"
PRIVATE_KEY_KEY = "private-key"
PUBLIC_KEY_KEY = "public-key"

_VERSION = re.compile(r"^v?(\d+)\.(\d+)")
_DIGEST = re.compile(r"^[a-z0-9]+(?:[.+_-][a-z0-9]+)*:[a-zA-Z0-9=_-]{32,}\Z")
_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}\Z")
_IANA_SVC_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,13}[a-z0-9])?\Z")
_PUBLIC_KEY = re.compile(r"^(ecdsa-sha2-nistp(?:256|384|521)) ([A-Za-z0-9+/]+={0,2})(?: \S.*)?\Z")


# ---------------------------------------------------------------------------------------------
# global.*


class SeccompProfile(StrictModel):
    type: Literal["RuntimeDefault", "Localhost", "Unconfined"] = "RuntimeDefault"
    localhostProfile: str = ""


class Capabilities(StrictModel):
    drop: list[str] = ["ALL"]
    add: list[str] = []


class GlobalSecurityContext(StrictModel):
    """Pod-level ids (`global.securityContext`)."""

    runAsUser: NonNegative = 49999
    runAsGroup: NonNegative = 49999
    fsGroup: NonNegative = 49999


class GlobalPodSecurityContext(StrictModel):
    """Despite the name, mostly container settings (`global.podSecurityContext`)."""

    runAsNonRoot: bool = True
    readOnlyRootFilesystem: bool = True
    allowPrivilegeEscalation: bool = False
    seccompProfile: SeccompProfile = SeccompProfile()
    capabilities: Capabilities = Capabilities()


class NodeAffinityPreset(StrictModel):
    type: Preset = "hard"
    matchExpressions: MatchExpressions = []


class AffinityPresets(StrictModel):
    podAntiAffinity: Preset = "soft"
    nodeAffinity: NodeAffinityPreset = NodeAffinityPreset()

    field_hints: ClassVar[dict[str, str]] = {"podAntiAffinity": "use none, soft or hard"}


class NodeAuth(StrictModel):
    enabled: bool = False
    authSupernodePrivateKey: str = ""
    authSupernodePublicKey: str = ""


class GlobalImage(StrictModel):
    pullPolicy: PullPolicy = "IfNotPresent"


class GlobalValues(StrictModel):
    annotations: dict[str, str] = {}
    labels: dict[str, str] = {}
    podLabels: dict[str, str] = {}
    nodeSelector: dict[str, str] = {}
    tolerations: Tolerations = []
    affinity: AffinityPresets = AffinityPresets()
    nodeAuth: NodeAuth = NodeAuth()
    securityContext: GlobalSecurityContext = GlobalSecurityContext()
    podSecurityContext: GlobalPodSecurityContext = GlobalPodSecurityContext()
    env: EnvList = []
    image: GlobalImage = GlobalImage()
    imagePullSecrets: PullSecrets = []


class TLSValues(StrictModel):
    enabled: bool = True


# ---------------------------------------------------------------------------------------------
# What both components have


class Probe(StrictModel):
    enabled: bool = True
    initialDelaySeconds: NonNegative = 0
    periodSeconds: Positive = 10
    timeoutSeconds: Positive = 1
    failureThreshold: Positive = 3
    successThreshold: Positive = 1


class ServiceAccountValues(StrictModel):
    enabled: bool = True
    annotations: dict[str, str] = {}
    labels: dict[str, str] = {}
    automountServiceAccountToken: bool = True


class UpdateStrategy(StrictModel):
    type: Literal["RollingUpdate", "Recreate"] = "RollingUpdate"
    rollingUpdate: RollingUpdate = {}


class Image(StrictModel):
    registry: str = "registry.hub.docker.com"
    repository: str = ""
    tag: str = ""
    digest: str = ""
    pullPolicy: Literal["Always", "IfNotPresent", "Never", ""] = "IfNotPresent"

    field_hints: ClassVar[dict[str, str]] = {"pullPolicy": "use Always, IfNotPresent or Never"}

    def reference(self) -> str:
        """`registry/repository:tag@digest`, leaving out the parts that are empty."""
        ref = f"{self.registry.rstrip('/')}/{self.repository}" if self.registry else self.repository
        if self.tag:
            ref += f":{self.tag}"
        if self.digest:
            ref += f"@{self.digest}"
        return ref


class SuperNodeImage(Image):
    repository: str = "flwr/supernode-ee"
    tag: str = "1.21.0-ubuntu"


class SuperExecImage(Image):
    repository: str = "flwr/superexec"
    tag: str = "1.21.0-py3.11-ubuntu24.04"


class EgressPolicy(StrictModel):
    enabled: bool = True
    allowExternalEgress: bool = True
    extraEgress: EgressRules = []


class SuperNodeNetworkPolicy(EgressPolicy):
    allowExternal: bool = True
    extraIngress: IngressRules = []
    ingressPodMatchLabels: dict[str, str] = {}
    ingressNSMatchLabels: dict[str, str] = {}
    ingressNSPodMatchLabels: dict[str, str] = {}


class Component(StrictModel):
    """The settings the SuperNode and the SuperExec share."""

    name: str = ""
    enabled: bool = False
    image: Image = Image()
    resources: Resources = {}
    volumes: Volumes = []
    volumeMounts: Mounts = []
    automountServiceAccountToken: bool = True
    serviceAccount: ServiceAccountValues = ServiceAccountValues()
    podSecurityContext: dict[str, Any] = {}
    livenessProbe: Probe = Probe()
    readinessProbe: Probe = Probe()
    replicas: NonNegative = 1
    labels: dict[str, str] = {}
    extraArgs: list[str] = []
    nodeSelector: dict[str, str] = {}
    tolerations: Tolerations = []
    updateStrategy: UpdateStrategy = UpdateStrategy()
    affinity: Affinity = {}
    env: EnvList = []
    lifecycle: Lifecycle = {}
    annotations: dict[str, str] = {}
    selectorLabels: dict[str, str] = {}
    podAnnotations: dict[str, str] = {}
    podLabels: dict[str, str] = {}
    imagePullSecrets: PullSecrets = []
    networkPolicy: EgressPolicy = EgressPolicy()

    field_hints: ClassVar[dict[str, str]] = {
        "podSecurityContext": "pod or container security settings, e.g. runAsUser: 1000 or privileged: false",
        "extraArgs": 'a list of strings, e.g. ["--max-retries=5"]',
    }


# ---------------------------------------------------------------------------------------------
# supernode.*


class NodeValues(StrictModel):
    config: dict[str, Any] = {}

    field_hints: ClassVar[dict[str, str]] = {
        "config": "a mapping of node-config keys to strings, numbers or true/false",
    }


class CopyFromExistingSecret(StrictModel):
    enabled: bool = False
    secretName: str = ""


class Certificate(StrictModel):
    existingSecret: str = ""
    copyFromExistingSecret: CopyFromExistingSecret = CopyFromExistingSecret()


class SuperLinkTarget(StrictModel):
    address: str = "my-superlink.example.com"
    port: Port = 9092
    certificate: Certificate = Certificate()


class ClientAppIoService(StrictModel):
    type: Literal["ClusterIP", "NodePort", "LoadBalancer"] = "ClusterIP"
    servicePortClientAppIoName: str = "clientappio"
    servicePortClientAppIo: Port = CLIENTAPPIO_PORT
    nodePortClientAppIo: Literal[""] | Port = ""

    field_hints: ClassVar[dict[str, str]] = {
        "type": "use ClusterIP, NodePort or LoadBalancer (Kubernetes spells it with a capital B)",
        "nodePortClientAppIo": 'a port number without quotes (e.g. 30094), or "" to let Kubernetes choose',
    }


class SuperNodePorts(StrictModel):
    clientAppIo: Port = CLIENTAPPIO_PORT
    health: Port = 8081


class SuperNodeComponent(Component):
    name: str = "supernode"
    enabled: bool = True
    image: SuperNodeImage = SuperNodeImage()
    node: NodeValues = NodeValues()
    isolationMode: Literal["subprocess", "process"] = "subprocess"
    superlink: SuperLinkTarget = SuperLinkTarget()
    service: ClientAppIoService = ClientAppIoService()
    containerPorts: SuperNodePorts = SuperNodePorts()
    networkPolicy: SuperNodeNetworkPolicy = SuperNodeNetworkPolicy()

    field_hints: ClassVar[dict[str, str]] = {
        **Component.field_hints,
        "isolationMode": "subprocess (the SuperNode runs the ClientApp itself) or process (a SuperExec does)",
    }


# ---------------------------------------------------------------------------------------------
# superexec.*


class SuperExecTarget(StrictModel):
    """Where the SuperExec finds the SuperNode's ClientAppIo API; empty means this release's SuperNode."""

    address: str = ""
    port: Port | None = None


class SuperExecPorts(StrictModel):
    health: Port = 8081


class SuperExecComponent(Component):
    name: str = "superexec-clientapp"
    enabled: bool = False
    image: SuperExecImage = SuperExecImage()
    supernode: SuperExecTarget = SuperExecTarget()
    containerPorts: SuperExecPorts = SuperExecPorts()


# ---------------------------------------------------------------------------------------------
# Names


def _helm_trunc(text: str) -> str:
    """Helm's `trunc 63 | trimSuffix "-"`."""
    return text[:MAX_NAME].removesuffix("-")


def chart_name(name_override: str) -> str:
    """The `app.kubernetes.io/name` label: nameOverride, else the chart's name."""
    return _helm_trunc(name_override or CHART_NAME)


def helm_fullname(release: str, name_override: str, fullname_override: str) -> str:
    """Helm's standard fullname: fullnameOverride, else the release when it already contains the
    chart name, else `<release>-<name>`; truncated to 63 characters without a trailing '-'."""
    if fullname_override:
        return _helm_trunc(fullname_override)
    name = name_override or CHART_NAME
    if name in release:
        return _helm_trunc(release)
    return _helm_trunc(f"{release}-{name}")


@dataclass(frozen=True)
class ReleaseNames:
    """Every name a release's objects get."""

    app: str
    fullname: str
    supernode: str
    superexec: str
    node_auth_secret: str
    ca_secret: str
    """The Secret the SuperNode mounts for `--root-certificates` (the copy when copying)."""
    ca_source: str
    """With copyFromExistingSecret: the SuperLink's Secret the copy is made from; else ''."""


def release_names(values: SuperNodeValues, release: str) -> ReleaseNames:
    fullname = helm_fullname(release, values.nameOverride, values.fullnameOverride)
    cert = values.supernode.superlink.certificate
    if cert.copyFromExistingSecret.enabled:
        ca_secret = cert.copyFromExistingSecret.secretName or DEFAULT_CA_SECRET
        ca_source = cert.existingSecret
    else:
        ca_secret = cert.existingSecret or DEFAULT_CA_SECRET
        ca_source = ""
    return ReleaseNames(
        app=chart_name(values.nameOverride),
        fullname=fullname,
        supernode=f"{fullname}-{values.supernode.name}",
        superexec=f"{fullname}-{values.superexec.name}",
        node_auth_secret=f"{fullname}-{NODE_AUTH_SUFFIX}",
        ca_secret=ca_secret,
        ca_source=ca_source,
    )


def flower_version(tag: str) -> tuple[int, int] | None:
    """(major, minor) from an image tag such as `1.20.0-pytorch`; None when the tag says nothing."""
    match = _VERSION.match(tag)
    return (int(match.group(1)), int(match.group(2))) if match else None


def supports(image: Image, since: tuple[int, int]) -> bool:
    """Whether the image's Flower version has a feature; unknown versions are taken as recent."""
    version = flower_version(image.tag)
    return version is None or version >= since


# ---------------------------------------------------------------------------------------------
# Security contexts


def merge_maps(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """Deep merge like Helm's values: mappings merge key by key, anything else from `over` replaces,
    and a null in `over` removes the key."""
    out = dict(base)
    for key, value in over.items():
        if value is None:
            out.pop(key, None)
            continue
        current = out.get(key)
        if isinstance(current, dict) and isinstance(value, dict):
            out[key] = merge_maps(current, value)
        else:
            out[key] = value
    return out


def security_contexts(values: SuperNodeValues, comp: Component) -> tuple[dict[str, Any], dict[str, Any]]:
    """(pod securityContext, container securityContext) for a component: the global defaults with
    the component's `podSecurityContext` merged over, each key where Kubernetes accepts it."""
    ids = values.global_.securityContext
    sec = values.global_.podSecurityContext
    seccomp: dict[str, Any] = {"type": sec.seccompProfile.type}
    if sec.seccompProfile.localhostProfile:
        seccomp["localhostProfile"] = sec.seccompProfile.localhostProfile
    pod: dict[str, Any] = {
        "runAsUser": ids.runAsUser,
        "runAsGroup": ids.runAsGroup,
        "fsGroup": ids.fsGroup,
        "runAsNonRoot": sec.runAsNonRoot,
        "seccompProfile": seccomp,
    }
    caps: dict[str, Any] = {}
    if sec.capabilities.add:
        caps["add"] = list(sec.capabilities.add)
    if sec.capabilities.drop:
        caps["drop"] = list(sec.capabilities.drop)
    container: dict[str, Any] = {
        "readOnlyRootFilesystem": sec.readOnlyRootFilesystem,
        "allowPrivilegeEscalation": sec.allowPrivilegeEscalation,
        "runAsNonRoot": sec.runAsNonRoot,
    }
    if caps:
        container["capabilities"] = caps
    pod_over: dict[str, Any] = {}
    container_over: dict[str, Any] = {}
    for key, value in comp.podSecurityContext.items():
        if key in CONTAINER_ONLY_SECURITY:
            container_over[key] = value
        else:
            pod_over[key] = value
            if key in BOTH_SECURITY:
                container_over[key] = value
    if pod_over:
        pod = merge_maps(pod, pod_over)
    if container_over:
        container = merge_maps(container, container_over)
    return pod, container


# ---------------------------------------------------------------------------------------------
# Node-auth keys


class KeyFormatError(ValueError):
    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.hint = hint


_OPENSSH_BEGIN = "-----BEGIN OPENSSH PRIVATE KEY-----"
_OPENSSH_END = "-----END OPENSSH PRIVATE KEY-----"
_OPENSSH_MAGIC = b"openssh-key-v1\x00"
_CONVERT_HINT = ("Flower reads node-auth keys in OpenSSH format only: convert the key in place with "
                 "`ssh-keygen -p -m RFC4716 -f <keyfile>`, or generate one with `ssh-keygen -t ecdsa -b 384`")
_GENERATE_HINT = 'generate an ECDSA key with `ssh-keygen -t ecdsa -b 384 -N "" -f <keyfile>`'


@dataclass(frozen=True)
class OpenSSHKey:
    key_type: str
    public_blob: bytes


def _ssh_string(buf: bytes, pos: int) -> tuple[bytes, int]:
    if pos + 4 > len(buf):
        raise KeyFormatError("node-auth private key is truncated (OpenSSH key structure ends early)",
                             "paste the whole key, including every line between BEGIN and END")
    length = int.from_bytes(buf[pos:pos + 4], "big")
    end = pos + 4 + length
    if end > len(buf):
        raise KeyFormatError("node-auth private key is truncated (OpenSSH key structure ends early)",
                             "paste the whole key, including every line between BEGIN and END")
    return buf[pos + 4:end], end


def _printable(raw: bytes) -> str:
    text = raw.decode("ascii", errors="replace")
    text = "".join(c if c.isprintable() else "?" for c in text)
    return text if len(text) <= 40 else text[:37] + "..."


def parse_openssh_private_key(text: str) -> OpenSSHKey:
    """Check that `text` is an unencrypted OpenSSH-format ECDSA private key, as Flower's loader
    demands. Raises KeyFormatError; messages never contain key material."""
    lines = [line.strip() for line in text.strip().splitlines()]
    first = lines[0] if lines else ""
    if first != _OPENSSH_BEGIN:
        if first in ("-----BEGIN PRIVATE KEY-----", "-----BEGIN ENCRYPTED PRIVATE KEY-----"):
            raise KeyFormatError("node-auth private key is in PKCS#8 format, which Flower cannot read",
                                 _CONVERT_HINT)
        if first.startswith("-----BEGIN ") and first.endswith(" PRIVATE KEY-----"):
            kind = first[len("-----BEGIN "):-len(" PRIVATE KEY-----")]
            raise KeyFormatError(f"node-auth private key is a PEM {_printable(kind.encode())} key, not an "
                                 "OpenSSH-format key", _CONVERT_HINT)
        raise KeyFormatError(f"node-auth private key must start with {_OPENSSH_BEGIN}",
                             "paste the whole private key file, e.g. with `authSupernodePrivateKey: |+`")
    if lines[-1] != _OPENSSH_END or len(lines) < 3:
        raise KeyFormatError(f"node-auth private key must end with {_OPENSSH_END}",
                             "paste the whole key, including the END line")
    try:
        raw = base64.b64decode("".join(lines[1:-1]), validate=True)
    except (binascii.Error, ValueError):
        raise KeyFormatError(
            "node-auth private key body is not valid base64",
            "paste the key unchanged; a YAML block scalar (|+) keeps its lines intact",
        ) from None
    if not raw.startswith(_OPENSSH_MAGIC):
        raise KeyFormatError("node-auth private key is not an openssh-key-v1 structure", _GENERATE_HINT)
    pos = len(_OPENSSH_MAGIC)
    cipher, pos = _ssh_string(raw, pos)
    _kdf, pos = _ssh_string(raw, pos)
    _kdf_options, pos = _ssh_string(raw, pos)
    if pos + 4 > len(raw):
        raise KeyFormatError("node-auth private key is truncated (OpenSSH key structure ends early)",
                             "paste the whole key, including every line between BEGIN and END")
    count = int.from_bytes(raw[pos:pos + 4], "big")
    pos += 4
    if count != 1:
        raise KeyFormatError(f"node-auth private key file holds {count} keys; Flower needs exactly one",
                             _GENERATE_HINT)
    public_blob, pos = _ssh_string(raw, pos)
    key_type_raw, _ = _ssh_string(public_blob, 0)
    key_type = _printable(key_type_raw)
    if not key_type.startswith("ecdsa-sha2-"):
        raise KeyFormatError(f"node-auth private key is a {key_type} key; Flower needs an ECDSA key "
                             "(ecdsa-sha2-nistp384)", _GENERATE_HINT)
    if cipher != b"none":
        raise KeyFormatError("node-auth private key is protected by a passphrase, which Flower cannot supply",
                             'remove the passphrase with `ssh-keygen -p -N "" -f <keyfile>`')
    return OpenSSHKey(key_type, public_blob)


def public_key_problem(text: str, private: OpenSSHKey | None) -> tuple[str, str] | None:
    """Why an OpenSSH public key line is unusable (message, hint), or None."""
    match = _PUBLIC_KEY.match(text.strip())
    hint = "paste the public key line, e.g. the content of <keyfile>.pub: `ecdsa-sha2-nistp384 AAAA...`"
    if not match:
        return "node-auth public key must look like `ecdsa-sha2-nistp384 <base64>`", hint
    try:
        blob = base64.b64decode(match.group(2), validate=True)
        key_type, _ = _ssh_string(blob, 0)
    except (binascii.Error, ValueError):
        return "node-auth public key is not valid base64 OpenSSH key data", hint
    if key_type.decode("ascii", errors="replace") != match.group(1):
        return "node-auth public key data does not match its type prefix", hint
    if private is not None and blob != private.public_blob:
        return ("node-auth public key does not belong to the private key",
                "use the .pub file written next to the private key, or `ssh-keygen -y -f <keyfile>`")
    return None


# ---------------------------------------------------------------------------------------------
# The document


_SUPERNODE_FLAGS = {
    "--superlink": "set supernode.superlink.address and supernode.superlink.port instead",
    "--isolation": "set supernode.isolationMode instead",
    "--clientappio-api-address": "set supernode.containerPorts.clientAppIo instead",
    "--health-server-address": "set supernode.containerPorts.health instead",
    "--insecure": "set tls.enabled instead",
    "--root-certificates": "set tls.enabled and supernode.superlink.certificate instead",
}
_SUPERNODE_CONFIG_FLAGS = {"--node-config": "set supernode.node.config instead"}
_SUPERNODE_AUTH_FLAGS = {
    "--auth-supernode-private-key": "set global.nodeAuth.authSupernodePrivateKey instead",
    "--auth-supernode-public-key": "set global.nodeAuth.authSupernodePublicKey instead",
}
_SUPEREXEC_FLAGS = {
    "--plugin-type": "the SuperExec of this chart always runs ClientApps",
    "--appio-api-address": "set superexec.supernode.address and superexec.supernode.port instead",
    "--insecure": "flower-syncer always passes it (SuperExec has no TLS)",
    "--health-server-address": "set superexec.containerPorts.health instead",
}


class SuperNodeValues(StrictModel):
    """`supernodes/<release>/values.yaml`: the SuperNode chart's values."""

    nameOverride: str = CHART_NAME
    fullnameOverride: str = ""
    global_: GlobalValues = Field(default=GlobalValues(), alias="global")
    tls: TLSValues = TLSValues()
    supernode: SuperNodeComponent = SuperNodeComponent()
    superexec: SuperExecComponent = SuperExecComponent()

    def semantic_issues(self) -> list[Issue]:
        issues: list[Issue] = self._name_issues()
        if self.fullnameOverride and not issues:
            issues.extend(self._derived_name_issues(release=""))
        issues.extend(self._metadata_issues())
        issues.extend(self._topology_issues())
        issues.extend(self._tls_issues())
        issues.extend(self._node_auth_issues())
        for comp, key in ((self.supernode, "supernode"), (self.superexec, "superexec")):
            issues.extend(_security_issues(self, comp, key))
            if comp.enabled:
                issues.extend(self._component_issues(comp, key))
        if self.supernode.enabled:
            issues.extend(self._supernode_issues())
        return issues

    def release_issues(self, release: str) -> list[Issue]:
        """Problems that depend on the release name (the folder name), which the file does not hold."""
        problem = name_problem(release, "release name")
        if problem:
            return [Issue((), problem, "rename the release folder supernodes/<release>/")]
        if self.fullnameOverride or self._name_issues():
            return []  # names do not depend on the release, or their parts are wrong: semantic_issues said so
        return self._derived_name_issues(release)

    # -- names ---------------------------------------------------------------------------------

    def _name_issues(self) -> list[Issue]:
        issues: list[Issue] = []
        if self.nameOverride:
            problem = name_problem(self.nameOverride, "nameOverride")
            if problem:
                issues.append(Issue(("nameOverride",), problem,
                                    "use a short lowercase name such as flower-client"))
        if self.fullnameOverride:
            problem = name_problem(_helm_trunc(self.fullnameOverride), "fullnameOverride")
            if problem:
                issues.append(Issue(("fullnameOverride",), problem, "use a lowercase DNS name"))
        for comp, key in ((self.supernode, "supernode"), (self.superexec, "superexec")):
            problem = name_problem(comp.name, f"{key}.name")
            if problem:
                issues.append(Issue((key, "name"), problem, "use a short lowercase name"))
        if self.supernode.enabled and self.superexec.enabled and self.supernode.name == self.superexec.name:
            issues.append(Issue(("superexec", "name"),
                                f"superexec.name {self.superexec.name!r} is the same as supernode.name; "
                                "their objects would have the same names", "rename one of them"))
        return issues

    def _blame(self, comp_key: str) -> FieldPath:
        """The field to point at when a derived name is too long."""
        if self.fullnameOverride:
            return ("fullnameOverride",)
        comp: Component = self.supernode if comp_key == "supernode" else self.superexec
        if "name" in comp.model_fields_set:
            return (comp_key, "name")
        if "nameOverride" in self.model_fields_set:
            return ("nameOverride",)
        return ("fullnameOverride",)

    def _derived_name_issues(self, release: str) -> list[Issue]:
        names = release_names(self, release)
        checks: list[tuple[str, str, str, bool]] = []
        if self.supernode.enabled:
            checks.append((names.supernode, "SuperNode Deployment/Service name", "supernode", True))
            if self.global_.nodeAuth.enabled:
                checks.append((names.node_auth_secret, "node-auth Secret name", "supernode", False))
        if self.superexec.enabled:
            checks.append((names.superexec, "SuperExec Deployment name", "superexec", False))
        issues: list[Issue] = []
        for name, what, comp_key, service in checks:
            problem = name_problem(name, f"derived {what}", dns1035=service)
            if problem is None:
                continue
            path = self._blame(comp_key)
            if len(name) > MAX_NAME:
                if self.fullnameOverride:
                    hint = "shorten fullnameOverride"
                else:
                    hint = (f"shorten the release name {release!r} (the folder under supernodes/), "
                            f"nameOverride or {comp_key}.name, or set a short fullnameOverride")
            else:
                hint = ("names are <release>-<nameOverride>-<component name>; "
                        "set fullnameOverride to choose one")
            issues.append(Issue(path, problem, hint))
        return issues

    # -- labels, annotations, selectors ------------------------------------------------------------

    def _metadata_issues(self) -> list[Issue]:
        g = self.global_
        label_maps: list[tuple[FieldPath, dict[str, str]]] = [
            (("global", "labels"), g.labels),
            (("global", "podLabels"), g.podLabels),
            (("global", "nodeSelector"), g.nodeSelector),
        ]
        annotation_maps: list[tuple[FieldPath, dict[str, str]]] = [(("global", "annotations"), g.annotations)]
        for comp, key in ((self.supernode, "supernode"), (self.superexec, "superexec")):
            label_maps += [
                ((key, "labels"), comp.labels),
                ((key, "podLabels"), comp.podLabels),
                ((key, "selectorLabels"), comp.selectorLabels),
                ((key, "nodeSelector"), comp.nodeSelector),
                ((key, "serviceAccount", "labels"), comp.serviceAccount.labels),
            ]
            annotation_maps += [
                ((key, "annotations"), comp.annotations),
                ((key, "podAnnotations"), comp.podAnnotations),
                ((key, "serviceAccount", "annotations"), comp.serviceAccount.annotations),
            ]
        np = self.supernode.networkPolicy
        label_maps += [
            (("supernode", "networkPolicy", "ingressPodMatchLabels"), np.ingressPodMatchLabels),
            (("supernode", "networkPolicy", "ingressNSMatchLabels"), np.ingressNSMatchLabels),
            (("supernode", "networkPolicy", "ingressNSPodMatchLabels"), np.ingressNSPodMatchLabels),
        ]
        issues: list[Issue] = []
        for path, labels in label_maps:
            for k, v in labels.items():
                problem = label_key_problem(k) or label_value_problem(v)
                if problem:
                    issues.append(Issue((*path, k), problem, "fix the label"))
        for path, mapping in annotation_maps:
            for k in mapping:
                problem = label_key_problem(k)
                if problem:
                    issues.append(Issue((*path, k), problem.replace("label", "annotation"),
                                        "fix the annotation key"))
        for comp, key in ((self.supernode, "supernode"), (self.superexec, "superexec")):
            for k in comp.selectorLabels:
                if k.startswith("app.kubernetes.io/") or k.startswith("flower-syncer.io/"):
                    issues.append(Issue((key, "selectorLabels", k),
                                        f"selector label {k!r} is set by flower-syncer",
                                        "use a label key of your own"))
        return issues

    # -- how the components fit together -----------------------------------------------------------

    def _topology_issues(self) -> list[Issue]:
        issues: list[Issue] = []
        sn, se = self.supernode, self.superexec
        target = se.supernode
        if target.port is not None and not target.address:
            issues.append(Issue(("superexec", "supernode", "port"),
                                "superexec.supernode.port is set but superexec.supernode.address is not",
                                "set the address too, or remove both to reach this release's SuperNode"))
        if not se.enabled:
            return issues
        if not target.address and not sn.enabled:
            issues.append(Issue(("superexec", "supernode", "address"),
                                "the SuperExec needs a SuperNode, and this release renders none "
                                "(supernode.enabled is false)",
                                "set superexec.supernode.address and port to a SuperNode's ClientAppIo API"))
        if not target.address and sn.enabled and sn.isolationMode == "subprocess":
            issues.append(Issue(("supernode", "isolationMode"),
                                "superexec.enabled needs supernode.isolationMode: process; in subprocess "
                                "mode the SuperNode runs ClientApps itself and the SuperExec would compete "
                                "with it",
                                "set supernode.isolationMode: process, or disable the SuperExec"))
        if target.address:
            problem = _address_problem(target.address)
            if problem:
                issues.append(Issue(("superexec", "supernode", "address"), problem,
                                    "write the host name or IP only; the port goes in "
                                    "superexec.supernode.port"))
        if not supports(se.image, SUPEREXEC_SINCE):
            issues.append(Issue(("superexec", "image", "tag"),
                                f"flower-superexec exists from Flower 1.21; image tag {se.image.tag!r} "
                                "is older", "use a SuperExec image of Flower 1.21 or later"))
        return issues

    def _tls_issues(self) -> list[Issue]:
        if not (self.tls.enabled and self.supernode.enabled):
            return []
        issues: list[Issue] = []
        cert = self.supernode.superlink.certificate
        at: FieldPath = ("supernode", "superlink", "certificate")
        copy_name = cert.copyFromExistingSecret.secretName
        for value, path in ((cert.existingSecret, (*at, "existingSecret")),
                            (copy_name, (*at, "copyFromExistingSecret", "secretName"))):
            if value and (len(value) > 253 or not DNS1123_SUBDOMAIN.match(value)):
                issues.append(Issue(path, f"{value!r} is not a valid Secret name",
                                    "use a lowercase DNS name"))
        if cert.copyFromExistingSecret.enabled:
            names = release_names(self, "")
            if not cert.existingSecret:
                issues.append(Issue((*at, "existingSecret"),
                                    "copyFromExistingSecret needs existingSecret: the SuperLink's Secret "
                                    "to copy from",
                                    "set supernode.superlink.certificate.existingSecret to the SuperLink's "
                                    "TLS Secret"))
            elif names.ca_secret == cert.existingSecret:
                issues.append(Issue((*at, "copyFromExistingSecret", "secretName"),
                                    f"the copy would be named {names.ca_secret!r}, like the Secret it is "
                                    "copied from",
                                    "set copyFromExistingSecret.secretName to a different name"))
        return issues

    def _node_auth_issues(self) -> list[Issue]:
        auth = self.global_.nodeAuth
        if not (auth.enabled and self.supernode.enabled):
            return []
        at: FieldPath = ("global", "nodeAuth")
        issues: list[Issue] = []
        if not self.tls.enabled:
            issues.append(Issue((*at, "enabled"), "node authentication needs TLS (the SuperLink refuses it "
                                "on an insecure connection)", "set tls.enabled: true"))
        private: OpenSSHKey | None = None
        if not auth.authSupernodePrivateKey.strip():
            issues.append(Issue((*at, "authSupernodePrivateKey"),
                                "global.nodeAuth.enabled needs a private key",
                                f"set authSupernodePrivateKey to an OpenSSH ECDSA key; {_GENERATE_HINT}"))
        else:
            try:
                private = parse_openssh_private_key(auth.authSupernodePrivateKey)
            except KeyFormatError as exc:
                issues.append(Issue((*at, "authSupernodePrivateKey"), str(exc), exc.hint))
        if auth.authSupernodePublicKey.strip():
            found = public_key_problem(auth.authSupernodePublicKey, private)
            if found:
                issues.append(Issue((*at, "authSupernodePublicKey"), *found))
        elif not supports(self.supernode.image, PUBLIC_KEY_OPTIONAL_SINCE):
            issues.append(Issue((*at, "authSupernodePublicKey"),
                                f"Flower before 1.23 (image tag {self.supernode.image.tag!r}) needs the "
                                "public key together with the private key",
                                "set authSupernodePublicKey (the .pub file's line)"))
        return issues

    # -- per component ------------------------------------------------------------------------------

    def _component_issues(self, comp: Component, key: str) -> list[Issue]:
        issues: list[Issue] = []
        if not comp.image.repository:
            issues.append(Issue((key, "image", "repository"), "image repository is empty",
                                "e.g. flwr/supernode"))
        if comp.image.tag and not _TAG.match(comp.image.tag):
            issues.append(Issue((key, "image", "tag"), f"{comp.image.tag!r} is not a valid image tag",
                                "letters, digits, '_', '.' and '-', at most 128 characters"))
        if comp.image.digest and not _DIGEST.match(comp.image.digest):
            issues.append(Issue((key, "image", "digest"), f"{comp.image.digest!r} is not an image digest",
                                "write it as sha256:<64 hex digits>"))
        if comp.updateStrategy.type == "Recreate" and comp.updateStrategy.rollingUpdate:
            issues.append(Issue((key, "updateStrategy", "rollingUpdate"),
                                "rollingUpdate cannot be set when updateStrategy.type is Recreate",
                                "remove rollingUpdate or use type RollingUpdate"))
        if comp.livenessProbe.successThreshold != 1:
            issues.append(Issue((key, "livenessProbe", "successThreshold"),
                                "Kubernetes requires livenessProbe.successThreshold to be 1", "set it to 1"))
        issues.extend(_volume_issues(comp, key))
        issues.extend(self._extra_arg_issues(comp, key))
        return issues

    def _extra_arg_issues(self, comp: Component, key: str) -> list[Issue]:
        if key == "superexec":
            managed = _SUPEREXEC_FLAGS
        else:
            managed = dict(_SUPERNODE_FLAGS)
            if self.supernode.node.config:
                managed.update(_SUPERNODE_CONFIG_FLAGS)
            if self.global_.nodeAuth.enabled:
                managed.update(_SUPERNODE_AUTH_FLAGS)
        issues = []
        for i, arg in enumerate(comp.extraArgs):
            flag = arg.split("=", 1)[0]
            if flag in managed:
                issues.append(Issue((key, "extraArgs", i), f"{flag} is already set from the values",
                                    managed[flag]))
        return issues

    def _supernode_issues(self) -> list[Issue]:
        sn = self.supernode
        issues: list[Issue] = []
        problem = _address_problem(sn.superlink.address)
        if problem:
            issues.append(Issue(("supernode", "superlink", "address"), problem,
                                "write the host name or IP only; the port goes in supernode.superlink.port"))
        if sn.containerPorts.clientAppIo == sn.containerPorts.health:
            issues.append(Issue(("supernode", "containerPorts", "health"),
                                f"health and clientAppIo both use port {sn.containerPorts.health}",
                                "give the health API its own port (8081 by convention)"))
        svc = sn.service
        if not _IANA_SVC_NAME.match(svc.servicePortClientAppIoName) or not re.search(
                "[a-z]", svc.servicePortClientAppIoName) or "--" in svc.servicePortClientAppIoName:
            issues.append(Issue(("supernode", "service", "servicePortClientAppIoName"),
                                f"port name {svc.servicePortClientAppIoName!r} is not a valid Kubernetes "
                                "port name",
                                "at most 15 lowercase letters, digits and '-', e.g. clientappio"))
        if svc.nodePortClientAppIo != "" and svc.type == "ClusterIP":
            issues.append(Issue(("supernode", "service", "nodePortClientAppIo"),
                                "nodePortClientAppIo only applies to NodePort and LoadBalancer Services",
                                'set service.type: NodePort, or nodePortClientAppIo: ""'))
        for key, raw in sn.node.config.items():
            try:
                check_key(key)
                encode_typed(raw)
            except NodeConfigError as exc:
                issues.append(Issue(("supernode", "node", "config", key), str(exc), exc.hint))
        return issues


def _address_problem(address: str) -> str | None:
    if not address:
        return "the address is empty"
    if "://" in address:
        return f"address {address!r} has a URL scheme; Flower dials plain gRPC host:port"
    if any(c.isspace() for c in address) or "/" in address:
        return f"address {address!r} is not a host name or IP address"
    if address.count(":") == 1:
        return f"address {address!r} includes a port"
    return None


def _security_issues(values: SuperNodeValues, comp: Component, key: str) -> list[Issue]:
    """Check a component's podSecurityContext keys against the pod or container type they go to,
    and the combinations Kubernetes refuses."""
    at: FieldPath = (key, "podSecurityContext")
    issues: list[Issue] = []
    pod_part: dict[str, Any] = {}
    container_part: dict[str, Any] = {}
    known = sorted(POD_ONLY_SECURITY | CONTAINER_ONLY_SECURITY | SHARED_SECURITY)
    for k, v in comp.podSecurityContext.items():
        if k in CONTAINER_ONLY_SECURITY:
            container_part[k] = v
        elif k in POD_ONLY_SECURITY or k in SHARED_SECURITY:
            pod_part[k] = v
        else:
            guess = did_you_mean(k, known)
            issues.append(Issue((*at, k), f"unknown field {k!r} in a security context",
                                f"did you mean {guess!r}?" if guess else f"valid fields: {', '.join(known)}"))
    if pod_part:
        issues.extend(check_field(pod_part, K8sType("api.core.v1.PodSecurityContext"), at))
    if container_part:
        issues.extend(check_field(container_part, K8sType("api.core.v1.SecurityContext"), at))
    if issues:
        return issues
    pod, container = security_contexts(values, comp)
    seccomp = pod.get("seccompProfile")
    localhost = isinstance(seccomp, dict) and seccomp.get("type") == "Localhost"
    if localhost and isinstance(seccomp, dict) and not seccomp.get("localhostProfile"):
        path = (*at, "seccompProfile") if "seccompProfile" in comp.podSecurityContext else (
            "global", "podSecurityContext", "seccompProfile")
        issues.append(Issue(path, "seccompProfile type Localhost needs localhostProfile",
                            "set localhostProfile"))
    if pod.get("runAsNonRoot") is True and pod.get("runAsUser") == 0:
        issues.append(Issue(at, "runAsNonRoot is true but runAsUser is 0 (root); the pod would not start",
                            "use a non-zero runAsUser (the Flower images use 49999) or runAsNonRoot: false"))
    if container.get("allowPrivilegeEscalation") is False:
        caps = container.get("capabilities")
        added = caps.get("add") if isinstance(caps, dict) else None
        if container.get("privileged") is True:
            issues.append(Issue(at, "privileged: true needs allowPrivilegeEscalation: true (Kubernetes "
                                "refuses the combination)",
                                "set allowPrivilegeEscalation: true, or drop privileged"))
        elif isinstance(added, list) and ("SYS_ADMIN" in added or "CAP_SYS_ADMIN" in added):
            issues.append(Issue(at, "adding SYS_ADMIN needs allowPrivilegeEscalation: true (Kubernetes "
                                "refuses the combination)", "set allowPrivilegeEscalation: true"))
    return issues


def _volume_issues(comp: Component, key: str) -> list[Issue]:
    reserved_names = {name for name, _ in WRITABLE_DIRS} | {CA_VOLUME, NODE_AUTH_VOLUME}
    reserved_paths = {path for _, path in WRITABLE_DIRS} | {CA_MOUNT_DIR, NODE_AUTH_MOUNT_DIR}
    issues: list[Issue] = []
    names: set[str] = set(reserved_names)
    for i, volume in enumerate(comp.volumes):
        name = volume.get("name") if isinstance(volume, dict) else None
        if not isinstance(name, str):
            continue
        if name in reserved_names:
            issues.append(Issue((key, "volumes", i, "name"), f"volume name {name!r} is used by flower-syncer",
                                "choose another volume name"))
        elif name in names:
            issues.append(Issue((key, "volumes", i, "name"), f"volume {name!r} is defined twice",
                                "give every volume a unique name"))
        names.add(name)
    for i, mount in enumerate(comp.volumeMounts):
        if not isinstance(mount, dict):
            continue
        name = mount.get("name")
        if isinstance(name, str) and name not in names:
            defined = ", ".join(sorted(n for n in names if n not in reserved_names)) or "none"
            issues.append(Issue((key, "volumeMounts", i, "name"),
                                f"volume mount refers to volume {name!r}, which is not defined "
                                f"(volumes here: {defined})", f"add it to {key}.volumes"))
        path = mount.get("mountPath")
        if isinstance(path, str) and path.rstrip("/") in reserved_paths:
            issues.append(Issue((key, "volumeMounts", i, "mountPath"), f"{path} is mounted by flower-syncer",
                                "mount your volume somewhere else"))
    return issues


# ---------------------------------------------------------------------------------------------
# Validation with the release name


def validate_values(doc: YamlDoc, release: str,
                    unit: str = "") -> tuple[SuperNodeValues | None, list[Diagnostic]]:
    """`validate_document` for a values file, plus the checks that need the release name."""
    model, diags = validate_document(SuperNodeValues, doc, unit)
    candidate = model
    if candidate is None:
        try:  # still report name problems alongside the others
            candidate = SuperNodeValues.model_validate(doc.data)
        except ValidationError:
            candidate = None
    if candidate is None:
        return model, diags
    extra: list[Diagnostic] = []
    seen = {(d.path, d.message) for d in diags}
    for issue in candidate.release_issues(release):
        path = format_path(issue.path)
        if (path, issue.message) in seen:
            continue
        line, col = doc.position(issue.path)
        extra.append(Diagnostic(doc.file, line, col, path, issue.message, issue.hint, unit=unit))
    if not extra:
        return model, diags
    return None, sorted(diags + extra)
