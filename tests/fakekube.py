"""An in-memory Kubernetes API server behind the real `Kube` client, for fast tests of sync logic.

`FakeKube` subclasses `Kube` and replaces only `_send` (the one HTTP request), so every verb,
the request counts, error parsing, list paging and any check `Kube` makes before a write run as
in production. Behind it, `FakeApiServer` keeps objects and follows the parts of the API that the
engine's decisions depend on:

- server-side apply (`application/apply-patch+yaml`): create (201) or merge (200), field ownership
  per manager in `managedFields` (FieldsV1; lists are atomic), conflicts (409 with causes naming
  the manager) when a field another manager owns would change, `force`, `dryRun`; a no-op apply
  changes nothing (same resourceVersion);
- imperative updates (merge patch) by a named field manager, which take the fields they change;
- create (409 AlreadyExists), delete with a uid precondition (409), 404s with `details.kind`;
- writes into a namespace that does not exist fail with 404 `namespaces "x" not found`;
- immutable `spec.selector` of workloads (422 "field is immutable") and `spec.volumeClaimTemplates`
  of StatefulSets (422 "updates to statefulset spec for fields other than ...");
- LIST with equality label selectors, metadata-only lists, resourceVersion;
- 429 Too Many Requests with a Retry-After header, for the next requests listed in `throttle`;
- kinds listed in `absent` answer a bare 404, as for a CustomResourceDefinition not installed.

It is not a full API server (no defaulting, no admission, no watch); integration tests on the
local control plane prove the real thing.
"""

from __future__ import annotations

import copy
import itertools
import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from syncer.cluster.client import RESOURCES, Kube
from syncer.engine.canary import DS_GENERATION

_PLURALS = {(r.api_version, r.plural): kind for kind, r in RESOURCES.items()}
_IMMUTABLE_SELECTOR_KINDS = ("Deployment", "StatefulSet", "DaemonSet")
_SERVER_META = ("managedFields", "resourceVersion", "uid", "creationTimestamp", "generation")


@dataclass
class _Response:
    status: int
    body: bytes
    reason: str = ""
    headers: dict[str, str] = field(default_factory=dict)

    def read(self) -> bytes:
        return self.body

    def getheader(self, name: str, default: str | None = None) -> str | None:
        return self.headers.get(name, default)


def _status(code: int, reason: str, message: str, details: Mapping[str, Any] | None = None) -> _Response:
    payload = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "reason": reason,
               "message": message, "details": dict(details or {})}
    return _Response(code, json.dumps(payload).encode(), reason)


def fields_of(obj: Any) -> dict[str, Any]:
    """FieldsV1 of an object as applied: every map key a `f:` entry, lists and scalars leaves."""
    out: dict[str, Any] = {}
    for key, raw in obj.items():
        if key in ("apiVersion", "kind"):
            continue
        value = raw
        if key == "metadata":
            value = {k: v for k, v in raw.items() if k not in ("name", "namespace", *_SERVER_META)}
            if not value:
                continue
        out[f"f:{key}"] = fields_of(value) if isinstance(value, dict) and value else {}
    return out


def _leaves(fields: Mapping[str, Any], prefix: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    paths: set[tuple[str, ...]] = set()
    for key, sub in fields.items():
        path = (*prefix, key[2:])
        if sub:
            paths |= _leaves(sub, path)
        else:
            paths.add(path)
    return paths


def _from_leaves(paths: set[tuple[str, ...]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for path in sorted(paths):
        node = out
        for key in path:
            node = node.setdefault(f"f:{key}", {})
    return out


_MISSING = object()


def _get(obj: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(obj, dict) or key not in obj:
            return _MISSING
        obj = obj[key]
    return obj


def _delete(obj: dict[str, Any], path: tuple[str, ...]) -> None:
    node: Any = obj
    for key in path[:-1]:
        node = node.get(key) if isinstance(node, dict) else None
        if node is None:
            return
    if isinstance(node, dict):
        node.pop(path[-1], None)


def _merge(base: dict[str, Any], patch: Mapping[str, Any]) -> None:
    for key, value in patch.items():
        if value is None:
            base.pop(key, None)
        elif isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = copy.deepcopy(value)


def _matches(labels: Mapping[str, str], selector: str) -> bool:
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            k, v = term.split("!=", 1)
            if labels.get(k) == v:
                return False
        elif "=" in term:
            k, v = term.split("=", 1)
            if labels.get(k) != v.lstrip("="):
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


@dataclass
class FakeApiServer:
    objects: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)
    namespaces_required: bool = True
    throttle: list[str | None] = field(default_factory=list)
    """Retry-After values (None: no header) of the next requests to turn away with 429, in order."""
    absent: set[str] = field(default_factory=set)
    """Kinds whose CustomResourceDefinition is not installed: every request is a bare 404."""
    _rv: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _uid: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # -- direct access for tests ------------------------------------------------------------------

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        obj = self.objects.get((kind, namespace, name))
        return copy.deepcopy(obj) if obj is not None else None

    def add_namespace(self, name: str) -> None:
        self._store("Namespace", "", name, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
                    [])

    def edit(self, kind: str, namespace: str, name: str, patch: Mapping[str, Any], *, manager: str) -> None:
        """An imperative update (like `kubectl edit`, `kubectl scale`) by `manager`."""
        resp = self._update(kind, namespace, name, dict(patch), manager)
        assert resp.status == 200, resp.body

    # -- HTTP ---------------------------------------------------------------------------------------

    def handle(self, method: str, url: str, headers: Mapping[str, str], body: Any) -> _Response:
        parts = urlsplit(url)
        query = dict(parse_qsl(parts.query))
        segments = [unquote(s) for s in parts.path.strip("/").split("/")]
        api_version = segments[1] if segments[0] == "api" else f"{segments[1]}/{segments[2]}"
        segments = segments[2:] if segments[0] == "api" else segments[3:]  # drop /api/v1 or /apis/g/v
        namespace = ""
        if segments[0] == "namespaces" and len(segments) > 2:
            namespace, segments = segments[1], segments[2:]
        kind = _PLURALS[(api_version, segments[0])]
        name = segments[1] if len(segments) > 1 else ""
        if kind in self.absent:  # what the API server answers for a group/version it does not serve
            return _Response(404, b"404 page not found\n", "Not Found")
        with self._lock:
            if self.throttle:
                retry_after = self.throttle.pop(0)
                resp = _status(429, "TooManyRequests", "Too many requests, please try again later.")
                resp.headers = {"Retry-After": retry_after} if retry_after is not None else {}
                return resp
            if method == "GET" and name:
                obj = self.objects.get((kind, namespace, name))
                if obj is None:
                    return _status(404, "NotFound", f'{segments[0]} "{name}" not found',
                                   {"name": name, "kind": segments[0]})
                return _Response(200, json.dumps(obj).encode())
            if method == "GET":
                return self._list(kind, namespace, query, headers.get("Accept", ""))
            if method == "DELETE":
                return self._remove(kind, namespace, name, body or {}, query)
            if method == "POST":
                return self._create(kind, namespace, body, query)
            if method == "PATCH" and headers.get("Content-Type") == "application/apply-patch+yaml":
                return self._apply(kind, namespace, name, body, query)
            if method == "PATCH":
                return self._update(kind, namespace, name, body, query.get("fieldManager", "unknown"),
                                    dry_run="dryRun" in query)
        return _status(405, "MethodNotAllowed", f"{method} not supported by the fake")

    # -- verbs ---------------------------------------------------------------------------------------

    def _missing_namespace(self, kind: str, namespace: str) -> _Response | None:
        if (self.namespaces_required and RESOURCES[kind].namespaced
                and ("Namespace", "", namespace) not in self.objects):
            return _status(404, "NotFound", f'namespaces "{namespace}" not found',
                           {"name": namespace, "kind": "namespaces"})
        return None

    def _list(self, kind: str, namespace: str, query: Mapping[str, str], accept: str) -> _Response:
        selector = query.get("labelSelector", "")
        items = [o for (k, ns, _), o in sorted(self.objects.items())
                 if k == kind and (not namespace or ns == namespace)
                 and _matches(o["metadata"].get("labels") or {}, selector)]
        if "PartialObjectMetadata" in accept:
            items = [{"metadata": o["metadata"]} for o in items]
        rv = str(next(self._rv))
        return _Response(200, json.dumps({"items": items, "metadata": {"resourceVersion": rv}}).encode())

    def _create(self, kind: str, namespace: str, body: dict[str, Any], query: Mapping[str, str]) -> _Response:
        name = body["metadata"]["name"]
        if (kind, namespace, name) in self.objects:
            return _status(409, "AlreadyExists", f'{kind.lower()}s "{name}" already exists')
        missing = self._missing_namespace(kind, namespace)
        if missing:
            return missing
        manager = query.get("fieldManager", "unknown")
        entries = [{"manager": manager, "operation": "Update", "fieldsType": "FieldsV1", "fieldsV1": fields_of(body)}]
        obj = self._stored(kind, namespace, name, body, entries, None)
        if "dryRun" not in query:
            self.objects[(kind, namespace, name)] = obj
        return _Response(201, json.dumps(obj).encode())

    def _remove(self, kind: str, namespace: str, name: str, body: Mapping[str, Any],
                query: Mapping[str, str]) -> _Response:
        obj = self.objects.get((kind, namespace, name))
        if obj is None:
            return _status(404, "NotFound", f'{kind.lower()}s "{name}" not found', {"name": name})
        uid = (body.get("preconditions") or {}).get("uid")
        if uid and uid != obj["metadata"]["uid"]:
            return _status(409, "Conflict", f"Precondition failed: UID in precondition: {uid}, "
                                            f"UID in object meta: {obj['metadata']['uid']}")
        if "dryRun" not in query:
            del self.objects[(kind, namespace, name)]
            if kind == "Namespace":
                for key in [k for k in self.objects if k[1] == name]:
                    del self.objects[key]
        return _Response(200, json.dumps({"kind": "Status", "status": "Success"}).encode())

    def _apply(self, kind: str, namespace: str, name: str, body: Any, query: Mapping[str, str]) -> _Response:
        desired = json.loads(body) if isinstance(body, str | bytes) else copy.deepcopy(body)
        manager = query["fieldManager"]
        force = query.get("force") == "true"
        dry_run = "dryRun" in query
        missing = self._missing_namespace(kind, namespace)
        if missing:
            return missing
        current = self.objects.get((kind, namespace, name))
        wanted = _leaves(fields_of(desired))
        if current is None:
            entries = [{"manager": manager, "operation": "Apply", "fieldsType": "FieldsV1",
                        "fieldsV1": fields_of(desired)}]
            obj = self._stored(kind, namespace, name, desired, entries, None)
            if not dry_run:
                self.objects[(kind, namespace, name)] = obj
            return _Response(201, json.dumps(obj).encode())
        if kind in _IMMUTABLE_SELECTOR_KINDS and "selector" in desired.get("spec", {}) \
                and desired["spec"]["selector"] != current.get("spec", {}).get("selector"):
            return _status(422, "Invalid", f'{kind}.apps "{name}" is invalid: spec.selector: Invalid value: '
                                           f'{json.dumps(desired["spec"]["selector"])}: field is immutable')
        if kind == "StatefulSet" and (desired.get("spec") or {}).get("volumeClaimTemplates") != \
                (current.get("spec") or {}).get("volumeClaimTemplates"):
            return _status(422, "Invalid", f'StatefulSet.apps "{name}" is invalid: spec: Forbidden: updates to '
                                           "statefulset spec for fields other than 'replicas', 'ordinals', "
                                           "'template', 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' "
                                           "and 'minReadySeconds' are forbidden")
        entries = copy.deepcopy(current["metadata"].get("managedFields") or [])
        mine = next((e for e in entries if e["manager"] == manager and e["operation"] == "Apply"), None)
        owned_before = _leaves(mine["fieldsV1"]) if mine else set()
        conflicts = []
        for entry in entries:
            if entry is mine:
                continue
            for path in _leaves(entry["fieldsV1"]) & wanted:
                if _get(current, path) != _get(desired, path):
                    conflicts.append((path, entry["manager"]))
        if conflicts and not force:
            causes = [{"reason": "FieldManagerConflict", "field": "." + ".".join(p),
                       "message": f'conflict with "{m}"'} for p, m in sorted(conflicts)]
            return _status(409, "Conflict", f"Apply failed with {len(causes)} conflicts",
                           {"causes": causes, "name": name})
        taken = {p for p, _ in conflicts}
        others = set()
        for entry in entries:
            if entry is mine:
                continue
            kept = _leaves(entry["fieldsV1"]) - taken
            entry["fieldsV1"] = _from_leaves(kept)
            others |= kept
        result = copy.deepcopy(current)
        for path in owned_before - wanted - others:  # no longer applied by anyone: removed
            _delete(result, path)
        _merge(result, {k: v for k, v in desired.items() if k not in ("apiVersion", "kind")})
        entries = [e for e in entries if e is not mine and e["fieldsV1"]]
        entries.append({"manager": manager, "operation": "Apply", "fieldsType": "FieldsV1",
                        "fieldsV1": fields_of(desired)})
        return self._replace(kind, namespace, name, current, result, entries, dry_run)

    def _update(self, kind: str, namespace: str, name: str, patch: dict[str, Any], manager: str, *,
                dry_run: bool = False) -> _Response:
        current = self.objects.get((kind, namespace, name))
        if current is None:
            return _status(404, "NotFound", f'{kind.lower()}s "{name}" not found', {"name": name})
        result = copy.deepcopy(current)
        _merge(result, patch)
        changed = {p for p in _leaves(fields_of(result)) if _get(result, p) != _get(current, p)}
        entries = copy.deepcopy(current["metadata"].get("managedFields") or [])
        for entry in entries:
            entry["fieldsV1"] = _from_leaves(_leaves(entry["fieldsV1"]) - changed)
        entries = [e for e in entries if e["fieldsV1"]]
        if changed:
            mine = next((e for e in entries if e["manager"] == manager and e["operation"] == "Update"), None)
            if mine is None:
                mine = {"manager": manager, "operation": "Update", "fieldsType": "FieldsV1", "fieldsV1": {}}
                entries.append(mine)
            mine["fieldsV1"] = _from_leaves(_leaves(mine["fieldsV1"]) | changed)
        return self._replace(kind, namespace, name, current, result, entries, dry_run)

    # -- storage ------------------------------------------------------------------------------------

    def _replace(self, kind: str, namespace: str, name: str, current: dict[str, Any], result: dict[str, Any],
                 entries: list[dict[str, Any]], dry_run: bool) -> _Response:
        result["metadata"]["managedFields"] = entries
        if _strip(result) == _strip(current) and entries == current["metadata"].get("managedFields"):
            return _Response(200, json.dumps(current).encode())  # a no-op write changes nothing
        if kind == "DaemonSet" and (result.get("spec") or {}).get("template") != (current.get("spec") or {}).get(
                "template"):  # the API server raises a DaemonSet's template generation (its pods carry it)
            annotations = result["metadata"].setdefault("annotations", {})
            annotations[DS_GENERATION] = str(int(annotations.get(DS_GENERATION, "1")) + 1)
        result["metadata"]["resourceVersion"] = str(next(self._rv))
        if not dry_run:
            self.objects[(kind, namespace, name)] = result
        return _Response(200, json.dumps(result).encode())

    def _stored(self, kind: str, namespace: str, name: str, body: Mapping[str, Any],
                entries: list[dict[str, Any]], uid: str | None) -> dict[str, Any]:
        obj = copy.deepcopy(dict(body))
        obj["kind"] = kind
        obj.setdefault("apiVersion", RESOURCES[kind].api_version)
        meta = obj.setdefault("metadata", {})
        meta.update({"name": name, "uid": uid or f"uid-{next(self._uid)}", "resourceVersion": str(next(self._rv)),
                     "creationTimestamp": "2026-01-01T00:00:00Z", "managedFields": entries})
        if namespace:
            meta["namespace"] = namespace
        if kind == "DaemonSet":
            meta.setdefault("annotations", {})[DS_GENERATION] = "1"
        return obj

    def _store(self, kind: str, namespace: str, name: str, body: Mapping[str, Any],
               entries: list[dict[str, Any]]) -> None:
        self.objects[(kind, namespace, name)] = self._stored(kind, namespace, name, body, entries, None)


def _strip(obj: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(dict(obj))
    for key in _SERVER_META:
        out.get("metadata", {}).pop(key, None)
    return out


class FakeKube(Kube):
    """`Kube` talking to a `FakeApiServer` instead of HTTP."""

    def __init__(self, server: FakeApiServer | None = None) -> None:
        super().__init__(api_client=None)
        self.server = server or FakeApiServer()

    def _send(self, method: str, path: str, params: list[tuple[str, Any]], headers: dict[str, str],
              body: Any, timeout: Any) -> Any:
        query = "&".join(f"{k}={v}" for k, v in params)
        return self.server.handle(method, f"{path}?{query}", headers, body)
