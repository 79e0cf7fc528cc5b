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

import re

from pydantic import Field, ValidationError

from syncer.diagnostics import Diagnostic, FieldPath, format_path
from syncer.models.base import StrictModel, validate_document
from syncer.models.k8s import Issue
from syncer.models.names import (
    DNS1123_SUBDOMAIN,
    MAX_NAME,
    label_key_problem,
    label_value_problem,
    name_problem,
)
from syncer.models.nodeconfig import NodeConfigError, check_key, encode_typed
from syncer.models.supernode.keys import (
    GENERATE_HINT,
    KeyFormatError,
    OpenSSHKey,
    parse_openssh_private_key,
    public_key_problem,
)
from syncer.models.supernode.naming import ReleaseNames, helm_trunc, interface, release_names
from syncer.models.supernode.schema import (
    CA_MOUNT_DIR,
    CA_VOLUME,
    CHART_NAME,
    DIGEST_PATTERN,
    IANA_SVC_NAME_PATTERN,
    NODE_AUTH_MOUNT_DIR,
    NODE_AUTH_VOLUME,
    TAG_PATTERN,
    WRITABLE_DIRS,
    Component,
    GlobalValues,
    SuperExecComponent,
    SuperNodeComponent,
    TLSValues,
)
from syncer.models.supernode.security import security_issues
from syncer.models.supernode.versions import version_issues
from syncer.yamldoc import YamlDoc

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
    """Replaces the chart's name in object names (`<release>-<nameOverride>-<component name>`) and in the
    `app.kubernetes.io/name` label."""
    fullnameOverride: str = ""
    """Replaces `<release>-<nameOverride>` in object names."""
    global_: GlobalValues = Field(default=GlobalValues(), alias="global")
    """Defaults for both components."""
    tls: TLSValues = TLSValues()
    """TLS between the SuperNode and its SuperLink."""
    supernode: SuperNodeComponent = SuperNodeComponent()
    """The SuperNode: a Deployment, its ClientAppIo Service, ServiceAccount and NetworkPolicy."""
    superexec: SuperExecComponent = SuperExecComponent()
    """A SuperExec that runs ClientApps for a SuperNode in `process` isolation: a Deployment, ServiceAccount and
    egress NetworkPolicy."""

    def semantic_issues(self) -> list[Issue]:
        issues: list[Issue] = self._name_issues()
        if self.fullnameOverride and not issues:
            issues.extend(self._derived_name_issues(release=""))
        issues.extend(self._metadata_issues())
        issues.extend(self._topology_issues())
        issues.extend(self._tls_issues())
        issues.extend(self._node_auth_issues())
        for comp, key in ((self.supernode, "supernode"), (self.superexec, "superexec")):
            issues.extend(security_issues(self.global_, comp, key))
            if comp.enabled:
                issues.extend(self._component_issues(comp, key))
        if self.supernode.enabled:
            issues.extend(self._supernode_issues())
        issues.extend(version_issues(self.supernode, self.superexec, self.global_.nodeAuth))
        return issues

    def release_names(self, release: str) -> ReleaseNames:
        """Every name release `release` gives its objects (Helm's fullname rule)."""
        return release_names(release, self.nameOverride, self.fullnameOverride, self.supernode, self.superexec.name)

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
            problem = name_problem(helm_trunc(self.fullnameOverride), "fullnameOverride")
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
        names = self.release_names(release)
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
        if not interface(se.image).superexec:
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
            names = self.release_names("")
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
                                f"set authSupernodePrivateKey to an OpenSSH ECDSA key; {GENERATE_HINT}"))
        else:
            try:
                private = parse_openssh_private_key(auth.authSupernodePrivateKey)
            except KeyFormatError as exc:
                issues.append(Issue((*at, "authSupernodePrivateKey"), str(exc), exc.hint))
        if auth.authSupernodePublicKey.strip():
            found = public_key_problem(auth.authSupernodePublicKey, private)
            if found:
                issues.append(Issue((*at, "authSupernodePublicKey"), *found))
        elif not interface(self.supernode.image).public_key_optional:
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
        if comp.image.tag and not TAG_PATTERN.match(comp.image.tag):
            issues.append(Issue((key, "image", "tag"), f"{comp.image.tag!r} is not a valid image tag",
                                "letters, digits, '_', '.' and '-', at most 128 characters"))
        if comp.image.digest and not DIGEST_PATTERN.match(comp.image.digest):
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
        if not IANA_SVC_NAME_PATTERN.match(svc.servicePortClientAppIoName) or not re.search(
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
