"""SuperNode chart values -> Kubernetes objects, as the Flower SuperNode Helm chart documents them.

Objects, per release (names from `release_names`, `<fullname>` by Helm's rule):

- SuperNode (when `supernode.enabled`): Deployment, ClientAppIo Service and ServiceAccount named
  `<fullname>-<supernode.name>`, a NetworkPolicy of the same name;
- SuperExec (when `superexec.enabled`): Deployment and ServiceAccount `<fullname>-<superexec.name>`
  and an egress-only NetworkPolicy;
- node auth (`global.nodeAuth.enabled`): Secret `<fullname>-node-auth` (Opaque) with the keys
  `private-key` and `public-key` (when given), mounted read-only at /app/node-auth and passed
  with `--auth-supernode-private-key=/app/node-auth/private-key` (and `...-public-key`);
- TLS (`tls.enabled`): the SuperNode mounts only the key `ca.crt` of its CA Secret at
  /app/certificates/ca.crt (`items`, so the `tls.key` of a `kubernetes.io/tls` Secret never reaches
  the pod) and passes `--root-certificates=/app/certificates/ca.crt`. The CA Secret is
  `supernode.superlink.certificate.existingSecret`, else `flower-client-tls`. With
  `copyFromExistingSecret.enabled`, existingSecret is the SuperLink's Secret to copy from and the
  SuperNode mounts the copy, `copyFromExistingSecret.secretName` (else `flower-client-tls`). The copy
  is rendered as an Opaque Secret with `data: {}` and the annotations `flower-syncer.io/copy-from:
  <source>` and `flower-syncer.io/copy-keys: ca.crt,tls.crt`; the sync engine fills `data["ca.crt"]`
  from the live source Secret (its ca.crt, else its tls.crt), which Helm's `lookup` cannot do in GitOps.

Both Deployments come from one pod builder (`_deployment`) fed by a `_Plan` per component:
security contexts (see `security_contexts`), writable emptyDirs when the root filesystem is read-only,
affinity presets, env/nodeSelector/tolerations merges, probes. Flags, ports and probes follow the
Flower release of each image (syncer.models.flower: its tag, else `image.flowerVersion`): before 1.21
there is no health server, so neither `--health-server-address` nor the gRPC probes are rendered (the
documented examples use 1.20 images); from 1.35 the SuperNode's ClientApp API is HTTP on `--host
0.0.0.0 --port <containerPorts.clientAppIo>` and probed on its GET /health; the SuperExec keeps its
gRPC health server up to 1.42.

Pure and deterministic: no I/O, lists in a fixed order, user sub-trees copied (nulls dropped), so no
two manifests share a mutable object and nothing renders as null.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from syncer.identity import ANN_COPY_FROM, ANN_COPY_KEYS, LABEL_COMPONENT, LABEL_INSTANCE, LABEL_NAME, Manifest
from syncer.models.flower import HEALTH_PATH
from syncer.models.nodeconfig import encode_typed, join_pairs
from syncer.models.supernode import (
    ReleaseNames,
    SuperNodeValues,
    chart_name,
    interface,
    merge_maps,
    security_contexts,
)
from syncer.models.supernode.schema import (
    CA_KEY,
    CA_MOUNT_DIR,
    CA_VOLUME,
    NODE_AUTH_MOUNT_DIR,
    NODE_AUTH_VOLUME,
    PRIVATE_KEY_KEY,
    PUBLIC_KEY_KEY,
    WRITABLE_DIRS,
    Component,
)
from syncer.render.common import RenderContext, metadata, sort_manifests

ANN_NODE_AUTH_SHA = "flower-syncer.io/node-auth-sha256"
COPY_KEYS = "ca.crt,tls.crt"
HOSTNAME_TOPOLOGY = "kubernetes.io/hostname"
DNS_PORT = 53

CA_PATH = f"{CA_MOUNT_DIR}/{CA_KEY}"
PRIVATE_KEY_PATH = f"{NODE_AUTH_MOUNT_DIR}/{PRIVATE_KEY_KEY}"
PUBLIC_KEY_PATH = f"{NODE_AUTH_MOUNT_DIR}/{PUBLIC_KEY_KEY}"


def render_supernode(values: SuperNodeValues, release: str, ctx: RenderContext) -> list[Manifest]:
    """Every object of one SuperNode release, in apply order."""
    names = values.release_names(release)
    out: list[Manifest] = []
    if values.supernode.enabled:
        out.extend(_supernode_objects(values, release, names, ctx))
    if values.superexec.enabled:
        out.extend(_superexec_objects(values, release, names, ctx))
    return sort_manifests(out)


def selector_labels(values: SuperNodeValues, release: str, comp: Component) -> dict[str, str]:
    """The Deployment selector: the chart's three standard labels plus the component's selectorLabels."""
    return {**comp.selectorLabels, LABEL_NAME: chart_name(values.nameOverride), LABEL_INSTANCE: release,
            LABEL_COMPONENT: comp.name}


# ---------------------------------------------------------------------------------------------
# SuperNode


def _supernode_objects(values: SuperNodeValues, release: str, names: ReleaseNames,
                       ctx: RenderContext) -> list[Manifest]:
    sn = values.supernode
    ports = sn.containerPorts
    iface = interface(sn.image)
    args = [f"--superlink={_host(sn.superlink.address)}:{sn.superlink.port}", f"--isolation={sn.isolationMode}"]
    if iface.http_runtime:  # 1.35+: the ClientApp API is HTTP, with GET /health, on --host/--port
        args += ["--host=0.0.0.0", f"--port={ports.clientAppIo}"]
        plan = _Plan(comp=sn, name=names.supernode, container="supernode",
                     security=security_contexts(values.global_, sn),
                     ports=[("clientappio", ports.clientAppIo)], health_port=ports.clientAppIo, http_health=True)
    else:
        args.append(f"--clientappio-api-address=0.0.0.0:{ports.clientAppIo}")
        if iface.health_server:
            args.append(f"--health-server-address=0.0.0.0:{ports.health}")
        plan = _Plan(comp=sn, name=names.supernode, container="supernode",
                     security=security_contexts(values.global_, sn),
                     ports=[("clientappio", ports.clientAppIo), ("health", ports.health)],
                     health_port=ports.health if iface.health_server else None)
    out: list[Manifest] = []
    if values.tls.enabled:
        args.append(f"--root-certificates={CA_PATH}")
        plan.volumes.append({"name": CA_VOLUME, "secret": {"secretName": names.ca_secret,
                                                           "items": [{"key": CA_KEY, "path": CA_KEY}]}})
        plan.mounts.append({"name": CA_VOLUME, "mountPath": CA_MOUNT_DIR, "readOnly": True})
        if names.ca_source:
            out.append(_ca_copy_secret(values, release, names, ctx))
    else:
        args.append("--insecure")
    auth = values.global_.nodeAuth
    if auth.enabled:
        secret = _node_auth_secret(values, release, names, ctx)
        out.append(secret)
        args.append(f"--auth-supernode-private-key={PRIVATE_KEY_PATH}")
        if PUBLIC_KEY_KEY in secret["data"] and not iface.http_runtime:  # deprecated and ignored from 1.23
            args.append(f"--auth-supernode-public-key={PUBLIC_KEY_PATH}")
        # Files readable by the pod's group (fsGroup) or, without one, by anyone in the pod.
        mode = 0o440 if plan.security[0].get("fsGroup") is not None else 0o444
        plan.volumes.append({"name": NODE_AUTH_VOLUME,
                             "secret": {"secretName": names.node_auth_secret, "defaultMode": mode}})
        plan.mounts.append({"name": NODE_AUTH_VOLUME, "mountPath": NODE_AUTH_MOUNT_DIR, "readOnly": True})
        digest = hashlib.sha256("\0".join(secret["data"].values()).encode()).hexdigest()
        plan.pod_annotations[ANN_NODE_AUTH_SHA] = digest  # rolls the pods when a key changes
    if sn.node.config:
        token = join_pairs([(key, encode_typed(value)) for key, value in sn.node.config.items()])
        args.append(f"--node-config={token.static_text()}")
    args.extend(sn.extraArgs)
    plan.args = args

    selector = selector_labels(values, release, sn)
    if sn.serviceAccount.enabled:
        out.append(_service_account(values, release, sn, names.supernode, ctx))
    out.append(_clientappio_service(values, release, selector, names, ctx))
    if sn.networkPolicy.enabled:
        out.append(_supernode_network_policy(values, release, selector, names, ctx))
    out.append(_deployment(values, release, plan, selector, ctx))
    return out


def _host(address: str) -> str:
    """IPv6 literals need brackets before the port."""
    return f"[{address}]" if address.count(":") > 1 and not address.startswith("[") else address


def _clientappio_service(values: SuperNodeValues, release: str, selector: dict[str, str], names: ReleaseNames,
                         ctx: RenderContext) -> Manifest:
    sn = values.supernode
    svc = sn.service
    port: dict[str, Any] = {"name": svc.servicePortClientAppIoName, "port": svc.servicePortClientAppIo,
                            "targetPort": sn.containerPorts.clientAppIo, "protocol": "TCP"}
    if svc.nodePortClientAppIo != "" and svc.type in ("NodePort", "LoadBalancer"):
        port["nodePort"] = svc.nodePortClientAppIo
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(ctx, names.supernode, _object_labels(values, release, sn),
                             _object_annotations(values, sn)),
        "spec": {"type": svc.type, "selector": dict(selector), "ports": [port]},
    }


def _supernode_network_policy(values: SuperNodeValues, release: str, selector: dict[str, str],
                              names: ReleaseNames, ctx: RenderContext) -> Manifest:
    """Ingress to the SuperNode's ports (from anywhere, or only from the matching pods/namespaces and
    this release's SuperExec in process mode); egress unrestricted, or DNS + the SuperLink port."""
    sn = values.supernode
    np = sn.networkPolicy
    ports = [_np_port(sn.containerPorts.clientAppIo)]
    if not interface(sn.image).http_runtime:  # 1.35+ has no separate health port
        ports.append(_np_port(sn.containerPorts.health))
    ingress: list[dict[str, Any]] = []
    if np.allowExternal:
        ingress.append({"ports": ports})
    else:
        peers: list[dict[str, Any]] = []
        if np.ingressPodMatchLabels:
            peers.append({"podSelector": {"matchLabels": dict(np.ingressPodMatchLabels)}})
        if np.ingressNSMatchLabels:
            peer: dict[str, Any] = {"namespaceSelector": {"matchLabels": dict(np.ingressNSMatchLabels)}}
            if np.ingressNSPodMatchLabels:
                peer["podSelector"] = {"matchLabels": dict(np.ingressNSPodMatchLabels)}
            peers.append(peer)
        if peers:  # a rule without `from` would allow everyone
            ingress.append({"from": peers, "ports": ports})
        se = values.superexec
        if sn.isolationMode == "process" and se.enabled and not se.supernode.address:
            ingress.append({"from": [{"podSelector": {"matchLabels": selector_labels(values, release, se)}}],
                            "ports": [_np_port(sn.containerPorts.clientAppIo)]})
    ingress.extend(_clean(rule) for rule in np.extraIngress)
    egress = _egress(np.allowExternalEgress, [sn.superlink.port], np.extraEgress)
    return _network_policy(values, release, sn, ctx, name=names.supernode, selector=selector, ingress=ingress,
                           egress=egress)


def _ca_copy_secret(values: SuperNodeValues, release: str, names: ReleaseNames,
                    ctx: RenderContext) -> Manifest:
    annotations = {**values.global_.annotations, ANN_COPY_FROM: names.ca_source, ANN_COPY_KEYS: COPY_KEYS}
    labels = _object_labels(values, release, values.supernode)
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata(ctx, names.ca_secret, labels, annotations),
        "type": "Opaque",
        "data": {},
    }


def _node_auth_secret(values: SuperNodeValues, release: str, names: ReleaseNames,
                      ctx: RenderContext) -> Manifest:
    auth = values.global_.nodeAuth
    data = {PRIVATE_KEY_KEY: _b64(auth.authSupernodePrivateKey)}
    if auth.authSupernodePublicKey.strip():
        data[PUBLIC_KEY_KEY] = _b64(auth.authSupernodePublicKey.strip() + "\n")
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata(ctx, names.node_auth_secret, _object_labels(values, release, values.supernode),
                             dict(values.global_.annotations)),
        "type": "Opaque",
        "data": data,
    }


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode("ascii")


# ---------------------------------------------------------------------------------------------
# SuperExec


def _superexec_objects(values: SuperNodeValues, release: str, names: ReleaseNames,
                       ctx: RenderContext) -> list[Manifest]:
    se = values.superexec
    sn = values.supernode
    target = se.supernode
    if target.address:
        host, port = _host(target.address), target.port or sn.service.servicePortClientAppIo
        # NetworkPolicies see the destination pod's port; for an address of our own choosing that
        # is the port given.
        egress_port = port
    else:
        host, port = names.supernode, sn.service.servicePortClientAppIo
        egress_port = sn.containerPorts.clientAppIo  # after the Service's translation to the pod
    iface = interface(se.image)
    if interface(sn.image).http_runtime or iface.http_runtime:  # 1.35+: plain HTTP (no --ssl-* on the SuperNode)
        args = [f"{iface.superexec_address_flag}={host}:{port}", "--insecure"]
        if iface.plugin_type:
            args.insert(0, "--plugin-type=clientapp")
    else:
        args = ["--plugin-type=clientapp", f"--appio-api-address={host}:{port}", "--insecure"]
    if iface.health_server:
        args.append(f"--health-server-address=0.0.0.0:{se.containerPorts.health}")
    args.extend(se.extraArgs)
    keep_port = iface.health_server or not iface.http_runtime  # 1.43+ has no health server
    plan = _Plan(comp=se, name=names.superexec, container="superexec", security=security_contexts(values.global_, se),
                 args=args, ports=[("health", se.containerPorts.health)] if keep_port else [],
                 health_port=se.containerPorts.health if iface.health_server else None)
    selector = selector_labels(values, release, se)
    out: list[Manifest] = []
    if se.serviceAccount.enabled:
        out.append(_service_account(values, release, se, names.superexec, ctx))
    if se.networkPolicy.enabled:
        egress = _egress(se.networkPolicy.allowExternalEgress, [egress_port], se.networkPolicy.extraEgress)
        out.append(_network_policy(values, release, se, ctx, name=names.superexec, selector=selector,
                                   ingress=None, egress=egress))
    out.append(_deployment(values, release, plan, selector, ctx))
    return out


# ---------------------------------------------------------------------------------------------
# Shared by both components


@dataclass
class _Plan:
    """What differs between the SuperNode's and the SuperExec's pods."""

    comp: Component
    name: str
    container: str
    security: tuple[dict[str, Any], dict[str, Any]]
    """(pod, container) securityContext"""
    ports: list[tuple[str, int]]
    health_port: int | None
    http_health: bool = False
    """Probe Flower's GET /health on health_port (1.35+) instead of its gRPC health server."""
    args: list[str] = field(default_factory=list)
    volumes: list[dict[str, Any]] = field(default_factory=list)
    mounts: list[dict[str, Any]] = field(default_factory=list)
    pod_annotations: dict[str, str] = field(default_factory=dict)


def _object_labels(values: SuperNodeValues, release: str, comp: Component) -> dict[str, str]:
    return {**values.global_.labels, LABEL_NAME: chart_name(values.nameOverride), LABEL_INSTANCE: release,
            LABEL_COMPONENT: comp.name}


def _object_annotations(values: SuperNodeValues, comp: Component) -> dict[str, str]:
    return {**values.global_.annotations, **comp.annotations}


def _service_account(values: SuperNodeValues, release: str, comp: Component, name: str,
                     ctx: RenderContext) -> Manifest:
    sa = comp.serviceAccount
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": metadata(ctx, name, {**sa.labels, **_object_labels(values, release, comp)},
                             {**_object_annotations(values, comp), **sa.annotations}),
        "automountServiceAccountToken": sa.automountServiceAccountToken,
    }


def _np_port(port: int, protocol: str = "TCP") -> dict[str, Any]:
    return {"port": port, "protocol": protocol}


def _egress(allow_all: bool, ports: list[int], extra: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if allow_all:
        return [{}]
    return [
        {"ports": [_np_port(DNS_PORT, "UDP"), _np_port(DNS_PORT, "TCP")]},
        {"ports": [_np_port(p) for p in ports]},
        *(_clean(rule) for rule in extra),
    ]


def _network_policy(values: SuperNodeValues, release: str, comp: Component, ctx: RenderContext, *, name: str,
                    selector: dict[str, str], ingress: list[dict[str, Any]] | None,
                    egress: list[dict[str, Any]]) -> Manifest:
    spec: dict[str, Any] = {"podSelector": {"matchLabels": dict(selector)}}
    if ingress is None:
        spec["policyTypes"] = ["Egress"]
    else:
        spec["policyTypes"] = ["Ingress", "Egress"]
        spec["ingress"] = ingress
    spec["egress"] = egress
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(ctx, name, _object_labels(values, release, comp),
                             _object_annotations(values, comp)),
        "spec": spec,
    }


def _deployment(values: SuperNodeValues, release: str, plan: _Plan, selector: dict[str, str],
                ctx: RenderContext) -> Manifest:
    comp = plan.comp
    g = values.global_
    pod_sc, container_sc = plan.security

    volumes: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = []
    if container_sc.get("readOnlyRootFilesystem"):
        for vol_name, path in WRITABLE_DIRS:
            volumes.append({"name": vol_name, "emptyDir": {}})
            mounts.append({"name": vol_name, "mountPath": path})
    volumes.extend(plan.volumes)
    mounts.extend(plan.mounts)
    volumes.extend(_clean(v) for v in comp.volumes)
    mounts.extend(_clean(m) for m in comp.volumeMounts)

    container: dict[str, Any] = {
        "name": plan.container,
        "image": comp.image.reference(),
        "imagePullPolicy": _pull_policy(values, comp),
        "args": list(plan.args),
    }
    if plan.ports:
        container["ports"] = [{"name": n, "containerPort": p, "protocol": "TCP"} for n, p in plan.ports]
    container["securityContext"] = container_sc
    env = _merge_env(g.env, comp.env)
    if env:
        container["env"] = env
    if comp.resources:
        container["resources"] = _clean(comp.resources)
    if comp.lifecycle:
        container["lifecycle"] = _clean(comp.lifecycle)
    if plan.health_port is not None:
        for key, probe in (("livenessProbe", comp.livenessProbe), ("readinessProbe", comp.readinessProbe)):
            if probe.enabled:
                check: dict[str, Any] = {"grpc": {"port": plan.health_port}}
                if plan.http_health:
                    check = {"httpGet": {"path": HEALTH_PATH, "port": plan.health_port, "scheme": "HTTP"}}
                container[key] = {
                    **check,
                    "initialDelaySeconds": probe.initialDelaySeconds,
                    "periodSeconds": probe.periodSeconds,
                    "timeoutSeconds": probe.timeoutSeconds,
                    "failureThreshold": probe.failureThreshold,
                    "successThreshold": probe.successThreshold,
                }
        if plan.http_health and comp.livenessProbe.enabled:
            # Liveness only once the API has answered: a 1.42 SuperNode took over 30 s to serve on a
            # loaded 2-core node, and the chart's liveness (no delay, 3 x 10 s) restarted it for ever.
            container["startupProbe"] = {
                "httpGet": {"path": HEALTH_PATH, "port": plan.health_port, "scheme": "HTTP"},
                "periodSeconds": 10, "timeoutSeconds": 1, "failureThreshold": 30,
            }
    if mounts:
        container["volumeMounts"] = mounts

    pod_spec: dict[str, Any] = {}
    if comp.serviceAccount.enabled:
        pod_spec["serviceAccountName"] = plan.name
    pod_spec["automountServiceAccountToken"] = comp.automountServiceAccountToken
    pod_spec["securityContext"] = pod_sc
    pull_secrets = comp.imagePullSecrets or g.imagePullSecrets
    if pull_secrets:
        pod_spec["imagePullSecrets"] = [_clean(s) for s in pull_secrets]
    node_selector = {**g.nodeSelector, **comp.nodeSelector}
    if node_selector:
        pod_spec["nodeSelector"] = node_selector
    tolerations = [_clean(t) for t in (*g.tolerations, *comp.tolerations)]
    if tolerations:
        pod_spec["tolerations"] = tolerations
    affinity = _affinity(values, comp, selector)
    if affinity:
        pod_spec["affinity"] = affinity
    pod_spec["containers"] = [container]
    if volumes:
        pod_spec["volumes"] = volumes

    pod_labels = {**g.podLabels, **comp.labels, **comp.podLabels, **selector, **ctx.unit.labels()}
    pod_meta: dict[str, Any] = {"labels": pod_labels}
    pod_annotations = {**comp.podAnnotations, **plan.pod_annotations}
    if pod_annotations:
        pod_meta["annotations"] = pod_annotations

    strategy: dict[str, Any] = {"type": comp.updateStrategy.type}
    if comp.updateStrategy.type == "RollingUpdate" and comp.updateStrategy.rollingUpdate:
        strategy["rollingUpdate"] = _clean(comp.updateStrategy.rollingUpdate)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(ctx, plan.name, _object_labels(values, release, comp),
                             _object_annotations(values, comp)),
        "spec": {
            "replicas": comp.replicas,
            "selector": {"matchLabels": dict(selector)},
            "strategy": strategy,
            "template": {"metadata": pod_meta, "spec": pod_spec},
        },
    }


def _pull_policy(values: SuperNodeValues, comp: Component) -> str:
    """The component's pullPolicy when the values set it (non-empty), else global.image.pullPolicy."""
    if comp.image.pullPolicy and "pullPolicy" in comp.image.model_fields_set:
        return comp.image.pullPolicy
    return values.global_.image.pullPolicy


def _merge_env(base: list[dict[str, Any]], over: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """global.env, then the component's env; a component variable replaces the global one of the
    same name (the global one is left out, the component's keeps its place in the component list)."""
    names = {item.get("name") for item in over}
    return [_clean(item) for item in base if item.get("name") not in names] + [_clean(item) for item in over]


def _affinity(values: SuperNodeValues, comp: Component, selector: dict[str, str]) -> dict[str, Any]:
    """The global presets, with the component's own affinity merged over (its keys win)."""
    presets = values.global_.affinity
    out: dict[str, Any] = {}
    term = {"labelSelector": {"matchLabels": dict(selector)}, "topologyKey": HOSTNAME_TOPOLOGY}
    if presets.podAntiAffinity == "soft":
        out["podAntiAffinity"] = {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 1, "podAffinityTerm": term}]}
    elif presets.podAntiAffinity == "hard":
        out["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
    node = presets.nodeAffinity
    if node.matchExpressions and node.type != "none":
        expressions = [_clean(e) for e in node.matchExpressions]
        if node.type == "soft":
            out["nodeAffinity"] = {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 1, "preference": {"matchExpressions": expressions}}]}
        else:
            out["nodeAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": expressions}]}}
    if comp.affinity:
        out = merge_maps(out, _clean(comp.affinity))
    return out


def _clean(value: Any) -> Any:
    """A copy of a user-provided tree without null values (Kubernetes reads null as unset)."""
    if isinstance(value, Mapping):
        return {k: _clean(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_clean(v) for v in value if v is not None]
    return value
