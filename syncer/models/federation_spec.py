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
    """The federation's name: every object it renders is named after it (`<name>-superlink`,
    `<name>-supernode-<pool>`), so it must be a DNS label short enough for those names."""
    namespace: str | None = None
    """Namespace of the federation's objects; unset, the repository's `defaultNamespace` (flower-syncer.yaml)."""
    labels: dict[str, str] = {}
    """Labels of the document. flower-syncer renders the federation's objects directly (there is no Federation object
    in the cluster), so they are not copied anywhere."""
    annotations: dict[str, str] = {}
    """flower-syncer's per-federation settings (TLS, NetworkPolicies, SuperNode authentication, sync policy; see
    annotations.md). The operator ignores them, so the document stays valid for it."""


class ClaimTemplateMeta(StrictModel):
    name: Annotated[str, Field(min_length=1)]
    """Name of the claim template: mount it by this name in `volumeMounts`; each pod gets its own
    PersistentVolumeClaim `<name>-<pod name>`."""
    labels: dict[str, str] = {}
    """Labels of the PersistentVolumeClaims made from this template."""
    annotations: dict[str, str] = {}
    """Annotations of the PersistentVolumeClaims made from this template."""


class ClaimTemplate(StrictModel):
    metadata: ClaimTemplateMeta
    """Name, labels and annotations of the claims."""
    spec: ClaimSpec
    """The claims' spec (access modes, storage class, size). Kubernetes does not let a StatefulSet's claim templates
    change: changing them needs the annotation `flower-syncer.io/allow-recreate`."""


class SuperLinkPorts(StrictModel):
    grpc: Port = 9092
    """Service port of the Fleet API, which the SuperNodes dial. The operator's SuperNodes always dial 9092;
    flower-syncer's dial this port."""
    serverAppIO: Port = 9091
    """Service port of the ServerAppIO API; the Service has it only with `isolationMode: process`."""
    extra: Port = 9093
    """Service port of the Control API, which `flwr run` and `flwr ls` use (the operator calls it extra).
    flower-syncer also registers SuperNode keys there."""


class SuperLinkNodePorts(StrictModel):
    """Extension: the node port of each Service port, set in Git (a NodePort or LoadBalancer
    Service; unset, Kubernetes picks one, which no site can be told in advance)."""

    grpc: Port | None = None
    """Node port of the Fleet API, the one SuperNodes of other clusters dial."""
    serverAppIO: Port | None = None
    """Node port of the ServerAppIO API (process isolation only)."""
    extra: Port | None = None
    """Node port of the Control API."""


class SuperLinkService(StrictModel):
    type: Literal["ClusterIP", "NodePort", "LoadBalancer"] = "ClusterIP"
    """Type of the Service `<name>-superlink`. A change updates the Service in place (the operator deletes and
    recreates it)."""
    ports: SuperLinkPorts = SuperLinkPorts()
    """Port numbers of the Service. They stay the same across Flower releases; only the ports they target in the pod
    follow the image's release."""
    nodePorts: SuperLinkNodePorts = SuperLinkNodePorts()  # extension
    """flower-syncer extension: fixed node ports of a NodePort or LoadBalancer Service (the operator has no such
    field); an error with a ClusterIP Service."""
    labels: dict[str, str] = {}
    """Extra labels of the SuperLink Service (flower-syncer's own labels win on a clash)."""
    annotations: dict[str, str] = {}
    """Annotations of the SuperLink Service, e.g. a cloud provider's load balancer settings."""


class SuperLink(StrictModel):
    image: Annotated[str, Field(min_length=1)]
    """Image of the `superlink` container, e.g. `flwr/superlink:1.25.0`. The Flower release in its tag decides the
    flags, ports and probes flower-syncer renders."""
    superexecImage: str = ""
    """Image of the `superexec-serverapp` sidecar that runs ServerApps: required with `isolationMode: process`, must
    be empty with `subprocess`."""
    resources: Resources = {}
    """CPU and memory requests and limits of the `superlink` container."""
    superexecResources: Resources = {}
    """Requests and limits of the `superexec-serverapp` sidecar (process isolation only)."""
    env: EnvList = []
    """Environment variables of the `superlink` container and of its SuperExec sidecar, in the order written (the
    operator's order changes between reconciles, which rolls the pod)."""
    extraArgs: list[str] = []
    """Arguments added after the ones flower-syncer sets, each passed as its own word. A flag set from the document
    (`--insecure`, `--isolation`, ...) is an error here."""
    superexecExtraArgs: list[str] = []  # extension
    """flower-syncer extension: arguments added to the `superexec-serverapp` sidecar's command line (the operator has
    no such field)."""
    podTemplate: PodTemplate | None = None
    """Pod settings merged into the SuperLink pod: `metadata` labels and annotations reach the pod; `spec.volumes`,
    `imagePullSecrets` and `initContainers` are added by name; other `spec` fields (nodeSelector, tolerations,
    ...) replace flower-syncer's; `containers` is not used."""
    service: SuperLinkService = SuperLinkService()
    """The Service `<name>-superlink` in front of the SuperLink's APIs."""
    volumes: Volumes = []
    """Volumes of the SuperLink pod."""
    volumeMounts: Mounts = []
    """Volume mounts of the `superlink` container (and of the SuperExec sidecar when `superexecVolumeMounts` is
    empty)."""
    superexecVolumeMounts: Mounts = []
    """Volume mounts of the `superexec-serverapp` sidecar; empty, it gets `volumeMounts`."""
    volumeClaimTemplates: list[ClaimTemplate] = []
    """PersistentVolumeClaims of the SuperLink StatefulSet (one replica), e.g. for a state database that survives a
    restart."""


class PoolImages(StrictModel):
    supernode: str = ""
    """Image of this pool's `supernode` container; empty, `supernodes.image`."""
    superexecClientApp: str = ""
    """Image of the `superexec-clientapp` sidecar that runs ClientApps: required with `isolationMode: process`, must
    be empty with `subprocess`."""


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
    """Request GPUs: `<resourceName>: <count>` is added to the limits and requests of the container that runs
    ClientApps (`supernode` in subprocess isolation, `superexec-clientapp` in process isolation)."""
    vendor: Literal["nvidia", "amd"] | None = None
    """`nvidia` or `amd`: picks the default `resourceName` and what `mountAll` does; required with `mountAll`."""
    resourceName: str = ""
    """Extended resource requested, as the device plugin names it; empty, `nvidia.com/gpu` (`amd.com/gpu` with vendor
    `amd`)."""
    count: Annotated[int, Field(ge=1, le=2**63 - 1)] = 1  # a resource quantity: int64
    """GPUs requested per pod, with `enabled`."""
    mountAll: bool = False
    """Give the pods every GPU of their node instead of requesting some: NVIDIA sets `runtimeClassName: nvidia` and
    `NVIDIA_VISIBLE_DEVICES=all`; AMD mounts /dev/kfd and /dev/dri, sets `ROCR_VISIBLE_DEVICES=all` and runs the
    containers privileged. No GPU resource is requested then."""

    def resource(self) -> str:
        if self.resourceName:
            return self.resourceName
        return "amd.com/gpu" if self.vendor == "amd" else "nvidia.com/gpu"


class Pool(StrictModel):
    name: Annotated[str, Field(min_length=1, max_length=63)]
    """Pool name, unique in the federation: its workload is `<federation>-supernode-<name>`, and `{pool}` in
    `nodeConfig` expands to it."""
    replicas: Annotated[int, Field(ge=1, le=2**31 - 1)] | None = None  # int32 in the API
    """SuperNode pods of the pool's StatefulSet: required with `mode: StatefulSet`, must be unset with `DaemonSet`
    (one pod per matching node)."""
    images: PoolImages = PoolImages()  # required by the CRD, yet the operator's quick start omits it
    """Images of this pool, overriding the defaults. The operator's CRD requires the key; flower-syncer accepts it
    missing, as the operator's quick start writes it."""
    gpu: GPU | None = None
    """GPUs for the pool's pods; unset, none."""
    supernodeResources: Resources = {}
    """CPU and memory requests and limits of the `supernode` container."""
    superexecResources: Resources = {}
    """Requests and limits of the `superexec-clientapp` sidecar (process isolation only)."""
    podTemplate: PodTemplate | None = None
    """Pod settings merged into the pool's pods, as for `superlink.podTemplate`: e.g. nodeSelector, affinity and
    tolerations to place them."""
    extraArgs: list[str] = []
    """Arguments added to the `supernode` command line, each passed as its own word (the operator pastes them into a
    shell command). A flag set from the document is an error here."""
    superexecExtraArgs: list[str] = []  # extension
    """flower-syncer extension: arguments added to the `superexec-clientapp` sidecar's command line (the operator has
    no such field)."""
    env: EnvList = []
    """Environment variables of the pool's containers, merged over `supernodes.env` by name (this one wins), in a
    fixed order so the pods do not roll at every sync."""
    volumes: Volumes = []
    """Volumes of the pool's pods."""
    volumeMounts: Mounts = []
    """Volume mounts of the `supernode` container (and of the SuperExec sidecar when `superexecVolumeMounts` is
    empty)."""
    superexecVolumeMounts: Mounts = []
    """Volume mounts of the `superexec-clientapp` sidecar; empty, it gets `volumeMounts`."""
    volumeClaimTemplates: list[ClaimTemplate] = []
    """A PersistentVolumeClaim per pod of the pool, e.g. for a local dataset. StatefulSet mode only: in DaemonSet
    mode they are an error (the operator silently drops them)."""
    nodeConfig: dict[str, str] = {}
    """Passed to each SuperNode as `--node-config`. Values are strings that may use `{index}` (the pod's ordinal,
    StatefulSet only), `{replicas}`, `{pool}` and `{node}`; they are quoted so Flower reads back exactly what was
    written."""

    field_hints: ClassVar[dict[str, str]] = {
        "nodeConfig": 'node-config values are strings in a Federation; quote them, e.g. batch-size: "32"',
    }


class SuperNodes(StrictModel):
    image: Annotated[str, Field(min_length=1)]
    """Default image of every pool's `supernode` container (a pool's `images.supernode` overrides it)."""
    env: EnvList = []
    """Environment variables of every pool's containers; a pool's `env` overrides them by name."""
    pools: Annotated[list[Pool], Field(max_length=16)]
    """The SuperNode pools (1 to 16), each its own StatefulSet or DaemonSet."""


class FederationSpec(StrictModel):
    mode: Literal["DaemonSet", "StatefulSet"]
    """`StatefulSet`: each pool runs `replicas` SuperNode pods; `DaemonSet`: one per matching node. Switching prunes
    the old workloads (the operator leaves them running)."""
    isolationMode: Literal["process", "subprocess"]
    """`subprocess`: the SuperLink and the SuperNodes run the apps themselves; `process`: each gets a SuperExec
    sidecar, which needs `superlink.superexecImage` and each pool's `images.superexecClientApp`."""
    version: Annotated[str, Field(min_length=1)] | None = None
    """The operator's convenience field for the Flower version. flower-syncer reads it as the Flower release of
    images whose tag names none (the annotation `flower-syncer.io/flower-version` wins)."""
    insecure: bool = True
    """`true`: plain-text connections (`--insecure`). `false`: TLS, which needs the certificate's Secret in
    `flower-syncer.io/superlink-tls-secret` or an issuer in `flower-syncer.io/superlink-issuer`."""
    superlink: SuperLink
    """The SuperLink: a StatefulSet with one replica and a Service, both `<name>-superlink`."""
    supernodes: SuperNodes
    """The SuperNodes, in pools."""
