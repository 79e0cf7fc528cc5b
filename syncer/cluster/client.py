"""The only place that talks to the Kubernetes API.

A thin layer over the official client's `ApiClient`: raw JSON requests to the handful of
resources flower-syncer uses, server-side apply, typed errors, and a count of every request by
verb so callers (and tests) can tell how many writes a sync made.
"""

from __future__ import annotations

import copy
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import orjson
import structlog

from syncer.cluster import official
from syncer.cluster.fence import WRITE_METHODS, WriteFence

log = structlog.get_logger("syncer.cluster")

FIELD_MANAGER = "flower-syncer"
METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
METADATA_WATCH = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"
THROTTLE_RETRIES = 10  # as client-go: a request the server turned away with 429 is tried this many more times
THROTTLE_MAX_WAIT = 10.0  # seconds; a longer Retry-After is cut to this


@dataclass(frozen=True)
class Resource:
    api_version: str
    plural: str
    namespaced: bool = True

    def base(self) -> str:
        return f"/api/{self.api_version}" if "/" not in self.api_version else f"/apis/{self.api_version}"


RESOURCES: dict[str, Resource] = {
    "Namespace": Resource("v1", "namespaces", namespaced=False),
    "Node": Resource("v1", "nodes", namespaced=False),
    "Pod": Resource("v1", "pods"),
    "Event": Resource("v1", "events"),
    "events.k8s.io/Event": Resource("events.k8s.io/v1", "events"),  # what flower-syncer reports
    "ServiceAccount": Resource("v1", "serviceaccounts"),
    "Secret": Resource("v1", "secrets"),
    "ConfigMap": Resource("v1", "configmaps"),
    "Service": Resource("v1", "services"),
    "NetworkPolicy": Resource("networking.k8s.io/v1", "networkpolicies"),
    "Deployment": Resource("apps/v1", "deployments"),
    "StatefulSet": Resource("apps/v1", "statefulsets"),
    "DaemonSet": Resource("apps/v1", "daemonsets"),
    "Lease": Resource("coordination.k8s.io/v1", "leases"),
    "Certificate": Resource("cert-manager.io/v1", "certificates"),
    "FlowerUnit": Resource("flower-syncer.io/v1alpha1", "flowerunits"),  # the agent's own view of each unit
}


class ApiError(Exception):
    """A failed API request, with the Status the server sent."""

    def __init__(self, status: int, reason: str, message: str, details: Mapping[str, Any] | None = None) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.details = dict(details or {})

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def unserved(self) -> bool:
        """A 404 for the resource type itself, not for one object: the API server serves no such
        group, version or resource (a CustomResourceDefinition that is not installed). It answers
        those with a bare `404 page not found`, or a Status naming no object; a missing object or
        namespace is a Status that names it (`details.name`, `details.kind`)."""
        return self.status == 404 and not self.details.get("name") and not self.details.get("kind")

    @property
    def conflict(self) -> bool:
        return self.status == 409

    @property
    def forbidden(self) -> bool:
        return self.status == 403

    @property
    def invalid(self) -> bool:
        return self.status == 422


class ClusterUnreachable(Exception):
    """The API server could not be reached at all (network, TLS, credentials file)."""


def path_for(kind: str, namespace: str | None = None, name: str | None = None, subresource: str = "") -> str:
    res = RESOURCES[kind]
    path = res.base()
    if res.namespaced and namespace:
        path += f"/namespaces/{quote(namespace, safe='')}"
    path += f"/{res.plural}"
    if name:
        path += f"/{quote(name, safe='')}"
    if subresource:
        path += f"/{subresource}"
    return path


@dataclass
class _Connection:
    """What every copy of a Kube shares: the API client (replaced when the kubeconfig it came from
    changes on disk: a rotated token, a new API server address) and whether the API server could
    be reached at the last request."""

    api: Any
    kubeconfig: Path | None = None  # None: in-cluster (the official client re-reads rotated tokens itself)
    context: str | None = None
    stamp: tuple[int, int] | None = None  # (mtime_ns, size) of the kubeconfig when it was read
    config_arg: str | None = None  # what the caller named (None: $KUBECONFIG, possibly a list, or the default)
    unreachable: str = ""  # why the last request did not reach the API server; "" when it did
    user_agent: str | None = None  # e.g. one per agent replica, so audit logs tell them apart
    not_before: float = 0.0  # monotonic time before which no request is sent (the server said 429)
    throttled: int = 0  # requests the server turned away with 429 (and that were tried again)


class Kube:
    """Requests against one cluster. Thread-safe; counts requests by verb."""

    def __init__(self, api_client: Any, *, kubeconfig: Path | None = None, context: str | None = None,
                 config_arg: str | None = None, user_agent: str | None = None) -> None:
        self._conn = _Connection(api_client, kubeconfig, context, _stamp(kubeconfig), config_arg,
                                 user_agent=user_agent)
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()
        self.fence: WriteFence | None = None
        self.impersonate: str | None = None  # the user every write is made as (Impersonate-User)

    @property
    def api(self) -> Any:
        return self._conn.api

    @property
    def unreachable(self) -> str:
        """Why the last request did not reach the API server ("" when it did): for /readyz."""
        return self._conn.unreachable

    def reload_if_changed(self) -> bool:
        """Read the kubeconfig again if it changed since it was read (token rotation, a new server
        address); True when the client now uses new credentials."""
        conn = self._conn
        if conn.kubeconfig is None:
            return False
        stamp = _stamp(conn.kubeconfig)
        if stamp is None or stamp == conn.stamp:
            return False
        try:
            api = _api_client(conn.config_arg, conn.context, in_cluster=False, user_agent=conn.user_agent)
        except ClusterUnreachable:
            return False  # half-written, say: keep the old one and try again at the next failure
        with self._lock:
            conn.api, conn.stamp = api, stamp
        log.info("kubeconfig changed on disk; using the new credentials", kubeconfig=str(conn.kubeconfig))
        return True

    def _send_reloading(self, method: str, path: str, params: list[tuple[str, Any]], headers: dict[str, str],
                        body: Any, timeout: Any) -> Any:
        """`_send`, retried once with fresh credentials when the API server cannot be reached or
        answers 401 and the kubeconfig changed meanwhile; records whether it was reached."""
        try:
            resp = self._send(method, path, params, headers, body, timeout)
        except ClusterUnreachable as exc:
            if not self.reload_if_changed():
                self._conn.unreachable = str(exc)
                raise
            try:
                resp = self._send(method, path, params, headers, body, timeout)
            except ClusterUnreachable as again:
                self._conn.unreachable = str(again)
                raise
        else:
            if resp.status == 401 and self.reload_if_changed():
                resp.read()
                resp = self._send(method, path, params, headers, body, timeout)
        self._conn.unreachable = ""
        return resp

    def fenced(self, fence: WriteFence) -> Kube:
        """This client (same connections and counters) with every write checked by `fence` just
        before it is sent; dry-runs and reads pass."""
        clone = copy.copy(self)
        clone.fence = fence
        return clone

    def impersonating(self, user: str | None) -> Kube:
        """This client (same connections, counters and fence) with every write (apply, dry-run,
        create, delete) sent as `user` (`Impersonate-User`, e.g.
        `system:serviceaccount:team-a:flower-syncer-tenant`): the API server then authorizes it
        with that user's RBAC, and the agent's own rights need not include writing. Reads stay
        the agent's own. None: writes as the agent."""
        clone = copy.copy(self)
        clone.impersonate = user
        return clone

    @classmethod
    def from_kubeconfig(cls, kubeconfig: str | None = None, context: str | None = None, *,
                        user_agent: str | None = None) -> Kube:
        """From a kubeconfig file (default: $KUBECONFIG or ~/.kube/config), or in-cluster config when
        neither exists and the process runs in a pod. A kubeconfig file is read again when it
        changes (see `reload_if_changed`)."""
        path = _kubeconfig_path(kubeconfig)
        return cls(_api_client(kubeconfig, context, in_cluster=path is None, user_agent=user_agent), kubeconfig=path,
                   context=context, config_arg=kubeconfig, user_agent=user_agent)

    @property
    def throttled(self) -> int:
        """How many requests the API server turned away with 429 Too Many Requests (API Priority
        and Fairness queues full, or max-requests-inflight reached); each was tried again."""
        return self._conn.throttled

    @property
    def writes(self) -> int:
        return sum(n for verb, n in self.counts.items() if verb in ("POST", "PUT", "PATCH", "DELETE"))

    def _send(self, method: str, path: str, params: list[tuple[str, Any]], headers: dict[str, str],
              body: Any, timeout: Any) -> Any:
        """One HTTP request through the official client (auth, TLS, proxies); the raw response."""
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        api = self.api  # one client for the whole request, even if the credentials change meanwhile
        _, url, all_headers, _, _ = api.param_serialize(
            method, path, query_params=params, header_params=headers, auth_settings=["BearerToken"])
        try:
            if method in WRITE_METHODS:
                fence = None if any(k == "dryRun" for k, _ in params) else self.fence
                return self._send_body(api, fence, method, path, url, all_headers, body, timeout)
            return api.rest_client.request(method, url, headers=all_headers, body=body, _request_timeout=timeout)
        except ApiException as exc:  # raised for transport-level failures (e.g. TLS)
            raise ClusterUnreachable(f"cannot reach the Kubernetes API at {api.configuration.host}: "
                                     f"{exc.reason}") from None
        except (HTTPError, OSError) as exc:
            raise ClusterUnreachable(f"cannot reach the Kubernetes API at {api.configuration.host}: {exc}") \
                from exc

    @staticmethod
    def _send_body(api: Any, fence: WriteFence | None, method: str, path: str, url: str, headers: dict[str, str],
                   body: Any, timeout: Any) -> Any:
        """A write, its body serialised by orjson (the official client's json.dumps was a tenth of
        a cold sync's CPU). With a `fence`, checked at the last moment: the headers and all but
        the last byte of the body are sent first (the API server acts only on a whole request),
        then the fence is checked, then the last byte goes out. Refused there, the connection is
        dropped with the request incomplete, so the server does nothing. (A pause between that
        check and the socket write is the one window no client-side fence closes; this keeps it to
        a few instructions instead of the whole request.)"""
        import urllib3
        from kubernetes.client.rest import RESTResponse

        raw = orjson.dumps(body if body is not None else {})  # an empty object is a valid body of any write
        payload: bytes | Iterator[bytes] = raw
        if fence is not None:
            def body_then_fence() -> Iterator[bytes]:
                yield raw[:-1]
                fence.check(method, path)
                yield raw[-1:]

            fence.check(method, path)  # before the connection is even taken
            payload = body_then_fence()
        resp = api.rest_client.pool_manager.request(
            method, url, body=payload, headers={**headers, "Content-Length": str(len(raw))},
            preload_content=False, timeout=urllib3.Timeout(total=timeout) if timeout else None)
        return RESTResponse(resp)

    def request(self, method: str, path: str, *, body: Any = None, query: Mapping[str, Any] | None = None,
                content_type: str = "application/json", timeout: float = 30) -> Any:
        return self.request_status(method, path, body=body, query=query, content_type=content_type,
                                   timeout=timeout)[0]

    def request_status(self, method: str, path: str, *, body: Any = None, query: Mapping[str, Any] | None = None,
                       content_type: str = "application/json", timeout: float = 30,
                       accept: str = "application/json") -> tuple[Any, int]:
        """Like `request`, also returning the HTTP status (201 tells a create from an update)."""
        params = [(k, v) for k, v in (query or {}).items() if v is not None]
        dry = any(k == "dryRun" for k, _ in params)
        if self.fence is not None and not dry:
            self.fence.check(method, path)
        with self._lock:
            self.counts[method + (" dry-run" if dry else "")] += 1
        headers = {"Accept": accept, "Content-Type": content_type}
        if self.impersonate and method in WRITE_METHODS:
            headers["Impersonate-User"] = self.impersonate
        for attempt in range(THROTTLE_RETRIES + 1):
            self._wait_out_throttling()
            resp = self._send_reloading(method, path, params, headers, body, timeout)
            if resp.status != 429 or attempt == THROTTLE_RETRIES:
                break
            self._throttled_by(resp, method, path)
        raw = resp.read()
        if resp.status >= 400:
            raise _api_error(resp.status, resp.reason, raw)
        return (orjson.loads(raw) if raw else None), resp.status

    def _wait_out_throttling(self) -> None:
        wait = self._conn.not_before - time.monotonic()
        if wait > 0:
            time.sleep(wait)

    def _throttled_by(self, resp: Any, method: str, path: str) -> None:
        """A 429: the server did not act on the request (so even a write is safe to send again).
        Every request through this connection, not only this one, waits the Retry-After it names
        (1 s if none), so a busy server sees the load drop at once instead of a retry storm."""
        resp.read()
        header = resp.getheader("Retry-After")
        try:
            wait = min(max(float(header), 0.0), THROTTLE_MAX_WAIT) if header else 1.0
        except ValueError:  # an HTTP date, say: a second is what client-go falls back to as well
            wait = 1.0
        now = time.monotonic()
        with self._lock:
            self._conn.throttled += 1
            first = self._conn.not_before <= now  # the others of a burst are not logged again
            self._conn.not_before = max(self._conn.not_before, now + wait)
        if first:
            log.info("API server is throttling requests; waiting", method=method, path=path, seconds=wait)

    # -- verbs ---------------------------------------------------------------------------------

    def get(self, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        try:
            obj: dict[str, Any] = self.request("GET", path_for(kind, namespace, name))
        except ApiError as exc:
            if exc.not_found:
                return None
            raise
        return obj

    def list(self, kind: str, namespace: str | None = None, *, labels: str | None = None,
             fields: str | None = None, metadata_only: bool = False,
             each: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
             page_size: int = 5000) -> tuple[list[dict[str, Any]], str]:
        """All items (following `continue`), and the list's resourceVersion. `metadata_only` asks
        the server for metadata alone (much smaller): items then have only kind, apiVersion and
        metadata. `each` turns every item into what the caller keeps as its page arrives (with a
        small `page_size`, only one page of whole objects is ever held)."""
        items: list[dict[str, Any]] = []
        token: str | None = None
        accept = METADATA_LIST if metadata_only else "application/json"
        while True:
            page, _ = self.request_status("GET", path_for(kind, namespace), accept=accept, query={
                "labelSelector": labels, "fieldSelector": fields, "limit": page_size, "continue": token})
            page_items = page.get("items") or []  # a metadata list says null when empty
            for item in page_items:
                item["kind"] = kind
                item["apiVersion"] = RESOURCES[kind].api_version
            items.extend(map(each, page_items) if each is not None else page_items)
            token = page.get("metadata", {}).get("continue")
            if not token:
                return items, page.get("metadata", {}).get("resourceVersion", "")

    def apply(self, manifest: Mapping[str, Any], *, force: bool = False, dry_run: bool = False,
              manager: str = FIELD_MANAGER) -> dict[str, Any]:
        """Server-side apply. Raises ApiError 409 on a conflict with another field manager."""
        return self.apply_status(manifest, force=force, dry_run=dry_run, manager=manager)[0]

    def apply_status(self, manifest: Mapping[str, Any], *, force: bool = False, dry_run: bool = False,
                     manager: str = FIELD_MANAGER) -> tuple[dict[str, Any], bool]:
        """Server-side apply; also says whether the object was created (HTTP 201)."""
        meta = manifest["metadata"]
        path = path_for(manifest["kind"], meta.get("namespace"), meta["name"])
        # fieldValidation=Ignore: the API server would otherwise decode the body a second time,
        # strictly, to warn of unknown or duplicate fields (a measurable part of its CPU per
        # apply); our manifests are rendered from typed models, and its warnings were
        # never read
        result, status = self.request_status(
            "PATCH", path, body=manifest, content_type="application/apply-patch+yaml",
            query={"fieldManager": manager, "force": "true" if force else None,
                   "dryRun": "All" if dry_run else None, "fieldValidation": "Ignore"})
        return result, status == 201

    def create(self, manifest: Mapping[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
        meta = manifest["metadata"]
        result: dict[str, Any] = self.request(
            "POST", path_for(manifest["kind"], meta.get("namespace")), body=manifest,
            query={"fieldManager": FIELD_MANAGER, "dryRun": "All" if dry_run else None})
        return result

    def delete(self, kind: str, namespace: str | None, name: str, *, propagation: str = "Background",
               dry_run: bool = False, uid: str | None = None) -> bool:
        """Delete; False if it was already gone. `uid` guards against deleting a newer object."""
        body: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": propagation}
        if uid:
            body["preconditions"] = {"uid": uid}
        if dry_run:
            body["dryRun"] = ["All"]
        try:
            self.request("DELETE", path_for(kind, namespace, name), body=body,
                         query={"dryRun": "All" if dry_run else None})
        except ApiError as exc:
            if exc.not_found:
                return False
            raise
        return True

    def watch(self, kind: str, namespace: str | None, *, labels: str | None = None, fields: str | None = None,
              resource_version: str = "", timeout_seconds: int = 300,
              metadata_only: bool = False) -> Iterator[dict[str, Any]]:
        """Watch events (dicts with `type` and `object`), until the server closes the stream.
        With `metadata_only`, objects carry only kind, apiVersion and metadata."""
        query: list[tuple[str, Any]] = [("watch", "true"), ("allowWatchBookmarks", "true"),
                                        ("timeoutSeconds", str(timeout_seconds))]
        if labels:
            query.append(("labelSelector", labels))
        if fields:
            query.append(("fieldSelector", fields))
        if resource_version:
            query.append(("resourceVersion", resource_version))
        with self._lock:
            self.counts["WATCH"] += 1
        accept = METADATA_WATCH if metadata_only else "application/json"
        resp = self._send_reloading("GET", path_for(kind, namespace), query, {"Accept": accept}, None,
                                    (10, timeout_seconds + 30))
        if resp.status >= 400:
            raise _api_error(resp.status, resp.reason, resp.read())
        raw = resp.response
        from urllib3.exceptions import HTTPError
        try:
            buffer = b""
            for chunk in _stream(raw, HTTPError):
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip():
                        event = orjson.loads(line)
                        obj = event.get("object")
                        if isinstance(obj, dict) and obj.get("kind") == "PartialObjectMetadata":
                            obj["kind"] = kind
                            obj["apiVersion"] = RESOURCES[kind].api_version
                        yield event
        finally:
            raw.release_conn()


def _stream(raw: Any, errors: type[Exception]) -> Iterator[bytes]:
    """The chunks of a response; a connection that breaks mid-stream (the server restarting, a
    proxy cutting it) is `ClusterUnreachable`, which watchers retry, not an error that ends them."""
    try:
        yield from raw.stream(65536, decode_content=True)
    except errors as exc:
        raise ClusterUnreachable(f"the watch stream broke: {exc}") from exc


KUBECONFIG_ENV = "KUBECONFIG"
DEFAULT_KUBECONFIG = "~/.kube/config"


def _kubeconfig_path(kubeconfig: str | None) -> Path | None:
    """The kubeconfig file the official client will read (its first, for a $KUBECONFIG list), or None
    for in-cluster credentials."""
    if kubeconfig:
        return Path(kubeconfig).expanduser()
    env = os.environ.get("KUBECONFIG", "")
    if env:
        return Path(env.split(os.pathsep)[0]).expanduser()
    default = Path("~/.kube/config").expanduser()
    return default if default.exists() else None


def _stamp(path: Path | None) -> tuple[int, int] | None:
    if path is None:
        return None
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


def _api_client(kubeconfig: str | None, context: str | None, *, in_cluster: bool, user_agent: str | None = None) -> Any:
    configuration_class, api_client_class, config = official.load()
    configuration = configuration_class()
    try:
        if in_cluster:
            config.load_incluster_config(client_configuration=configuration)
        else:
            config.load_kube_config(
                config_file=kubeconfig, context=context, client_configuration=configuration)
    except Exception as exc:  # a missing, malformed or incomplete kubeconfig: never a traceback
        detail = " ".join(str(exc).split())
        source = "" if in_cluster else f" from {kubeconfig or os.environ.get(KUBECONFIG_ENV) or DEFAULT_KUBECONFIG}"
        raise ClusterUnreachable(f"cannot load Kubernetes credentials{source}: {detail}") from exc
    configuration.connection_pool_maxsize = 16
    configuration.retries = 0
    api = api_client_class(configuration)
    if user_agent:
        api.user_agent = user_agent
    return api


def _api_error(status: int, reason: str | None, raw: bytes | None) -> ApiError:
    message = reason or ""
    details: dict[str, Any] = {}
    if raw:
        try:
            payload = orjson.loads(raw)
            message = payload.get("message", message)
            reason = payload.get("reason", reason)
            details = payload.get("details") or {}
        except (ValueError, AttributeError):
            message = raw[:500].decode("utf-8", "replace")
    return ApiError(status, reason or "", message, details)
