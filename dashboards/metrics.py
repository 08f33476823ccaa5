"""The console's Prometheus metrics, served at `GET /metrics` (docs/metrics.md).

Everything is computed at scrape time from the breaker engine, the database and Redis, so any console
worker answers the same (multi-worker safe by construction): circuit states, operator holds, the
request-log pipeline's shared counters, alert deliveries by status. In embedded mode the one process
serves /metrics from the gateway app, which adds this collector to its own metrics.
"""

from __future__ import annotations

import logging
import time
from collections import Counter as Tally
from collections.abc import Iterator

import redis
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from rest_framework.exceptions import APIException
from rest_framework.request import Request

from access.client import client_ip
from alerts.selectors import delivery_counts
from catalog.authentication import ConsoleTokenAuthentication
from catalog.selectors import llm_model_list, provider_list
from core.networks import METRICS_FORBIDDEN_TEXT, address_allowed
from core.roles import Role, has_role
from health.breaker.types import ControlKind, State
from health.selectors import circuit_controls, circuit_list, circuits_local_only
from requestlogs.stream import StreamKeys

log = logging.getLogger(__name__)

CONSOLE = "controlplane_console_"


class ConsoleCollector(Collector):
    """Scrape-time console metrics. Reads the database, the engine and Redis: blocking."""

    def collect(self) -> Iterator[Metric]:
        yield from self._circuits()
        yield from self._holds()
        yield from self._request_logs()
        yield self._deliveries()

    def _circuits(self) -> Iterator[Metric]:
        providers = set(provider_list().values_list("name", flat=True))
        models = set(llm_model_list().values_list("name", flat=True))
        state = GaugeMetricFamily(
            CONSOLE + "circuit_state",
            "1 for the circuit's current state (closed, open, half_open), 0 for the others; circuits of providers "
            "and models in the catalog only.",
            labels=["provider", "model", "state"],
        )
        for row in circuit_list():
            if row.provider not in providers or row.model not in models:
                continue  # a name the catalog no longer has: labels stay bounded by the catalog
            for value in State:
                state.add_metric([row.provider, row.model, str(value)], 1.0 if row.state is value else 0.0)
        yield state
        degraded = GaugeMetricFamily(
            CONSOLE + "breaker_degraded",
            "1 while the breaker engine cannot reach Redis and shows this process's local view.",
        )
        degraded.add_metric([], 1.0 if circuits_local_only() else 0.0)
        yield degraded

    def _holds(self) -> Iterator[Metric]:
        now = time.time()
        held = Tally(str(c.kind) for c in circuit_controls().values() if c.active(now))
        family = GaugeMetricFamily(
            CONSOLE + "circuits_held",
            "Operator holds in force: circuits forced open, providers drained.",
            labels=["kind"],
        )
        for kind in ControlKind:
            family.add_metric([str(kind)], held[str(kind)])
        yield family

    def _request_logs(self) -> Iterator[Metric]:
        """The request-log stream's counters every gateway shares (production; embedded mode has no stream)."""
        if not settings.REDIS_URL:
            return
        keys = StreamKeys(settings.REQUEST_LOG_STREAM)
        up = GaugeMetricFamily(CONSOLE + "requestlog_redis_up", "1 if the request-log counters could be read.")
        try:
            client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=0.5, socket_connect_timeout=0.5)
            length, trimmed, dropped, dead = client.mget(keys.records, keys.trimmed, keys.dropped, keys.dead_lettered)
        except redis.RedisError:
            up.add_metric([], 0.0)
            yield up
            return
        up.add_metric([], 1.0)
        yield up
        stream = GaugeMetricFamily(
            CONSOLE + "requestlog_stream_length", "Records in the request-log stream, not yet ingested."
        )
        stream.add_metric([], max(int(length or 0), 0))
        yield stream
        for name, value, text in (
            ("requestlog_trimmed", trimmed, "Records the stream's cap removed before they were ingested."),
            ("requestlog_dropped", dropped, "Records gateways dropped because their buffer was full."),
            ("requestlog_dead_lettered", dead, "Records moved to the dead-letter stream (undecodable or refused)."),
        ):
            counter = CounterMetricFamily(CONSOLE + name, text)
            counter.add_metric([], int(value or 0))
            yield counter

    def _deliveries(self) -> Metric:
        family = GaugeMetricFamily(
            CONSOLE + "alert_deliveries",
            "Alert webhook deliveries kept, by status (pending, delivered, failed).",
            labels=["status"],
        )
        for status, n in sorted(delivery_counts().items()):
            family.add_metric([status], n)
        return family


def console_metrics_text() -> bytes:
    """The console's metrics as Prometheus text (version 0.0.4)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ConsoleCollector())
    return generate_latest(registry)


class _BearerConsoleToken(ConsoleTokenAuthentication):
    """Prometheus sends `Authorization: Bearer <token>`; the API's own keyword is `Token`."""

    keyword = "Bearer"


def _token_is_admin(request: HttpRequest) -> bool:
    """An admin's console API token, checked (and failures throttled) exactly as the API checks it."""
    drf_request = Request(request)
    for authentication in (_BearerConsoleToken(), ConsoleTokenAuthentication()):
        try:
            found = authentication.authenticate(drf_request)
        except APIException:  # a wrong token, or an address locked out after too many
            return False
        if found is not None:
            return has_role(found[0], Role.ADMIN)
    return False


@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    """`GET /metrics`: for METRICS_ALLOWED_NETWORKS or an admin token; else 403.

    The address is the client's as throttling sees it (access.client: REMOTE_ADDR, or the X-Forwarded-For entry
    of the outermost of TRUSTED_PROXY_COUNT proxies), so a proxy on the same host does not make every client
    loopback.
    """
    allowed = address_allowed(client_ip(request), settings.METRICS_ALLOWED_NETWORKS)
    if not allowed and not _token_is_admin(request):
        return HttpResponse(METRICS_FORBIDDEN_TEXT, status=403, content_type="text/plain; charset=utf-8")
    return HttpResponse(console_metrics_text(), content_type=CONTENT_TYPE_PLAIN_0_0_4)
