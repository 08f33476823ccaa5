"""The Redis breaker behind a frozen Redis (a real TCP proxy holding every byte): no orphan probe slot, the
probe timeout setting, and a console/API that say when they show this process's local view."""

import os
import re
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
import redis

from health.breaker import ManualClock, MemoryEngine, Outcome, State, factory, use_engine
from health.breaker.redis_backend import RedisEngine
from tests.faults import FaultProxy
from tests.health.conftest import M, P, redis_engine, trip
from tests.servers import until, within

ROOT = Path(__file__).resolve().parents[2]
T0 = 1_700_000_000.0
FAIL = Outcome.of_status(503)
INDEX_URL = "/fallback/health/"
BANNER = "Degraded: showing this process's local view."


@pytest.fixture
def direct(redis_url):
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()


def _name_probe_connection(engine: RedisEngine) -> str:
    """Open the engine's request-path connection now, under a name CLIENT LIST shows (so a test can see it go)."""
    name = f"probe-{uuid.uuid4().hex[:12]}"
    engine._fast.connection_pool.connection_kwargs["client_name"] = name
    engine._fast.ping()
    return name


def _frozen_allow(
    engine: RedisEngine, proxy: FaultProxy, direct: redis.Redis, *, hold_release: bool = True
) -> list[tuple[str, str, str]]:
    """A probe round trip that times out in a frozen Redis; returns once Redis has run the late command.

    With `hold_release`, the engine's release of the abandoned ticket is held back (and returned) until then,
    so the late command meets only the caller's deadline, whichever thread resynchronises first.
    """
    name = _name_probe_connection(engine)
    proxy.freeze()
    started = time.perf_counter()
    during = engine.allow(P, M)
    waited = time.perf_counter() - started
    with engine._abandoned_lock:
        abandoned = list(engine._abandoned)
        if hold_release:
            engine._abandoned[:] = []
    assert engine.degraded
    # This process decided locally: its own view still lets one probe through.
    assert (during.allowed, during.probe) == (True, True)
    assert [(p, m) for p, m, _ in abandoned] == [(P, M)]
    proxy.restore()
    # The held EVALSHA reaches Redis now; the connection it came on closes right after it ran.
    until(lambda: name not in {c.get("name") for c in direct.client_list()}, 10, "the probe connection to close")
    print(f"\nfigure: probe allow() in a frozen Redis returned a local decision after {waited * 1000:.0f} ms")
    return abandoned


def test_allow_that_timed_out_in_a_frozen_redis_leaves_no_orphan_probe(
    redis_proxy, namespace, engines, direct, redis_url
):
    """The deadline alone: a negative margin puts it at the moment the command was sent, so the command the freeze
    held runs past it however short the freeze (with the real margin this takes a freeze of over half a second)."""
    clock = ManualClock(T0)
    gateway = redis_engine(engines, redis_proxy.url, namespace, clock, deadline_margin=-0.05)
    other = redis_engine(engines, redis_url, namespace, clock)  # another gateway process, never cut off
    trip(gateway)
    assert gateway.flush()
    clock.advance(60)  # cooldown over: the next allow() needs Redis for the probe slot

    _frozen_allow(gateway, redis_proxy, direct)

    # The clock has not moved: an orphan slot would block every caller for the whole probe timeout.
    circuit = other.get(P, M)
    other.refresh(P, M)  # its mirror may not have seen the transitions' pub/sub messages yet
    probe = other.allow(P, M)
    assert (circuit.state, circuit.probe_in_flight) == (State.HALF_OPEN, False)
    assert (probe.allowed, probe.probe) == (True, True)
    until(gateway.resync, 10, "a resync once Redis answers")
    assert gateway.degraded is False


def test_short_freeze_inside_the_margin_leaves_no_orphan_once_redis_answers(
    redis_proxy, namespace, engines, direct, redis_url
):
    """The default margin: the held command may still be granted, and the ticket release frees it (or, if the
    release gets there first, makes it grant nothing)."""
    clock = ManualClock(T0)
    gateway = redis_engine(engines, redis_proxy.url, namespace, clock)
    other = redis_engine(engines, redis_url, namespace, clock)
    trip(gateway)
    assert gateway.flush()
    clock.advance(60)

    abandoned = _frozen_allow(gateway, redis_proxy, direct, hold_release=False)
    back = within(gateway.resync)
    circuit = other.get(P, M)
    other.refresh(P, M)
    probe = other.allow(P, M)

    assert (circuit.state, circuit.probe_in_flight) == (State.HALF_OPEN, False)
    assert (probe.allowed, probe.probe) == (True, True)
    assert (back, gateway._abandoned) == (True, [])
    assert direct.zscore(gateway._keys(P, M)[3], abandoned[0][2]) is not None  # the ticket is remembered


def test_late_grant_is_released_when_redis_answers_again(redis_url, namespace, engines):
    """If a late allow still granted the slot (clocks skewed past the margin), the engine frees it on resync."""
    clock = ManualClock(T0)
    gateway = redis_engine(engines, redis_url, namespace, clock)
    other = redis_engine(engines, redis_url, namespace, clock)
    # The subscriber's first resync releases abandoned tickets too: done before the test abandons one, so only
    # the resync below can release it (a slow thread start once released it before `orphan` was read).
    _settled(gateway)
    trip(gateway)
    assert gateway.flush()
    clock.advance(60)
    far = str(round(time.time() * 1000) + 3_600_000)
    late = gateway._eval("allow", P, M, "330000", far, "ticket-a")  # the round trip the caller gave up on
    with gateway._abandoned_lock:
        gateway._abandoned.append((P, M, "ticket-a"))
    orphan = other.get(P, M)

    back = gateway.resync()
    circuit = other.get(P, M)
    other.refresh(P, M)  # its mirror may not have seen the transitions' pub/sub messages yet
    probe = other.allow(P, M)

    assert (late[:2], orphan.state, orphan.probe_in_flight) == (["1", "1"], State.HALF_OPEN, True)
    assert (back, gateway._abandoned) == (True, [])
    assert (circuit.state, circuit.probe_in_flight) == (State.HALF_OPEN, False)
    assert (probe.allowed, probe.probe) == (True, True)


def test_released_ticket_grants_nothing_when_its_allow_arrives_after_the_release(redis_url, namespace, engines):
    clock = ManualClock(T0)
    engine = redis_engine(engines, redis_url, namespace, clock)
    trip(engine)
    assert engine.flush()
    clock.advance(60)
    far = str(round(time.time() * 1000) + 3_600_000)

    released = engine._eval("release", P, M, "60000", "ticket-a")
    late = engine._eval("allow", P, M, "330000", far, "ticket-a")
    fresh = engine._eval("allow", P, M, "330000", far, "ticket-b")

    assert released[0] == "ignored"  # nothing to free yet, but the ticket is remembered
    assert late[:2] == ["0", "0"]
    assert fresh[:2] == ["1", "1"]


def test_allow_past_the_callers_deadline_grants_nothing(redis_url, namespace, engines):
    clock = ManualClock(T0)
    engine = redis_engine(engines, redis_url, namespace, clock)
    trip(engine)
    assert engine.flush()
    clock.advance(60)
    past = str(round(time.time() * 1000) - 1_000)

    late = engine._eval("allow", P, M, "330000", past, "ticket-a")
    circuit = engine.get(P, M)

    assert late[:2] == ["late", "0"]
    assert (circuit.state, circuit.probe_in_flight) == (State.HALF_OPEN, False)


# ---------- a grant refused as late, the clock offset, releasing tickets ----------


def _counting_client(url: str, **kwargs) -> tuple[redis.Redis, type[redis.Connection]]:
    """A real client whose connections count what they send (one send per command or pipeline)."""

    class Counting(redis.Connection):
        sent = 0

        def send_packed_command(self, command, check_health=True):
            type(self).sent += 1
            return super().send_packed_command(command, check_health)

    client = redis.Redis.from_url(url, decode_responses=True, connection_class=Counting, **kwargs)
    client.ping()  # connect now: the handshake's commands are not counted
    Counting.sent = 0
    return client, Counting


def _settled(engine: RedisEngine) -> None:
    """Wait for the subscriber's first resync, so that nothing else measures the offset behind the test's back."""
    until(lambda: engine._measurements >= 2, 10, "the subscriber's first resync")


def test_late_refusal_remeasures_the_offset_and_holds_the_circuit_locally(
    redis_url, namespace, engines, direct, caplog
):
    clock = ManualClock(T0)
    engine = redis_engine(engines, redis_url, namespace, clock, late_hold=5.0)
    _settled(engine)
    trip(engine)
    assert engine.flush()
    clock.advance(60)
    fast, counting = _counting_client(redis_url, socket_timeout=0.05)
    engine._fast = fast
    measured = engine._real_offset_ms
    engine._real_offset_ms = measured - 60_000  # the sample was a minute off: every deadline is long past

    refused = [engine.allow(P, M) for _ in range(20)]
    sent_while_held = counting.sent
    remeasured = within(lambda: engine._measurements >= 3)
    offset_after = engine._real_offset_ms
    clock.advance(5)  # the local hold is over
    probe = engine.allow(P, M)
    fast.close()
    print(f"\nfigure: 20 allow() calls with the clock offset a minute off made {sent_while_held} Redis round trip(s)")

    assert {(d.allowed, d.probe) for d in refused} == {(False, False)}
    assert sent_while_held == 1  # one refused round trip, then 19 local refusals
    assert remeasured is True
    assert abs(offset_after - measured) < 30_000
    assert (probe.allowed, probe.probe) == (True, True)
    assert counting.sent == 2
    assert "as late" in caplog.text
    assert direct.hget(engine._keys(P, M)[0], "state") == "half_open"


def test_offset_comes_from_the_sample_with_the_shortest_round_trip(redis_url, namespace, engines):
    """Redis runs on this host, so its TIME and time.time() read the same clock: the true offset is 0."""
    engine = redis_engine(engines, redis_url, namespace, ManualClock(T0))
    _settled(engine)
    client, counting = _counting_client(redis_url)
    engine._client = client
    real_time = client.time
    samples = []

    def time_of_redis():
        reply = real_time()
        if not samples:
            time.sleep(0.4)  # the first reply is held on its way back (say, a GIL wait behind a long parse)
        samples.append(reply)
        return reply

    client.time = time_of_redis  # the same TIME round trips, one of them delayed

    engine._measure_offset()
    client.close()

    # That sample alone would put the offset 200 ms off.
    assert abs(engine._real_offset_ms) < 100
    assert engine._offset_rtt_ms < 400
    assert (len(samples), counting.sent) == (5, 5)


def _abandon(engine: RedisEngine, tickets: list[tuple[str, str, str]]) -> None:
    with engine._abandoned_lock:
        engine._abandoned.extend(tickets)


def _tickets(models: list[str], count: int) -> list[tuple[str, str, str]]:
    return [(P, models[i % len(models)], f"ticket-{i}") for i in range(count)]


def test_thousand_abandoned_tickets_are_released_in_one_pipeline(redis_url, namespace, engines, direct):
    clock = ManualClock(T0)
    engine = redis_engine(engines, redis_url, namespace, clock)
    _settled(engine)
    trip(engine)
    assert engine.flush()
    clock.advance(60)
    far = str(round(time.time() * 1000) + 3_600_000)
    late = engine._eval("allow", P, M, "330000", far, "ticket-8")  # one of them (on P/M) holds the slot
    models = [M, "m-1", "m-2", "m-3"]
    _abandon(engine, _tickets(models, 1_000))
    client, counting = _counting_client(redis_url)
    engine._client = client

    started = time.perf_counter()
    back = engine.resync()
    took = time.perf_counter() - started
    sent = counting.sent
    circuit = engine.get(P, M)
    client.close()
    print(f"\nfigure: a resync releasing 1,000 abandoned tickets (4 circuits): {took * 1000:.1f} ms, {sent} sends")

    assert (late[:2], back, engine._abandoned) == (["1", "1"], True, [])
    # Script loads, the release pipeline, TIME samples, the registry and the circuit pipeline; not 1,000.
    assert sent < 20
    assert [direct.zcard(engine._keys(P, m)[3]) for m in models] == [250, 250, 250, 250]
    assert (circuit.state, circuit.probe_in_flight) == (State.HALF_OPEN, False)


def test_concurrent_resyncs_release_every_ticket_once(redis_url, namespace, engines, direct):
    engine = redis_engine(engines, redis_url, namespace, ManualClock(T0))
    _settled(engine)
    models = [M, "m-1"]
    _abandon(engine, _tickets(models, 4_000))
    start = threading.Barrier(4)
    results: list[object] = []

    def resync():
        start.wait()
        try:
            results.append(engine.resync())
        except Exception as exc:
            results.append(exc)

    threads = [threading.Thread(target=resync) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)

    assert results == [True] * 4
    assert engine._abandoned == []
    assert [direct.zcard(engine._keys(P, m)[3]) for m in models] == [2_000, 2_000]


def test_tickets_whose_release_failed_are_kept_and_the_others_released(redis_url, namespace, engines, direct):
    engine = redis_engine(engines, redis_url, namespace, ManualClock(T0))
    _settled(engine)
    direct.set(engine._keys(P, "broken")[0], "not a hash")  # this circuit's script fails (WRONGTYPE)
    broken = [(P, "broken", "ticket-b1"), (P, "broken", "ticket-b2")]
    _abandon(engine, [(P, M, "ticket-a"), *broken])

    back = engine.resync()

    assert back is True  # one circuit's failure does not keep the engine degraded
    assert engine._abandoned == broken
    assert direct.zrange(engine._keys(P, M)[3], 0, -1) == ["ticket-a"]


def test_released_tickets_are_forgotten_after_their_own_time(redis_url, namespace, engines, direct):
    """Each ticket is kept for its own remember time: later releases do not extend the earlier ones."""
    engine = redis_engine(engines, redis_url, namespace, ManualClock(T0))
    key = engine._keys(P, M)[3]

    engine._eval("release", P, M, "60000", "ticket-kept")
    engine._eval("release", P, M, "1", "ticket-old")  # remembered for 1 ms only
    forget_at = float(direct.zscore(key, "ticket-old"))
    until(lambda: _redis_ms(direct) > forget_at, 10, "Redis TIME to move past the deadline")
    engine._eval("release", P, M, "60000", "ticket-new")
    ttl = direct.pttl(key)

    assert direct.zrange(key, 0, -1) == ["ticket-kept", "ticket-new"]
    assert 0 < ttl <= 60_000


def _redis_ms(client: redis.Redis) -> float:
    seconds, micros = client.time()
    return seconds * 1000 + micros / 1000


# ---------- the probe timeout setting ----------


def _settings(env: dict[str, str], attr: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("BREAKER_PROBE", "GATEWAY_DEADLINE"))}
    base |= {"DJANGO_SETTINGS_MODULE": "controlplane.settings", "REDIS_URL": "", "DATABASE_URL": ""}
    probe = f"import django; django.setup(); from django.conf import settings; print(settings.{attr})"
    return subprocess.run(
        [sys.executable, "-c", probe],
        env={**base, **env},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("seconds", ["90", "300", "304"])
def test_probe_timeout_not_clear_of_the_upstream_deadline_refuses_to_start(tmp_path, seconds):
    """Equal to the deadline is refused too: the probe's outcome is recorded only after its deadline fires."""
    result = _settings(
        {"BREAKER_PROBE_TIMEOUT_SECONDS": seconds, "CONTROLPLANE_VAR_DIR": str(tmp_path)},
        "BREAKER_PROBE_TIMEOUT_SECONDS",
    )

    assert result.returncode != 0
    assert (
        f"BREAKER_PROBE_TIMEOUT_SECONDS ({seconds}) must be at least GATEWAY_DEADLINE_SECONDS + 5 (305)"
        in result.stderr
    )


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, "330"),
        ({"GATEWAY_DEADLINE_SECONDS": "600"}, "630"),
        ({"BREAKER_PROBE_TIMEOUT_SECONDS": "305"}, "305"),
    ],
)
def test_probe_timeout_defaults_above_the_upstream_deadline(tmp_path, env, expected):
    result = _settings({**env, "CONTROLPLANE_VAR_DIR": str(tmp_path)}, "BREAKER_PROBE_TIMEOUT_SECONDS")

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == expected


@pytest.mark.django_db
def test_process_engine_uses_the_probe_timeout_setting(settings):
    settings.REDIS_URL = ""
    settings.BREAKER_PROBE_TIMEOUT_SECONDS = 400
    with use_engine(None):  # type: ignore[arg-type]
        engine = factory.get_engine()

    assert isinstance(engine, MemoryEngine)
    assert engine._probe_timeout == 400


@pytest.mark.parametrize("seconds", [0, -1])
def test_engines_refuse_a_probe_timeout_that_is_not_positive(redis_url, seconds):
    with pytest.raises(ValueError, match="probe_timeout_seconds must be positive"):
        MemoryEngine(probe_timeout_seconds=seconds)
    with pytest.raises(ValueError, match="probe_timeout_seconds must be positive"):
        RedisEngine(url=redis_url, probe_timeout_seconds=seconds)


# ---------- Provider Health and /api/circuits/ on local state ----------


@pytest.fixture
def process_engine(redis_proxy, namespace, engines):
    """This process's engine, talking to Redis through the proxy, with one open circuit."""
    engine = redis_engine(engines, redis_proxy.url, namespace, ManualClock(T0), background_timeout=0.2)
    trip(engine)
    assert engine.flush()
    with use_engine(engine):
        yield engine


@pytest.mark.django_db
def test_provider_health_says_when_it_shows_the_local_view(
    admin_client, single_model_catalog, process_engine, redis_proxy
):
    healthy = admin_client.get(INDEX_URL).content.decode()
    redis_proxy.freeze()
    frozen = admin_client.get(INDEX_URL).content.decode()
    poll = admin_client.get(INDEX_URL, headers={"HX-Request": "true", "HX-Target": "circuit-table"}).content.decode()

    assert BANNER not in healthy
    assert 'id="breaker-degraded"' not in healthy
    assert process_engine.degraded is True
    for page in (frozen, poll):
        assert 'class="alert alert-warning" role="status" id="breaker-degraded"' in page
        assert BANNER in page
        assert 'data-state="open"' in page  # the local view still lists the circuit (open stays open)
        # Reset needs Redis: offered as a disabled button, not a link into the dialog.
        assert 'data-dialog-open="reset-dialog"' not in page
        assert re.search(r'<button type="button" class="btn btn-small" id="reset-open-[^"]+" disabled', page)
    assert 'data-dialog-open="reset-dialog"' in healthy


@pytest.mark.django_db
def test_circuit_api_marks_rows_of_the_local_view(admin_client, process_engine, redis_proxy):
    healthy = admin_client.get("/api/circuits/")
    redis_proxy.freeze()
    frozen = admin_client.get("/api/circuits/")

    assert healthy.status_code == 200
    assert [(r["state"], r["degraded"]) for r in healthy.json()] == [("open", False)]
    assert "X-Circuits-Degraded" not in healthy.headers
    assert frozen.status_code == 200
    assert isinstance(frozen.json(), list)  # the list shape clients already parse
    assert [(r["provider"], r["state"], r["degraded"]) for r in frozen.json()] == [(P, "open", True)]
    assert frozen.headers["X-Circuits-Degraded"].startswith("degraded: showing this process's local view")


@pytest.mark.django_db
def test_schema_documents_the_degraded_field_and_header(admin_client):
    schema = admin_client.get("/api/schema/", {"format": "json"}).json()

    item = schema["components"]["schemas"]["CircuitListItem"]
    response = schema["paths"]["/api/circuits/"]["get"]["responses"]["200"]
    assert item["properties"]["degraded"]["type"] == "boolean"
    assert "degraded" in item["required"]
    assert response["content"]["application/json"]["schema"]["items"]["$ref"].endswith("/CircuitListItem")
    assert "X-Circuits-Degraded" in response["headers"]
