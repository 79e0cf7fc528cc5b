"""The flower-operator's `Federation` (flwr.exalsius.ai/v1), field for field, plus its CEL rules.

A Federation file written for the operator validates here unchanged. Fields marked "extension"
are flower-syncer additions; the operator would reject them.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any, Literal

from syncer.diagnostics import FieldPath
from syncer.models.base import StrictModel
from syncer.models.canary import CanarySettings, canary_issues, canary_settings
from syncer.models.exposure import ExternalAddress, exposure_issues, external_addresses
from syncer.models.federation_spec import (
    ANN_TLS_EXTRA_NAMES,
    ANN_TLS_ISSUER,
    ANN_TLS_SECRET,
    ClaimTemplate,
    FederationSpec,
    ObjectMeta,
    Pool,
)
from syncer.models.federation_versions import federation_version_issues
from syncer.models.flower import (
    ANN_FLOWER_VERSION,
    FlowerInterface,
    Transport,
    flower_interface,
    image_version,
    interface_of_image,
)
from syncer.models.k8s import Issue, reserved_env_issues
from syncer.models.names import (
    DNS1123_SUBDOMAIN,
    MAX_NAME,
    MAX_WORKLOAD_NAME,
    label_key_problem,
    label_value_problem,
    name_problem,
)
from syncer.models.netsources import (
    ANN_CONTROL_API_FROM,
    ANN_FLEET_API_FROM,
    ANN_NETWORK_POLICIES,
    Source,
    parse_sources,
)
from syncer.models.nodeauth import (
    ANN_CONTROL_API_ADDRESS,
    ANN_SUPERNODE_AUTH,
    ANN_SUPERNODE_KEYS,
    KEY_HINT,
    NodeKey,
    control_address_problem,
    own_control_targets,
    parse_keys,
)
from syncer.models.nodeconfig import (
    NODE_VAR,
    PLACEHOLDER,
    POD_NAME_VAR,
    NodeConfigError,
    check_key,
    encode_template,
    unknown_placeholders,
)
from syncer.models.superlink_state import StateSettings, state_issues, state_settings

API_VERSION = "flwr.exalsius.ai/v1"
KIND = "Federation"




class Federation(StrictModel):
    apiVersion: Literal["flwr.exalsius.ai/v1"]
    kind: Literal["Federation"]
    metadata: ObjectMeta
    """Name, namespace, labels and annotations of the federation."""
    spec: FederationSpec
    """The federation: its SuperLink, its SuperNode pools and how they run."""

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def stateful(self) -> bool:
        return self.spec.mode == "StatefulSet"

    def canary(self) -> CanarySettings | None:
        """Which SuperNodes of each pool take a change first (syncer.models.canary); None: no canary."""
        return canary_settings(self.metadata.annotations)

    def superlink_name(self) -> str:
        return f"{self.name}-superlink"

    def tls_secret(self) -> str:
        """The kubernetes.io/tls Secret of the SuperLink (`insecure: false`): named by annotation,
        or the one cert-manager writes for the Certificate flower-syncer renders."""
        default = f"{self.superlink_name()}-tls" if self.tls_issuer() else ""
        return self.metadata.annotations.get(ANN_TLS_SECRET, default)

    def tls_issuer(self) -> tuple[str, str] | None:
        """(kind, name) of the cert-manager issuer that signs the SuperLink's certificate."""
        value = self.metadata.annotations.get(ANN_TLS_ISSUER, "").strip()
        if not value:
            return None
        kind, _, name = value.rpartition("/")
        return (kind or "Issuer", name)

    def external_addresses(self) -> list[ExternalAddress]:
        """Where SuperNodes outside the cluster reach the Fleet API (syncer.models.exposure)."""
        return external_addresses(self.metadata.annotations)

    def tls_extra_names(self) -> list[str]:
        return [n for n in re.split(r"[,\s]+", self.metadata.annotations.get(ANN_TLS_EXTRA_NAMES, "")) if n]

    def ca_secret_name(self) -> str:
        """The Secret flower-syncer fills with the CA (ca.crt, else tls.crt) for the SuperNodes."""
        return f"{self.superlink_name()}-ca"

    def pool_name(self, pool: Pool) -> str:
        return f"{self.name}-supernode-{pool.name}"

    @property
    def network_policies(self) -> bool:
        """NetworkPolicies for the SuperLink and the pools: on unless the annotation says disabled."""
        return self.metadata.annotations.get(ANN_NETWORK_POLICIES, "enabled") != "disabled"

    @property
    def supernode_auth(self) -> bool:
        """The SuperLink admits only SuperNodes whose keys are registered (models/nodeauth.py)."""
        return self.metadata.annotations.get(ANN_SUPERNODE_AUTH, "disabled") == "enabled"

    def superlink_state(self) -> StateSettings:
        """Where the SuperLink keeps its state: a persistent volume or memory (models.superlink_state)."""
        return state_settings(self.metadata.annotations, self.spec.superlink.extraArgs)

    def admitted_keys(self) -> list[NodeKey]:
        return parse_keys(self.metadata.annotations.get(ANN_SUPERNODE_KEYS, ""))[0]

    def control_api(self) -> tuple[Transport, int]:
        """(transport, Service port) of the SuperLink's Control API: the transport of its release
        (syncer.models.flower), the port its Service names for it (the target port follows the
        release: 9093 before 1.37, the SuperLink's --port 8000 from 1.37)."""
        return self.flower(self.spec.superlink.image).control_transport, self.spec.superlink.service.ports.extra

    def own_control_targets(self, namespace: str) -> tuple[str, ...]:
        """The SuperLink Service's addresses at the Control port: always a target the agent may dial."""
        return own_control_targets(self.superlink_name(), namespace, self.control_api()[1])

    def control_api_address(self, namespace: str) -> str:
        """Where flower-syncer reaches the Control API to register keys: the SuperLink's Service,
        unless the annotation says otherwise (a SuperLink outside the cluster, tests), which the
        admin must allow (render.control_targets)."""
        default = self.own_control_targets(namespace)[1]
        return self.metadata.annotations.get(ANN_CONTROL_API_ADDRESS, default).strip() or default

    def flower(self, image: str) -> FlowerInterface:
        """The Flower interface of one of this federation's images: from its tag, else from the
        annotation flower-syncer.io/flower-version, else from the operator's `spec.version` (its
        "convenience field for the Flower version", when it reads as one), else (assumed, with a
        warning) the SuperLink's release when its tag names one (the operator's examples pair
        `flwr/superlink:1.25.0` with `my-app/client:latest`), else the newest known release."""
        explicit = self.metadata.annotations.get(ANN_FLOWER_VERSION, "") or self.spec.version or ""
        iface = interface_of_image(image, explicit)
        if iface.assumed and image != self.spec.superlink.image:
            return iface.beside(interface_of_image(self.spec.superlink.image, explicit))
        return iface

    def images(self) -> list[tuple[FieldPath, str]]:
        """(field, image) of every Flower container this federation runs."""
        spec = self.spec
        out: list[tuple[FieldPath, str]] = [(("spec", "superlink", "image"), spec.superlink.image)]
        if spec.isolationMode == "process" and spec.superlink.superexecImage:
            out.append((("spec", "superlink", "superexecImage"), spec.superlink.superexecImage))
        out.append((("spec", "supernodes", "image"), spec.supernodes.image))
        for i, pool in enumerate(spec.supernodes.pools):
            if pool.images.supernode:
                out.append((("spec", "supernodes", "pools", i, "images", "supernode"), pool.images.supernode))
            if spec.isolationMode == "process" and pool.images.superexecClientApp:
                out.append((("spec", "supernodes", "pools", i, "images", "superexecClientApp"),
                            pool.images.superexecClientApp))
        return out

    def api_sources(self, annotation: str) -> list[Source]:
        """Who may reach a SuperLink API besides the federation's own SuperNodes (netsources)."""
        return parse_sources(self.metadata.annotations.get(annotation, ""))[0]

    def semantic_issues(self) -> list[Issue]:
        issues: list[Issue] = []
        spec = self.spec
        pools = spec.supernodes.pools
        pools_path: FieldPath = ("spec", "supernodes", "pools")

        # The operator's eight CEL rules, with its messages.
        if not pools:
            issues.append(Issue(pools_path, "spec.supernodes.pools must contain at least one pool", "add a pool"))
        for i, pool in enumerate(pools):
            at: FieldPath = (*pools_path, i)
            if spec.mode == "DaemonSet" and pool.replicas is not None:
                issues.append(Issue((*at, "replicas"), "replicas must not be set for pools when mode is DaemonSet",
                                    "remove replicas: a DaemonSet runs one pod per matching node"))
            if spec.mode == "StatefulSet" and pool.replicas is None:
                issues.append(Issue((*at, "replicas"), "replicas must be set (>=1) for every pool when mode is "
                                    "StatefulSet", "add replicas: N to the pool"))
            if spec.isolationMode == "process" and not pool.images.superexecClientApp:
                issues.append(Issue((*at, "images", "superexecClientApp"),
                                    "spec.supernodes.pools[*].images.superexecClientApp is required when "
                                    "isolationMode=process", "set the SuperExec ClientApp image for this pool"))
            if spec.isolationMode == "subprocess" and pool.images.superexecClientApp:
                issues.append(Issue((*at, "images", "superexecClientApp"),
                                    "spec.supernodes.pools[*].images.superexecClientApp must be empty when "
                                    "isolationMode=subprocess", "remove it, or switch isolationMode to process"))
            if pool.gpu is not None and pool.gpu.mountAll and not pool.gpu.vendor:
                issues.append(Issue((*at, "gpu", "vendor"),
                                    "spec.supernodes.pools[*].gpu.vendor is required when gpu.mountAll=true",
                                    "set vendor: nvidia or vendor: amd"))
        if spec.isolationMode == "process" and not spec.superlink.superexecImage:
            issues.append(Issue(("spec", "superlink", "superexecImage"),
                                "spec.superlink.superexecImage is required when isolationMode=process",
                                "set the SuperExec ServerApp image"))
        if spec.isolationMode == "subprocess" and spec.superlink.superexecImage:
            issues.append(Issue(("spec", "superlink", "superexecImage"),
                                "spec.superlink.superexecImage must be empty when isolationMode=subprocess",
                                "remove it, or switch isolationMode to process"))

        issues.extend(self._name_issues())
        issues.extend(self._pool_issues())
        issues.extend(self._label_issues())
        issues.extend(self._env_issues())
        issues.extend(self._extra_arg_issues())
        issues.extend(self._network_issues())
        issues.extend(self._auth_issues())
        issues.extend(self._issuer_issues())
        issues.extend(exposure_issues(self.metadata.annotations, spec.superlink.service))
        issues.extend(state_issues(self.metadata.annotations, spec.superlink.extraArgs,
                                   {c.metadata.name for c in spec.superlink.volumeClaimTemplates},
                                   {str(v.get("name")) for v in spec.superlink.volumes if isinstance(v, dict)}))
        issues.extend(canary_issues(self.metadata.annotations, [(p.name, p.replicas) for p in spec.supernodes.pools]))
        issues.extend(federation_version_issues(spec, self.metadata.annotations, self.images(), self.flower,
                                                self.tls_issuer() is not None))
        if not spec.insecure and not self.tls_secret():
            issues.append(Issue(("spec", "insecure"), "insecure: false needs the SuperLink's certificate, and none is "
                                "named (Flower would exit at start-up)",
                                f"name the kubernetes.io/tls Secret (tls.crt, tls.key, ca.crt) in the annotation "
                                f"{ANN_TLS_SECRET}, or a cert-manager issuer in {ANN_TLS_ISSUER}; "
                                "or set insecure: true"))
        elif self.tls_secret() and name_problem(self.tls_secret(), "Secret name"):
            issues.append(Issue(("metadata", "annotations", ANN_TLS_SECRET),
                                str(name_problem(self.tls_secret(), "Secret name")), "use the Secret's name"))
        return issues

    def _issuer_issues(self) -> list[Issue]:
        issuer = self.tls_issuer()
        at: FieldPath = ("metadata", "annotations", ANN_TLS_ISSUER)
        issues = []
        if issuer is not None:
            kind, name = issuer
            if kind not in ("Issuer", "ClusterIssuer") or len(name) > 253 or not DNS1123_SUBDOMAIN.match(name):
                issues.append(Issue(at, f"{self.metadata.annotations[ANN_TLS_ISSUER]!r} is not an issuer",
                                    "write the Issuer's name, or ClusterIssuer/<name>"))
            elif self.spec.insecure:
                issues.append(Issue(at, "a certificate is issued but the SuperLink runs with insecure: true",
                                    "set insecure: false", severity="warning"))
        for name in self.tls_extra_names():
            try:
                ipaddress.ip_address(name)
            except ValueError:
                if len(name) > 253 or not DNS1123_SUBDOMAIN.match(name.removeprefix("*.")):
                    issues.append(Issue(("metadata", "annotations", ANN_TLS_EXTRA_NAMES),
                                        f"{name!r} is neither a DNS name nor an IP address",
                                        "list names such as flower.example.com or 10.0.0.7"))
        return issues

    def _auth_issues(self) -> list[Issue]:
        annotations = self.metadata.annotations
        at: FieldPath = ("metadata", "annotations", ANN_SUPERNODE_AUTH)
        keys_at: FieldPath = ("metadata", "annotations", ANN_SUPERNODE_KEYS)
        issues = [Issue(keys_at, f"line {i + 1} of the list: {problem}", KEY_HINT)
                  for i, problem in parse_keys(annotations.get(ANN_SUPERNODE_KEYS, ""))[1]]
        address = annotations.get(ANN_CONTROL_API_ADDRESS)
        if address is not None and control_address_problem(address.strip()):
            issues.append(Issue(("metadata", "annotations", ANN_CONTROL_API_ADDRESS),
                                f"the Control API address {control_address_problem(address.strip())}",
                                "write host:port of the SuperLink's Control API, or remove the annotation to use "
                                "the federation's own SuperLink Service"))
        mode = annotations.get(ANN_SUPERNODE_AUTH, "disabled")
        if mode not in ("enabled", "disabled"):
            return [*issues, Issue(at, f"{mode!r} is not a setting", "write enabled or disabled (the default)")]
        if mode == "disabled":
            if annotations.get(ANN_SUPERNODE_KEYS, "").strip():
                issues.append(Issue(keys_at, "public keys are listed but supernode authentication is off, so "
                                    "any SuperNode is admitted", f"set {ANN_SUPERNODE_AUTH}: enabled",
                                    severity="warning"))
            return issues
        spec = self.spec
        if self.network_policies and not annotations.get(ANN_CONTROL_API_FROM, "").strip() \
                and ANN_CONTROL_API_ADDRESS not in annotations:
            issues.append(Issue(at, "flower-syncer registers the keys through the SuperLink's Control API, which "
                                "the federation's NetworkPolicy closes to everyone not named",
                                f"name the agent's namespace in {ANN_CONTROL_API_FROM}", severity="warning"))
        if spec.insecure:
            issues.append(Issue(at, "SuperNode authentication needs a TLS SuperLink (Flower refuses it with "
                                "--insecure)", f"set insecure: false and name the certificate in {ANN_TLS_SECRET}"))
        version = image_version(spec.superlink.image)
        if version is not None and not flower_interface(version).supernode_auth:
            issues.append(Issue(("spec", "superlink", "image"), f"SuperNode authentication with keys registered "
                                f"through the Control API needs Flower 1.23 or newer, not {spec.superlink.image}",
                                "use a newer SuperLink image, or set supernode-auth: disabled"))
        for i, pool in enumerate(spec.supernodes.pools):
            pool_at: FieldPath = ("spec", "supernodes", "pools", i)
            if not any(a.split("=", 1)[0] == "--auth-supernode-private-key" for a in pool.extraArgs):
                issues.append(Issue((*pool_at, "extraArgs"), f"pool {pool.name!r} has no key, so the SuperLink "
                                    "refuses its SuperNodes", "mount a private key from a Secret (volumes, "
                                    "volumeMounts) and pass --auth-supernode-private-key=<path> in extraArgs; "
                                    "list its public key in " + ANN_SUPERNODE_KEYS))
            elif spec.mode == "DaemonSet" or (pool.replicas or 1) > 1:
                issues.append(Issue((*pool_at, "replicas"), f"the SuperNodes of pool {pool.name!r} would share one "
                                    "key, and the SuperLink admits one SuperNode per key",
                                    "use one pool (StatefulSet, replicas: 1) per key, or SuperNode Helm releases "
                                    "with global.nodeAuth"))
        return issues

    def _network_issues(self) -> list[Issue]:
        annotations = self.metadata.annotations
        issues = []
        mode = annotations.get(ANN_NETWORK_POLICIES, "enabled")
        if mode not in ("enabled", "disabled"):
            issues.append(Issue(("metadata", "annotations", ANN_NETWORK_POLICIES), f"{mode!r} is not a setting",
                                "write enabled (the default) or disabled"))
        service = self.spec.superlink.service.type
        if mode == "disabled" and self.spec.insecure and service != "ClusterIP":
            issues.append(Issue(("spec", "superlink", "service", "type"), f"the SuperLink's Fleet API and Control "
                                f"API are on a {service} Service, in plain text (insecure: true), with no "
                                "NetworkPolicy: anyone who reaches the Service can connect SuperNodes and start or "
                                "stop runs", "set insecure: false with a certificate, or turn the NetworkPolicies "
                                f"on ({ANN_NETWORK_POLICIES}: enabled), or keep the Service ClusterIP",
                                severity="warning"))
        for key in (ANN_FLEET_API_FROM, ANN_CONTROL_API_FROM):
            issues += [Issue(("metadata", "annotations", key), problem,
                             "list CIDRs, namespaces or NAMESPACE/KEY=VALUE pod labels, or * for anyone")
                       for problem in parse_sources(annotations.get(key, ""))[1]]
        return issues

    def _extra_arg_issues(self) -> list[Issue]:
        """extraArgs that set a flag flower-syncer sets from the document (the SuperNode values
        side checks the same): the container would get it twice, and which one wins is Flower's
        parser's business."""
        spec = self.spec
        common = {"--isolation": "set spec.isolationMode instead", "--insecure": "set spec.insecure instead",
                  "--health-server-address": "flower-syncer runs the health server on 8081 for the probes"}
        superlink_only = {"--enable-supernode-auth": f"set the annotation {ANN_SUPERNODE_AUTH}: enabled"}
        issues = [Issue(("spec", "superlink", "extraArgs", i), f"{flag} is already set from the document", hint)
                  for i, flag, hint in _managed_args(spec.superlink.extraArgs, {**common, **superlink_only})]
        for p, pool in enumerate(spec.supernodes.pools):
            managed = {**common, "--superlink": "flower-syncer points the pool at the federation's SuperLink"}
            if spec.isolationMode == "process":
                managed["--clientappio-api-address"] = "flower-syncer sets it for the SuperExec sidecar"
            if pool.nodeConfig:
                managed["--node-config"] = "set the pool's nodeConfig instead"
            issues += [Issue(("spec", "supernodes", "pools", p, "extraArgs", i),
                             f"{flag} is already set from the document", hint)
                       for i, flag, hint in _managed_args(pool.extraArgs, managed)]
        return issues

    def _env_issues(self) -> list[Issue]:
        """User env that collides with what the renderer sets in the SuperNode container: the
        node-config wrapper's variables (when node config has placeholders). (A user's GPU
        visibility variable overrides the one of `gpu.mountAll`: the renderer keeps it.)"""
        issues: list[Issue] = []
        spec = self.spec
        for i, pool in enumerate(spec.supernodes.pools):
            reserved: dict[str, str] = {}
            if any(PLACEHOLDER.search(v) for v in pool.nodeConfig.values()):
                reserved |= dict.fromkeys((POD_NAME_VAR, NODE_VAR), "the node-config wrapper of this pool")
            if not reserved:
                continue
            for path, env in ((("spec", "supernodes", "env"), spec.supernodes.env),
                              (("spec", "supernodes", "pools", i, "env"), pool.env)):
                issues.extend(reserved_env_issues(env, path, reserved))
        return issues

    def _name_issues(self) -> list[Issue]:
        issues: list[Issue] = []
        meta_path: FieldPath = ("metadata", "name")
        problem = name_problem(self.name, "federation name", dns1035=True)
        if problem:
            issues.append(Issue(meta_path, problem, "rename the federation"))
            return issues
        svc = self.superlink_name()
        if len(svc) > MAX_NAME:
            issues.append(Issue(meta_path, f"derived Service name {svc!r} is {len(svc)} characters (max {MAX_NAME})",
                                f"shorten the federation name to at most {MAX_NAME - len('-superlink')} characters"))
        if self.metadata.namespace is not None:
            ns_problem = name_problem(self.metadata.namespace, "namespace")
            if ns_problem:
                issues.append(Issue(("metadata", "namespace"), ns_problem, "use a valid namespace name"))
        return issues

    def _pool_issues(self) -> list[Issue]:
        issues: list[Issue] = []
        seen: dict[str, int] = {}
        pools_path: FieldPath = ("spec", "supernodes", "pools")
        for i, pool in enumerate(self.spec.supernodes.pools):
            at: FieldPath = (*pools_path, i)
            problem = name_problem(pool.name, "pool name")
            if problem:
                issues.append(Issue((*at, "name"), problem, "rename the pool"))
                continue
            if pool.name in seen:
                issues.append(Issue((*at, "name"),
                                    f"pool name {pool.name!r} is used twice (first at pools[{seen[pool.name]}])",
                                    "give every pool a unique name"))
            seen.setdefault(pool.name, i)
            workload = self.pool_name(pool)
            if len(workload) > MAX_WORKLOAD_NAME:
                issues.append(Issue((*at, "name"),
                                    f"derived workload name {workload!r} is {len(workload)} characters; "
                                    f"StatefulSets and DaemonSets need at most {MAX_WORKLOAD_NAME} (their pods "
                                    "carry a revision-hash label)",
                                    "shorten the federation or pool name"))
            component = f"pool-{pool.name}"
            if len(component) > MAX_NAME:
                issues.append(Issue((*at, "name"), f"label value {component!r} is over {MAX_NAME} characters",
                                    "shorten the pool name"))
            if pool.volumeClaimTemplates and not self.stateful:
                issues.append(Issue((*at, "volumeClaimTemplates"),
                                    "volumeClaimTemplates only work in StatefulSet mode (the operator silently "
                                    "drops them)",
                                    "use volumes with a persistentVolumeClaim or hostPath in DaemonSet mode"))
            if self.spec.isolationMode == "subprocess" and (pool.superexecResources or pool.superexecVolumeMounts
                                                           or pool.superexecExtraArgs):
                field = ("superexecResources" if pool.superexecResources else
                         "superexecVolumeMounts" if pool.superexecVolumeMounts else "superexecExtraArgs")
                issues.append(Issue((*at, field), f"{field} has no effect in subprocess mode (there is no SuperExec "
                                    "container)", "remove it, or switch isolationMode to process",
                                    "warning"))  # the operator accepts it: operator files load unchanged
            issues.extend(self._node_config_issues(pool, at))
            issues.extend(_pod_template_issues(pool.podTemplate, at))
            issues.extend(_mount_issues(pool.volumes, pool.volumeClaimTemplates, pool.volumeMounts,
                                        pool.superexecVolumeMounts, at, gpu_amd=_amd_mount_all(pool)))
        sl = self.spec.superlink
        issues.extend(_pod_template_issues(sl.podTemplate, ("spec", "superlink")))
        issues.extend(_mount_issues(sl.volumes, sl.volumeClaimTemplates, sl.volumeMounts, sl.superexecVolumeMounts,
                                    ("spec", "superlink"), gpu_amd=False))
        return issues

    def _node_config_issues(self, pool: Pool, at: FieldPath) -> list[Issue]:
        issues = []
        for key, raw in pool.nodeConfig.items():
            for word in unknown_placeholders(raw):
                issues.append(Issue((*at, "nodeConfig", key), f"{word} is not a placeholder: it is passed on as "
                                    "literal text, as the operator does", "the placeholders are {index}, "
                                    "{replicas}, {pool} and {node}; check the spelling", "warning"))
            try:
                check_key(key)
                encode_template(raw, pool=pool.name, replicas=pool.replicas, stateful=self.stateful)
            except NodeConfigError as exc:
                issues.append(Issue((*at, "nodeConfig", key), str(exc), exc.hint))
        return issues

    def _label_issues(self) -> list[Issue]:
        issues = []
        maps: list[tuple[FieldPath, dict[str, str]]] = [
            (("metadata", "labels"), self.metadata.labels),
            (("spec", "superlink", "service", "labels"), self.spec.superlink.service.labels),
        ]
        for path, labels in maps:
            for key, value in labels.items():
                problem = label_key_problem(key) or label_value_problem(value)
                if problem:
                    issues.append(Issue((*path, key), problem, "fix the label"))
        return issues


def _pod_template_issues(template: dict[str, Any] | None, at: FieldPath) -> list[Issue]:
    spec = (template or {}).get("spec") or {}
    issues = []
    for field in ("containers", "ephemeralContainers"):
        if isinstance(spec, dict) and spec.get(field):
            issues.append(Issue((*at, "podTemplate", "spec", field),
                                f"podTemplate.spec.{field} is not used: flower-syncer writes the Flower containers",
                                "set images, env, extraArgs, resources and volumeMounts on the pool or superlink; "
                                "add helpers with podTemplate.spec.initContainers"))
    return issues


def _managed_args(args: list[str], managed: dict[str, str]) -> list[tuple[int, str, str]]:
    out = []
    for i, arg in enumerate(args):
        flag = arg.split("=", 1)[0]
        if flag in managed:
            out.append((i, flag, managed[flag]))
    return out


def _amd_mount_all(pool: Pool) -> bool:
    return pool.gpu is not None and pool.gpu.mountAll and pool.gpu.vendor == "amd"


def _mount_issues(volumes: list[dict[str, Any]], claims: list[ClaimTemplate], mounts: list[dict[str, Any]],
                  superexec_mounts: list[dict[str, Any]], at: FieldPath, *, gpu_amd: bool) -> list[Issue]:
    """A mount must name a volume of the pod; Kubernetes would refuse the workload otherwise."""
    names = {v.get("name") for v in volumes if isinstance(v, dict)}
    names |= {c.metadata.name for c in claims}
    if gpu_amd:
        names |= {"dev-kfd", "dev-dri"}
    issues = []
    for field, items in (("volumeMounts", mounts), ("superexecVolumeMounts", superexec_mounts)):
        for i, mount in enumerate(items):
            name = mount.get("name") if isinstance(mount, dict) else None
            if isinstance(name, str) and name not in names:
                known = ", ".join(sorted(n for n in names if isinstance(n, str))) or "none"
                issues.append(Issue((*at, field, i, "name"), f"volume mount refers to volume {name!r}, which is not "
                                    f"defined (volumes here: {known})", "add it to volumes or volumeClaimTemplates"))
    return issues
