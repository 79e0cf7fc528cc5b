#!/usr/bin/env python3
"""Generate docs/reference/ from the code, so the reference cannot drift from what the code accepts.

    python3 tools/gen_reference.py            write docs/reference/*.md
    python3 tools/gen_reference.py --check    exit 1 if a file differs from what the code gives, or
                                              if anything is undocumented (tests/unit/test_reference.py)

What each page is made from:

- config.md: the pydantic models a user writes (Federation, SuperNode values, release.yaml,
  flower-syncer.yaml, the admin's Policy, the agent's settings): every field with its YAML name,
  type, default and meaning. The meaning is the field's `description`, or else the attribute
  docstring under the field in the source (read with `ast`, so nothing changes at run time).
- annotations.md: every `flower-syncer.io/...` annotation and label the code names (found by
  scanning syncer/ for the string literals), with the meaning given in ANNOTATIONS below. A new
  annotation in the code without an entry there fails the check.
- cli.md: every command and flag, from the CLI's own parser.
- metrics.md: every metric family, from a fresh `Metrics` registry: name, type, labels, help.
- events.md: the Synced and Healthy condition reasons (their enums) and every Event reason the
  agent posts (found by scanning for `Event(` calls), with meanings from EVENT_REASONS below.

Nothing here is imported by the agent: it is development tooling.
"""

from __future__ import annotations

import argparse
import ast
import enum
import functools
import inspect
import itertools
import re
import sys
import textwrap
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "docs" / "reference"
sys.path.insert(0, str(REPO))

# -- annotations and labels: the meaning of each key the code names ------------------------------------

ANNOTATIONS: dict[str, tuple[str, str]] = {
    # key: (where it goes, what it means)
    "flower-syncer.io/unit": ("label, every object",
        "the unit (federation or SuperNode release) that renders the object"),
    "flower-syncer.io/unit-kind": ("label, every object", "`federation` or `supernode`"),
    "flower-syncer.io/repository": ("label, every object",
        "the config repository that applied the unit (its `name`, or the derived one)"),
    "flower-syncer.io/inventory": ("label, inventory ConfigMaps",
        "`true` on the ConfigMap that records what a unit applied"),
    "flower-syncer.io/source-record": ("label, ConfigMaps",
        "marks the record of the revision a repository was last checked at"),
    "flower-syncer.io/leader": ("label, the agent's pod", "set on the pod that holds the Lease"),
    "flower-syncer.io/source": ("annotation, every object",
        "the file of the config repository the object was rendered from"),
    "flower-syncer.io/applied-hash": ("annotation, every object",
        "the fingerprint of the desired object last applied: an object whose live copy carries it is known "
        "unchanged without a request"),
    "flower-syncer.io/prune": ("annotation, any managed object", "`disabled`: never pruned, even when it leaves Git"),
    "flower-syncer.io/prune-policy": ("annotation, Federation",
        "what pruning the Federation does with the objects it leaves behind"),
    "flower-syncer.io/hold-for-runs": ("annotation, Federation or release",
        "how long a change that restarts pods waits for runs in progress to end (`30m`, `2h`, `off`)"),
    "flower-syncer.io/hold-strict": ("annotation, Federation or release",
        "`true`: hold such a change also when the SuperLink cannot be asked about its runs"),
    "flower-syncer.io/release-hold": ("annotation, FlowerUnit",
        "an RFC 3339 time: holds begun by then go ahead now (`flower-syncer resync --release-hold` sets it)"),
    "flower-syncer.io/canary": ("annotation, Federation; rendered on a canary pool's StatefulSet or DaemonSet",
        "how many SuperNodes of each pool take a change of its pod template first: `1` (every pool) or "
        "`gpu=1, cpu=2` (per pool); a DaemonSet pool's canary is always fewer than its nodes (docs/rollouts.md)"),
    "flower-syncer.io/canary-gate": ("annotation, Federation; rendered on a canary pool's StatefulSet or DaemonSet",
        "how long the canary stays healthy before the rest of the pool rolls (a duration, default `60s`)"),
    "flower-syncer.io/canary-deadline": ("annotation, Federation; rendered on a canary pool's StatefulSet or "
        "DaemonSet",
        "by when, from its start, the canary must have passed its gate, or it failed (default `10m`)"),
    "flower-syncer.io/canary-template": ("annotation, a canary pool's StatefulSet or DaemonSet, a release's Deployment",
        "the digest of the pod template Git renders: a new change when it differs from the live one's"),
    "flower-syncer.io/canary-from": ("annotation, a SuperNode release's Deployment while its canary waits",
        "the `pod-template-hash` of the pods the canary started over: a pod with another is the canary's"),
    "flower-syncer.io/canary-nodes": ("annotation, a canary pool's DaemonSet while its canary waits",
        "the canary's nodes (the first of the pool's by name), whose pods take the change first (`OnDelete`)"),
    "flower-syncer.io/superlink-state": ("annotation, Federation",
        "`persistent`: the SuperLink keeps runs, nodes and keys in SQLite on a volume; `memory`: in memory "
        "(docs/superlink-state.md)"),
    "flower-syncer.io/superlink-state-size": ("annotation, Federation",
        "the size of the SuperLink's state volume, a Kubernetes quantity (default `1Gi`)"),
    "flower-syncer.io/superlink-state-storage-class": ("annotation, Federation",
        "the StorageClass of the state volume (unset: the cluster's default class)"),
    "flower-syncer.io/superlink-state-retention": ("annotation, Federation",
        "`Retain` (default) or `Delete`: whether the state volume outlives the SuperLink's StatefulSet"),
    "flower-syncer.io/copy-from": ("annotation, rendered Secret",
        "`namespace/name` of a Secret whose data is copied in at sync time (the chart's "
        "`copyFromExistingSecret`)"),
    "flower-syncer.io/copy-keys": ("annotation, rendered Secret", "the keys copied from `copy-from`"),
    "flower-syncer.io/suspended": ("annotation, inventory ConfigMap",
        "set by `flower-syncer suspend`: the unit is neither applied nor healed until resumed"),
    "flower-syncer.io/suspend": ("annotation, FlowerUnit",
        "`true` suspends the unit, `false` resumes it (as `flower-syncer suspend`/`resume`)"),
    "flower-syncer.io/requestedAt": ("annotation, FlowerUnit",
        "any new value asks the agent to sync the unit now (as Flux's `reconcile.fluxcd.io/requestedAt`)"),
    "flower-syncer.io/force-conflicts": ("annotation, Federation", "take over fields another server-side applier owns"),
    "flower-syncer.io/allow-recreate": ("annotation, Federation", "recreate an object whose immutable fields changed"),
    "flower-syncer.io/flower-version": ("annotation, Federation",
        "the Flower release of the Federation's images, when the image tag does not say it"),
    "flower-syncer.io/network-policies": ("annotation, Federation",
        "whether NetworkPolicies are rendered for the federation"),
    "flower-syncer.io/fleet-api-from": ("annotation, Federation",
        "who may reach the SuperLink's Fleet API (NetworkPolicy peers)"),
    "flower-syncer.io/control-api-from": ("annotation, Federation",
        "who may reach the SuperLink's Control API (NetworkPolicy peers)"),
    "flower-syncer.io/control-api-address": ("annotation, Federation",
        "where the agent reaches the SuperLink's Control API, when not at its Service"),
    "flower-syncer.io/superlink-tls-secret": ("annotation, Federation",
        "the Secret with the SuperLink's TLS certificate and key"),
    "flower-syncer.io/superlink-issuer": ("annotation, Federation",
        "the cert-manager Issuer that issues the SuperLink's certificate"),
    "flower-syncer.io/superlink-tls-extra-names": ("annotation, Federation",
        "extra DNS names for the SuperLink's certificate"),
    "flower-syncer.io/superlink-external-address": ("annotation, Federation",
        "the address SuperNodes outside the cluster dial"),
    "flower-syncer.io/supernode-auth": ("annotation, Federation", "turns on SuperNode authentication at the SuperLink"),
    "flower-syncer.io/supernode-public-keys": ("annotation, Federation",
        "the SuperNodes' public keys the agent registers with the SuperLink"),
    "flower-syncer.io/node-auth-sha256": ("annotation, rendered workloads",
        "digest of the node-authentication keys, so a change rolls the pods"),
    "flower-syncer.io/sealed-hmac": ("annotation, `-sealed` Secrets",
        "keyed digest of sealed values, so a change rolls the pods without revealing them"),
    "flower-syncer.io/digest-key": ("annotation, agent Secret", "the key of the keyed digests above"),
}
NOT_ANNOTATIONS = re.compile(r"^flower-syncer\.io/v\d")  # apiVersions, not keys

EVENT_REASONS: dict[str, str] = {
    "Synced": "the unit's revision was applied",
    "SyncFailed": "objects of the unit could not be applied",
    "ConfigError": "the unit's configuration has errors; its last good state stays applied",
    "Conflict": "another server-side applier owns fields of an object",
    "DriftCorrected": "an outside change to a managed field was put back",
    "Pruned": "an object left Git and was deleted",
    "Suspended": "the unit is no longer applied or healed",
    "Resumed": "the unit is applied and healed again",
    "RunFailed": "a run of the federation failed at its SuperLink",
    "SuperNodesLost": "SuperNodes that were connected to the SuperLink are gone",
    "SuperNodesConnected": "every expected SuperNode is connected again",
    "SuperNodesNotConnected": "SuperNodes run but their SuperLink does not list them online",
    "InternalError": "the agent failed on the unit (a bug); it syncs the unit again",
    "RolloutHeld": "a change that restarts pods waits for the federation's runs to end (docs/rollouts.md)",
    "RolloutResumed": "a held change goes ahead: the runs ended, the deadline passed, or a person released it",
    "CanaryStarted": "a change of a canary pool's pod template went to its canary first (docs/rollouts.md)",
    "CanaryPassed": "a pool's canary stayed healthy for its gate time: the rest of the pool rolls",
    "CanaryFailed": "a pool's canary did not become healthy: the rest of the pool stays on its revision",
    "RestartNotHeld": "a change restarts pods although runs may be in progress: the SuperLink could not be asked",
    "SuperNodeKeysForgotten": "the SuperLink no longer knows SuperNode keys listed in Git: they are registered again",
    "Unverified": "the newest revision is not signed by a key the admin's policy lists; nothing of it is applied",
}


# -- models ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Row:
    path: str
    type: str
    default: str
    meaning: str


@functools.cache
def _docstrings(cls: type) -> dict[str, str]:
    """Attribute docstrings: the string literal right under a field's annotated assignment."""
    out: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        try:
            source = textwrap.dedent(inspect.getsource(klass))
        except (OSError, TypeError):
            continue
        body = ast.parse(source).body
        if not body or not isinstance(body[0], ast.ClassDef):
            continue
        stmts = body[0].body
        for here, after in itertools.pairwise(stmts):
            if (isinstance(here, ast.AnnAssign) and isinstance(here.target, ast.Name)
                    and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                    and isinstance(after.value.value, str)):
                out[here.target.id] = " ".join(after.value.value.split())
    return out


def _type_name(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        base, *meta = args
        return _k8s_type(meta) or _type_name(base) + _bounds(meta, base)
    if origin is typing.Literal:
        if len(args) == 1 and isinstance(args[0], str):
            return "string"
        return "one of " + ", ".join(f"`{_yaml_scalar(a)}`" for a in args)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        names = [f"`{_yaml_scalar(a.__args__[0])}`" if typing.get_origin(a) is typing.Literal and len(a.__args__) == 1
                 else _type_name(a) for a in args if a is not type(None)]
        return " or ".join(names) + (" (optional)" if type(None) in args else "")
    if origin in (list, tuple, set, frozenset):
        return f"list of {_type_name(args[0])}" if args else "list"
    if origin is dict:
        return f"map of {_type_name(args[0])} to {_type_name(args[1])}" if args else "map"
    if isinstance(annotation, type):
        if hasattr(annotation, "model_fields"):
            return "object"
        if issubclass(annotation, enum.Enum):
            return "one of " + ", ".join(f"`{m.value}`" for m in annotation)
        return {"str": "string", "int": "integer", "float": "number", "bool": "boolean", "dict": "map",
                "list": "list", "Path": "path", "Any": "any"}.get(annotation.__name__, annotation.__name__)
    return "any" if annotation is Any else str(annotation).replace("typing.", "")


_MACHINE_LIMITS = (2**31 - 1, 2**63 - 1)  # int32/int64 bounds: the API's, not worth a reader's attention


def _bounds(metadata: list[Any], base: Any) -> str:
    """`, 1 to 65535`, `, at most 16 items`: the limits of Field(ge=, le=, min_length=, max_length=)."""
    marks: list[Any] = []
    for mark in metadata:
        marks.extend(getattr(mark, "metadata", None) or [mark])  # a FieldInfo carries its marks in .metadata
    found = {name: getattr(mark, name) for mark in marks
             for name in ("ge", "gt", "le", "lt", "min_length", "max_length") if hasattr(mark, name)}
    low = found.get("ge", found["gt"] + 1 if "gt" in found else None)
    high = found.get("le", found["lt"] - 1 if "lt" in found else None)
    if high in _MACHINE_LIMITS:
        high = None
    unit = ""
    if low is None and high is None:
        low, high = found.get("min_length"), found.get("max_length")
        unit = " characters" if base is str else " items"
        if low == 1 and high is None:
            return ", not empty"
    if low is not None and high is not None:
        return f", {low} to {high}{unit}"
    if low is not None:
        return f", at least {low}{unit}"
    return f", at most {high}{unit}" if high is not None else ""


def _yaml_scalar(value: Any) -> str:
    """How a default or an allowed value is written in YAML: quoted only where YAML would read something
    else (`""`, `"on"`, `"1.0"`); lists and maps in flow style."""
    import json

    import yaml

    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        try:
            plain = yaml.safe_load(value) == value and value.strip() == value and "#" not in value
        except yaml.YAMLError:
            plain = False
        return value if plain and value else json.dumps(value)
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))  # seconds: `60`, as one writes it
    return str(value)


def _k8s_type(metadata: list[Any]) -> str:
    """A field marked with syncer.models.k8s.K8sType holds a Kubernetes type, checked strictly."""
    from syncer.models.k8s import K8sType

    for mark in metadata:
        if isinstance(mark, K8sType):
            name = mark.name.removeprefix("api.")
            return (f"list of Kubernetes `{name}`" if mark.list_of else f"map of string to Kubernetes `{name}`"
                    if mark.map_of else f"Kubernetes `{name}`")
    return ""


def _default(info: Any) -> str:
    from pydantic import BaseModel
    from pydantic_core import PydanticUndefined

    if info.is_required():
        return "required"
    if info.default_factory is not None:
        return "computed"
    value = info.default
    if value is PydanticUndefined or value is None:
        return "unset"
    if isinstance(value, BaseModel):
        return "see below"
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, (list, dict, tuple)) and not value:
        return "empty"
    return f"`{_yaml_scalar(value)}`"


def _models_in(annotation: Any) -> Iterator[type]:
    from pydantic import BaseModel

    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
    for arg in typing.get_args(annotation):
        yield from _models_in(arg)


def model_rows(root: type, prefix: str = "", seen: frozenset[type] = frozenset()) -> list[Row]:
    """Every field under `root`, depth first, by YAML name (`a.b[].c`)."""
    rows: list[Row] = []
    docs = _docstrings(root)
    for name, info in root.model_fields.items():  # type: ignore[attr-defined]
        key = info.alias or name
        path = f"{prefix}{key}"
        meaning = info.description or docs.get(name, "")
        if not meaning and key in ("apiVersion", "kind") and typing.get_origin(info.annotation) is typing.Literal:
            meaning = "always " + " or ".join(f"`{v}`" for v in typing.get_args(info.annotation))
        kind = _k8s_type(info.metadata) or _type_name(info.annotation)
        bounds = _bounds(info.metadata, info.annotation)
        if bounds:
            base, optional, _ = kind.partition(" (optional)")
            kind = base + bounds + optional
        rows.append(Row(path, kind, _default(info), meaning))
        for sub in _models_in(info.annotation):
            if sub in seen or sub is root:
                continue
            listy = typing.get_origin(info.annotation) in (list, tuple) or "list of" in _type_name(info.annotation)
            rows.extend(model_rows(sub, f"{path}{'[]' if listy else ''}.", seen | {root}))
    return rows


def _models() -> list[tuple[str, str, type]]:
    from syncer.agent.config import AgentConfig
    from syncer.models.federation import Federation
    from syncer.models.policy import AdminPolicy
    from syncer.models.settings import ReleaseSettings, RepoSettings
    from syncer.models.supernode.values import SuperNodeValues

    return [
        ("Federation", "`federations/*.yaml`: the flower-operator's Federation document", Federation),
        ("SuperNode values", "`supernodes/<release>/values.yaml`: the SuperNode chart's values", SuperNodeValues),
        ("release.yaml", "`supernodes/<release>/release.yaml`: namespace and sync policy of a release",
         ReleaseSettings),
        ("flower-syncer.yaml", "`flower-syncer.yaml`: repository-wide settings", RepoSettings),
        ("Policy", "the admin's policy (`flower-syncer run --policy FILE`, the chart's `policy`)", AdminPolicy),
        ("Agent settings", "`flower-syncer run` options, its `--config` file and `FLOWER_SYNCER_*` variables",
         AgentConfig),
    ]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def config_page() -> tuple[str, list[str]]:
    lines = ["# Configuration reference", "", _GENERATED, "",
             "Every field flower-syncer reads, by file. A path `a.b[].c` is field `c` of each item of list `b` of",
             "`a`. Unknown fields are errors (with a did-you-mean), and values are not coerced (`\"2\"` is not a",
             "number). Narrative docs: [the config repository](../config-repo.md), [the policy](../policy.md).", ""]
    missing: list[str] = []
    for title, what, model in _models():
        lines += [f"## {title}", "", what + ".", "",
                  "| field | type | default | meaning |", "| --- | --- | --- | --- |"]
        for row in model_rows(model):
            if not row.meaning:
                missing.append(f"{title}: {row.path}")
            lines.append(f"| `{row.path}` | {_cell(row.type)} | {_cell(row.default)} | {_cell(row.meaning)} |")
        lines.append("")
    return "\n".join(lines), missing


# -- annotations ---------------------------------------------------------------------------------------

@functools.cache
def _syncer_nodes() -> tuple[ast.AST, ...]:
    """Every node of every module of syncer/, parsed once."""
    return tuple(node for path in sorted((REPO / "syncer").rglob("*.py"))
                 for node in ast.walk(ast.parse(path.read_text(), str(path))))


def annotations_in_code() -> set[str]:
    keys: set[str] = set()
    for node in _syncer_nodes():
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            key = node.value.strip()
            if re.fullmatch(r"flower-syncer\.io/[A-Za-z0-9._-]+", key) and not NOT_ANNOTATIONS.match(key):
                keys.add(key)
    return keys


def annotations_page() -> tuple[str, list[str]]:
    found = annotations_in_code()
    missing = sorted(f"annotation {k}" for k in found - set(ANNOTATIONS))
    stale = sorted(f"annotation {k} is documented but no code names it" for k in set(ANNOTATIONS) - found)
    lines = ["# Annotations and labels", "", _GENERATED, "",
             "Every `flower-syncer.io/` annotation and label flower-syncer reads or writes. The ones on a",
             "Federation are flower-syncer's extensions to the flower-operator's format: the operator ignores",
             "them, so a document stays valid for both.", "",
             "| key | where | meaning |", "| --- | --- | --- |"]
    for key in sorted(found & set(ANNOTATIONS)):
        where, meaning = ANNOTATIONS[key]
        lines.append(f"| `{key}` | {where} | {_cell(meaning)} |")
    lines += ["", "The standard labels `app.kubernetes.io/managed-by: flower-syncer`, `app.kubernetes.io/name`,",
              "`app.kubernetes.io/instance` and `app.kubernetes.io/component` are on every object too.", ""]
    return "\n".join(lines), missing + stale


# -- CLI -----------------------------------------------------------------------------------------------

def _subparsers(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser, str]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            for name, sub in action.choices.items():
                complete = getattr(sub, "complete", None)
                yield name, (complete() if complete else sub), helps.get(name, "")


def cli_page() -> tuple[str, list[str]]:
    from syncer.cli import build_parser

    parser = build_parser()
    lines = ["# CLI reference", "", _GENERATED, "", "`flower-syncer COMMAND [options]`. " + _cell(parser.epilog or ""),
             "Narrative: [the CLI guide](../cli.md).", ""]
    missing: list[str] = []
    for name, sub, summary in _subparsers(parser):
        lines += [f"## `{name}`", "", _cell(sub.description or summary), "", "| option | default | meaning |",
                  "| --- | --- | --- |"]
        for action in sub._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            flags = ", ".join(f"`{o}`" for o in action.option_strings) or f"`{action.metavar or action.dest}`"
            default = action.default
            unset = default in (None, False, [], argparse.SUPPRESS)  # [] is a repeatable option given no value
            shown = "" if unset or isinstance(action, argparse._StoreTrueAction) else f"`{default}`"
            if action.choices and not isinstance(action, argparse._SubParsersAction):
                shown = (shown + " " if shown else "") + "(" + ", ".join(str(c) for c in action.choices) + ")"
            meaning = (action.help or "") if action.help != argparse.SUPPRESS else ""
            if not meaning:
                missing.append(f"cli {name} {flags}")
            if "%(" in meaning:
                meaning = meaning % vars(action)
            lines.append(f"| {flags} | {_cell(shown)} | {_cell(meaning)} |")
        lines.append("")
    return "\n".join(lines), missing


# -- metrics -------------------------------------------------------------------------------------------

def served_metrics() -> Any:
    """A fresh `Metrics` with every collector the agent's runner registers besides (syncer/agent/runner.py):
    what `GET /metrics` serves."""
    from syncer.observe.gc_pauses import GCPauses
    from syncer.observe.metrics import Metrics
    from syncer.observe.notify import Notifier

    metrics = Metrics()
    metrics.registry.register(GCPauses())
    metrics.registry.register(Notifier([]))
    return metrics


def metric_families() -> list[tuple[str, str, list[str], str]]:
    from syncer.observe.families import FamilyCollector

    out: dict[str, tuple[str, str, list[str], str]] = {}
    for collector in served_metrics().registry.in_order():
        if isinstance(collector, FamilyCollector):  # families described in syncer.observe.families
            for family in collector.families:
                out[family.served_name] = (family.served_name, family.type, list(family.labels), family.help)
            continue
        # a prometheus_client metric: its own name, type and labels
        kind = getattr(collector, "_type", "")
        name = getattr(collector, "_name", "")
        full = name + ("_total" if kind == "counter" and not name.endswith("_total") else "")
        out[full] = (full, kind, list(getattr(collector, "_labelnames", ())), getattr(collector, "_documentation", ""))
    return sorted(out.values())


def metrics_page() -> tuple[str, list[str]]:
    lines = ["# Metrics reference", "", _GENERATED, "",
             "Every metric family the agent serves at `GET /metrics`. What the labels hold and how to use the",
             "metrics: [Metrics](../metrics.md).", "",
             "| metric | type | labels | meaning |", "| --- | --- | --- | --- |"]
    missing: list[str] = []
    for name, kind, labels, help_text in metric_families():
        if not help_text:
            missing.append(f"metric {name}")
        lines.append(f"| `{name}` | {kind} | {', '.join(labels) or '—'} | {_cell(help_text)} |")
    return "\n".join(lines) + "\n", missing


# -- events and conditions ----------------------------------------------------------------------------

def event_reasons_in_code() -> set[str]:
    reasons: set[str] = set()
    for node in _syncer_nodes():
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Event"
                and len(node.args) >= 3 and isinstance(node.args[2], ast.Constant)
                and isinstance(node.args[2].value, str)):
            reasons.add(node.args[2].value)
    return reasons


def _enum_comments(cls: type) -> dict[str, str]:
    out: dict[str, str] = {}
    source = inspect.getsource(cls)
    for line in source.splitlines():
        m = re.match(r"\s*([A-Z_]+) = \"([^\"]+)\"\s*#\s*(.*)", line)
        if m:
            out[m.group(2)] = m.group(3)
    return out


def events_page() -> tuple[str, list[str]]:
    from syncer.observe.conditions import HealthReason, SyncedReason

    lines = ["# Conditions and Events", "", _GENERATED, "",
             "Every unit has two conditions, on its `FlowerUnit`, in `status -o json` and `/api/v1/status`:",
             "`Synced` and `Healthy`. Their `reason` is always one of the values below.", ""]
    missing: list[str] = []
    for title, cls in (("Synced", SyncedReason), ("Healthy", HealthReason)):
        notes = _enum_comments(cls)
        lines += [f"## `{title}` reasons", "", "| reason | meaning |", "| --- | --- |"]
        for member in cls:
            if not notes.get(member.value):
                missing.append(f"condition reason {member.value}")
            lines.append(f"| `{member.value}` | {_cell(notes.get(member.value, ''))} |")
        lines.append("")
    found = event_reasons_in_code()
    missing += sorted(f"event reason {r}" for r in found - set(EVENT_REASONS))
    missing += sorted(f"event reason {r} is documented but never posted" for r in set(EVENT_REASONS) - found)
    lines += ["## Event reasons", "", "Events (`events.k8s.io/v1`) regard the unit's inventory ConfigMap",
              "(`kubectl events -n NS --for configmap/flower-syncer.<kind>.<name>`) or the object concerned.", "",
              "| reason | meaning |", "| --- | --- |"]
    lines += [f"| `{r}` | {_cell(EVENT_REASONS.get(r, ''))} |" for r in sorted(found)]
    return "\n".join(lines) + "\n", missing


_GENERATED = "<!-- Generated by tools/gen_reference.py from the code; do not edit by hand. -->"
PAGES = {"config.md": config_page, "annotations.md": annotations_page, "cli.md": cli_page,
         "metrics.md": metrics_page, "events.md": events_page}


def generate() -> tuple[dict[str, str], list[str]]:
    pages: dict[str, str] = {}
    missing: list[str] = []
    for name, page in PAGES.items():
        text, gaps = page()
        pages[name] = text.rstrip("\n") + "\n"
        missing += gaps
    index = ["# Reference", "", _GENERATED, "", "Generated from the code; a test fails when they differ.", "",
             "- [Configuration](config.md): every field of a Federation, SuperNode values, release.yaml,",
             "  flower-syncer.yaml, the admin's Policy and the agent's settings",
             "- [Annotations and labels](annotations.md)", "- [CLI](cli.md): every command and flag",
             "- [Metrics](metrics.md): every metric family", "- [Conditions and Events](events.md)", ""]
    pages["README.md"] = "\n".join(index)
    return pages, missing


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="compare with docs/reference/ instead of writing")
    args = parser.parse_args(argv)
    pages, missing = generate()
    if args.check:
        stale = [n for n, text in pages.items() if not (OUT / n).is_file() or (OUT / n).read_text() != text]
        extra = sorted(p.name for p in OUT.glob("*.md") if p.name not in pages) if OUT.is_dir() else []
        for name in stale:
            print(f"docs/reference/{name} differs from the code: run python3 tools/gen_reference.py")
        for name in extra:
            print(f"docs/reference/{name} is not generated: remove it")
        for gap in missing:
            print(f"undocumented: {gap}")
        return 1 if stale or extra or missing else 0
    OUT.mkdir(parents=True, exist_ok=True)
    for name, text in pages.items():
        (OUT / name).write_text(text)
    for gap in missing:
        print(f"undocumented: {gap}")
    print(f"wrote {len(pages)} pages to {OUT.relative_to(REPO)}; {len(missing)} undocumented")
    return 0


if __name__ == "__main__":
    sys.exit(main())
