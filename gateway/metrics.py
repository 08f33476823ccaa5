"""Prometheus metrics of a gateway process, served at `GET /metrics` (docs/metrics.md).

The request path only appends the finished request's log record (the dict the log sink ships) to a
deque. A background thread folds the records into the counters and histograms four times a second (and
the scrape folds first), batching each label set: one counter increment per label set and fold, not several
prometheus calls per request. The deque holds the records until then: folding often keeps that small (at
10,000 req/s, a second's records were about 10 MiB of a worker's memory). Label values are bounded: a
provider or model the configuration snapshot does not name counts as "other"; no request ids, user ids or
free text.

Under `run_gateway` (PROMETHEUS_MULTIPROC_DIR set) the values live in prometheus_client's per-process
mmap files, so a scrape answered by any uvicorn worker reports the sum over all of them. What is read at
scrape time (circuit states, the request-log counters kept in Redis) comes from the answering worker,
whose engine mirrors the shared breaker state.
"""

from __future__ import annotations

import asyncio
import glob
import ipaddress
import logging
import os
import re
import threading
import time
from bisect import bisect_left
from collections import Counter as Tally
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead
from prometheus_client.registry import Collector

from catalog.keys import key_hash
from core.networks import METRICS_FORBIDDEN_TEXT, address_allowed
from gateway.config import ConfigHolder
from gateway.logsink import LogSink
from gateway.resilience import TIMEOUT_KINDS
from health.breaker.base import BreakerEngine
from health.breaker.types import EventKind, State

log = logging.getLogger(__name__)

# Counters would each get a `_created` series in single-process mode (tests, embedded): noise for a scrape.
disable_created_metrics()

CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4
GATEWAY = "controlplane_gateway_"
REQUESTLOG = "controlplane_requestlog_"
OTHER = "other"  # a provider or model the configuration does not name (deleted since, or never known)
NONE = "none"  # no provider or model served the request (refused before any upstream call)
FOLD_SECONDS = 0.25
PENDING_MAX = 100_000
# An admitted console token is remembered this long, so a scraper's every request does not reach the database;
# a revoked token keeps working at most this long on a gateway.
TOKEN_CACHE_SECONDS = 10.0
TOKEN_CACHE_SIZE = 64
# A client address (an IPv6 one as its /64) that sent a refused token is refused this long whatever token it
# sends, without a lookup: wrong tokens cost at most one database query per address and period.
REFUSED_SECONDS = 10.0
REFUSED_CACHE_SIZE = 4096
# Token lookups run one at a time in a thread of their own (never the pool the request path uses); while this
# many wait for their answer, another token is refused at once.
TOKEN_CHECKS_PENDING_MAX = 8
FORBIDDEN_BODY = METRICS_FORBIDDEN_TEXT.encode()
# Upstream calls last from milliseconds to the whole deadline (300 s by default, streams included).
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
TTFB_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_EVENT_KINDS = frozenset(str(kind) for kind in EventKind)
_LIVE_GAUGE_FILE = re.compile(r"gauge_live\w*?_(\d+)\.db$")


class GatewayMetrics:
    """This process's metrics: `add(record)` on the request path, `render()` for a scrape (in a thread)."""

    def __init__(
        self,
        *,
        config: ConfigHolder,
        engine: Callable[[], BreakerEngine],
        sink: LogSink | None,
        console: bool = False,
        fold_seconds: float = FOLD_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._config = config
        self._engine = engine
        self._sink = sink
        self._fold_seconds = fold_seconds
        # Folded every FOLD_SECONDS; the cap only bounds memory should folding stall (10 s at 10,000 req/s).
        self._pending: deque[dict[str, Any]] = deque(maxlen=PENDING_MAX)
        self._lock = threading.Lock()  # one fold at a time (the thread and a scrape)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._seen: dict[str, int] = {}  # per-process totals already mirrored into counters
        # Token checks (docs/metrics.md, Access): admitted digests and refused addresses, each with its expiry.
        self._admitted: dict[str, float] = {}
        self._refused: dict[str, float] = {}
        self._clock = clock  # the token caches' expiry
        self._token_lock = threading.Lock()  # the event loop reads, the lookup thread reads and writes
        self._token_checks = 0  # awaiting the lookup thread (event loop only)
        self._token_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gateway-metrics-token")
        self._console = console
        self.multiprocess_dir = os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None
        # Metric objects are kept out of any registry: in multiprocess mode the scrape reads every worker's
        # files instead (MultiProcessCollector), in single-process mode _Own yields them.
        self.requests = Counter(
            GATEWAY + "requests",
            "Chat requests answered, by the provider and model that served them, HTTP status and chain step.",
            ["provider", "model", "status", "step"],
            registry=None,
        )
        self.fallbacks = Counter(
            GATEWAY + "fallbacks",
            "Requests a chain entry served because the source model's circuit was unavailable.",
            ["source_model", "provider", "model"],
            registry=None,
        )
        self.optimistic = Counter(
            GATEWAY + "optimistic_primary",
            "Requests sent to the source model although its circuit and every chain entry were unavailable.",
            ["source_model"],
            registry=None,
        )
        self.attempts = Histogram(
            GATEWAY + "upstream_attempt_duration_seconds",
            "Duration of each upstream call (a stream until its end), by provider, model and outcome.",
            ["provider", "model", "outcome"],
            buckets=DURATION_BUCKETS,
            registry=None,
        )
        self.ttfb = Histogram(
            GATEWAY + "time_to_first_byte_seconds",
            "From the request's arrival to the first byte of the upstream's answer, by served provider and model.",
            ["provider", "model"],
            buckets=TTFB_BUCKETS,
            registry=None,
        )
        self.transitions = Counter(
            GATEWAY + "circuit_transitions",
            "Circuit state changes this gateway's breaker engine emitted, by kind.",
            ["kind"],
            registry=None,
        )
        self.events_dropped = Counter(
            GATEWAY + "breaker_events_dropped",
            "Breaker events dropped before they could be recorded (the engine's event buffer was full).",
            registry=None,
        )
        self.fold_cpu = Counter(
            GATEWAY + "metrics_fold_cpu_seconds",
            "CPU time spent folding request records into these metrics (their cost, off the request path).",
            registry=None,
        )
        self.buffered = Gauge(
            REQUESTLOG + "buffered",
            "Request-log records in the gateways' buffers, not yet written.",
            registry=None,
            multiprocess_mode="livesum",
        )
        self.buffer_dropped = Counter(
            REQUESTLOG + "buffer_dropped",
            "Request-log records the gateways dropped because their buffer was full.",
            registry=None,
        )
        self.spilled = Counter(
            REQUESTLOG + "spilled",
            "Request-log records the gateways spilled to a local file at shutdown.",
            registry=None,
        )
        self.replayed = Counter(
            REQUESTLOG + "replayed",
            "Request-log records the gateways replayed from spill files at start.",
            registry=None,
        )
        for kind in EventKind:
            self.transitions.labels(str(kind))  # every kind present from the start, at 0
        self._own = [
            self.requests,
            self.fallbacks,
            self.optimistic,
            self.attempts,
            self.ttfb,
            self.transitions,
            self.events_dropped,
            self.fold_cpu,
            self.buffered,
            self.buffer_dropped,
            self.spilled,
            self.replayed,
        ]
        self.registry = CollectorRegistry(auto_describe=False)
        if self.multiprocess_dir:
            MultiProcessCollector(self.registry, path=self.multiprocess_dir)
        else:
            self.registry.register(_Own(self._own))
        self.registry.register(_Live(self))
        if console:
            # Embedded mode: the one process serves the console's metrics too. Imported here: a production
            # gateway process does not install the apps they read (alerts).
            from dashboards.metrics import ConsoleCollector

            self.registry.register(ConsoleCollector())

    # -- request path ----------------------------------------------------------------
    def add(self, record: dict[str, Any]) -> None:
        """The finished request's log record (shared with the sink, never modified). O(1), never raises."""
        self._pending.append(record)

    # -- folding -----------------------------------------------------------------------
    def start(self) -> None:
        if self.multiprocess_dir:
            self._mark_dead_workers()
        self._thread = threading.Thread(target=self._run, name="gateway-metrics", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._token_executor.submit(_close_connections)  # the lookup thread's own connection
        self._token_executor.shutdown(wait=True)
        self.fold()

    def _run(self) -> None:
        while not self._stop.wait(self._fold_seconds):
            try:
                self.fold()
            except Exception:  # metrics must never stop the gateway; the next fold retries
                log.exception("gateway metrics: fold failed")

    def fold(self) -> None:
        """Apply the records added so far and this process's pipeline and breaker counters."""
        with self._lock:
            started = time.thread_time()
            self._fold_records()
            self._fold_process()
            self.fold_cpu.inc(time.thread_time() - started)

    def _fold_records(self) -> None:
        pending = self._pending
        if not pending:
            return
        snap = self._config.current
        providers = snap.providers if snap is not None else {}
        models = snap.models if snap is not None else {}

        def provider_of(name: str) -> str:
            return name if name in providers else (NONE if not name else OTHER)

        def model_of(name: str) -> str:
            return name if name in models else (NONE if not name else OTHER)

        requests: Tally[tuple[str, str, str, str]] = Tally()
        fallbacks: Tally[tuple[str, str, str]] = Tally()
        optimistic: Tally[str] = Tally()
        attempts: dict[tuple[str, str, str], list[float]] = {}
        ttfb: dict[tuple[str, str], list[float]] = {}
        for _ in range(len(pending)):
            record = pending.popleft()
            provider, model = provider_of(record["served_provider"]), model_of(record["served_model"])
            step = record["chain_step"]
            requests[provider, model, _status(record["status"]), str(step) if step < 3 else "3+"] += 1
            if record["fallback_triggered"]:
                fallbacks[model_of(record["fallback_original_model"]), provider, model] += 1
            if record["optimistic_primary"]:
                optimistic[model] += 1
            if record["ttfb_ms"] is not None:
                ttfb.setdefault((provider, model), []).append(record["ttfb_ms"] / 1000)
            for attempt in record["attempts"]:
                key = (provider_of(attempt["provider"]), model_of(attempt["model"]), _outcome(attempt))
                attempts.setdefault(key, []).append(attempt["duration_ms"] / 1000)
        for request_labels, n in requests.items():
            self.requests.labels(*request_labels).inc(n)
        for fallback_labels, n in fallbacks.items():
            self.fallbacks.labels(*fallback_labels).inc(n)
        for source, n in optimistic.items():
            self.optimistic.labels(source).inc(n)
        for attempt_labels, values in attempts.items():
            _observe_all(self.attempts.labels(*attempt_labels), values)
        for ttfb_labels, values in ttfb.items():
            _observe_all(self.ttfb.labels(*ttfb_labels), values)

    def _fold_process(self) -> None:
        """Mirror this process's own running totals (sink, breaker events) into counters, by their growth."""
        sink = self._sink
        if sink is not None:
            self.buffered.set(sink.pending)
            self._mirror("buffer_dropped", sink.dropped, self.buffer_dropped.inc)
            self._mirror("spilled", sink.spilled, self.spilled.inc)
            self._mirror("replayed", sink.replayed, self.replayed.inc)
        events = self._engine().events
        for kind, count in list(events.emitted.items()):
            label = str(kind)
            self._mirror(
                f"event:{label}", count, self.transitions.labels(label if label in _EVENT_KINDS else OTHER).inc
            )
        self._mirror("events_dropped", events.dropped, self.events_dropped.inc)

    def _mirror(self, name: str, total: int, inc: Callable[[float], None]) -> None:
        grown = total - self._seen.get(name, 0)
        if grown > 0:
            inc(grown)
            self._seen[name] = total

    def _mark_dead_workers(self) -> None:
        """Drop the live gauges of workers that exited (their buffers are gone); their counters stay summed."""
        assert self.multiprocess_dir is not None
        pids = set()
        for path in glob.glob(os.path.join(self.multiprocess_dir, "gauge_live*.db")):
            match = _LIVE_GAUGE_FILE.search(os.path.basename(path))
            if match is not None:
                pids.add(int(match.group(1)))
        for pid in pids:
            if not _alive(pid):
                mark_process_dead(pid, self.multiprocess_dir)

    # -- scrape ------------------------------------------------------------------------
    def render(self) -> bytes:
        """The exposition text. Blocking (files, Redis, the breaker engine): call it in a worker thread."""
        self.fold()
        if self.multiprocess_dir:
            self._mark_dead_workers()
        try:
            return generate_latest(self.registry)
        finally:
            if self._console:
                from django.db import connections

                connections.close_all()  # the console collector's queries, in this worker thread

    def client_allowed(self, client: tuple[str, int] | list[Any] | None) -> bool:
        """Whether the peer address, as the server reports it, is in METRICS_ALLOWED_NETWORKS. This code reads no
        forwarded header itself; uvicorn's proxy-header handling may already have put the client named in
        X-Forwarded-For in place of a trusted proxy's address (docs/metrics.md)."""
        from django.conf import settings

        return client is not None and address_allowed(str(client[0]), settings.METRICS_ALLOWED_NETWORKS)

    async def token_allowed(self, client: tuple[str, int] | list[Any] | None, secret: str) -> bool:
        """Whether `secret` is a live console API token of an active admin. On the event loop.

        An admitted token is remembered for TOKEN_CACHE_SECONDS; after a refusal, the client's address is refused
        at once for REFUSED_SECONDS. Lookups run one at a time in this object's own thread, which keeps its
        database connection; while TOKEN_CHECKS_PENDING_MAX wait, further tokens are refused at once.
        """
        digest = key_hash(secret)
        address = _address_key(client)
        known = self._known(address, digest)
        if known is not None:
            return known
        if self._token_checks >= TOKEN_CHECKS_PENDING_MAX:
            return False
        self._token_checks += 1
        try:
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self._token_executor, self._check_token, address, digest)
        finally:
            self._token_checks -= 1

    def _known(self, address: str, digest: str) -> bool | None:
        now = self._clock()
        with self._token_lock:
            if self._admitted.get(digest, 0.0) > now:
                return True
            if self._refused.get(address, 0.0) > now:
                return False
        return None

    def _check_token(self, address: str, digest: str) -> bool:
        """In the lookup thread: the database's answer, remembered (a database error is not)."""
        known = self._known(address, digest)  # answered while this check waited (the same address, say)
        if known is not None:
            return known
        allowed = _console_token_is_admin(digest)
        now = self._clock()
        with self._token_lock:
            if allowed:
                if len(self._admitted) >= TOKEN_CACHE_SIZE:
                    self._admitted.clear()
                self._admitted[digest] = now + TOKEN_CACHE_SECONDS
            elif allowed is not None:
                if len(self._refused) >= REFUSED_CACHE_SIZE:
                    self._refused = {key: until for key, until in self._refused.items() if until > now}
                    if len(self._refused) >= REFUSED_CACHE_SIZE:
                        self._refused.clear()  # many addresses: each still waits for the one lookup thread
                self._refused[address] = now + REFUSED_SECONDS
        return bool(allowed)


def _console_token_is_admin(digest: str) -> bool | None:
    """catalog's rule of a live console token, plus the admin role; None if the database cannot answer.

    Without the API's failure throttling or last-used stamp: a gateway process does not install the access app
    (GatewayMetrics remembers refused addresses instead). The connection stays open for the next check; a failed
    one is closed and the lookup tried once more on a new one (the server may have dropped an idle connection).
    """
    from django.db import connection

    from catalog.selectors import console_token_live
    from core.roles import Role, has_role

    for attempt in range(2):
        try:
            token = console_token_live(secret_hash=digest)
            return token is not None and has_role(token.user, Role.ADMIN)
        except Exception:  # a database away refuses the token; it does not fail the scrape
            connection.close()
            if attempt:
                log.warning("gateway metrics: console token check failed", exc_info=True)
    return None


def _close_connections() -> None:
    from django.db import connections

    connections.close_all()


def _address_key(client: tuple[str, int] | list[Any] | None) -> str:
    """The peer address refusals are remembered by: an IPv6 address as its /64 (one host owns a whole /64)."""
    address = str(client[0]) if client else ""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address or "unknown"
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip)


def bearer_secret(headers: Iterable[tuple[bytes, bytes]]) -> str | None:
    """The secret of an `Authorization: Bearer <secret>` (or `Token <secret>`) header, if any."""
    for name, value in headers:
        if name == b"authorization":
            scheme, _, secret = value.partition(b" ")
            secret = secret.strip()
            if scheme.lower() in (b"bearer", b"token") and secret:
                return secret.decode("latin-1")
            return None
    return None


def _observe_all(histogram: Histogram, values: list[float]) -> None:
    """`histogram.observe(v)` for each value, batched: one increment per bucket hit and one of the sum, where
    observe() makes two locked file writes per value. Reaches into the child's buckets (prometheus_client is
    pinned; tests/gateway/test_metrics.py checks the counts against the traffic)."""
    bounds = histogram._upper_bounds  # ascending, +Inf last: the bucket of v is the first bound >= v
    for index, n in Tally(bisect_left(bounds, value) for value in values).items():
        histogram._buckets[index].inc(n)
    histogram._sum.inc(sum(values))


def _status(status: int) -> str:
    return str(status) if 100 <= status <= 599 else OTHER


def _outcome(attempt: dict[str, Any]) -> str:
    """timeout, connection_error, cancelled or credential_unavailable; else the status class (429 on its own:
    rate limiting is a failure the breaker counts). The resilience policy's attempts name their error more
    finely (an error status, a timeout by the timer that fired, a cut): the same classes."""
    error = attempt["error"]
    if error and error != "upstream_status":
        if error in _ERRORS:
            return str(error)
        if error in TIMEOUT_KINDS:
            return "timeout"
        return "connection_error" if error in _CUTS else OTHER
    status = attempt["status"]
    if status is None:
        return OTHER
    return "429" if status == 429 else f"{status // 100}xx" if 100 <= status <= 599 else OTHER


_ERRORS = frozenset({"timeout", "connection_error", "cancelled", "credential_unavailable"})
_CUTS = frozenset({"stream_incomplete", "stream_interrupted"})  # what the breaker hears as a connection error


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class _Own(Collector):
    """Single-process mode: this process's metric objects, in a registry of their own."""

    def __init__(self, metrics: list[Any]) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        for metric in self.metrics:
            yield from metric.collect()


class _Live(Collector):
    """Read at scrape time by the answering worker: circuit states, the request-log counters kept in Redis."""

    def __init__(self, metrics: GatewayMetrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        yield from self._circuits()
        sink = self._metrics._sink
        if sink is None:
            return
        counts = sink.counts()
        if "redis_up" not in counts:
            return  # embedded mode: no stream
        up = GaugeMetricFamily(REQUESTLOG + "redis_up", "1 if the request-log counters could be read from Redis.")
        up.add_metric([], counts["redis_up"])
        yield up
        if counts["redis_up"]:
            length = GaugeMetricFamily(
                REQUESTLOG + "stream_length", "Records in the Redis request-log stream, not yet ingested."
            )
            length.add_metric([], counts["stream_length"])
            trimmed = CounterMetricFamily(
                REQUESTLOG + "trimmed", "Records the stream's cap removed before they were ingested."
            )
            trimmed.add_metric([], counts["trimmed_total"])
            dead = CounterMetricFamily(
                REQUESTLOG + "dead_lettered", "Records moved to the dead-letter stream (undecodable or refused)."
            )
            dead.add_metric([], counts["dead_lettered_total"])
            yield from (length, trimmed, dead)

    def _circuits(self) -> Iterator[Metric]:
        snap = self._metrics._config.current
        family = GaugeMetricFamily(
            GATEWAY + "circuit_state",
            "1 for the circuit's current state (closed, open, half_open), 0 for the others; circuits of the "
            "configuration only.",
            labels=["provider", "model", "state"],
        )
        if snap is not None:
            try:
                circuits = self._metrics._engine().list_circuits()
            except Exception:  # an engine that cannot list leaves the family empty
                log.warning("gateway metrics: could not list the circuits", exc_info=True)
                circuits = []
            for circuit in circuits:
                if circuit.provider not in snap.providers or circuit.model not in snap.models:
                    continue
                for state in State:
                    family.add_metric(
                        [circuit.provider, circuit.model, str(state)], 1.0 if circuit.state is state else 0.0
                    )
        yield family
