"""A half-open probe whose client goes away gives its slot back, as a non-result, on the shared (Redis) breaker."""

import json
import socket
import uuid

import pytest

from catalog.models import Provider
from gateway.app import GatewayApp
from gateway.config import ConfigHolder
from health.breaker.redis_backend import RedisEngine
from health.breaker.types import ConfigSet, ManualClock, Outcome, State
from tests.gateway.conftest import TEST_BREAKER
from tests.servers import delete_namespace, serve, within

BODY = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture
def shared(redis_url):
    """Two engines on one Redis namespace and one hand-driven clock: the gateway's and another process's."""
    namespace = f"test:breaker:{uuid.uuid4().hex}"
    clock = ManualClock()
    config = ConfigSet(default=TEST_BREAKER)
    gateway = RedisEngine(url=redis_url, namespace=namespace, clock=clock, config=config)
    other = RedisEngine(url=redis_url, namespace=namespace, clock=clock, config=config)
    yield gateway, other, clock
    gateway.close()
    other.close()
    delete_namespace(redis_url, namespace)


def test_client_gone_while_probing_releases_the_probe_slot(world, shared):
    engine, other, clock = shared
    for _ in range(3):
        engine.record(engine.allow("openai", "gpt-4o"), Outcome.of_status(503))
    assert engine.flush()
    clock.advance(TEST_BREAKER.initial_cooldown_seconds)  # cooldown over: the next call is the probe
    Provider.objects.filter(name="openai").update(base_url=f"{world.sim_url}/hang/v1", read_timeout=60)
    app = GatewayApp(config=ConfigHolder(), engine=engine, max_body=64 * 1024)
    body = json.dumps(BODY).encode()

    with serve(app, lifespan=True) as url:
        host, port = url.removeprefix("http://").split(":")
        client = socket.create_connection((host, int(port)))
        client.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Authorization: Bearer {world.secret}\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        reached = within(lambda: world.sim.requests["hang"] == 1)
        probing = other.get("openai", "gpt-4o")
        client.close()
        abandoned = within(lambda: world.sim.abandoned["hang"] == 1)
        assert engine.flush()
        after = other.get("openai", "gpt-4o")

    other.refresh("openai", "gpt-4o")
    probe = other.allow("openai", "gpt-4o")

    assert (reached, abandoned) == (True, True)
    assert (probing.state, probing.probe_in_flight) == (State.HALF_OPEN, True)
    # Neither a success (it would close) nor a failure (it would reopen, a second open): the slot is just free.
    assert (after.state, after.probe_in_flight, after.consecutive_opens) == (State.HALF_OPEN, False, 1)
    assert (probe.allowed, probe.probe) == (True, True)
