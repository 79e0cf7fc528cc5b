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

DIGEST_PATTERN = re.compile(r"^[a-z0-9]+(?:[.+_-][a-z0-9]+)*:[a-zA-Z0-9=_-]{32,}\Z")
TAG_PATTERN = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}\Z")
IANA_SVC_NAME_PATTERN = re.compile(r"^[a-z0-9]([a-z0-9-]{0,13}[a-z0-9])?\Z")


# ---------------------------------------------------------------------------------------------
# global.*


class SeccompProfile(StrictModel):
    type: Literal["RuntimeDefault", "Localhost", "Unconfined"] = "RuntimeDefault"
    """`RuntimeDefault` (the container runtime's profile), `Localhost` (a profile file on the node) or `Unconfined`
    (none)."""
    localhostProfile: str = ""
    """With type `Localhost`: the profile's path, relative to the kubelet's seccomp directory."""


class Capabilities(StrictModel):
    drop: list[str] = ["ALL"]
    """Linux capabilities removed from the containers."""
    add: list[str] = []
    """Linux capabilities added to the containers."""


class GlobalSecurityContext(StrictModel):
    """Pod-level ids (`global.securityContext`)."""

    runAsUser: NonNegative = 49999
    """User id the containers run as."""
    runAsGroup: NonNegative = 49999
    """Primary group id the containers run as."""
    fsGroup: NonNegative = 49999
    """Group that owns the pods' volumes, so the mounted key and CA files are readable."""


class GlobalPodSecurityContext(StrictModel):
    """Despite the name, mostly container settings (`global.podSecurityContext`)."""

    runAsNonRoot: bool = True
    """Refuse to start a container that would run as root."""
    readOnlyRootFilesystem: bool = True
    """Mount the containers' root filesystem read-only; flower-syncer then adds writable emptyDirs at /app/.flwr,
    /app/.cache, /app/.config and /var/tmp."""
    allowPrivilegeEscalation: bool = False
    """Let a process gain more privileges than its parent (setuid binaries)."""
    seccompProfile: SeccompProfile = SeccompProfile()
    """Seccomp profile of the pods."""
    capabilities: Capabilities = Capabilities()
    """Linux capabilities of the containers."""


class NodeAffinityPreset(StrictModel):
    type: Preset = "hard"
    """`hard`: the pods run only on nodes that match `matchExpressions`; `soft`: such nodes are preferred; `none`:
    ignored."""
    matchExpressions: MatchExpressions = []
    """Node label requirements of the preset; empty, no node affinity is rendered."""


class AffinityPresets(StrictModel):
    podAntiAffinity: Preset = "soft"
    """Spread a component's pods over nodes: `soft` prefers different nodes, `hard` requires them (a pod with no free
    node stays Pending), `none` does not spread them."""
    nodeAffinity: NodeAffinityPreset = NodeAffinityPreset()
    """Node affinity preset of every pod."""

    field_hints: ClassVar[dict[str, str]] = {"podAntiAffinity": "use none, soft or hard"}


class NodeAuth(StrictModel):
    enabled: bool = False
    """Authenticate the SuperNode to the SuperLink with a key pair: the keys go into the Secret
    `<fullname>-node-auth` and are passed with `--auth-supernode-private-key`. Needs `tls.enabled`."""
    authSupernodePrivateKey: str = ""
    """The SuperNode's private key, an OpenSSH ECDSA key (`ssh-keygen -t ecdsa -b 384`); keep it encrypted in Git
    (SOPS)."""
    authSupernodePublicKey: str = ""
    """Its public key (the `.pub` file's line): required before Flower 1.23, optional from then on; checked against
    the private key when given."""


class GlobalImage(StrictModel):
    pullPolicy: PullPolicy = "IfNotPresent"
    """Image pull policy of both components, unless a component sets its own `image.pullPolicy`."""


class GlobalValues(StrictModel):
    annotations: dict[str, str] = {}
    """Annotations of every object of the release except the pods (a component's `annotations` are added over them)."""
    labels: dict[str, str] = {}
    """Labels of every object of the release except the pods (see `podLabels`)."""
    podLabels: dict[str, str] = {}
    """Labels of every pod of the release; a component's `labels` and `podLabels` are added over them."""
    nodeSelector: dict[str, str] = {}
    """Node labels every pod must run on; a component's `nodeSelector` is merged over it."""
    tolerations: Tolerations = []
    """Tolerations of every pod; a component's `tolerations` are added after them."""
    affinity: AffinityPresets = AffinityPresets()
    """Affinity presets of every pod; a component's `affinity` is merged over them."""
    nodeAuth: NodeAuth = NodeAuth()
    """SuperNode authentication with a key pair (Flower's node authentication)."""
    securityContext: GlobalSecurityContext = GlobalSecurityContext()
    """User and group ids of every pod."""
    podSecurityContext: GlobalPodSecurityContext = GlobalPodSecurityContext()
    """Hardening of every container (despite the name, mostly container settings; `runAsNonRoot` and `seccompProfile`
    are also set on the pod)."""
    env: EnvList = []
    """Environment variables of every container; a component's `env` replaces a variable of the same name."""
    image: GlobalImage = GlobalImage()
    """Image settings of both components."""
    imagePullSecrets: PullSecrets = []
    """Pull secrets of every pod, unless a component lists its own (the chart refers to this value without listing
    it)."""


class TLSValues(StrictModel):
    enabled: bool = True
    """Dial the SuperLink over TLS, trusting the CA (`ca.crt`) of the Secret given in
    `supernode.superlink.certificate`; false passes `--insecure`."""


# ---------------------------------------------------------------------------------------------
# What both components have


class Probe(StrictModel):
    enabled: bool = True
    """Render this probe. It checks Flower's health endpoint: images without one (before Flower 1.21, and a SuperExec
    from 1.43) get no probe."""
    initialDelaySeconds: NonNegative = 0
    """Seconds after the container starts before the first probe."""
    periodSeconds: Positive = 10
    """Seconds between two probes."""
    timeoutSeconds: Positive = 1
    """Seconds after which a probe counts as failed."""
    failureThreshold: Positive = 3
    """Failed probes in a row before the container is restarted (liveness) or taken out of service (readiness)."""
    successThreshold: Positive = 1
    """Successful probes in a row before the container counts as healthy again; Kubernetes requires 1 for a liveness
    probe."""


class ServiceAccountValues(StrictModel):
    enabled: bool = True
    """Render a ServiceAccount named like the component's Deployment and run its pods under it; false, the pods run
    under the namespace's `default` ServiceAccount."""
    annotations: dict[str, str] = {}
    """Annotations of the ServiceAccount, added over the component's `annotations`."""
    labels: dict[str, str] = {}
    """Labels of the ServiceAccount."""
    automountServiceAccountToken: bool = True
    """The ServiceAccount's own `automountServiceAccountToken`; the pods' setting is the component's
    `automountServiceAccountToken`."""


class UpdateStrategy(StrictModel):
    type: Literal["RollingUpdate", "Recreate"] = "RollingUpdate"
    """`RollingUpdate` replaces the pods a few at a time; `Recreate` stops all old pods before starting new ones."""
    rollingUpdate: RollingUpdate = {}
    """`maxSurge` and `maxUnavailable` of a rolling update; only with type `RollingUpdate`."""


class Image(StrictModel):
    registry: str = "registry.hub.docker.com"
    """Registry the image is pulled from; empty, the reference has no registry part."""
    repository: str = ""
    """Repository of the image in the registry."""
    tag: str = ""
    """Image tag. The Flower release it names decides the flags, ports and probes flower-syncer renders (see
    `flowerVersion` for a tag that names none)."""
    digest: str = ""
    """Image digest (`sha256:...`), appended to the reference so the exact image is pulled."""
    pullPolicy: Literal["Always", "IfNotPresent", "Never", ""] = "IfNotPresent"
    """Image pull policy of this component; when the values do not set it (or set it empty),
    `global.image.pullPolicy` applies."""
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
    """Render a NetworkPolicy for the component's pods."""
    allowExternalEgress: bool = True
    """Let the pods connect anywhere; false allows only DNS, the port the component dials (the SuperLink's, or the
    SuperNode's ClientAppIo) and `extraEgress`."""
    extraEgress: EgressRules = []
    """Extra egress rules, used when `allowExternalEgress` is false (the chart's table calls them ingress rules)."""


class SuperNodeNetworkPolicy(EgressPolicy):
    allowExternal: bool = True
    """Admit anyone to the SuperNode's ports; false, only the pods matched by the `ingress*` labels, this release's
    SuperExec and `extraIngress`."""
    extraIngress: IngressRules = []
    """Extra ingress rules of the SuperNode's NetworkPolicy."""
    ingressPodMatchLabels: dict[str, str] = {}
    """With `allowExternal: false`: pods of the release's namespace with these labels may connect."""
    ingressNSMatchLabels: dict[str, str] = {}
    """With `allowExternal: false`: pods of the namespaces with these labels may connect."""
    ingressNSPodMatchLabels: dict[str, str] = {}
    """With `ingressNSMatchLabels`: only the pods with these labels in those namespaces."""


class Component(StrictModel):
    """The settings the SuperNode and the SuperExec share."""

    name: str = ""
    """The component's name: its objects are named `<fullname>-<name>`, and it is their `app.kubernetes.io/component`
    label."""
    enabled: bool = False
    """Render this component."""
    image: Image = Image()
    """The component's container image."""
    resources: Resources = {}
    """CPU and memory requests and limits of the container."""
    volumes: Volumes = []
    """Extra volumes of the pods (not named like flower-syncer's own)."""
    volumeMounts: Mounts = []
    """Extra volume mounts of the container."""
    automountServiceAccountToken: bool = True
    """Mount a Kubernetes API token into the pods."""
    serviceAccount: ServiceAccountValues = ServiceAccountValues()
    """The component's ServiceAccount."""
    podSecurityContext: dict[str, Any] = {}
    """Security settings merged over the global ones; each key goes where Kubernetes accepts it (the pod's or the
    container's securityContext)."""
    livenessProbe: Probe = Probe()
    """Restart the container when Flower's health check keeps failing."""
    readinessProbe: Probe = Probe()
    """Take the pod out of service while Flower's health check fails."""
    replicas: NonNegative = 1
    """Number of pods of the component's Deployment."""
    labels: dict[str, str] = {}
    """Extra labels of the component's pods."""
    extraArgs: list[str] = []
    """Arguments added after the ones flower-syncer sets, each its own word; a flag the values already set is an
    error naming the value to use instead."""
    nodeSelector: dict[str, str] = {}
    """Node labels the pods must run on, merged over `global.nodeSelector`."""
    tolerations: Tolerations = []
    """Tolerations of the pods, added after `global.tolerations`."""
    updateStrategy: UpdateStrategy = UpdateStrategy()
    """How the Deployment replaces its pods."""
    affinity: Affinity = {}
    """Affinity of the pods, merged over the `global.affinity` presets (its keys win)."""
    env: EnvList = []
    """Environment variables of the container, merged over `global.env` (same name: this one wins)."""
    lifecycle: Lifecycle = {}
    """postStart and preStop hooks of the container."""
    annotations: dict[str, str] = {}
    """Annotations of the component's objects (Deployment, Service, ServiceAccount, NetworkPolicy), added over
    `global.annotations`."""
    selectorLabels: dict[str, str] = {}
    """Extra labels of the Deployment's selector and its pods. Kubernetes does not let a Deployment's selector
    change, so set them before the first sync."""
    podAnnotations: dict[str, str] = {}
    """Annotations of the component's pods."""
    podLabels: dict[str, str] = {}
    """Extra labels of the component's pods, added over `labels`."""
    imagePullSecrets: PullSecrets = []
    """Pull secrets of the pods; set, they replace `global.imagePullSecrets`."""
    networkPolicy: EgressPolicy = EgressPolicy()
    """The component's NetworkPolicy."""

    field_hints: ClassVar[dict[str, str]] = {
        "podSecurityContext": "pod or container security settings, e.g. runAsUser: 1000 or privileged: false",
        "extraArgs": 'a list of strings, e.g. ["--max-retries=5"]',
    }


# ---------------------------------------------------------------------------------------------
# supernode.*


class NodeValues(StrictModel):
    config: dict[str, Any] = {}
    """Passed to the SuperNode as `--node-config` (e.g. `partition-id: 0`). Values keep their YAML type and are
    written so Flower reads back exactly that value (Helm prints 1000000 as 1e+06)."""

    field_hints: ClassVar[dict[str, str]] = {
        "config": "a mapping of node-config keys to strings, numbers or true/false",
    }


class CopyFromExistingSecret(StrictModel):
    enabled: bool = False
    """Copy the CA from the SuperLink's Secret `existingSecret` into a Secret of this release, kept in step at every
    sync (the chart's Helm `lookup` finds nothing under GitOps)."""
    secretName: str = ""
    """Name of the copy; empty, `flower-client-tls`."""


class Certificate(StrictModel):
    existingSecret: str = ""
    """The Secret with the CA that signed the SuperLink's certificate (`ca.crt`); empty, `flower-client-tls`. With
    `copyFromExistingSecret`, the SuperLink's Secret to copy it from."""
    copyFromExistingSecret: CopyFromExistingSecret = CopyFromExistingSecret()
    """Copy the CA out of the SuperLink's own Secret instead of providing one."""


class SuperLinkTarget(StrictModel):
    address: str = "my-superlink.example.com"
    """Host name or IP address of the SuperLink the SuperNode connects to (no scheme, no port)."""
    port: Port = 9092
    """Port of the SuperLink's Fleet API."""
    certificate: Certificate = Certificate()
    """Where the SuperNode finds the SuperLink's CA, with `tls.enabled`."""


class ClientAppIoService(StrictModel):
    type: Literal["ClusterIP", "NodePort", "LoadBalancer"] = "ClusterIP"
    """Type of the Service in front of the SuperNode's ClientAppIo API."""
    servicePortClientAppIoName: str = "clientappio"
    """Name of that Service port (a Kubernetes port name: at most 15 characters)."""
    servicePortClientAppIo: Port = CLIENTAPPIO_PORT
    """Service port of the ClientAppIo API, which a SuperExec dials."""
    nodePortClientAppIo: Literal[""] | Port = ""
    """Node port of the ClientAppIo API with a NodePort or LoadBalancer Service; empty, Kubernetes picks one."""

    field_hints: ClassVar[dict[str, str]] = {
        "type": "use ClusterIP, NodePort or LoadBalancer (Kubernetes spells it with a capital B)",
        "nodePortClientAppIo": 'a port number without quotes (e.g. 30094), or "" to let Kubernetes choose',
    }


class SuperNodePorts(StrictModel):
    clientAppIo: Port = CLIENTAPPIO_PORT
    """Container port of the SuperNode's ClientAppIo API (from Flower 1.35 also its GET /health)."""
    health: Port = 8081
    """Container port of the SuperNode's gRPC health server, which the probes check (Flower 1.21 to 1.34)."""


class SuperNodeComponent(Component):
    name: str = "supernode"
    enabled: bool = True
    image: SuperNodeImage = SuperNodeImage()
    node: NodeValues = NodeValues()
    """The SuperNode's node settings."""
    isolationMode: Literal["subprocess", "process"] = "subprocess"
    """`subprocess`: the SuperNode runs ClientApps itself; `process`: a SuperExec does (this release's `superexec`,
    or one that dials the SuperNode's Service)."""
    superlink: SuperLinkTarget = SuperLinkTarget()
    """The SuperLink the SuperNode connects to."""
    service: ClientAppIoService = ClientAppIoService()
    """The Service in front of the SuperNode's ClientAppIo API."""
    containerPorts: SuperNodePorts = SuperNodePorts()
    """Ports of the SuperNode container."""
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
    """Host of the SuperNode whose ClientAppIo API the SuperExec dials; empty, this release's SuperNode Service."""
    port: Port | None = None
    """Its port; unset, `supernode.service.servicePortClientAppIo`."""


class SuperExecPorts(StrictModel):
    health: Port = 8081
    """Container port of the SuperExec's gRPC health server, which the probes check (Flower 1.21 to 1.42)."""


class SuperExecComponent(Component):
    name: str = "superexec-clientapp"
    enabled: bool = False
    image: SuperExecImage = SuperExecImage()
    supernode: SuperExecTarget = SuperExecTarget()
    """The SuperNode the SuperExec runs ClientApps for."""
    containerPorts: SuperExecPorts = SuperExecPorts()
    """Ports of the SuperExec container."""
