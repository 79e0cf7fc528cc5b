"""The `spec` of the flower-operator's `Federation` (flwr.exalsius.ai/v1) and its metadata, field for
field (syncer.models.federation holds the document and its rules): the types the renderer and the
version checks (syncer.models.federation_versions) read without the document's rules."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field

from syncer.models.base import StrictModel
from syncer.models.k8s import K8sType

EnvList = Annotated[list[dict[str, Any]], K8sType("api.core.v1.EnvVar", list_of=True)]
Volumes = Annotated[list[dict[str, Any]], K8sType("api.core.v1.Volume", list_of=True)]
Mounts = Annotated[list[dict[str, Any]], K8sType("api.core.v1.VolumeMount", list_of=True)]
Resources = Annotated[dict[str, Any], K8sType("api.core.v1.ResourceRequirements")]
PodTemplate = Annotated[dict[str, Any], K8sType("api.core.v1.PodTemplateSpec")]
ClaimSpec = Annotated[dict[str, Any], K8sType("api.core.v1.PersistentVolumeClaimSpec")]
Port = Annotated[int, Field(ge=1, le=65535)]


class ObjectMeta(StrictModel):
    name: str
    namespace: str | None = None
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}


class ClaimTemplateMeta(StrictModel):
    name: Annotated[str, Field(min_length=1)]
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}


class ClaimTemplate(StrictModel):
    metadata: ClaimTemplateMeta
    spec: ClaimSpec


class SuperLinkPorts(StrictModel):
    grpc: Port = 9092
    serverAppIO: Port = 9091
    extra: Port = 9093


class SuperLinkNodePorts(StrictModel):
    """Extension: the node port of each Service port, set in Git (a NodePort or LoadBalancer
    Service; unset, Kubernetes picks one, which no site can be told in advance)."""

    grpc: Port | None = None
    serverAppIO: Port | None = None
    extra: Port | None = None


class SuperLinkService(StrictModel):
    type: Literal["ClusterIP", "NodePort", "LoadBalancer"] = "ClusterIP"
    ports: SuperLinkPorts = SuperLinkPorts()
    nodePorts: SuperLinkNodePorts = SuperLinkNodePorts()  # extension
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}


class SuperLink(StrictModel):
    image: Annotated[str, Field(min_length=1)]
    superexecImage: str = ""
    resources: Resources = {}
    superexecResources: Resources = {}
    env: EnvList = []
    extraArgs: list[str] = []
    superexecExtraArgs: list[str] = []  # extension
    podTemplate: PodTemplate | None = None
    service: SuperLinkService = SuperLinkService()
    volumes: Volumes = []
    volumeMounts: Mounts = []
    superexecVolumeMounts: Mounts = []
    volumeClaimTemplates: list[ClaimTemplate] = []


class PoolImages(StrictModel):
    supernode: str = ""
    superexecClientApp: str = ""


# The kubernetes.io/tls Secret (tls.crt, tls.key, and ca.crt or a self-signed tls.crt) of a
# Federation with `insecure: false`: an annotation, so the document stays a valid operator document.
ANN_TLS_SECRET = "flower-syncer.io/superlink-tls-secret"
# Or a cert-manager Issuer (`name`, or `ClusterIssuer/name`): flower-syncer renders the SuperLink's
# Certificate for its Service names (and the extra names), into the Secret above or <name>-superlink-tls.
ANN_TLS_ISSUER = "flower-syncer.io/superlink-issuer"
ANN_TLS_EXTRA_NAMES = "flower-syncer.io/superlink-tls-extra-names"  # DNS names and IPs, comma-separated

GPU_ENV = {"nvidia": "NVIDIA_VISIBLE_DEVICES", "amd": "ROCR_VISIBLE_DEVICES"}  # what gpu.mountAll sets


class GPU(StrictModel):
    enabled: bool = False
    vendor: Literal["nvidia", "amd"] | None = None
    resourceName: str = ""
    count: Annotated[int, Field(ge=1, le=2**63 - 1)] = 1  # a resource quantity: int64
    mountAll: bool = False

    def resource(self) -> str:
        if self.resourceName:
            return self.resourceName
        return "amd.com/gpu" if self.vendor == "amd" else "nvidia.com/gpu"


class Pool(StrictModel):
    name: Annotated[str, Field(min_length=1, max_length=63)]
    replicas: Annotated[int, Field(ge=1, le=2**31 - 1)] | None = None  # int32 in the API
    images: PoolImages = PoolImages()  # required by the CRD, yet the operator's quick start omits it
    gpu: GPU | None = None
    supernodeResources: Resources = {}
    superexecResources: Resources = {}
    podTemplate: PodTemplate | None = None
    extraArgs: list[str] = []
    superexecExtraArgs: list[str] = []  # extension
    env: EnvList = []
    volumes: Volumes = []
    volumeMounts: Mounts = []
    superexecVolumeMounts: Mounts = []
    volumeClaimTemplates: list[ClaimTemplate] = []
    nodeConfig: dict[str, str] = {}

    field_hints: ClassVar[dict[str, str]] = {
        "nodeConfig": 'node-config values are strings in a Federation; quote them, e.g. batch-size: "32"',
    }


class SuperNodes(StrictModel):
    image: Annotated[str, Field(min_length=1)]
    env: EnvList = []
    pools: Annotated[list[Pool], Field(max_length=16)]


class FederationSpec(StrictModel):
    mode: Literal["DaemonSet", "StatefulSet"]
    isolationMode: Literal["process", "subprocess"]
    version: Annotated[str, Field(min_length=1)] | None = None
    insecure: bool = True
    superlink: SuperLink
    supernodes: SuperNodes
