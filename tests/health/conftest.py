"""Health fixtures: the engine in use, the one-model catalog, and the contract suite's engines (one per backend,
each with its own clock and Redis key namespace)."""

import socket
import uuid
from datetime import UTC, datetime

import pytest
import redis
import time_machine

from health.breaker import (
    BreakerEngine,
    BreakerSettings,
    ConfigSet,
    ManualClock,
    MemoryEngine,
    Outcome,
    build_engine,
    use_engine,
)
from health.breaker.redis_backend import RedisEngine
from tests.factories import LlmModelFactory, ProviderFactory
from tests.servers import delete_namespace, until

P, M = "openai", "gpt-4o"
T0 = 1_700_000_000.0


@pytest.fixture
def frozen_engine():
    """A memory engine in use at T0, with the wall clock (time_machine) and the engine's clock stopped there."""
    with time_machine.travel(datetime.fromtimestamp(T0, UTC), tick=False):
        engine = MemoryEngine(clock=ManualClock(T0))
        with use_engine(engine):
            yield engine


def trip(engine: BreakerEngine, provider: str = P, model: str = M) -> None:
    """Open a circuit under the default thresholds: ten 503s in a row (a Redis engine applies them on
    flush())."""
    for _ in range(10):
        engine.record(engine.allow(provider, model), Outcome.of_status(503))


def redis_engine(engines: list[RedisEngine], url: str, namespace: str, clock: ManualClock, **kwargs) -> RedisEngine:
    """A Redis engine on `clock` in `namespace`, closed with the `engines` fixture."""
    engine = RedisEngine(url=url, namespace=namespace, clock=clock, **kwargs)
    engines.append(engine)
    return engine


def wait_subscribed(client: redis.Redis, channel: str, subscribers: int = 1) -> None:
    """Wait, bounded, until `subscribers` engines listen on `channel` (each subscribes in its own thread)."""
    until(
        lambda: dict(client.pubsub_numsub(channel)).get(channel, 0) >= subscribers,
        5,
        f"{subscribers} subscriber(s) on {channel}",
    )


def closed_port_url() -> str:
    """A Redis URL on a local port nothing listens on: every connection is refused (Redis down)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return f"redis://127.0.0.1:{port}/0"


@pytest.fixture
def engine():
    """An in-memory engine on a hand-driven clock at T0, installed as the engine the app uses."""
    engine = MemoryEngine(clock=ManualClock(T0))
    with use_engine(engine):
        yield engine


@pytest.fixture
def engines():
    """Redis engines a test makes (append them); all closed afterwards."""
    made: list[RedisEngine] = []
    yield made
    for engine in made:
        engine.close()


@pytest.fixture
def single_model_catalog(db):
    """One provider with one model: gpt-4o on openai (the circuit the health tests open)."""
    LlmModelFactory(name=M, provider=ProviderFactory(name=P))


@pytest.fixture
def namespace(redis_url):
    """A Redis key namespace of this test's own, deleted afterwards."""
    ns = f"test:breaker:{uuid.uuid4().hex}"
    yield ns
    delete_namespace(redis_url, ns)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(1_700_000_000.0)


@pytest.fixture(params=["memory", "redis"])
def backend(request) -> str:
    return request.param


@pytest.fixture
def make_engine(request, backend, clock):
    """make_engine(config=..., namespace=..., clock=...) -> a new engine of this test's backend; all closed after."""
    url = request.getfixturevalue("redis_url") if backend == "redis" else ""
    made = []
    namespaces = set()

    def make(*, config: ConfigSet | None = None, namespace: str | None = None, clock=clock, **kwargs):
        ns = namespace or f"test:breaker:{uuid.uuid4().hex}"
        namespaces.add(ns)
        engine = build_engine(redis_url=url, namespace=ns, clock=clock, config=config, **kwargs)
        made.append(engine)
        return engine

    make.backend = backend
    make.url = url
    yield make
    for engine in made:
        engine.close()
    if url:
        for ns in namespaces:
            delete_namespace(url, ns)


def settings(**overrides) -> BreakerSettings:
    return BreakerSettings(**overrides)


def config(**overrides) -> ConfigSet:
    return ConfigSet(default=BreakerSettings(**overrides))
