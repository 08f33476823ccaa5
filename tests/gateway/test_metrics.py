"""GET /metrics on the gateway: Prometheus text whose counters match the traffic sent, bounded labels, access rules,
and (production) the sum over several uvicorn workers."""

import asyncio
import glob
import os
import subprocess
import sys
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import redis
from django.db import connection
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.parser import text_string_to_metric_families

from catalog.models import LlmModel, Provider
from catalog.services import console_token_create, console_token_revoke
from gateway.app import GatewayApp
from gateway.config import ConfigHolder
from gateway.logsink import LogSink
from gateway.metrics import REFUSED_SECONDS, TOKEN_CACHE_SECONDS, TOKEN_CHECKS_PENDING_MAX, GatewayMetrics
from health.breaker.factory import build_engine
from health.breaker.types import ManualClock, Outcome, State
from requestlogs.stream import StreamKeys
from tests.gateway.conftest import make_model
from tests.requestlogs.test_stream_batches import append_records
from tests.servers import delete_namespace, free_port, production_env, run_async, serve, until, wait_ready

ROOT = Path(__file__).resolve().parents[2]
BODY = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
REQUESTS = "controlplane_gateway_requests_total"


def post(url, secret, model="gpt-4o"):
    return httpx.post(
        f"{url}/v1/chat/completions",
        json={**BODY, "model": model},
        headers={"authorization": f"Bearer {secret}"},
        timeout=10,
    )


def scrape(url, headers=None):
    response = httpx.get(f"{url}/metrics", headers=headers, timeout=10)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    return parse(response.text)


def parse(text):
    """{sample name: {labels as a sorted tuple: value}}, through the Prometheus text parser."""
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return found


def labelled(samples, name, *keys):
    """One sample name's values keyed by the values of `keys` (the other labels must not vary)."""
    out = {}
    for labels, value in samples.get(name, {}).items():
        as_dict = dict(labels)
        key = tuple(as_dict[k] for k in keys)
        assert key not in out, f"{name}: {key} repeated"
        out[key] = value
    return out


def fail(world, provider, status=503):
    world.sim.behaviours[provider] = world.sim.behaviour(provider).updated({"mode": "status", "status": status})


def test_metrics_count_requests_by_served_target_status_and_step(gateway, world):
    ok = [post(gateway.url, world.secret) for _ in range(2)]
    refused = post(gateway.url, "cp-wrong")
    fail(world, "openai")
    failed = [post(gateway.url, world.secret) for _ in range(3)]  # the third opens gpt-4o's circuit
    fallen = [post(gateway.url, world.secret) for _ in range(2)]  # served by claude, step 1
    engine = gateway.app.engine
    for _ in range(3):  # claude's circuit opens too: mistral (step 2) serves
        engine.record(engine.allow("backup", "claude"), Outcome.of_status(503))
    second = post(gateway.url, world.secret)

    samples = scrape(gateway.url)

    statuses = [r.status_code for r in [*ok, refused, *failed, *fallen, second]]
    assert statuses == [200, 200, 401, 503, 503, 503, 200, 200, 200]
    assert labelled(samples, REQUESTS, "provider", "model", "status", "step") == {
        ("openai", "gpt-4o", "200", "0"): 2,
        ("none", "none", "401", "0"): 1,
        ("openai", "gpt-4o", "503", "0"): 3,
        ("backup", "claude", "200", "1"): 2,
        ("third", "mistral", "200", "2"): 1,
    }
    assert labelled(samples, "controlplane_gateway_fallbacks_total", "source_model", "provider", "model") == {
        ("gpt-4o", "backup", "claude"): 2,
        ("gpt-4o", "third", "mistral"): 1,
    }
    assert labelled(
        samples, "controlplane_gateway_upstream_attempt_duration_seconds_count", "provider", "model", "outcome"
    ) == {
        ("openai", "gpt-4o", "2xx"): 2,
        ("openai", "gpt-4o", "5xx"): 3,
        ("backup", "claude", "2xx"): 2,
        ("third", "mistral", "2xx"): 1,
    }
    assert labelled(samples, "controlplane_gateway_time_to_first_byte_seconds_count", "provider", "model") == {
        ("openai", "gpt-4o"): 5,
        ("backup", "claude"): 2,
        ("third", "mistral"): 1,
    }
    states = labelled(samples, "controlplane_gateway_circuit_state", "provider", "model", "state")
    assert {key for key, value in states.items() if value == 1} == {
        ("openai", "gpt-4o", "open"),
        ("backup", "claude", "open"),
        ("third", "mistral", "closed"),
    }
    assert len(states) == 9  # one series per state of each of the three circuits
    transitions = labelled(samples, "controlplane_gateway_circuit_transitions_total", "kind")
    assert {kind: n for kind, n in transitions.items() if n} == {("opened",): 2}
    assert samples["controlplane_gateway_breaker_events_dropped_total"] == {(): 0}


def test_optimistic_primary_is_counted_by_source_model(gateway, world):
    fail(world, "third")  # mistral has no chain: once its circuit is open, the primary is tried anyway
    statuses = [post(gateway.url, world.secret, "mistral").status_code for _ in range(4)]

    samples = scrape(gateway.url)

    assert gateway.app.engine.get("third", "mistral").state is State.OPEN
    assert statuses == [503] * 4
    assert labelled(samples, "controlplane_gateway_optimistic_primary_total", "source_model") == {("mistral",): 1}
    assert labelled(samples, REQUESTS, "provider", "model", "status", "step") == {("third", "mistral", "503", "0"): 4}


def test_unknown_model_names_do_not_become_label_values(gateway, world):
    statuses = {post(gateway.url, world.secret, f"invented-{i}").status_code for i in range(200)}

    samples = scrape(gateway.url)

    assert statuses == {404}
    assert labelled(samples, REQUESTS, "provider", "model", "status", "step") == {("none", "none", "404", "0"): 200}
    values = {value for series in samples.values() for labels in series for _, value in labels}
    assert not any(value.startswith("invented-") for value in values)


def test_a_model_gone_from_the_configuration_counts_as_other(world):
    make_model("solo", Provider.objects.get(name="third"))
    app = GatewayApp(config=ConfigHolder(), engine=build_engine(clock=ManualClock()), sink=None)
    app.config.reload()
    with serve(app) as url:  # no lifespan: nothing folds the records until the scrape
        served = post(url, world.secret, "solo")
        LlmModel.objects.filter(name="solo").delete()
        assert app.config.reload() is True

        samples = scrape(url)

    assert served.status_code == 200
    assert labelled(samples, REQUESTS, "provider", "model", "status", "step") == {("third", "other", "200", "0"): 1}
    assert labelled(samples, "controlplane_gateway_circuit_state", "provider", "model", "state") == {}


def test_metrics_expose_the_sink_counters(gateway, world):
    gateway.sink.dropped = 4  # as if the buffer had overflowed four times

    samples = scrape(gateway.url)

    assert {name: series[()] for name, series in samples.items() if name.startswith("controlplane_requestlog_")} == {
        "controlplane_requestlog_buffered": 0,
        "controlplane_requestlog_buffer_dropped_total": 4,
        "controlplane_requestlog_spilled_total": 0,
        "controlplane_requestlog_replayed_total": 0,
    }


@pytest.mark.redis
def test_metrics_read_the_stream_counters_from_redis(world, redis_url):
    stream = f"test:metrics:{uuid.uuid4().hex}"
    keys = StreamKeys(stream)
    client = redis.Redis.from_url(redis_url)
    client.set(keys.trimmed, 12)
    client.set(keys.dead_lettered, 2)
    append_records(redis_url, stream, [{"request_id": "a"}])  # another gateway's records
    sink = LogSink(redis_url=redis_url, stream_key=stream, flush_seconds=0.05)
    app = GatewayApp(config=ConfigHolder(), engine=build_engine(clock=ManualClock()), sink=sink)
    try:
        with serve(app, lifespan=True) as url:
            samples = scrape(url)
    finally:
        client.delete(stream, keys.records, keys.trimmed, keys.dead_lettered)

    assert {name: series[()] for name, series in samples.items() if name.startswith("controlplane_requestlog_")} == {
        "controlplane_requestlog_buffered": 0,
        "controlplane_requestlog_buffer_dropped_total": 0,
        "controlplane_requestlog_spilled_total": 0,
        "controlplane_requestlog_replayed_total": 0,
        "controlplane_requestlog_redis_up": 1,
        "controlplane_requestlog_stream_length": 1,
        "controlplane_requestlog_trimmed_total": 12,
        "controlplane_requestlog_dead_lettered_total": 2,
    }


# -- access --------------------------------------------------------------------------------


def test_loopback_is_allowed_by_default(gateway, world, settings):
    assert settings.METRICS_ALLOWED_NETWORKS == ["127.0.0.0/8", "::1/128"]

    response = httpx.get(f"{gateway.url}/metrics")

    assert response.status_code == 200


def test_a_client_outside_the_allowed_networks_is_refused_in_one_line(gateway, world, settings):
    settings.METRICS_ALLOWED_NETWORKS = ["10.0.0.0/8", "::1/128"]

    response = httpx.get(f"{gateway.url}/metrics")

    assert response.status_code == 403
    assert response.headers["content-type"] == "text/plain; charset=utf-8"
    assert response.text == "Forbidden: /metrics answers METRICS_ALLOWED_NETWORKS or an admin console API token.\n"


def test_an_admin_console_token_is_accepted_from_any_network(gateway, world, settings, admin_user):
    settings.METRICS_ALLOWED_NETWORKS = ["10.0.0.0/8"]
    _, secret = console_token_create(actor=admin_user, user=admin_user, name="prometheus")

    bearer = httpx.get(f"{gateway.url}/metrics", headers={"authorization": f"Bearer {secret}"})
    token = httpx.get(f"{gateway.url}/metrics", headers={"authorization": f"Token {secret}"})

    assert (bearer.status_code, token.status_code) == (200, 200)
    assert "controlplane_gateway_circuit_transitions_total" in parse(bearer.text)


def test_wrong_tokens_are_refused(gateway, world, settings, admin_user, bi_user):
    settings.METRICS_ALLOWED_NETWORKS = ["10.0.0.0/8"]
    _, bi_secret = console_token_create(actor=admin_user, user=bi_user, name="bi")
    revoked, revoked_secret = console_token_create(actor=admin_user, user=admin_user, name="old")
    console_token_revoke(actor=admin_user, token=revoked)

    statuses = [
        httpx.get(f"{gateway.url}/metrics", headers={"authorization": f"Bearer {secret}"}).status_code
        for secret in ("cpt-00000000-not-a-token", bi_secret, revoked_secret, world.secret)
    ]

    assert statuses == [403, 403, 403, 403]


class TokenQueries:
    """Counts the console-token queries the metrics' lookup thread sends to the database (installed in it)."""

    def __init__(self, metrics):
        self.count = 0
        self.metrics = metrics
        metrics._token_executor.submit(lambda: connection.execute_wrappers.append(self)).result()

    def __call__(self, execute, sql, params, many, context):
        if "catalog_consoletoken" in sql:
            self.count += 1
        return execute(sql, params, many, context)

    def connected(self):
        """Whether the lookup thread holds an open database connection."""
        return self.metrics._token_executor.submit(lambda: connection.connection is not None).result()


def test_wrong_tokens_from_one_address_cost_one_lookup_per_period(gateway, world, settings):
    settings.METRICS_ALLOWED_NETWORKS = ["10.0.0.0/8"]
    queries = TokenQueries(gateway.app.metrics)

    statuses = {
        httpx.get(f"{gateway.url}/metrics", headers={"authorization": f"Bearer cpt-{n:08d}-wrong"}).status_code
        for n in range(30)
    }

    assert statuses == {403}
    assert queries.count == 1  # the first refusal makes 127.0.0.1 refused for REFUSED_SECONDS, without a lookup
    assert queries.connected()  # the lookup thread keeps its connection for the next check


@pytest.fixture
def token_metrics(transactional_db):
    clock = ManualClock()
    engine = build_engine(clock=clock)
    metrics = GatewayMetrics(config=ConfigHolder(), engine=lambda: engine, sink=None, clock=clock.now)
    yield metrics, clock
    metrics.stop()


def _check(metrics, address, secret):
    return run_async(metrics.token_allowed((address, 5000), secret))


def test_a_refused_address_is_looked_up_again_after_the_period(token_metrics, admin_user):
    metrics, clock = token_metrics
    _, secret = console_token_create(actor=admin_user, user=admin_user, name="prometheus")
    queries = TokenQueries(metrics)

    wrong = _check(metrics, "10.9.0.1", "cpt-00000000-wrong")
    refused_meanwhile = _check(metrics, "10.9.0.1", secret)  # even a valid token, for the period
    other_address = _check(metrics, "10.9.0.2", secret)
    clock.advance(REFUSED_SECONDS + 1)
    after = _check(metrics, "10.9.0.1", secret)

    assert (wrong, refused_meanwhile, other_address, after) == (False, False, True, True)
    assert queries.count == 3  # the wrong token, the other address, `after`; none for `refused_meanwhile`


def test_an_admitted_token_is_remembered_ahead_of_a_refused_address(token_metrics, admin_user):
    metrics, clock = token_metrics
    _, secret = console_token_create(actor=admin_user, user=admin_user, name="prometheus")
    queries = TokenQueries(metrics)

    answers = [_check(metrics, "10.9.0.1", secret), _check(metrics, "10.9.0.1", "cpt-00000000-wrong")]
    answers.append(_check(metrics, "10.9.0.1", secret))
    clock.advance(TOKEN_CACHE_SECONDS + 1)
    answers.append(_check(metrics, "10.9.0.1", secret))  # neither remembered any more: looked up

    assert answers == [True, False, True, True]
    assert queries.count == 3


def test_checks_beyond_the_pending_limit_are_refused_at_once(token_metrics, admin_user):
    metrics, _ = token_metrics
    _, secret = console_token_create(actor=admin_user, user=admin_user, name="prometheus")
    queries = TokenQueries(metrics)
    release = threading.Event()

    async def scenario():
        blocker = metrics._token_executor.submit(release.wait)  # the lookup thread is busy
        try:
            waiting = [
                asyncio.create_task(metrics.token_allowed((f"10.9.1.{n}", 5000), "cpt-00000000-wrong"))
                for n in range(TOKEN_CHECKS_PENDING_MAX)
            ]
            await asyncio.sleep(0)  # each task runs up to its wait for the lookup thread
            pending = metrics._token_checks
            beyond = await metrics.token_allowed(("10.9.2.1", 5000), secret)  # answered with the thread still busy
            answered_while_busy = not blocker.done()
        finally:
            release.set()
        return pending, beyond, answered_while_busy, await asyncio.gather(*waiting)

    pending, beyond, answered_while_busy, waited = run_async(scenario())

    assert (pending, beyond, answered_while_busy) == (TOKEN_CHECKS_PENDING_MAX, False, True)
    assert waited == [False] * TOKEN_CHECKS_PENDING_MAX
    assert queries.count == TOKEN_CHECKS_PENDING_MAX  # one per address, none for the refused one
    assert _check(metrics, "10.9.2.1", secret) is True  # that address was not marked refused


def test_embedded_gateway_serves_the_console_metrics_too(world):
    app = GatewayApp(config=ConfigHolder(), engine=build_engine(clock=ManualClock()), console_metrics=True)
    app.config.reload()
    with serve(app) as url:
        samples = scrape(url)

    assert labelled(samples, "controlplane_console_alert_deliveries", "status") == {
        ("delivered",): 0,
        ("failed",): 0,
        ("pending",): 0,
    }
    assert labelled(samples, "controlplane_console_circuits_held", "kind") == {("forced_open",): 0, ("drained",): 0}
    assert "controlplane_gateway_circuit_transitions_total" in samples


# -- several workers -----------------------------------------------------------------------


def _served_per_worker(var_dir: Path) -> dict[int, float]:
    """Requests each worker has folded into its own metrics file (what the gateway's scrape sums)."""
    served = {}
    for path in glob.glob(str(var_dir / "gateway-metrics" / "run-*" / "counter_*.db")):
        pid = int(os.path.basename(path).removeprefix("counter_").removesuffix(".db"))
        metrics = MultiProcessCollector.merge([path], accumulate=False)
        served[pid] = sum(s.value for m in metrics if m.name == "controlplane_gateway_requests" for s in m.samples)
    return served


@pytest.fixture
def two_workers(world, redis_url, tmp_path):
    namespace = f"test:metrics:{uuid.uuid4().hex}"
    env = {**production_env(redis_url=redis_url, namespace=namespace), "CONTROLPLANE_VAR_DIR": str(tmp_path)}
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "run_gateway", "--port", str(port), "--workers", "2"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"

    try:
        wait_ready(url, proc)
        until(lambda: len(_served_per_worker(tmp_path)) == 2, 30, "two workers")
        yield url, tmp_path
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        delete_namespace(redis_url, namespace)


@pytest.mark.production
def test_two_workers_report_the_sum_of_their_traffic(two_workers, world):
    url, var_dir = two_workers
    # Slow answers keep connections open, so a burst of them lands on both workers.
    world.sim.behaviours["openai"] = world.sim.behaviour("openai").updated({"latency_ms": 100})
    sent = 0
    statuses = set()
    with ThreadPoolExecutor(max_workers=16) as pool:
        for _ in range(10):
            statuses |= {r.status_code for r in pool.map(lambda _: post(url, world.secret), range(16))}
            sent += 16
            until(lambda n=sent: sum(_served_per_worker(var_dir).values()) == n, 10, "every worker folded")
            if all(_served_per_worker(var_dir).values()):
                break
    per_worker = _served_per_worker(var_dir)

    def scraped_total():
        # A new connection per scrape: either worker may answer; each must report the sum of both.
        return sum(scrape(url).get(REQUESTS, {}).values())

    totals = [until(lambda: scraped_total() == sent, 10, f"a scrape counting {sent}") for _ in range(6)]

    assert statuses == {200}
    assert len(per_worker) == 2 and all(per_worker.values()), per_worker
    assert sum(per_worker.values()) == sent
    assert totals == [True] * 6
