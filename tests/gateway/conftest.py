"""A catalog pointing at a live simulator, and a live gateway with a hand-driven clock."""

import threading
import tracemalloc
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import httpx
import pytest

from catalog.models import LlmModel, Provider
from chains.services import ChainInput, EntryInput, chain_create
from gateway.app import GatewayApp
from gateway.config import ConfigHolder
from gateway.logsink import LogSink
from gateway.simulator import Simulator
from health.breaker.factory import build_engine
from health.breaker.types import BreakerSettings, ConfigSet, ManualClock
from tests.factories import LlmModelFactory, ProviderFactory, UserFactory
from tests.factories.keys import make_key
from tests.servers import serve

# Small thresholds so a test opens a circuit in a few calls.
TEST_BREAKER = BreakerSettings(
    failure_threshold=3, minimum_requests=3, window_seconds=60, initial_cooldown_seconds=30, cooldown_cap_seconds=300
)


@dataclass
class World:
    sim: Simulator
    sim_url: str
    secret: str
    key: Any
    user: Any


@dataclass
class Gateway:
    url: str
    app: GatewayApp
    clock: ManualClock
    sink: LogSink

    def headers(self, secret: str) -> dict[str, str]:
        return {"authorization": f"Bearer {secret}"}


@pytest.fixture
def sim():
    app = Simulator()
    with serve(app) as url:
        yield app, url


def make_provider(name: str, url: str, path: str | None = None, **extra: Any) -> Provider:
    return ProviderFactory(
        name=name,
        protocol="openai",
        base_url=f"{url}/{path or name}/v1",
        api_key=f"sk-{name}",
        connect_timeout=2,
        read_timeout=5,
        **extra,
    )


def make_model(name: str, provider: Provider, price: str = "1.00") -> LlmModel:
    return LlmModelFactory(
        name=name,
        provider=provider,
        capabilities=["text"],
        input_price_per_mtok=Decimal(price),
        output_price_per_mtok=Decimal(price),
    )


@pytest.fixture
def world(transactional_db, sim) -> World:
    app, url = sim
    openai = make_provider("openai", url)
    backup = make_provider("backup", url)
    third = make_provider("third", url)
    make_model("gpt-4o", openai, "2.50")
    make_model("claude", backup, "3.00")
    make_model("mistral", third, "2.00")
    chain_create(
        actor=None,
        data=ChainInput(
            name="gpt-4o chain", source_model="gpt-4o", entries=[EntryInput("claude"), EntryInput("mistral")]
        ),
    )
    user = UserFactory()
    created = make_key(user=user)
    return World(sim=app, sim_url=url, secret=created.secret, key=created.key, user=user)


def _gateway(**server: Any) -> Iterator[Gateway]:
    clock = ManualClock()
    engine = build_engine(clock=clock, config=ConfigSet(default=TEST_BREAKER))
    sink = LogSink(flush_seconds=0.05)
    app = GatewayApp(config=ConfigHolder(), engine=engine, sink=sink, max_body=64 * 1024)
    with serve(app, lifespan=True, **server) as url:
        yield Gateway(url=url, app=app, clock=clock, sink=sink)


@pytest.fixture
def gateway(world):
    yield from _gateway()


@pytest.fixture
def production_server_gateway(world):
    """The same gateway served as run_gateway serves it: uvloop and gateway/server.py's protocol."""
    from gateway.server import CorkedHttpToolsProtocol

    yield from _gateway(http=CorkedHttpToolsProtocol, loop="uvloop")


def parsed_alive_during_stream(
    url: str, gate: threading.Event, headers: dict[str, str], **request: Any
) -> tuple[httpx.Response, bytes, bytes, int]:
    """POST a streaming chat request (`json=` or `content=`) whose upstream holds its stream at `gate`; while it
    is held, the bytes still alive that gateway/bodies.py allocated (the parse). Returns (response, first chunk,
    the rest, those bytes); the gate is always released."""
    tracemalloc.start()
    try:
        with httpx.stream("POST", f"{url}/v1/chat/completions", headers=headers, timeout=60, **request) as response:
            chunks = response.iter_raw()
            first = next(chunks)  # the simulator now holds the stream at the gate
            snapshot = tracemalloc.take_snapshot()
            gate.set()
            rest = b"".join(chunks)
    finally:
        gate.set()
        tracemalloc.stop()
    alive = sum(
        stat.size for stat in snapshot.statistics("filename") if stat.traceback[0].filename.endswith("bodies.py")
    )
    return response, first, rest, alive
