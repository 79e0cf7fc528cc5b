"""The SuperNode chart's values schema: every documented parameter with its default, the
Kubernetes types inside the values, and the constants the checks and the renderer share."""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field

from syncer.models.base import StrictModel
from syncer.models.k8s import K8sType

CHART_NAME = "flower-client"
DEFAULT_CA_SECRET = "flower-client-tls"
NODE_AUTH_SUFFIX = "node-auth"
CLIENTAPPIO_PORT = 9094


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
NonNegative = Annotated[int, Field(ge=0, le=2**31 - 1)]  # int32 in the API (user ids too)
Positive = Annotated[int, Field(ge=1, le=2**31 - 1)]
PullPolicy = Literal["Always", "IfNotPresent", "Never"]
Preset = Literal["none", "soft", "hard"]


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

_DIGEST = re.compile(r"^[a-z0-9]+(?:[.+_-][a-z0-9]+)*:[a-zA-Z0-9=_-]{32,}\Z")
_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}\Z")
_IANA_SVC_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,13}[a-z0-9])?\Z")


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
    flowerVersion: str = ""
    """flower-syncer's key (Helm passes it through, the chart reads no such key): the Flower release
    of an image whose tag names none (`latest`, a digest, a private build), e.g. "1.42.0"."""

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
