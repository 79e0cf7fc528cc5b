"""Ask each Federation's SuperLink which SuperNodes are connected and how its runs went (the
Control API's ListNodes and ListRuns), at most every 30 s and within a CPU budget, without ever
holding up the status round.

The budget: the checks a round starts may cost, together, as much CPU as the round itself costs
without them (at least MIN_BUDGET). A check costs what its connection costs, several times more
over TLS than in plaintext, almost all of it the TLS handshake (bench/status_round.py measures
it); a SuperLink cannot be kept connected between checks (Flower's uvicorn
closes an idle connection after 5 s). So a small installation has every SuperLink asked every
30 s, and a large one goes round its SuperLinks more slowly instead of costing more: the ones
whose answer is oldest first, a federation whose pods have just become ready at once, whatever
the budget. `waiting` says how many were due and left for a later round.

A small bounded pool of worker threads (16) does the calls, off the agent's event queue and off
the status loop: a round hands out the checks that are due and reports the last answer of each
SuperLink (with the time it was got). A SuperLink that does not answer is asked again with
backoff (10 s doubling to 5 min), so thousands of federations with no reachable SuperLink cost the
round nothing but a dictionary lookup each. SuperLinks are servers tenants run, so no one of them
holds more than its share: a call is bounded whole (syncer.cluster.tenant_calls: one deadline for
connecting, the handshake and every byte, a size limit while reading, a limit of nodes and runs
kept); a SuperLink (its address) has at most ADDRESS_SHARE checks running and a namespace at most a
quarter of the workers (`share`): the chosen checks wait in one queue per namespace, and a free
worker takes the next check of the namespace with the fewest running, so slow SuperLinks of one
tenant hold at most its share while the other namespaces' checks go on; a hostile answer's CPU
counts at most 4 times the usual cost in the budget. Where it dials: the address and TLS of key
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
import math
import os
import threading
import time
from collections import Counter, deque
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
TIMEOUT = 3.0  # seconds per call, all of it (a check is two calls)
ADDRESS_SHARE = 1  # checks in flight per SuperLink address (several federations may name one address)
# seconds between checks of an answering SuperLink, at least: three status rounds. Flower itself
# takes 30-60 s to call a SuperNode that went away offline (its heartbeat)
INTERVAL = 30.0
MIN_BUDGET = 0.020  # CPU seconds a round's checks may cost, however cheap the round: 0.2 % of a core
FIRST_COST = 0.0015  # CPU seconds a check is taken to cost until checks were measured (one over TLS)
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
                 connector: Connect = connect, cluster_dns: bool | None = None, share: int | None = None) -> None:
        self.kube = kube
        self.enabled = enabled
        self.cluster_dns = in_cluster() if cluster_dns is None else cluster_dns  # Service names resolve here
        self.timeout = timeout
        self.interval = interval
        self.clock = clock
        self.connector = connector
        # checks in flight per namespace (queued for a worker included): no tenant holds all the workers
        self.share = share if share is not None else max(1, workers // 4)
        self.workers = workers
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="flower-health") if enabled else None
        self._waiting: dict[str, deque[tuple[Key, Transport]]] = {}  # chosen checks by namespace, for a worker
        self._flight: Counter[str] = Counter()  # checks running by namespace, and by ":" + address
        self._closed = False
        self._lock = threading.Lock()
        self._links: dict[Key, _Link] = {}
        self._cas: dict[tuple[str, str], tuple[bytes | None, float]] = {}
        self._unresolved_logged = False  # "not resolved" is said once for the agent, not per SuperLink
        self._silent_logged = 0  # SuperLinks whose failure was logged (at most LOGGED_SILENT, then one line)
        self.checks = 0  # checks made since the start
        self.cpu = 0.0  # CPU seconds the checks' threads spent, since the start
        self.waiting = 0  # SuperLinks due at the last round and left for a later one (the budget)
        self.cost = FIRST_COST  # CPU seconds per check, a moving average of the checks' own threads
        self._credit = 0.0  # CPU seconds of budget not spent yet (a round's fraction of a check)
        self._chosen: list[tuple[Key, Transport]] = []  # checks chosen by `round`, not started yet
        self._plan: Mapping[Unit, FlowerTarget] | None = None  # the targets of the last round, and
        self._rows: list[tuple[Unit, Key, Transport, _Link]] = []  # their links (made when the plan changes)
        self._then: dict[Key, list[Callable[[], None]]] = {}  # called once the key's check answered (ask_now)

    def close(self) -> None:
        with self._lock:
            self._closed = True
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def round(self, targets: Mapping[Unit, FlowerTarget], now_ready: frozenset[Unit] = frozenset(),
              budget: float | None = None, *, start_now: bool = True) -> dict[Unit, ControlAnswer]:
        """The last answer per federation; starts the checks that are due, as many as `budget`
        (CPU seconds; None: all) pays for at the checks' measured cost, the longest due first.
        `now_ready`: federations whose pods have just become ready: their SuperLink is asked
        this round, whatever its backoff and the budget (a SuperLink refused while it started must
        not stay unknown for minutes once it serves). `start_now=False`: the checks wait for `start`."""
        if not self.enabled:
            return {u: ControlAnswer(t.address, "", error=DISABLED, code="disabled") for u, t in targets.items()}
        now = self.clock()
        out: dict[Unit, ControlAnswer] = {}
        due: dict[Key, tuple[float, Transport]] = {}
        urgent: dict[Key, Transport] = {}
        with self._lock:
            if targets is not self._plan:  # a new plan: its SuperLinks' links, once
                self._plan, self._rows = targets, []
                for unit, target in targets.items():
                    row_key: Key = (unit.namespace, target.address, target.ca_secret, target.transport)
                    self._rows.append((unit, row_key, target.transport, self._links.setdefault(row_key, _Link())))
                for gone in set(self._links) - {row[1] for row in self._rows}:  # federations that left Git
                    if not self._links[gone].busy:
                        del self._links[gone]
            for unit, key, transport, link in self._rows:
                if link.answer is None:  # one object until the first answer: the watch need not compute again
                    link.answer = ControlAnswer(key[1], "", error="not checked yet", code="pending")
                out[unit] = link.answer
                if link.busy:
                    continue
                if unit in now_ready:
                    urgent[key] = transport
                    due.pop(key, None)
                elif now >= link.due and key not in urgent:
                    due[key] = (link.due, transport)
            start = [(k, t) for k, (_, t) in sorted(due.items(), key=lambda kv: kv[1][0])]
            if budget is not None:
                # unspent budget is not hoarded; the urgent checks are paid for too, by later rounds
                self._credit = min(self._credit + budget, budget * 2) - len(urgent) * self.cost
                afford = max(0, math.floor(self._credit / self.cost))
                self._credit = max(self._credit - min(afford, len(start)) * self.cost, -budget * 3)
                start = start[:afford]
            self.waiting = len(due) - len(start)
            start = [*urgent.items(), *start]
            for link_key, _ in start:
                self._links[link_key].busy = True
            self._chosen.extend(start)
        if start_now:
            self.start()
        return out

    def start(self) -> None:
        """Start the checks the last round chose (with `start_now=False`, the status round calls this
        once its own work is done: the checks then never compete with it for the interpreter)."""
        with self._lock:
            chosen, self._chosen = self._chosen, []
            for key, transport in chosen:
                self._waiting.setdefault(key[0], deque()).append((key, transport))
        if self._pool is not None:
            for _ in range(min(len(chosen), self.workers)):
                self._pool.submit(self._drain)

    def ask_now(self, unit: Unit, target: FlowerTarget, then: Callable[[], None]) -> None:
        """Ask `unit`'s SuperLink now, not at its turn in a status round (a held restart waits for
        its runs: engine.holds), and call `then` once it answered (at once when an answer is in
        already). The check takes the namespace's share like any other: a tenant's silent
        SuperLink holds no more workers for it."""
        if self._pool is None:
            return
        key: Key = (unit.namespace, target.address, target.ca_secret, target.transport)
        with self._lock:
            if self._closed:
                return
            link = self._links.setdefault(key, _Link())
            answered = link.answer is not None and link.answer.code != "pending"
            if not answered:
                self._then.setdefault(key, []).append(then)
                start = not link.busy  # a busy link's check is chosen or running: it calls `then`
                if start:
                    link.busy = True
                    self._waiting.setdefault(key[0], deque()).append((key, target.transport))
        if answered:
            then()
        elif start:
            self._pool.submit(self._drain)

    def soon(self, unit: Unit, target: FlowerTarget, within: float) -> None:
        """Make `unit`'s SuperLink due for a check within `within` seconds (a canary waits for a
        newer answer: engine.canary), at a status round like any other check: never sooner than
        it would be after a failure (its backoff stays)."""
        key: Key = (unit.namespace, target.address, target.ca_secret, target.transport)
        with self._lock:
            link = self._links.get(key)
            if link is not None and not link.failures:
                link.due = min(link.due, self.clock() + within)

    def answer_for(self, unit: Unit, target: FlowerTarget) -> ControlAnswer | None:
        """The last answer of `unit`'s SuperLink, as its check left it (newer than the last status
        round's, when a check answered since); None before any."""
        with self._lock:
            link = self._links.get((unit.namespace, target.address, target.ca_secret, target.transport))
        return link.answer if link is not None else None

    # -- the worker's side -----------------------------------------------------------------------

    def _drain(self) -> None:
        """Run the checks a worker may take, until none is left that it may: a check whose
        namespace or address has its share in flight waits for one of those to finish (its worker
        then takes it), while the other namespaces' checks go ahead."""
        while (item := self._pick()) is not None:
            key, transport = item
            try:
                self._check(key, transport)
            finally:
                with self._lock:
                    self._flight[key[0]] -= 1
                    self._flight[":" + key[1]] -= 1

    def _pick(self) -> tuple[Key, Transport] | None:
        with self._lock:
            if self._closed:
                return None
            best: tuple[int, str, int] | None = None  # (in flight, namespace, index in its queue)
            for namespace, waiting in self._waiting.items():
                if self._flight[namespace] >= self.share:
                    continue
                at = next((i for i, (key, _) in enumerate(waiting)
                           if self._flight[":" + key[1]] < ADDRESS_SHARE), None)
                if at is not None and (best is None or self._flight[namespace] < best[0]):
                    best = (self._flight[namespace], namespace, at)
            if best is None:
                return None
            waiting = self._waiting[best[1]]
            item = waiting[best[2]]
            del waiting[best[2]]
            if not waiting:
                del self._waiting[best[1]]
            self._flight[item[0][0]] += 1
            self._flight[":" + item[0][1]] += 1
            return item

    def _check(self, key: Key, transport: Transport) -> None:
        namespace, address, ca_secret, _ = key
        cpu = time.thread_time()
        try:
            answer = self._ask(namespace, address, ca_secret, transport)
        except Exception as exc:  # a bug here must not stop later checks
            answer = ControlAnswer(address, utc_now(), error=f"the check failed ({type(exc).__name__})",
                                   code=ControlErrorCode.SERVER.value)
        cpu = time.thread_time() - cpu
        now = self.clock()
        with self._lock:
            self.checks += 1
            self.cpu += cpu
            # a hostile answer's decoding counts at most 4 times the usual cost: it cannot slow
            # every other federation's checks down by inflating the measured cost
            self.cost += (min(max(cpu, 1e-5), self.cost * 4) - self.cost) * 0.1
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
            then = self._then.pop(key, [])
        for call in then:
            try:
                call()
            except Exception:  # a bug there must not stop this worker's later checks
                log.exception("a call after a Control API check failed", address=address)

    def unreachable_from_here(self, address: str) -> bool:
        """Whether `address` is a Service name this agent, outside the cluster, never asks (its
        answer is `outside-cluster` at once): known before any check runs."""
        return not self.cluster_dns and service_dns(address)

    def _ask(self, namespace: str, address: str, ca_secret: str, transport: Transport) -> ControlAnswer:
        if self.unreachable_from_here(address):
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
            listed = api.list_nodes()
            ran = api.list_runs()
        except ControlApiError as exc:
            detail = NOT_RESOLVED if exc.code is ControlErrorCode.NOT_RESOLVED else exc.detail
            if exc.code is ControlErrorCode.TLS:
                self._forget_ca(namespace, ca_secret)  # a rotated CA is read again next time
            if exc.code is ControlErrorCode.DENIED:
                detail += ("; the agent holds no Flower account: a SuperLink with account authentication on its "
                           "Control API cannot be checked (see docs/operating.md, Flower-level health)")
            return ControlAnswer(address, utc_now(), error=detail, code=exc.code.value)
        finally:
            api.close()
        return ControlAnswer(address, utc_now(), tuple(listed), tuple(ran), truncated=listed.truncated or ran.truncated)

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
