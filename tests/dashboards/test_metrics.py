"""GET /metrics on the console: scrape-time circuit states, holds, the request-log stream's counters and alert
deliveries, for allowed networks or an admin console token."""

import uuid

import pytest
import redis
from django.test import Client
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from alerts.models import Alert, Delivery
from catalog.services import console_token_create
from health.breaker import ManualClock, MemoryEngine, Outcome, use_engine
from health.services import circuit_force_open, provider_drain
from requestlogs.stream import StreamKeys
from tests.requestlogs.test_stream_batches import append_records

FORBIDDEN = "Forbidden: /metrics answers METRICS_ALLOWED_NETWORKS or an admin console API token.\n"
OUTSIDE = "10.1.2.3"
LABELS = ("provider", "model", "state", "kind", "status")  # the order label values are keyed in


@pytest.fixture(autouse=True)
def engine():
    engine = MemoryEngine(clock=ManualClock())
    with use_engine(engine):
        yield engine


def parse(response):
    assert response.status_code == 200, response.content
    assert response["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    found = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            values = tuple(sample.labels[name] for name in LABELS if name in sample.labels)
            assert len(values) == len(sample.labels), sample
            found.setdefault(sample.name, {})[values] = sample.value
    return found


def test_circuit_states_of_catalog_circuits(anon_client, health_catalog, engine):
    for _ in range(10):
        engine.record(engine.allow("openai", "gpt-4o"), Outcome.of_status(503))
    engine.record(engine.allow("anthropic", "claude-haiku"), Outcome.of_status(200))
    engine.record(engine.allow("gone", "deleted-model"), Outcome.of_status(200))  # not in the catalog

    samples = parse(anon_client.get("/metrics"))

    assert samples["controlplane_console_circuit_state"] == {
        ("anthropic", "claude-haiku", "closed"): 1,
        ("anthropic", "claude-haiku", "open"): 0,
        ("anthropic", "claude-haiku", "half_open"): 0,
        ("openai", "gpt-4o", "closed"): 0,
        ("openai", "gpt-4o", "open"): 1,
        ("openai", "gpt-4o", "half_open"): 0,
    }
    assert samples["controlplane_console_breaker_degraded"] == {(): 0}


def test_operator_holds_are_counted_by_kind(anon_client, health_catalog, admin_user):
    circuit_force_open(actor=admin_user, provider="openai", model="gpt-4o", reason="maintenance", minutes=None)
    provider_drain(actor=admin_user, provider="anthropic", reason="incident", minutes=30)

    samples = parse(anon_client.get("/metrics"))

    assert samples["controlplane_console_circuits_held"] == {("forced_open",): 1, ("drained",): 1}


def test_alert_deliveries_by_status(anon_client):
    now = timezone.now()
    alert = Alert.objects.create(
        rule_name="r", kind="circuit_open", subject="openai/gpt-4o", opened_at=now, last_seen_at=now
    )
    for status in ("pending", "delivered", "delivered", "failed"):
        Delivery.objects.create(
            alert=alert,
            event="opened",
            url="http://127.0.0.1:9/hook",
            body_format="json",
            payload={},
            status=status,
            created_at=now,
            next_attempt_at=now,
        )

    samples = parse(anon_client.get("/metrics"))

    assert samples["controlplane_console_alert_deliveries"] == {("delivered",): 2, ("failed",): 1, ("pending",): 1}


def test_embedded_mode_has_no_stream_counters(anon_client, settings):
    settings.REDIS_URL = ""

    samples = parse(anon_client.get("/metrics"))

    assert [name for name in samples if "requestlog" in name] == []


@pytest.mark.redis
def test_request_log_stream_counters_come_from_redis(anon_client, settings, redis_url):
    stream = f"test:console-metrics:{uuid.uuid4().hex}"
    keys = StreamKeys(stream)
    settings.REDIS_URL, settings.REQUEST_LOG_STREAM = redis_url, stream
    client = redis.Redis.from_url(redis_url)
    append_records(redis_url, stream, [{"request_id": "a"}, {"request_id": "b"}])
    client.set(keys.trimmed, 7)
    client.set(keys.dropped, 3)
    client.set(keys.dead_lettered, 1)
    try:
        samples = parse(anon_client.get("/metrics"))
    finally:
        client.delete(stream, keys.records, keys.trimmed, keys.dropped, keys.dead_lettered)

    assert {name: series[()] for name, series in samples.items() if "requestlog" in name} == {
        "controlplane_console_requestlog_redis_up": 1,
        "controlplane_console_requestlog_stream_length": 2,
        "controlplane_console_requestlog_trimmed_total": 7,
        "controlplane_console_requestlog_dropped_total": 3,
        "controlplane_console_requestlog_dead_lettered_total": 1,
    }


def test_a_redis_that_does_not_answer_reads_as_down(anon_client, settings):
    settings.REDIS_URL = "redis://127.0.0.1:9/0"  # nothing listens on the discard port

    samples = parse(anon_client.get("/metrics"))

    assert {name: series[()] for name, series in samples.items() if "requestlog" in name} == {
        "controlplane_console_requestlog_redis_up": 0
    }


# -- access --------------------------------------------------------------------------------


def test_a_client_outside_the_allowed_networks_is_refused(db):
    response = Client(REMOTE_ADDR=OUTSIDE).get("/metrics")

    assert response.status_code == 403
    assert response["Content-Type"] == "text/plain; charset=utf-8"
    assert response.content.decode() == FORBIDDEN


def test_the_allowed_networks_come_from_the_setting(db, settings):
    settings.METRICS_ALLOWED_NETWORKS = ["10.0.0.0/8"]

    outside = Client(REMOTE_ADDR=OUTSIDE).get("/metrics")
    loopback = Client().get("/metrics")

    assert (outside.status_code, loopback.status_code) == (200, 403)


def test_behind_trusted_proxies_the_forwarded_client_is_checked(db, settings):
    settings.TRUSTED_PROXY_COUNT = 1  # a proxy on this host: every peer is loopback

    forwarded_outside = Client(HTTP_X_FORWARDED_FOR=OUTSIDE).get("/metrics")
    forwarded_loopback = Client(HTTP_X_FORWARDED_FOR=f"{OUTSIDE}, 127.0.0.1").get("/metrics")
    settings.TRUSTED_PROXY_COUNT = 0
    peer_only = Client(HTTP_X_FORWARDED_FOR=OUTSIDE).get("/metrics")

    assert (forwarded_outside.status_code, forwarded_loopback.status_code, peer_only.status_code) == (403, 200, 200)


def test_ipv6_and_ipv4_mapped_loopback_are_allowed(db, settings):
    settings.TRUSTED_PROXY_COUNT = 1

    statuses = [
        Client(HTTP_X_FORWARDED_FOR=address).get("/metrics").status_code
        for address in ("::1", "::ffff:127.0.0.1", "2001:db8::1")
    ]

    assert statuses == [200, 200, 403]


def test_an_admin_console_token_is_accepted(admin_user):
    _, secret = console_token_create(actor=admin_user, user=admin_user, name="prometheus")
    client = Client(REMOTE_ADDR=OUTSIDE)

    bearer = client.get("/metrics", headers={"authorization": f"Bearer {secret}"})
    token = client.get("/metrics", headers={"authorization": f"Token {secret}"})

    assert "controlplane_console_alert_deliveries" in parse(bearer)
    assert "controlplane_console_alert_deliveries" in parse(token)


def test_other_tokens_and_sessions_are_refused(admin_user, bi_user, admin_client):
    _, bi_secret = console_token_create(actor=admin_user, user=bi_user, name="bi")
    client = Client(REMOTE_ADDR=OUTSIDE)
    admin_client.defaults["REMOTE_ADDR"] = OUTSIDE

    statuses = [
        client.get("/metrics", headers={"authorization": "Bearer cpt-00000000-wrong"}).status_code,
        client.get("/metrics", headers={"authorization": f"Bearer {bi_secret}"}).status_code,
        admin_client.get("/metrics").status_code,  # a signed-in admin's session is not a token
    ]

    assert statuses == [403, 403, 403]


def test_metrics_answer_get_only(anon_client):
    response = anon_client.post("/metrics")

    assert response.status_code == 405
