"""Ask each Federation's SuperLink, every third status round (30 s), which SuperNodes are connected
and how its runs went (the Control API's ListNodes and ListRuns), without ever holding up the round.

A small bounded pool of worker threads (16) does the calls, the SuperLinks that answered last time
first, off the agent's event queue and off the
status loop: a round hands out the checks that are due and reports the last answer of each
SuperLink (with the time it was got). A SuperLink that does not answer is asked again with
backoff (10 s doubling to 5 min), so thousands of federations with no reachable SuperLink cost the
round nothing but a dictionary lookup each. Where it dials: the address and TLS of key
registration (plan.FlowerTarget): the Service DNS name of the federation's SuperLink (or the
`flower-syncer.io/control-api-address` the admin allows), verified against the CA flower-syncer
copies into `<fed>-superlink-ca` (read from the cluster, kept 5 min); plaintext for `insecure`.

`--flower-health off` turns all of this off (e.g. an agent on a laptop, outside the cluster, cannot
resolve Service DNS): then nothing is dialled and the units say so. Left on outside a cluster, a
Service DNS name (`*.svc`, `*.svc.cluster.local`) is not even looked up: the host's resolver cannot
know it (and need not be asked thousands of times), so the answer is `outside-cluster` at once: the
federation's `flower` says so, and its health is not lowered for it (nothing is known to be wrong
with the SuperLink; the agent cannot ask it from here).
"""

from __future__ import annotations

import base64
import os
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime

import structlog

from syncer.cluster.client import ApiError, ClusterUnreachable, Kube
from syncer.cluster.control_transports import connect
from syncer.cluster.flower_control import ControlApi, ControlApiError, ControlErrorCode, Transport
from syncer.identity import Unit
from syncer.observe.flower_health import ControlAnswer
from syncer.plan import FlowerTarget

log = structlog.get_logger("syncer.agent")

WORKERS = 16  # Control API calls in flight at once (a silent SuperLink holds one for TIMEOUT, idle)
TIMEOUT = 3.0  # seconds per call
# seconds between checks of an answering SuperLink: three status rounds. Every round (10 s) at
# 2,000 units made the round's CPU three times what it was (34 -> 106 ms, bench/status_round.py);
# Flower itself takes 30-60 s to call a SuperNode that went away offline (its heartbeat)
INTERVAL = 30.0
BACKOFF = (10.0, 300.0)  # first and longest wait before asking a SuperLink that did not answer again
CA_TTL = 300.0  # seconds a CA read from the cluster is used
LOGGED_SILENT = 20  # SuperLinks whose failure is logged one by one; beyond, one line says there are more
NOT_RESOLVED = ("the agent cannot resolve the SuperLink's host name (an agent outside the cluster cannot "
                "resolve Service DNS: set flower-syncer.io/control-api-address to an address it can reach, "
                "where the admin allows it, or run the agent with --flower-health off)")
DISABLED = "Flower-level health is off (--flower-health off)"
OUTSIDE_CLUSTER = "outside-cluster"  # the answer's code for a Service name this agent cannot resolve
SERVICE_SUFFIXES = (".svc", ".svc.cluster.local")


def in_cluster() -> bool:
    """Whether this process runs in a Kubernetes pod (where Service DNS resolves)."""
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST"))


def service_dns(address: str) -> bool:
    """Whether `address` (host:port) names a Service by its cluster DNS name."""
    host = address.rpartition(":")[0].lower().rstrip(".")
    return host.endswith(SERVICE_SUFFIXES)

Key = tuple[str, str, str, str]  # namespace, address, CA secret, transport
Connect = Callable[..., ControlApi]


def utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class _Link:
    answer: ControlAnswer | None = None
    busy: bool = False
    due: float = 0.0
    failures: int = 0
    logged: str = ""  # the error code last logged (an error is logged once, not every round)


class FlowerProbe:
    """`round(targets)` -> the last ControlAnswer per federation unit (never blocks)."""

    def __init__(self, kube: Kube | None, *, enabled: bool = True, workers: int = WORKERS, timeout: float = TIMEOUT,
                 interval: float = INTERVAL, clock: Callable[[], float] = time.monotonic,
                 connector: Connect = connect, cluster_dns: bool | None = None) -> None:
        self.kube = kube
        self.enabled = enabled
        self.cluster_dns = in_cluster() if cluster_dns is None else cluster_dns  # Service names resolve here
        self.timeout = timeout
        self.interval = interval
        self.clock = clock
        self.connector = connector
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="flower-health") if enabled else None
        self._lock = threading.Lock()
        self._links: dict[Key, _Link] = {}
        self._cas: dict[tuple[str, str], tuple[bytes | None, float]] = {}
        self._unresolved_logged = False  # "not resolved" is said once for the agent, not per SuperLink
        self._silent_logged = 0  # SuperLinks whose failure was logged (at most LOGGED_SILENT, then one line)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def round(self, targets: Mapping[Unit, FlowerTarget], now_ready: frozenset[Unit] = frozenset()
              ) -> dict[Unit, ControlAnswer]:
        """`now_ready`: federations whose pods have just become ready: their SuperLink is asked
        this round, whatever its backoff (a SuperLink refused while it started must not stay
        unknown for minutes once it serves)."""
        if not self.enabled:
            return {u: ControlAnswer(t.address, "", error=DISABLED, code="disabled") for u, t in targets.items()}
        now = self.clock()
        out: dict[Unit, ControlAnswer] = {}
        wanted: set[Key] = set()
        due: list[tuple[int, Key, Transport]] = []
        with self._lock:
            for unit, target in targets.items():
                key = (unit.namespace, target.address, target.ca_secret, target.transport)
                wanted.add(key)
                link = self._links.setdefault(key, _Link())
                if not link.busy and (now >= link.due or unit in now_ready) and self._pool is not None:
                    link.busy = True
                    due.append((link.failures, key, target.transport))
                out[unit] = link.answer or ControlAnswer(target.address, "", error="not checked yet", code="pending")
            for gone in set(self._links) - wanted:  # federations that left Git: forget them
                if not self._links[gone].busy:
                    del self._links[gone]
        # those that answered last time first: SuperLinks that do not answer never hold them up
        for _, link_key, transport in sorted(due, key=lambda d: d[0]):
            if self._pool is not None:
                self._pool.submit(self._check, link_key, transport)
        return out

    # -- the worker's side -----------------------------------------------------------------------

    def _check(self, key: Key, transport: Transport) -> None:
        namespace, address, ca_secret, _ = key
        try:
            answer = self._ask(namespace, address, ca_secret, transport)
        except Exception as exc:  # a bug here must not stop later checks
            answer = ControlAnswer(address, utc_now(), error=f"the check failed ({type(exc).__name__})",
                                   code=ControlErrorCode.SERVER.value)
        now = self.clock()
        with self._lock:
            link = self._links.get(key) or _Link()
            link.busy = False
            link.answer = answer
            if answer.reachable:
                link.failures, link.due = 0, now + self.interval * 0.9
                if link.logged:
                    log.info("SuperLink Control API answers again", address=address, namespace=namespace)
                link.logged = ""
            else:
                link.failures += 1
                link.due = now + min(BACKOFF[0] * 2 ** (link.failures - 1), BACKOFF[1])
                if answer.code in (ControlErrorCode.NOT_RESOLVED.value, OUTSIDE_CLUSTER) and link.logged != answer.code:
                    link.logged = answer.code
                    if not self._unresolved_logged:
                        self._unresolved_logged = True
                        # outside a cluster that is expected (info); inside, a name that does not resolve is not
                        say = log.info if answer.code == OUTSIDE_CLUSTER else log.warning
                        say("SuperLink host names do not resolve here; Flower-level health of their "
                            "federations is unknown (each says so)", example=address, error=answer.error)
                elif link.logged != answer.code:
                    link.logged = answer.code
                    self._silent_logged += 1
                    if self._silent_logged <= LOGGED_SILENT:
                        log.warning("SuperLink Control API does not answer; Flower-level health unknown",
                                    address=address, namespace=namespace, code=answer.code, error=answer.error)
                    if self._silent_logged == LOGGED_SILENT:
                        log.warning(f"more SuperLinks may not answer: only the first {LOGGED_SILENT} are logged; "
                                    "/api/v1/status and flower_syncer_federation_control_api_up have them all")
            self._links[key] = link

    def _ask(self, namespace: str, address: str, ca_secret: str, transport: Transport) -> ControlAnswer:
        if not self.cluster_dns and service_dns(address):
            return ControlAnswer(address, utc_now(), error=NOT_RESOLVED, code=OUTSIDE_CLUSTER)
        ca: bytes | None = None
        if ca_secret:
            ca, problem = self._ca(namespace, ca_secret)
            if ca is None:
                return ControlAnswer(address, utc_now(), error=problem, code=ControlErrorCode.TLS.value)
        try:
            api = self.connector(address, transport, ca, timeout=self.timeout)
        except ControlApiError as exc:
            return ControlAnswer(address, utc_now(), error=exc.detail, code=exc.code.value)
        except (ValueError, OSError) as exc:
            self._forget_ca(namespace, ca_secret)
            return ControlAnswer(address, utc_now(), error=f"the CA in Secret {namespace}/{ca_secret} is not "
                                 f"usable ({type(exc).__name__})", code=ControlErrorCode.TLS.value)
        try:
            nodes = tuple(api.list_nodes())
            runs = tuple(api.list_runs())
        except ControlApiError as exc:
            detail = NOT_RESOLVED if exc.code is ControlErrorCode.NOT_RESOLVED else exc.detail
            if exc.code is ControlErrorCode.TLS:
                self._forget_ca(namespace, ca_secret)  # a rotated CA is read again next time
            if exc.code is ControlErrorCode.DENIED:
                detail += ("; the agent holds no Flower account: a SuperLink with account authentication on its "
                           "Control API cannot be checked (see README, Flower-level health)")
            return ControlAnswer(address, utc_now(), error=detail, code=exc.code.value)
        finally:
            api.close()
        return ControlAnswer(address, utc_now(), nodes, runs)

    def _ca(self, namespace: str, name: str) -> tuple[bytes | None, str]:
        now = self.clock()
        with self._lock:
            cached = self._cas.get((namespace, name))
        if cached is not None and cached[0] is not None and now - cached[1] < CA_TTL:
            return cached[0], ""
        if self.kube is None:
            return None, "no cluster to read the CA from"
        try:
            secret = self.kube.get("Secret", namespace, name)
        except (ApiError, ClusterUnreachable) as exc:
            return None, f"cannot read the CA Secret {namespace}/{name}: {exc}"
        data = ((secret or {}).get("data") or {}).get("ca.crt") or ""
        if not data:
            return None, f"Secret {namespace}/{name} has no ca.crt yet (the federation's first sync writes it)"
        try:
            ca = base64.b64decode(data)
        except ValueError:
            return None, f"Secret {namespace}/{name}: ca.crt is not base64"
        with self._lock:
            self._cas[(namespace, name)] = (ca, now)
        return ca, ""

    def _forget_ca(self, namespace: str, name: str) -> None:
        with self._lock:
            self._cas.pop((namespace, name), None)
