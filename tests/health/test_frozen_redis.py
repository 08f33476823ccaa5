"""The Redis breaker behind a frozen Redis (a real TCP proxy holding every byte): no orphan probe slot, the
probe timeout setting, and a console/API that say when they show this process's local view."""

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import redis

from health.breaker import ManualClock, MemoryEngine, Outcome, State, factory, use_engine
from health.breaker.redis_backend import RedisEngine
from tests.faults import FaultProxy
from tests.health.conftest import M, P, config, delete_namespace

ROOT = Path(__file__).resolve().parents[2]
T0 = 1_700_000_000.0
FAIL = Outcome.of_status(503)
INDEX_URL = "/fallback/health/"
BANNER = "Degraded: showing this process's local view."


@pytest.fixture
def namespace(redis_url):
    ns = f"test:breaker:{uuid.uuid4().hex}"
    yield ns
    delete_namespace(redis_url, ns)


@pytest.fixture
def proxy(redis_url):
    url = redis.connection.parse_url(redis_url)
    with FaultProxy(url.get("host", "127.0.0.1"), int(url.get("port", 6379))) as p:
        p.url = f"redis://127.0.0.1:{p.port}/{url.get('db', 0)}"
        yield p
        p.restore()  # let the engines' connections finish before they are closed


@pytest.fixture
def engines():
    made: list[RedisEngine] = []
    yield made
    for engine in made:
        engine.close()


@pytest.fixture
def direct(redis_url):
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()


def _engine(engines, url: str, namespace: str, clock: ManualClock, **kwargs) -> RedisEngine:
    engine = RedisEngine(url=url, namespace=namespace, clock=clock, config=config(), **kwargs)
    engines.append(engine)
    return engine


def _open(engine: RedisEngine) -> None:
    for _ in range(10):
        engine.record(engine.allow(P, M), FAIL)
    assert engine.flush()


def _until(predicate, seconds: float = 10.0) -> bool:
    """Bounded wait for another thread's or Redis's progress (not a timing assertion)."""
    deadline = time.monotonic() + seconds
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.01)
    return predicate()


def _name_probe_connection(engine: RedisEngine) -> str:
    """Open the engine's request-path connection now, under a name CLIENT LIST shows (so a test can see it go)."""
    name = f"probe-{uuid.uuid4().hex[:12]}"
    engine._fast.connection_pool.connection_kwargs["client_name"] = name
    engine._fast.ping()
    return name


def _frozen_allow(engine: RedisEngine, proxy: FaultProxy, direct: redis.Redis) -> list[tuple[str, str, str]]:
    """A probe round trip that times out in a frozen Redis; returns once Redis has run the late command.

    The engine's release of the abandoned ticket is held back (and returned) until then, so the late command
    meets only the caller's deadline, whichever thread resynchronises first.
    """
    name = _name_probe_connection(engine)
    proxy.freeze()
    started = time.perf_counter()
    during = engine.allow(P, M)
    waited = time.perf_counter() - started
    with engine._abandoned_lock:
        abandoned, engine._abandoned[:] = list(engine._abandoned), []
    assert engine.degraded
    # This process decided locally: its own view still lets one probe through.
    assert (during.allowed, during.probe) == (True, True)
    assert [(p, m) for p, m, _ in abandoned] == [(P, M)]
    proxy.restore()
    # The held EVALSHA reaches Redis now; the connection it came on closes right after it ran.
    assert _until(lambda: name not in {c.get("name") for c in direct.client_list()})
    print(f"\nfigure: probe allow() in a frozen Redis returned a local decision after {waited * 1000:.0f} ms")
    return abandoned


def test_allow_that_timed_out_in_a_frozen_redis_leaves_no_orphan_probe(proxy, namespace, engines, direct, redis_url):
    clock = ManualClock(T0)
    gateway = _engine(engines, proxy.url, namespace, clock)
    other = _engine(engines, redis_url, namespace, clock)  # another gateway process, never cut off
    _open(gateway)
    clock.advance(60)  # cooldown over: the next allow() needs Redis for the probe slot

    _frozen_allow(gateway, proxy, direct)

    # The clock has not moved: an orphan slot would block every caller for the whole probe timeout.
    circuit = other.get(P, M)
    other.refresh(P, M)  # its mirror may not have seen the transitions' pub/sub messages yet
    probe = other.allow(P, M)
    assert (circuit.state, circuit.probe_in_flight) == (State.HALF_OPEN, False)
    assert (probe.allowed, probe.probe) == (True, True)
    assert _until(gateway.resync)
    assert gateway.degraded is False


def test_late_grant_is_released_when_redis_answers_again(redis_url, namespace, engines):
    """If a late allow still granted the slot (clocks skewed past the margin), the engine frees it on resync."""
    clock = ManualClock(T0)
    gateway = _engine(engines, redis_url, namespace, clock)
    other = _engine(engines, redis_url, namespace, clock)
    _open(gateway)
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
    engine = _engine(engines, redis_url, namespace, clock)
    _open(engine)
    clock.advance(60)
    far = str(round(time.time() * 1000) + 3_600_000)

    released = engine._eval("release", P, M, "ticket-a", "60000")
    late = engine._eval("allow", P, M, "330000", far, "ticket-a")
    fresh = engine._eval("allow", P, M, "330000", far, "ticket-b")

    assert released[0] == "ignored"  # nothing to free yet, but the ticket is remembered
    assert late[:2] == ["0", "0"]
    assert fresh[:2] == ["1", "1"]


def test_allow_past_the_callers_deadline_grants_nothing(redis_url, namespace, engines):
    clock = ManualClock(T0)
    engine = _engine(engines, redis_url, namespace, clock)
    _open(engine)
    clock.advance(60)
    past = str(round(time.time() * 1000) - 1_000)

    late = engine._eval("allow", P, M, "330000", past, "ticket-a")
    circuit = engine.get(P, M)

    assert late[:2] == ["0", "0"]
    assert (circuit.state, circuit.probe_in_flight) == (State.HALF_OPEN, False)


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


def test_probe_timeout_below_the_upstream_deadline_refuses_to_start(tmp_path):
    result = _settings(
        {"BREAKER_PROBE_TIMEOUT_SECONDS": "90", "CONTROLPLANE_VAR_DIR": str(tmp_path)}, "BREAKER_PROBE_TIMEOUT_SECONDS"
    )

    assert result.returncode != 0
    assert "BREAKER_PROBE_TIMEOUT_SECONDS (90) must be at least GATEWAY_DEADLINE_SECONDS (300)" in result.stderr


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, "330"),
        ({"GATEWAY_DEADLINE_SECONDS": "600"}, "630"),
        ({"BREAKER_PROBE_TIMEOUT_SECONDS": "300"}, "300"),
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
def catalog(db):
    from tests.factories import LlmModelFactory, ProviderFactory

    LlmModelFactory(name=M, provider=ProviderFactory(name=P))


@pytest.fixture
def process_engine(proxy, namespace, engines):
    """This process's engine, talking to Redis through the proxy, with one open circuit."""
    engine = _engine(engines, proxy.url, namespace, ManualClock(T0), background_timeout=0.2)
    _open(engine)
    with use_engine(engine):
        yield engine


@pytest.mark.django_db
def test_provider_health_says_when_it_shows_the_local_view(admin_client, catalog, process_engine, proxy):
    healthy = admin_client.get(INDEX_URL).content.decode()
    proxy.freeze()
    frozen = admin_client.get(INDEX_URL).content.decode()
    poll = admin_client.get(INDEX_URL, headers={"HX-Request": "true", "HX-Target": "circuit-table"}).content.decode()

    assert BANNER not in healthy
    assert 'id="breaker-degraded"' not in healthy
    assert process_engine.degraded is True
    for page in (frozen, poll):
        assert 'class="alert alert-warning" role="status" id="breaker-degraded"' in page
        assert BANNER in page
        assert 'data-state="open"' in page  # the local view still lists the circuit (open stays open)


@pytest.mark.django_db
def test_circuit_api_marks_rows_of_the_local_view(admin_client, process_engine, proxy):
    healthy = admin_client.get("/api/circuits/")
    proxy.freeze()
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
