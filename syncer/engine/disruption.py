"""Which changes of a sync restart pods, and whose (pure: objects in, classification out).

A change restarts pods when it changes a workload's pod template (`spec.template`) and the
workload rolls its pods on such a change (every strategy but a StatefulSet's or DaemonSet's
`OnDelete`), or when the workload is deleted and recreated (an immutable field). Everything else
leaves the running pods alone: Services, NetworkPolicies, ServiceAccounts, a workload's own
labels and annotations, more `replicas` of a StatefulSet or Deployment (pods are added, the others
keep running). Fewer `replicas` stop the pods beyond the new count (`SCALES_DOWN`): SuperNodes
that may be in the middle of a round. A Secret or ConfigMap a workload mounts does not restart it either: the
kubelet updates the mounted files, and Flower reads its certificates and keys when it starts, so
the change takes effect at the pods' next restart (`NEXT_RESTART`). Where flower-syncer wants a
Secret's change to roll the pods (a SuperNode release's node-authentication key), it puts the
Secret's digest in the pod template, so that change is a pod-template change.

Who is restarted: a Federation's SuperLink (`the SuperLink`), one of its pools (`pool gpu (4
SuperNodes)`), or a component of a SuperNode release (`supernode (2 SuperNodes)`). `diff` and
`sync --dry-run` print it, the agent holds such changes while runs are in progress (engine.holds).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from syncer.identity import LABEL_COMPONENT, LABEL_POOL, WORKLOAD_KINDS, Manifest, ObjectRef

SUPERLINK = "superlink"  # a Federation's SuperLink workload: its component label (observe.status.SUPERLINK_POOL)
SUPERNODE_COMPONENT = "supernode"  # a SuperNode release's SuperNodes
MAX_PATHS = 4  # changed pod-template fields named per workload


class Effect(StrEnum):
    RESTARTS = "restarts"  # its pods are replaced (rolling update or Recreate strategy)
    RECREATES = "recreates"  # the workload is deleted and created again (an immutable field changed)
    REMOVES = "removes"  # the workload left Git and is pruned: its pods stop
    SCALES_DOWN = "scalesDown"  # fewer replicas: the pods beyond the new count stop, the others keep running
    NEXT_RESTART = "nextRestart"  # a mounted Secret or ConfigMap changed: read at the pods' next start

    @property
    def stops_pods(self) -> bool:
        return self is not Effect.NEXT_RESTART


@dataclass(frozen=True, slots=True)
class Disruption:
    """One change's effect on running pods."""

    ref: ObjectRef  # the workload (or, for NEXT_RESTART, the Secret or ConfigMap)
    effect: Effect
    target: str  # "superlink", a pool's name, a release's component
    role: str = "component"  # superlink | pool | supernodes | component | config
    pods: int | None = None  # pods it runs (desired), when known
    paths: tuple[str, ...] = ()  # what of the pod template changed (at most MAX_PATHS)
    mounted_by: tuple[str, ...] = ()  # NEXT_RESTART: the workloads that mount it (their subjects)
    pods_before: int | None = None  # SCALES_DOWN: the replicas it runs now
    canary: int | None = None  # a canary pool: the SuperNodes that take the change first (engine.canary)

    @property
    def superlink(self) -> bool:
        return self.role == SUPERLINK

    def stops_pods(self) -> bool:
        """Running pods stop (restart, recreate, removal): what a hold waits for runs to end for."""
        return self.effect.stops_pods

    def subject(self) -> str:
        """`the SuperLink`, `pool gpu (4 SuperNodes)`, `supernode (2 SuperNodes)`, `x (1 pod)`."""
        if self.superlink:
            return "the SuperLink"
        pods = ""
        if self.pods is not None:
            noun = "SuperNode" if self.role in ("pool", "supernodes") else "pod"
            pods = f" ({self.pods} {noun}{'' if self.pods == 1 else 's'})"
        return f"{'pool ' if self.role == 'pool' else ''}{self.target}{pods}"

    def describe(self) -> str:
        """What a reviewer reads: `restarts the SuperLink (args)`, `mounted by the SuperLink: ...`."""
        if self.effect is Effect.NEXT_RESTART:
            return (f"{self.ref.kind} {self.ref.name} changed; mounted by {', '.join(self.mounted_by)}: "
                    "takes effect at their next restart (not restarted now)")
        if self.effect is Effect.SCALES_DOWN:
            stopping = (self.pods_before or 0) - (self.pods or 0)
            return f"scales down {self.subject()}: {stopping} of {self.pods_before} stop"
        verb = {Effect.RESTARTS: "restarts", Effect.RECREATES: "deletes and recreates",
                Effect.REMOVES: "removes"}[self.effect]
        what = f" (pod template: {', '.join(self.paths)})" if self.paths else ""
        first = f": canary {self.canary} of {self.pods or '?'} first" if self.canary else ""
        return f"{verb} {self.subject()}{what}{first}"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"object": str(self.ref), "effect": self.effect.value, "target": self.target,
                               "superlink": self.superlink, "stopsPods": self.stops_pods(),
                               "summary": self.describe()}
        if self.pods is not None:
            out["pods"] = self.pods
        if self.paths:
            out["podTemplate"] = list(self.paths)
        if self.mounted_by:
            out["mountedBy"] = list(self.mounted_by)
        if self.pods_before is not None:
            out["podsBefore"] = self.pods_before
        if self.canary:
            out["canary"] = self.canary
        return out


def target_of(manifest: Mapping[str, Any]) -> tuple[str, str]:
    """Whom a workload runs and in which role: (`superlink`, superlink), (a Federation's pool,
    pool), (`supernode`, supernodes) of a release, or (another component or the name, component)."""
    meta = manifest.get("metadata") or {}
    labels = meta.get("labels") or {}
    if labels.get(LABEL_POOL):
        return str(labels[LABEL_POOL]), "pool"
    component = str(labels.get(LABEL_COMPONENT) or "")
    if component == SUPERLINK:
        return SUPERLINK, SUPERLINK
    if component == SUPERNODE_COMPONENT:
        return component, "supernodes"
    return component or str(meta.get("name", "")), "component"


def desired_pods(desired: Mapping[str, Any], live: Mapping[str, Any] | None) -> int | None:
    """Pods the workload runs: `spec.replicas` (default 1); a DaemonSet's from its live status."""
    if desired.get("kind") == "DaemonSet":
        status = (live or {}).get("status") or {}
        n = status.get("desiredNumberScheduled")
        return int(n) if isinstance(n, int) else None
    replicas = (desired.get("spec") or {}).get("replicas", 1)
    return int(replicas) if isinstance(replicas, int) else None


def rolls_on_change(workload: Mapping[str, Any]) -> bool:
    """Whether a changed pod template replaces running pods (every strategy but `OnDelete`)."""
    spec = workload.get("spec") or {}
    strategy = spec.get("updateStrategy") or {}
    return strategy.get("type") != "OnDelete"


def workload_change(ref: ObjectRef, live: Mapping[str, Any] | None, after: Mapping[str, Any], *,
                    recreate: bool = False, rolls: bool = False) -> Disruption | None:
    """What applying `after` over `live` does to a workload's running pods: None when it does not
    stop any (not a workload, a new one, the same pod template or `OnDelete`, and as many
    replicas or more). `rolls`: a changed template restarts pods even with `OnDelete` (a DaemonSet
    canary's, whose pods flower-syncer deletes: engine.canary)."""
    if ref.kind not in WORKLOAD_KINDS or live is None:
        return None
    pods = desired_pods(after, live)
    if recreate:
        return Disruption(ref, Effect.RECREATES, *target_of(after), pods)
    before_t = (live.get("spec") or {}).get("template") or {}
    after_t = (after.get("spec") or {}).get("template") or {}
    if before_t != after_t and (rolls or rolls_on_change(after)):
        return Disruption(ref, Effect.RESTARTS, *target_of(after), pods, changed_paths(before_t, after_t))
    running = desired_pods(live, live) if ref.kind != "DaemonSet" else None
    if pods is not None and running is not None and pods < running:
        return Disruption(ref, Effect.SCALES_DOWN, *target_of(after), pods, pods_before=running)
    return None


def target_ports(service: Mapping[str, Any]) -> tuple[tuple[str, object, object], ...]:
    """A Service's (name, port, targetPort) triples: what its clients dial and where it sends them."""
    ports = (service.get("spec") or {}).get("ports") or []
    return tuple((str(p.get("name", "")), p.get("port"), p.get("targetPort", p.get("port"))) for p in ports)


def selected_workloads(service: Mapping[str, Any], desired: Sequence[Manifest]) -> list[Manifest]:
    """The workloads of `desired` whose pods `service` selects (a Service without a selector: none)."""
    selector = (service.get("spec") or {}).get("selector") or {}
    if not selector:
        return []
    out = []
    for m in desired:
        if m.get("kind") not in WORKLOAD_KINDS:
            continue
        labels = (((m.get("spec") or {}).get("template") or {}).get("metadata") or {}).get("labels") or {}
        if all(labels.get(k) == v for k, v in selector.items()):
            out.append(m)
    return out


def removal(ref: ObjectRef, live: Mapping[str, Any] | None) -> Disruption | None:
    """A workload pruned: its pods stop. `live` may be metadata only (the target from its labels)."""
    if ref.kind not in WORKLOAD_KINDS:
        return None
    target, role = target_of(live) if live else (ref.name, "component")
    return Disruption(ref, Effect.REMOVES, target, role)


def changed_paths(before: Any, after: Any, limit: int = MAX_PATHS) -> tuple[str, ...]:
    """Dotted paths of the pod template that differ, shallowest first (containers by name)."""
    out: list[str] = []
    for path in _diff(before, after, ""):
        out.append(path or "(whole)")
        if len(out) >= limit:
            break
    return tuple(out)


def _diff(a: Any, b: Any, at: str) -> Iterator[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                yield from _diff(a.get(key), b.get(key), f"{at}.{key}" if at else str(key))
        return
    if isinstance(a, list) and isinstance(b, list) and _named(a) and _named(b):
        by_a, by_b = {x["name"]: x for x in a}, {x["name"]: x for x in b}
        for name in sorted(set(by_a) | set(by_b)):
            if by_a.get(name) != by_b.get(name):
                yield from _diff(by_a.get(name), by_b.get(name), f"{at}[{name}]")
        return
    yield at


def _named(items: list[Any]) -> bool:
    return all(isinstance(x, dict) and isinstance(x.get("name"), str) for x in items)


def config_changes(changed: Iterable[ObjectRef], desired: Sequence[Manifest]) -> list[Disruption]:
    """Changed Secrets and ConfigMaps that a desired workload of the unit mounts or reads into its
    environment: they take effect at those pods' next restart."""
    users: dict[tuple[str, str], list[str]] = {}
    for m in desired:
        if m.get("kind") in WORKLOAD_KINDS:
            for kind, name in referenced_config(m):
                users.setdefault((kind, name), []).append(subject_of(m))
    out = []
    for ref in changed:
        by = users.get((ref.kind, ref.name))
        if by:
            out.append(Disruption(ref, Effect.NEXT_RESTART, ref.name, "config", mounted_by=tuple(dict.fromkeys(by))))
    return out


def subject_of(workload: Mapping[str, Any]) -> str:
    return Disruption(ObjectRef.of(workload), Effect.RESTARTS, *target_of(workload)).subject()


def referenced_config(workload: Mapping[str, Any]) -> set[tuple[str, str]]:
    """(kind, name) of the Secrets and ConfigMaps a workload's pods mount or read (volumes,
    projected sources, envFrom, env valueFrom)."""
    pod = ((workload.get("spec") or {}).get("template") or {}).get("spec") or {}
    found: set[tuple[str, str]] = set()
    for v in pod.get("volumes") or []:
        if not isinstance(v, dict):
            continue
        sources = [v] + [s for s in ((v.get("projected") or {}).get("sources") or []) if isinstance(s, dict)]
        for s in sources:
            secret, config = s.get("secret"), s.get("configMap")
            if isinstance(secret, dict):
                found.add(("Secret", str(secret.get("secretName") or secret.get("name") or "")))
            if isinstance(config, dict):
                found.add(("ConfigMap", str(config.get("name") or "")))
    for c in [*(pod.get("containers") or []), *(pod.get("initContainers") or [])]:
        if not isinstance(c, dict):
            continue
        for e in c.get("envFrom") or []:
            if isinstance(e, dict):
                if isinstance(e.get("secretRef"), dict):
                    found.add(("Secret", str(e["secretRef"].get("name") or "")))
                if isinstance(e.get("configMapRef"), dict):
                    found.add(("ConfigMap", str(e["configMapRef"].get("name") or "")))
        for e in c.get("env") or []:
            source = (e.get("valueFrom") or {}) if isinstance(e, dict) else {}
            if isinstance(source.get("secretKeyRef"), dict):
                found.add(("Secret", str(source["secretKeyRef"].get("name") or "")))
            if isinstance(source.get("configMapKeyRef"), dict):
                found.add(("ConfigMap", str(source["configMapKeyRef"].get("name") or "")))
    found.discard(("Secret", ""))
    found.discard(("ConfigMap", ""))
    return found


def stops_pods(disruptions: Iterable[Disruption]) -> list[Disruption]:
    return [d for d in disruptions if d.stops_pods()]
