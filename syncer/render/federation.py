"""Federation -> Kubernetes objects: what the flower-operator creates, minus its known defects.

Objects: the SuperLink StatefulSet and Service, one StatefulSet or DaemonSet per pool, a headless
governing Service per pool StatefulSet, and two NetworkPolicies (SuperLink, SuperNodes; see
models/netsources.py). Differences from the operator, on purpose:

- env and volume-mount merges keep a fixed order (the operator's order changes between reconciles
  and rolls the pods);
- SuperNodes dial the Service's configured grpc port, not always 9092;
- node config is quoted so Flower reads back exactly what was written, and the shell wrapper
  passes every argument as its own word (no shell injection through values or extraArgs);
- pool StatefulSets get the governing Service they name;
- SuperExec containers talk to their own pod and accept `superexecExtraArgs`; they get `--insecure`,
  except beside a TLS SuperLink of Flower 1.37+, whose Runtime API is TLS: then they trust the CA;
- the flags, ports, transports and probes follow each image's Flower release (syncer.models.flower):
  from 1.35 the APIs are bound to 0.0.0.0 with `--host/--port` and probed on GET /health; the
  Service keeps its port names and numbers across releases and only the target ports move;
- `podTemplate.metadata` labels/annotations reach the pods, `initContainers` are appended, and
  other pod-level fields replace ours instead of being silently dropped;
- NetworkPolicies (the operator renders none): the Fleet API only from the federation's SuperNodes
  and named sources, the Control API only from named sources, nothing into the pool pods.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from syncer.identity import (
    ANN_COPY_FROM,
    ANN_COPY_KEYS,
    ANN_SUPERLINK_STATE,
    LABEL_COMPONENT,
    LABEL_INSTANCE,
    LABEL_NAME,
    LABEL_POOL,
    LABEL_UNIT,
    LABEL_UNIT_KIND,
    SUPERLINK_STATE_DIR,
    SUPERLINK_STATE_VOLUME,
    Manifest,
)
from syncer.models.federation import Federation
from syncer.models.federation_spec import GPU, GPU_ENV, ClaimTemplate, Pool
from syncer.models.flower import HEALTH_PATH, SUPERLINK_HTTP_PORT, FlowerInterface, interface_of_image
from syncer.models.netsources import ANN_CONTROL_API_FROM, ANN_FLEET_API_FROM, Source
from syncer.models.nodeauth import CONTROL_API_PORT
from syncer.models.nodeconfig import INDEX_VAR, NODE_VAR, POD_NAME_VAR, encode_template, join_pairs, shell_word
from syncer.models.superlink_state import DATABASE, DATABASE_FLAG
from syncer.render.common import RenderContext, clone, metadata
from syncer.render.superlink_state import STATE_SECURITY, state_claim

SERVERAPPIO_PORT = 9091
FLEET_PORT = 9092
CONTROL_PORT = CONTROL_API_PORT
CLIENTAPPIO_PORT = 9094
# Liveness tells a stuck process from a busy one: a stuck one never answers, a busy one (a round on a
# loaded node: load 60-80 on 2 cores seen in the demo) answers late. So liveness waits 10 s for an answer
# (readiness 1 s) and restarts only after 6 probes in a row got none: a SuperNode mid-round is never killed
# for being slow.
LIVENESS_TIMEOUT = 10
HEALTH_PORT = 8081  # Flower's gRPC health server (--health-server-address, 1.21+), the SuperNode chart's port
SUPEREXEC_HEALTH_PORT = 8082  # the SuperExec sidecar's, in the same pod


# podTemplate.spec lists that are added to ours (by name) instead of replacing them.
_APPENDED = ("volumes", "imagePullSecrets", "initContainers")
_OWNED = ("containers",)


CERT_DIR = "/app/certificates"
TLS_VOLUME = "superlink-tls"
CA_VOLUME = "superlink-ca"


def render_federation(fed: Federation, ctx: RenderContext) -> list[Manifest]:
    out: list[Manifest] = [_superlink_statefulset(fed, ctx), _superlink_service(fed, ctx)]
    if not fed.spec.insecure:
        out.append(_ca_secret(fed, ctx))
        if fed.tls_issuer() is not None:
            out.append(_superlink_certificate(fed, ctx))
    for pool in fed.spec.supernodes.pools:
        out.append(_pool_workload(fed, pool, ctx))  # its canary: render.repo, after sealing (render.canary)
        if fed.stateful:
            out.append(_pool_headless_service(fed, pool, ctx))
    if fed.network_policies:
        out += [_superlink_policy(fed, ctx), _supernodes_policy(fed, ctx)]
    return out


def superlink_selector(fed: Federation) -> dict[str, str]:
    return {LABEL_NAME: "superlink", LABEL_INSTANCE: fed.name, LABEL_COMPONENT: "superlink"}


def pool_selector(fed: Federation, pool: Pool) -> dict[str, str]:
    return {LABEL_NAME: "supernode", LABEL_INSTANCE: fed.name, LABEL_COMPONENT: f"pool-{pool.name}",
            LABEL_POOL: pool.name}


# ---------------------------------------------------------------------------------------------
# SuperLink


def _superlink_statefulset(fed: Federation, ctx: RenderContext) -> Manifest:
    sl = fed.spec.superlink
    link = fed.flower(sl.image)
    process = fed.spec.isolationMode == "process"
    args = [f"--isolation={fed.spec.isolationMode}"]
    if fed.spec.insecure:
        args.append("--insecure")
    else:
        args += [f"--ssl-ca-certfile={CERT_DIR}/ca.crt", f"--ssl-certfile={CERT_DIR}/tls.crt",
                 f"--ssl-keyfile={CERT_DIR}/tls.key"]
        if fed.supernode_auth:  # only the keys flower-syncer registers (engine/nodekeys.py) are admitted
            args.append("--enable-supernode-auth")
    state = fed.superlink_state()
    if state.persistent:  # runs, their history, nodes and keys in SQLite on the state volume
        args.append(f"{DATABASE_FLAG}={DATABASE}")
    if link.http_runtime:  # 1.35+: the HTTP API (Runtime; Control from 1.37, Fleet from 1.40) for everyone
        args += ["--host=0.0.0.0", f"--port={SUPERLINK_HTTP_PORT}"]
    args.extend(sl.extraArgs)
    tls_mounts = [] if fed.spec.insecure else [{"name": TLS_VOLUME, "mountPath": CERT_DIR, "readOnly": True}]
    state_mounts = [{"name": SUPERLINK_STATE_VOLUME, "mountPath": SUPERLINK_STATE_DIR}] if state.persistent else []
    superlink = _container("superlink", sl.image, args=args, ports=_superlink_container_ports(link, process),
                           env=sl.env, resources=sl.resources, mounts=[*sl.volumeMounts, *tls_mounts, *state_mounts])
    if link.http_runtime:
        _with_http_health(superlink, SUPERLINK_HTTP_PORT, tls=not fed.spec.insecure and link.superlink_runtime_tls)
    else:
        superlink["readinessProbe"] = {"tcpSocket": {"port": "fleet"}, "periodSeconds": 10}
        _with_health(superlink, HEALTH_PORT, "health", link)
    containers = [superlink]
    volumes = clone(sl.volumes)
    if process:
        sidecar, ca_volume = _serverapp_sidecar(fed, link)
        containers.append(sidecar)
        volumes = _merge_named(volumes, ca_volume, keep_existing=True)
    pod_spec: dict[str, Any] = {"containers": containers}
    if not fed.spec.insecure:  # the server's key and certificate, and the CA flower-syncer copied
        volumes.append({"name": TLS_VOLUME, "projected": {"sources": [
            {"secret": {"name": fed.tls_secret(), "items": [{"key": "tls.crt", "path": "tls.crt"},
                                                            {"key": "tls.key", "path": "tls.key"}]}},
            {"secret": {"name": fed.ca_secret_name(), "items": [{"key": "ca.crt", "path": "ca.crt"}]}}]}})
    if volumes:
        pod_spec["volumes"] = volumes
    if state.persistent:  # the volume writable by the images' group (a podTemplate securityContext replaces it)
        pod_spec["securityContext"] = dict(STATE_SECURITY)
    selector = superlink_selector(fed)
    name = fed.superlink_name()
    spec: dict[str, Any] = {
        "replicas": 1,
        "serviceName": name,
        "selector": {"matchLabels": selector},
        "template": _pod_template(ctx, selector, pod_spec, sl.podTemplate),
    }
    claims = [_claim(c) for c in sl.volumeClaimTemplates]
    if state.persistent:
        claims.append(state_claim(state.size, state.storage_class))
        # what happens to the volume when the StatefulSet goes (the Federation pruned): Git's choice
        spec["persistentVolumeClaimRetentionPolicy"] = {"whenDeleted": state.retention, "whenScaled": "Retain"}
    if claims:
        spec["volumeClaimTemplates"] = claims
    annotations = {ANN_SUPERLINK_STATE: state.mode} if state.mode != "user" else None
    return {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": metadata(ctx, name, selector, annotations),
            "spec": spec}


def _superlink_container_ports(link: FlowerInterface, process: bool) -> list[dict[str, Any]]:
    """The SuperLink's container ports: one per gRPC API, and `http` for the HTTP API (1.35+)."""
    if not link.http_runtime:
        return [_port(api, port) for api, port in link.superlink_ports(process)]
    grpc = [_port(api, port) for api, port in link.superlink_ports(process) if port != SUPERLINK_HTTP_PORT]
    return [*grpc, _port("http", SUPERLINK_HTTP_PORT)]


def _serverapp_sidecar(fed: Federation, link: FlowerInterface) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The ServerApp SuperExec of process isolation, dialing the SuperLink in its pod; and the
    volume it needs (the CA, when the SuperLink's Runtime API is TLS: 1.37+)."""
    sl = fed.spec.superlink
    exec_ = fed.flower(sl.superexecImage or "").beside(link)
    mounts = sl.superexecVolumeMounts or sl.volumeMounts
    volumes: list[dict[str, Any]] = []
    if not link.http_runtime and not exec_.http_runtime:
        args = ["--plugin-type=serverapp", f"--appio-api-address=localhost:{SERVERAPPIO_PORT}", "--insecure"]
    else:
        args = ["--plugin-type=serverapp"] if exec_.plugin_type else []
        args.append(f"{exec_.superexec_address_flag}=127.0.0.1:{link.serverappio_port}")
        if not fed.spec.insecure and link.superlink_runtime_tls:  # the certificate has the IP SAN 127.0.0.1
            args.append(f"--root-certificates={CERT_DIR}/ca.crt")
            volumes.append({"name": CA_VOLUME, "secret": {"secretName": fed.ca_secret_name(),
                                                          "items": [{"key": "ca.crt", "path": "ca.crt"}]}})
            mounts = _merge_named(mounts, [{"name": CA_VOLUME, "mountPath": CERT_DIR, "readOnly": True}],
                                  keep_existing=True)
        else:
            args.append("--insecure")
    args.extend(sl.superexecExtraArgs)
    container = _container("superexec-serverapp", sl.superexecImage, args=args, env=sl.env,
                           resources=sl.superexecResources, mounts=mounts)
    return _with_health(container, SUPEREXEC_HEALTH_PORT, "health-exec", exec_), volumes


def _superlink_policy(fed: Federation, ctx: RenderContext) -> Manifest:
    """Ingress to the SuperLink: the Fleet API from the federation's own SuperNodes and the sources
    named in flower-syncer.io/fleet-api-from; the Control API (flwr run, flwr ls) only from those
    in flower-syncer.io/control-api-from (none by default; `kubectl port-forward` still works).
    The ServerApp API stays inside the pod (the SuperExec sidecar dials the loopback address).

    From Flower 1.37 the Control API, and from 1.40 the Fleet API too, share the HTTP port with the
    ServerApp API: a NetworkPolicy sees ports, not paths, so whoever may reach one of them there
    reaches all three. The kubelet's HTTP /health probes come from the node, which NetworkPolicy
    implementations admit (the port is not opened to the cluster for them)."""
    sl = fed.spec.superlink
    link = fed.flower(sl.image)
    own = {"podSelector": {"matchLabels": _supernode_pods(fed, ctx)}}
    ingress = [_rule(link.fleet_port, [own], fed.api_sources(ANN_FLEET_API_FROM))]
    control = fed.api_sources(ANN_CONTROL_API_FROM)
    if control:
        ingress.append(_rule(link.control_port, [], control))
    process = fed.spec.isolationMode == "process"
    images = [(sl.image, link)]
    if process and sl.superexecImage:
        images.append((sl.superexecImage, fed.flower(sl.superexecImage).beside(link)))
    ingress += _health_rule(images)
    return _policy(fed, ctx, fed.superlink_name(), superlink_selector(fed), ingress)


def _supernodes_policy(fed: Federation, ctx: RenderContext) -> Manifest:
    """No ingress to the pool pods: a SuperNode dials out to the SuperLink, and its ClientAppIo API
    serves only the SuperExec in its own pod (localhost)."""
    images: list[tuple[str, FlowerInterface]] = []
    for p in fed.spec.supernodes.pools:
        image = p.images.supernode or fed.spec.supernodes.image
        images.append((image, fed.flower(image)))
        if p.images.superexecClientApp:
            images.append((p.images.superexecClientApp,
                           fed.flower(p.images.superexecClientApp).beside(images[-1][1])))
    return _policy(fed, ctx, f"{fed.name}-supernodes", _supernode_pods(fed, ctx), _health_rule(images))


def _health_rule(images: list[tuple[str, FlowerInterface]]) -> list[dict[str, Any]]:
    """The gRPC health ports, open: the kubelet's gRPC probes come from the node, which some CNIs
    hold to NetworkPolicies (the health service says SERVING and nothing else). Up to Flower 1.34
    both ports whenever one container has a health server; from 1.35 only the SuperExec's."""
    if any(i.health_server and not i.http_runtime for _, i in images):
        return [{"ports": [{"protocol": "TCP", "port": HEALTH_PORT},
                           {"protocol": "TCP", "port": SUPEREXEC_HEALTH_PORT}]}]
    if any(i.health_server for _, i in images):  # 1.35-1.42 SuperExecs
        return [{"ports": [{"protocol": "TCP", "port": SUPEREXEC_HEALTH_PORT}]}]
    return []


def _supernode_pods(fed: Federation, ctx: RenderContext) -> dict[str, str]:
    """Every pool pod of this federation, and no SuperNode of a Helm release that shares its
    instance label: the unit labels are on every pod we render."""
    return {LABEL_NAME: "supernode", LABEL_INSTANCE: fed.name, LABEL_UNIT_KIND: ctx.unit.kind,
            LABEL_UNIT: ctx.unit.name}


def _rule(port: int, peers: list[dict[str, Any]], sources: list[Source]) -> dict[str, Any]:
    rule: dict[str, Any] = {"ports": [{"protocol": "TCP", "port": port}]}
    if not any(s.anywhere for s in sources):  # `*`: no `from`, anyone
        rule["from"] = [*peers, *(s.peer() for s in sources)]
    return rule


def _policy(fed: Federation, ctx: RenderContext, name: str, selector: dict[str, str],
            ingress: list[dict[str, Any]]) -> Manifest:
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": metadata(ctx, name, {LABEL_NAME: "flower-federation", LABEL_INSTANCE: fed.name}),
            "spec": {"podSelector": {"matchLabels": selector}, "policyTypes": ["Ingress"], "ingress": ingress}}


def _superlink_certificate(fed: Federation, ctx: RenderContext) -> Manifest:
    """A cert-manager Certificate for the SuperLink's Service names (and the extra names), written
    by cert-manager into the TLS Secret the SuperLink mounts; its ca.crt is what the SuperNodes
    trust (copied into <name>-superlink-ca at sync time). A fresh key at every renewal."""
    kind, name = fed.tls_issuer() or ("Issuer", "")
    service, ns = fed.superlink_name(), ctx.unit.namespace
    names = [service, f"{service}.{ns}", f"{service}.{ns}.svc", f"{service}.{ns}.svc.cluster.local"]
    ips = ["127.0.0.1"] if fed.flower(fed.spec.superlink.image).loopback_ip_san else []
    # the hosts SuperNodes of other clusters dial (syncer.models.exposure) are named too
    for extra in [*fed.tls_extra_names(), *(a.host for a in fed.external_addresses())]:
        try:
            ips.append(str(ipaddress.ip_address(extra)))
        except ValueError:
            names.append(extra)
    spec: dict[str, Any] = {
        "secretName": fed.tls_secret(),
        "issuerRef": {"group": "cert-manager.io", "kind": kind, "name": name},
        "commonName": service,
        "dnsNames": list(dict.fromkeys(names)),
        "privateKey": {"algorithm": "ECDSA", "size": 256, "rotationPolicy": "Always"},
        "usages": ["server auth", "digital signature", "key encipherment"],
    }
    if ips:
        spec["ipAddresses"] = list(dict.fromkeys(ips))
    return {"apiVersion": "cert-manager.io/v1", "kind": "Certificate",
            "metadata": metadata(ctx, service, superlink_selector(fed)), "spec": spec}


def _ca_secret(fed: Federation, ctx: RenderContext) -> Manifest:
    """The CA the SuperNodes trust, copied at sync time from the SuperLink's TLS Secret (its
    ca.crt, else its tls.crt for a self-signed certificate), so no SuperNode pod mounts the
    server's private key. A rotated certificate is followed at the next sync."""
    annotations = {ANN_COPY_FROM: fed.tls_secret(), ANN_COPY_KEYS: "ca.crt,tls.crt"}
    return {"apiVersion": "v1", "kind": "Secret", "metadata": metadata(ctx, fed.ca_secret_name(), None, annotations),
            "type": "Opaque", "data": {}}


def _superlink_service(fed: Federation, ctx: RenderContext) -> Manifest:
    svc = fed.spec.superlink.service
    # Names and Service port numbers stay the same across releases; only the target port follows
    # the release, so an upgrade (say 1.26 -> 1.42) is an in-place update of the same ports and the
    # SuperNodes keep dialing <name>:<ports.grpc>.
    numbers = {"fleet": svc.ports.grpc, "control": svc.ports.extra, "serverappio": svc.ports.serverAppIO}
    link = fed.flower(fed.spec.superlink.image)
    ports = [_service_port(api, numbers[api], target)
             for api, target in link.superlink_ports(fed.spec.isolationMode == "process")]
    if svc.type != "ClusterIP":  # node ports set in Git (an extension); unset, Kubernetes picks one
        node_ports = {"fleet": svc.nodePorts.grpc, "control": svc.nodePorts.extra,
                      "serverappio": svc.nodePorts.serverAppIO}
        for port in ports:
            if node_ports.get(port["name"]) is not None:
                port["nodePort"] = node_ports[port["name"]]
    selector = superlink_selector(fed)
    labels = {**svc.labels, **selector}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(ctx, fed.superlink_name(), labels, svc.annotations),
        "spec": {"type": svc.type, "selector": selector, "ports": ports},
    }


# ---------------------------------------------------------------------------------------------
# Pools


def _pool_workload(fed: Federation, pool: Pool, ctx: RenderContext) -> Manifest:
    spec_ = fed.spec
    process = spec_.isolationMode == "process"
    gpu = pool.gpu
    env = _merge_named(spec_.supernodes.env, pool.env)
    gpu_env, gpu_mounts, gpu_volumes = _gpu_mount_all(gpu)
    env = _merge_named(env, gpu_env, keep_existing=True)
    gpu_resource = _gpu_resource(gpu)
    privileged = gpu is not None and gpu.mountAll and gpu.vendor == "amd"

    args = [f"--superlink={fed.superlink_name()}:{spec_.superlink.service.ports.grpc}",
            f"--isolation={spec_.isolationMode}"]
    if spec_.insecure:
        args.append("--insecure")
    else:
        args.append(f"--root-certificates={CERT_DIR}/ca.crt")  # the CA only: never the server's key
    image = pool.images.supernode or spec_.supernodes.image
    node = fed.flower(image)
    if node.http_runtime:  # 1.35+: the ClientApp API is HTTP, with GET /health, on --host/--port
        args += ["--host=0.0.0.0", f"--port={CLIENTAPPIO_PORT}"]
    elif process:
        args.append(f"--clientappio-api-address=0.0.0.0:{CLIENTAPPIO_PORT}")
    args.extend(pool.extraArgs)

    supernode = _container(
        "supernode", image, args=args,
        ports=[_port("clientappio", CLIENTAPPIO_PORT)], env=env,
        resources=_with_gpu(pool.supernodeResources, None if process else gpu_resource),
        mounts=_merge_named(pool.volumeMounts, [*gpu_mounts, *([] if spec_.insecure else [
            {"name": CA_VOLUME, "mountPath": CERT_DIR, "readOnly": True}])], keep_existing=True),
        privileged=privileged)
    if node.http_runtime:
        _with_http_health(supernode, CLIENTAPPIO_PORT, tls=False)  # plain HTTP: no --ssl-* on the SuperNode
    else:
        supernode["readinessProbe"] = {"tcpSocket": {"port": "clientappio"}, "periodSeconds": 10}
        _with_health(supernode, HEALTH_PORT, "health", node)
    _add_node_config(fed, pool, supernode)
    containers = [supernode]
    if process:
        exec_ = fed.flower(pool.images.superexecClientApp).beside(node)
        if not node.http_runtime and not exec_.http_runtime:
            exec_args = ["--plugin-type=clientapp", f"--appio-api-address=localhost:{CLIENTAPPIO_PORT}", "--insecure"]
        else:  # the SuperNode's ClientApp API is plain HTTP (no --ssl-*), in the same pod
            exec_args = ["--plugin-type=clientapp"] if exec_.plugin_type else []
            exec_args += [f"{exec_.superexec_address_flag}=127.0.0.1:{CLIENTAPPIO_PORT}", "--insecure"]
        containers.append(_with_health(_container(
            "superexec-clientapp", pool.images.superexecClientApp,
            args=[*exec_args, *pool.superexecExtraArgs],
            env=env, resources=_with_gpu(pool.superexecResources, gpu_resource),
            mounts=_merge_named(pool.superexecVolumeMounts or pool.volumeMounts, gpu_mounts, keep_existing=True),
            privileged=privileged), SUPEREXEC_HEALTH_PORT, "health-exec", exec_))

    pod_spec: dict[str, Any] = {"containers": containers}
    ca_volume = [] if spec_.insecure else [{"name": CA_VOLUME, "secret": {
        "secretName": fed.ca_secret_name(), "items": [{"key": "ca.crt", "path": "ca.crt"}]}}]
    volumes = _merge_named(pool.volumes, [*gpu_volumes, *ca_volume], keep_existing=True)
    if volumes:
        pod_spec["volumes"] = volumes
    if gpu is not None and gpu.mountAll and gpu.vendor == "nvidia":
        pod_spec["runtimeClassName"] = "nvidia"

    selector = pool_selector(fed, pool)
    name = fed.pool_name(pool)
    spec: dict[str, Any] = {
        "selector": {"matchLabels": selector},
        "template": _pod_template(ctx, selector, pod_spec, pool.podTemplate),
    }
    if fed.stateful:
        spec = {"replicas": pool.replicas, "serviceName": name, **spec}
        if pool.volumeClaimTemplates:
            spec["volumeClaimTemplates"] = [_claim(c) for c in pool.volumeClaimTemplates]
    return {"apiVersion": "apps/v1", "kind": spec_.mode, "metadata": metadata(ctx, name, selector), "spec": spec}


def _pool_headless_service(fed: Federation, pool: Pool, ctx: RenderContext) -> Manifest:
    """The governing Service a StatefulSet's `serviceName` refers to (stable pod DNS names)."""
    selector = pool_selector(fed, pool)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(ctx, fed.pool_name(pool), selector),
        "spec": {
            "clusterIP": "None",
            "selector": selector,
            "ports": [_service_port("clientappio", CLIENTAPPIO_PORT, CLIENTAPPIO_PORT)],
        },
    }


def _add_node_config(fed: Federation, pool: Pool, container: dict[str, Any]) -> None:
    """`--node-config` as one plain argument, or through a small shell wrapper when a value needs
    the pod's own ordinal or node name. The wrapper passes every other argument as "$@", so no
    user-written text is ever parsed by the shell except as one single-quoted word."""
    if not pool.nodeConfig:
        return
    pairs = [(key, encode_template(raw, pool=pool.name, replicas=pool.replicas, stateful=fed.stateful))
             for key, raw in pool.nodeConfig.items()]
    token = join_pairs(pairs)
    if not token.dynamic:
        container["args"].append(f"--node-config={token.static_text()}")
        return
    script = ""
    if fed.stateful:
        script += f'{INDEX_VAR}="${{{POD_NAME_VAR}##*-}}"; '
    script += f'exec "$0" "$@" --node-config {shell_word(token)}'
    container["command"] = ["/bin/sh", "-c", script, "flower-supernode"]
    container.setdefault("env", []).extend([
        {"name": POD_NAME_VAR, "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": NODE_VAR, "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
    ])


# ---------------------------------------------------------------------------------------------
# GPUs


def _gpu_resource(gpu: GPU | None) -> tuple[str, int] | None:
    if gpu is None or not gpu.enabled or gpu.mountAll:
        return None
    return gpu.resource(), gpu.count


def _gpu_mount_all(gpu: GPU | None) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """Env, mounts and volumes that expose every GPU of the node (mountAll)."""
    if gpu is None or not gpu.mountAll:
        return [], [], []
    if gpu.vendor == "nvidia":
        return [{"name": GPU_ENV["nvidia"], "value": "all"}], [], []
    env = [{"name": GPU_ENV["amd"], "value": "all"}]
    mounts = [{"name": "dev-kfd", "mountPath": "/dev/kfd"}, {"name": "dev-dri", "mountPath": "/dev/dri"}]
    volumes = [
        {"name": "dev-kfd", "hostPath": {"path": "/dev/kfd", "type": "CharDevice"}},
        {"name": "dev-dri", "hostPath": {"path": "/dev/dri", "type": "Directory"}},
    ]
    return env, mounts, volumes


def _with_gpu(resources: dict[str, Any], gpu: tuple[str, int] | None) -> dict[str, Any]:
    if gpu is None:
        return resources
    name, count = gpu
    out = clone(resources)
    for section in ("limits", "requests"):
        out.setdefault(section, {})[name] = str(count)
    return out


# ---------------------------------------------------------------------------------------------
# Building blocks


def _container(name: str, image: str, *, args: list[str], env: list[dict[str, Any]],
               resources: dict[str, Any], mounts: list[dict[str, Any]],
               ports: list[dict[str, Any]] | None = None, privileged: bool = False) -> dict[str, Any]:
    container: dict[str, Any] = {"name": name, "image": image, "args": list(args)}
    if ports:
        container["ports"] = ports
    if env:
        container["env"] = clone(env)
    if resources:
        container["resources"] = clone(resources)
    if mounts:
        container["volumeMounts"] = clone(mounts)
    if privileged:
        container["securityContext"] = {"privileged": True}
    return container


def has_health_server(image: str) -> bool:
    """Whether the image's Flower has --health-server-address (1.21 to 1.42); a tag without a
    version is the newest known release (syncer.models.flower)."""
    return interface_of_image(image).health_server


def _with_health(container: dict[str, Any], port: int, port_name: str, iface: FlowerInterface) -> dict[str, Any]:
    """Flower's gRPC health server (plain text, also beside a TLS SuperLink) on `port`, and kubelet
    gRPC probes on it: readiness, and liveness so a wedged process is restarted. Only where it is
    the best there is: up to 1.34 for SuperLinks and SuperNodes, up to 1.42 for SuperExecs (1.43
    removed it)."""
    if iface.health_server:
        container["args"].append(f"--health-server-address=0.0.0.0:{port}")
        container.setdefault("ports", []).append(_port(port_name, port))
        probe = {"grpc": {"port": port}, "periodSeconds": 10, "timeoutSeconds": 1, "failureThreshold": 3}
        container["readinessProbe"] = probe
        container["livenessProbe"] = {**probe, "timeoutSeconds": LIVENESS_TIMEOUT, "failureThreshold": 6}
    return container


def _with_http_health(container: dict[str, Any], port: int, *, tls: bool) -> None:
    """Probes on Flower's GET /health (1.35+), served by the same HTTP server as the APIs on `port`:
    when the API cannot be reached, the pod is not Ready."""
    def probe(failures: int, timeout: int = 1) -> dict[str, Any]:
        return {"httpGet": {"path": HEALTH_PATH, "port": port, "scheme": "HTTPS" if tls else "HTTP"},
                "periodSeconds": 10, "timeoutSeconds": timeout, "failureThreshold": failures}

    container["readinessProbe"] = probe(3)
    container["livenessProbe"] = probe(6, LIVENESS_TIMEOUT)
    # Liveness only once the API has answered: a 1.42 SuperLink took 66 s to serve on a loaded
    # 2-core node (imports), and liveness alone restarted it every minute, for ever.
    container["startupProbe"] = probe(30)


def _port(name: str, number: int) -> dict[str, Any]:
    return {"name": name, "containerPort": number, "protocol": "TCP"}


def _service_port(name: str, port: int, target: int) -> dict[str, Any]:
    return {"name": name, "port": port, "targetPort": target, "protocol": "TCP"}


def _merge_named(base: list[dict[str, Any]], extra: list[dict[str, Any]], *,
                 keep_existing: bool = False) -> list[dict[str, Any]]:
    """Merge two lists of named items in a fixed order: `base` order first, then new names from
    `extra`. On a name clash `extra` wins (or `base` with keep_existing), in base's position."""
    if not extra:
        return base
    if not base:
        return extra
    index = {item.get("name"): i for i, item in enumerate(base)}
    out = list(base)
    for item in extra:
        at = index.get(item.get("name"))
        if at is None:
            index[item.get("name")] = len(out)
            out.append(item)
        elif not keep_existing:
            out[at] = item
    return out


def _claim(template: ClaimTemplate) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": template.metadata.name}
    if template.metadata.labels:
        meta["labels"] = dict(template.metadata.labels)
    if template.metadata.annotations:
        meta["annotations"] = dict(template.metadata.annotations)
    return {"metadata": meta, "spec": clone(template.spec)}


def _pod_template(ctx: RenderContext, selector: dict[str, str], pod_spec: dict[str, Any],
                  user: dict[str, Any] | None) -> dict[str, Any]:
    """The pod template, with the user's `podTemplate` merged in (ours win on identity labels)."""
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    if user:
        user_meta = user.get("metadata") or {}
        labels.update(user_meta.get("labels") or {})
        annotations.update(user_meta.get("annotations") or {})
        for key, value in (user.get("spec") or {}).items():
            if value is None or key in _OWNED:
                continue
            if key in _APPENDED:
                pod_spec[key] = _merge_named(pod_spec.get(key, []), clone(value), keep_existing=True)
            else:
                pod_spec[key] = clone(value)
    labels.update(selector)
    labels.update(ctx.unit.labels())
    meta: dict[str, Any] = {"labels": labels}
    if annotations:
        meta["annotations"] = annotations
    return {"metadata": meta, "spec": pod_spec}
