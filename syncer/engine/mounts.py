"""Secret keys a workload's pods mount by name: a pod whose volume names a key that its Secret does
not have waits in ContainerCreating forever ("couldn't find key ca.crt in Secret ..."), and
nothing in the workload's status says why. The engine checks these before it applies a changed
workload, so the mistake is a sync error naming the Secret and the key instead.

The usual case: a SuperNode release's CA `existingSecret` made with `kubectl create secret tls`
(type kubernetes.io/tls: `tls.crt` and `tls.key`, no `ca.crt`).

And the Secrets a workload's pods read at all (`secrets_read`): a workload whose own Secret (e.g.
its `<workload>-sealed` one, render.sealed) failed to apply is not applied either, or its pods would
read whatever the Secret of that name holds, someone else's value included.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from syncer.identity import WORKLOAD_KINDS


def mounted_secret_keys(manifest: Mapping[str, Any]) -> dict[str, set[str]]:
    """{Secret name: keys} the pod template mounts through `items` (not optional), from `secret`
    volumes and `projected` sources."""
    if manifest.get("kind") not in WORKLOAD_KINDS:
        return {}
    pod = ((manifest.get("spec") or {}).get("template") or {}).get("spec") or {}
    wanted: dict[str, set[str]] = {}
    for name, source in _secret_sources(pod.get("volumes") or []):
        if source.get("optional") or not name:
            continue
        keys = {str(i["key"]) for i in source.get("items") or [] if isinstance(i, dict) and i.get("key")}
        if keys:
            wanted.setdefault(name, set()).update(keys)
    return wanted


def secrets_read(manifest: Mapping[str, Any]) -> set[str]:
    """The names of the Secrets the pod template reads: volumes (`secret`, `projected`) and every
    container's `env[].valueFrom.secretKeyRef` and `envFrom[].secretRef`, optional or not."""
    if manifest.get("kind") not in WORKLOAD_KINDS:
        return set()
    pod = ((manifest.get("spec") or {}).get("template") or {}).get("spec") or {}
    names = {name for name, _ in _secret_sources(pod.get("volumes") or [])}
    for key in ("initContainers", "containers", "ephemeralContainers"):
        for c in pod.get(key) or []:
            if not isinstance(c, dict):
                continue
            for item in c.get("env") or []:
                ref = ((item.get("valueFrom") or {}).get("secretKeyRef") or {}) if isinstance(item, dict) else {}
                names.add(str(ref.get("name") or ""))
            for item in c.get("envFrom") or []:
                names.add(str(((item.get("secretRef") or {}) if isinstance(item, dict) else {}).get("name") or ""))
    return names - {""}


def _secret_sources(volumes: list[Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    for v in volumes:
        if not isinstance(v, dict):
            continue
        secret = v.get("secret")
        if isinstance(secret, dict):
            yield str(secret.get("secretName") or ""), secret
        for src in (v.get("projected") or {}).get("sources") or []:
            if isinstance(src, dict) and isinstance(src.get("secret"), dict):
                yield str(src["secret"].get("name") or ""), src["secret"]


def missing_keys(wanted: Mapping[str, set[str]], secrets: Mapping[str, Mapping[str, Any] | None]) -> list[str]:
    """Plain-words problems: Secrets that lack a mounted key. `secrets`: the live Secrets by name
    (None: not found; a Secret created later is a normal order of events, and the kubelet waits
    for it, so only a Secret that exists without the key is a problem)."""
    problems = []
    for name in sorted(wanted):
        secret = secrets.get(name)
        if secret is None:
            continue
        have = set(secret.get("data") or {}) | set(secret.get("stringData") or {})
        absent = sorted(wanted[name] - have)
        if absent:
            hint = (" (a kubernetes.io/tls Secret, e.g. from `kubectl create secret tls`, has tls.crt and "
                    "tls.key only: add ca.crt to it, or let flower-syncer copy its tls.crt with "
                    "copyFromExistingSecret)") if "ca.crt" in absent and secret.get("type") == "kubernetes.io/tls" \
                else ""
            problems.append(f"Secret {name} has no key {', '.join(absent)}{hint}")
    return problems
