"""The corpus of broken config repositories (test_broken_inputs.py reports each precisely,
test_load_cache.py loads each from a warm cache): a helper module, not a test module. In each case
the line carrying a `#<` comment is the one the error must name (no marker: line 0)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tests.builders import federation, pool

# tests/builders.py's Federation (pool "a" of two replicas), without annotations (cases add theirs),
# split where its spec begins: cases break the one or the other
_HEAD, _SPEC, GOOD_SPEC = federation(pools=pool("a", 2)).replace("  annotations: {}\n", "").partition("spec:\n")
FED_HEAD = _HEAD + _SPEC


def fed(spec: str = GOOD_SPEC, head: str = FED_HEAD) -> str:
    return head + spec


def tweak(old: str, new: str) -> str:
    assert old in GOOD_SPEC, old
    return fed(GOOD_SPEC.replace(old, new, 1))


@dataclass
class Case:
    name: str
    files: dict[str, str | bytes]
    file: str  # the file the error must name
    path: str  # the field path it must name ("" for whole-file problems)
    message: str  # a piece of the message
    hint: str = ""  # a piece of the hint (what to do)
    extra: dict[str, str] = field(default_factory=dict)


F = "federations/fed.yaml"
V = "supernodes/r1/values.yaml"

CASES = [
    Case("yaml-syntax", {F: fed().replace("  isolationMode: subprocess\n", "  isolationMode: [subprocess\n")
                         .replace("  superlink:\n", "  superlink: #<\n")},
         F, "", "YAML syntax error"),
    Case("tab-indent", {F: fed().replace("  mode: StatefulSet", "\tmode: StatefulSet #<")}, F, "",
         "YAML syntax error"),
    Case("duplicate-key", {F: tweak("    image: flwr/superlink:1.25.0\n",
                                    "    image: flwr/superlink:1.25.0\n    image: other #<\n")},
         F, "spec.superlink.image", "duplicate key"),
    Case("unknown-top-field", {F: tweak("  mode: StatefulSet\n", "  mode: StatefulSet\n  moed: x #<\n")},
         F, "spec.moed", "unknown field", "did you mean 'mode'?"),
    Case("typo-in-pool", {F: tweak("        replicas: 2\n", "        replicas: 2\n        replica: 3 #<\n")},
         F, "spec.supernodes.pools[0].replica", "unknown field", "did you mean 'replicas'?"),
    Case("typo-superlink-service", {F: tweak("    image: flwr/superlink:1.25.0\n",
                                             "    image: flwr/superlink:1.25.0\n    servce: {} #<\n")},
         F, "spec.superlink.servce", "unknown field", "did you mean 'service'?"),
    Case("missing-mode", {F: fed(GOOD_SPEC.replace("  mode: StatefulSet\n", ""), FED_HEAD.replace(
        "spec:\n", "spec: #<\n"))}, F, "spec.mode", "required field 'mode' is missing"),
    Case("bad-mode-enum", {F: tweak("  mode: StatefulSet", "  mode: Deployment #<")},
         F, "spec.mode", "'DaemonSet' or 'StatefulSet'"),
    Case("quoted-replicas", {F: tweak("        replicas: 2", '        replicas: "2" #<')},
         F, "spec.supernodes.pools[0].replicas", "integer", "remove the quotes"),
    Case("replicas-zero", {F: tweak("        replicas: 2", "        replicas: 0 #<")},
         F, "spec.supernodes.pools[0].replicas", "greater than or equal to 1"),
    Case("cel-daemonset-replicas", {F: tweak("  mode: StatefulSet", "  mode: DaemonSet").replace(
        "        replicas: 2", "        replicas: 2 #<")},
         F, "spec.supernodes.pools[0].replicas", "replicas must not be set for pools when mode is DaemonSet"),
    Case("cel-statefulset-no-replicas", {F: tweak("        replicas: 2\n", "").replace(
        "      - name: a", "      - name: a #<")},
         F, "spec.supernodes.pools[0].replicas", "replicas must be set (>=1)"),
    Case("cel-process-no-superexec", {F: tweak("  isolationMode: subprocess\n", "  isolationMode: process\n")
                                      .replace("    image: flwr/superlink:1.25.0", "    image: flwr/superlink:1.25.0")
                                      .replace("  superlink:\n", "  superlink: #<\n")},
         F, "spec.superlink.superexecImage", "superexecImage is required when isolationMode=process"),
    Case("cel-subprocess-with-superexec", {F: tweak("    image: flwr/superlink:1.25.0\n",
                                                    "    image: flwr/superlink:1.25.0\n"
                                                    "    superexecImage: flwr/superexec:1.25.0 #<\n")},
         F, "spec.superlink.superexecImage", "must be empty when isolationMode=subprocess"),
    Case("cel-pool-superexec-in-subprocess", {F: tweak("        images: {}", "        images:\n"
                                                       "          superexecClientApp: x:1 #<")},
         F, "spec.supernodes.pools[0].images.superexecClientApp", "must be empty when isolationMode=subprocess"),
    Case("cel-mountall-no-vendor", {F: tweak("        images: {}", "        images: {}\n        gpu: #<\n"
                                             "          mountAll: true")},
         F, "spec.supernodes.pools[0].gpu.vendor", "vendor is required when gpu.mountAll=true"),
    Case("bad-gpu-vendor", {F: tweak("        images: {}", "        images: {}\n        gpu:\n"
                                     "          vendor: intel #<")},
         F, "spec.supernodes.pools[0].gpu.vendor", "'nvidia' or 'amd'"),
    Case("duplicate-pool", {F: tweak("        images: {}\n", "        images: {}\n      - name: a #<\n"
                                     "        replicas: 1\n")},
         F, "spec.supernodes.pools[1].name", "used twice"),
    Case("bad-pool-name", {F: tweak("      - name: a", "      - name: Pool_A #<")},
         F, "spec.supernodes.pools[0].name", "lowercase"),
    Case("federation-name-too-long", {F: fed(head=FED_HEAD.replace("name: fed", "name: " + "f" * 60 + " #<"))},
         F, "metadata.name", "characters"),
    Case("workload-name-over-52", {F: fed(GOOD_SPEC.replace("      - name: a", "      - name: a #<"),
                                          head=FED_HEAD.replace("name: fed", "name: " + "f" * 42))},
         F, "spec.supernodes.pools[0].name", "at most 52"),
    Case("federation-name-starts-with-digit", {F: fed(head=FED_HEAD.replace("name: fed", "name: 1fed #<"))},
         F, "metadata.name", "start with a lowercase letter"),
    Case("index-in-daemonset", {F: tweak("  mode: StatefulSet", "  mode: DaemonSet").replace(
        "        replicas: 2\n", "        nodeConfig:\n          partition-id: \"{index}\" #<\n")},
         F, "spec.supernodes.pools[0].nodeConfig.partition-id", "only exist in StatefulSet mode"),
    Case("node-config-dotted-key", {F: tweak("        images: {}", "        images: {}\n        nodeConfig:\n"
                                             "          lr.base: \"0.1\" #<")},
         F, "spec.supernodes.pools[0].nodeConfig['lr.base']", "nested table", "'-' or '_'"),
    Case("node-config-both-quotes", {F: tweak("        images: {}", "        images: {}\n        nodeConfig:\n"
                                              "          name: \"it's \\\"x\\\"\" #<")},
         F, "spec.supernodes.pools[0].nodeConfig.name", "both kinds of quote"),
    Case("node-config-number-not-string", {F: tweak("        images: {}", "        images: {}\n        nodeConfig:\n"
                                                    "          batch-size: 32 #<")},
         F, "spec.supernodes.pools[0].nodeConfig.batch-size", "string", "quote"),
    Case("env-typo", {F: tweak("        images: {}", "        images: {}\n        env:\n          - name: A\n"
                               "            valu: x #<")},
         F, "spec.supernodes.pools[0].env[0].valu", "unknown field 'valu' in EnvVar", "did you mean 'value'?"),
    Case("env-int-value", {F: tweak("        images: {}", "        images: {}\n        env:\n          - name: A\n"
                                    "            value: 1 #<")},
         F, "spec.supernodes.pools[0].env[0].value", "expected a string", 'quote the value: "1"'),
    Case("pod-template-typo", {F: tweak("        images: {}", "        images: {}\n        podTemplate:\n"
                                        "          spec:\n            nodeSelectr: {a: b} #<")},
         F, "spec.supernodes.pools[0].podTemplate.spec.nodeSelectr", "unknown field", "nodeSelector"),
    Case("pod-template-containers", {F: tweak("        images: {}", "        images: {}\n        podTemplate:\n"
                                              "          spec:\n            containers: [{name: x}] #<")},
         F, "spec.supernodes.pools[0].podTemplate.spec.containers", "flower-syncer writes the Flower containers"),
    Case("bad-quantity", {F: tweak("        images: {}", "        images: {}\n        supernodeResources:\n"
                                   "          limits: {cpu: lots} #<")},
         F, "spec.supernodes.pools[0].supernodeResources.limits.cpu", "not a Kubernetes quantity"),
    Case("mount-without-volume", {F: tweak("        images: {}", "        images: {}\n        volumeMounts:\n"
                                           "          - {name: data, mountPath: /data} #<")},
         F, "spec.supernodes.pools[0].volumeMounts[0].name", "not defined"),
    Case("vct-in-daemonset", {F: tweak("  mode: StatefulSet", "  mode: DaemonSet").replace(
        "        replicas: 2\n", "        volumeClaimTemplates: #<\n          - metadata: {name: d}\n"
                                "            spec: {}\n")},
         F, "spec.supernodes.pools[0].volumeClaimTemplates", "only work in StatefulSet mode"),
    Case("bad-service-type", {F: tweak("    image: flwr/superlink:1.25.0\n", "    image: flwr/superlink:1.25.0\n"
                                       "    service:\n      type: Loadbalancer #<\n")},
         F, "spec.superlink.service.type", "'LoadBalancer'"),
    Case("wrong-kind", {F: fed().replace("kind: Federation", "kind: Deployment #<")}, F, "kind",
         "expected apiVersion flwr.exalsius.ai/v1 kind Federation"),
    Case("not-a-mapping", {F: "- just\n- a list\n"}, F, "", "expected a mapping"),
    Case("scalar-document", {F: "hello\n"}, F, "", "expected a mapping"),
    Case("bad-annotation-policy", {F: fed(head=FED_HEAD.replace(
        "  name: fed\n", "  name: fed\n  annotations:\n    flower-syncer.io/suspend: \"yes\" #<\n"))},
         F, "metadata.annotations['flower-syncer.io/suspend']", '"true" or "false"'),
    Case("duplicate-federation", {F: fed(), "federations/zz-copy.yaml": fed(head=FED_HEAD.replace(
        "  name: fed\n", "  name: fed #<\n"))},
         "federations/zz-copy.yaml", "metadata.name", "is also defined in federations/fed.yaml"),
    Case("binary-file", {F: b"\x00\x01\x02binary"}, F, "", "binary"),
    Case("invalid-utf8", {F: b"apiVersion: v1\nkind: \xff\xfe\n"}, F, "", "not valid UTF-8"),
    Case("yaml-bomb", {F: "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n" for i in range(8))
        .replace("b: &b", "b: &b", 1)}, F, "", "expands to more than"),
    Case("recursive-alias", {F: "a: &a\n  b: *a\n"}, F, "", "expands to more than"),
    Case("values-typo", {V: "supernode:\n  replica: 3 #<\n"}, V, "supernode.replica", "unknown field",
         "did you mean 'replicas'?"),
    Case("values-isolation-enum", {V: "supernode:\n  isolationMode: thread #<\n"}, V, "supernode.isolationMode",
         "'subprocess' or 'process'"),
    Case("values-node-config-dotted", {V: "supernode:\n  node:\n    config:\n      a.b: 1 #<\n"}, V,
         "supernode.node.config['a.b']", "nested table"),
    Case("values-pkcs8-key", {V: "global:\n  nodeAuth:\n    enabled: true\n    authSupernodePrivateKey: | #<\n"
                                 "      -----BEGIN PRIVATE KEY-----\n      MC4CAQAwBQYDK2VwBCIEIA==\n"
                                 "      -----END PRIVATE KEY-----\n"}, V, "global.nodeAuth.authSupernodePrivateKey",
         "PKCS#8", "ssh-keygen"),
    Case("values-multi-doc", {V: "supernode: {}\n---\nsupernode: {} #<\n"}, V, "", "single YAML document"),
    Case("release-name-invalid", {"supernodes/Bad_Name/values.yaml": "{}\n"}, "supernodes/Bad_Name", "",
         "release name"),
    Case("release-without-values", {"supernodes/r2/release.yaml": "namespace: x\n"}, "supernodes/r2", "",
         "has no values.yaml"),
    Case("release-settings-typo", {V: "{}\n", "supernodes/r1/release.yaml": "namesapce: x #<\n"},
         "supernodes/r1/release.yaml", "namesapce", "unknown field", "did you mean 'namespace'?"),
    Case("values-at-wrong-place", {"supernodes/r3.yaml": "{}\n"}, "supernodes/r3.yaml", "",
         "supernodes/<release>/values.yaml"),
    Case("settings-typo", {F: fed(), "flower-syncer.yaml": "defaultNamespac: x #<\n"}, "flower-syncer.yaml",
         "defaultNamespac", "unknown field", "did you mean 'defaultNamespace'?"),
    Case("object-collision", {F: tweak("      - name: a\n", "      - name: a-superlink\n"),
                              "federations/c.yaml": fed(head=FED_HEAD.replace("  name: fed\n",
                                                                              "  name: fed-supernode-a\n"))},
         "", "", "renders"),
]


def write_files(root: Path, files: dict[str, str | bytes]) -> None:
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
