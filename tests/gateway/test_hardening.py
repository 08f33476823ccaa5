"""Faults found in review: bad upstream data, odd framings, probe slots, memo growth, policy bypass."""

import json
import socket
import threading

import httpx
import pytest

from catalog.models import LlmModel, Provider
from chains.models import ChainEntry, FallbackChain
from gateway.snapshot import KeyInfo, ModelInfo, Refusal, Snapshot
from health.breaker.types import Outcome, State
from requestlogs.models import RequestLog
from tests.factories import AliasFactory, ChainEntryFactory, GuardrailFactory, ProviderFactory
from tests.gateway.conftest import make_model

BODY = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}


def post(gateway, world, body=BODY):
    return httpx.post(
        f"{gateway.url}/v1/chat/completions", json=body, headers={"authorization": f"Bearer {world.secret}"}, timeout=10
    )


def open_primary(gateway):
    engine = gateway.app.engine
    for _ in range(3):
        engine.record(engine.allow("openai", "gpt-4o"), Outcome.of_status(503))


@pytest.mark.parametrize("model", ["x" * 257, "gpt-4o\r\nx-evil: 1", "gpt\x00-4o"])
def test_unprintable_or_huge_model_names_are_refused(gateway, world, model):
    response = post(gateway, world, {**BODY, "model": model})

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_model"
    assert world.sim.requests == {}


def test_malformed_upstream_usage_is_ignored_not_fatal(gateway, world):
    world.sim.behaviours["openai"] = world.sim.behaviour("openai").updated({"mode": "badusage"})

    plain = post(gateway, world)
    with httpx.stream(
        "POST",
        f"{gateway.url}/v1/chat/completions",
        json={**BODY, "stream": True, "stream_options": {"include_usage": True}},
        headers={"authorization": f"Bearer {world.secret}"},
        timeout=10,
    ) as response:
        events = [line for line in response.iter_lines() if line.startswith("data: ")]
    assert gateway.sink.flush(timeout=10)

    assert plain.status_code == 200
    assert events[-1] == "data: [DONE]"
    rows = list(RequestLog.objects.order_by("created_at").values_list("status", "tokens_in", "tokens_out"))
    assert rows == [(200, None, None), (200, None, None)]
    assert gateway.app.engine.get("openai", "gpt-4o").failure_count == 0


def test_uncallable_chain_entry_is_skipped_without_taking_its_probe(gateway, world):
    # A protocol this gateway has no adapter for (a row written by a newer release, say).
    anthropic = ProviderFactory(name="anth", protocol="future", base_url=f"{world.sim_url}/anth/v1", api_key="")
    make_model("claude-native", anthropic)
    chain = FallbackChain.objects.get()
    ChainEntry.objects.filter(chain=chain).delete()
    ChainEntryFactory(chain=chain, position=0, model=LlmModel.objects.get(name="claude-native"))
    ChainEntryFactory(chain=chain, position=1, model=LlmModel.objects.get(name="mistral"))
    gateway.app.config.reload()
    open_primary(gateway)

    response = post(gateway, world)

    assert response.status_code == 200
    assert response.headers["x-vidai-model"] == "mistral"
    assert gateway.app.engine.get("anth", "claude-native").probe_in_flight is False


def test_half_open_probe_reports_even_when_the_provider_is_unusable(gateway, world):
    open_primary(gateway)
    gateway.clock.advance(31)
    Provider.objects.filter(name="openai").update(base_url="http://127.0.0.1:99999/v1")
    gateway.app.config.reload()

    probe = post(gateway, world)

    assert probe.status_code == 502
    assert probe.json()["error"]["code"] == "connection_error"
    circuit = gateway.app.engine.get("openai", "gpt-4o")
    assert (circuit.state, circuit.probe_in_flight) == (State.OPEN, False)


def test_deny_guardrail_holds_through_an_alias(gateway, world):
    gpt = LlmModel.objects.get(name="gpt-4o")
    GuardrailFactory(name="no gpt-4o", model=gpt, action="deny", message="not approved")
    AliasFactory(name="smart", model=gpt)
    gateway.app.config.reload()

    response = post(gateway, world, {**BODY, "model": "smart"})

    assert response.status_code == 403
    assert response.json()["error"]["code"] == "guardrail_refused"


def test_invented_model_names_are_not_memoised():
    key = KeyInfo(1, "cp-x", 1, None, None, None, (("key", 1), ("user", 1), ("global", None)))
    snapshot = Snapshot(version=1, models={"gpt-4o": ModelInfo("gpt-4o", "openai", frozenset(), 1.0, 1.0)})

    refusals = [snapshot.resolve(key, f"invented-{i}") for i in range(50)]
    snapshot.resolve(key, "gpt-4o")

    assert all(isinstance(r, Refusal) for r in refusals)
    assert list(snapshot._routes) == [(1, "gpt-4o")]


def test_repeated_model_key_is_refused(gateway, world):
    raw = b'{"model": "gpt-4o", "model": "mistral", "messages": [{"role": "user", "content": "hi"}]}'

    response = httpx.post(
        f"{gateway.url}/v1/chat/completions",
        content=raw,
        headers={"authorization": f"Bearer {world.secret}", "content-type": "application/json"},
    )

    # Parsers disagree on which "model" wins: the gateway routes on none of them (docs/decisions.md).
    assert response.status_code == 400
    assert (response.json()["error"]["code"], response.json()["error"]["param"]) == ("duplicate_key", "model")
    assert world.sim.requests == {}


def test_deadline_also_bounds_a_slow_stream(world, transactional_db):
    from gateway.app import GatewayApp
    from gateway.config import ConfigHolder
    from gateway.logsink import LogSink
    from health.breaker.factory import build_engine
    from health.breaker.types import ConfigSet, ManualClock
    from tests.gateway.conftest import TEST_BREAKER
    from tests.servers import serve

    world.sim.behaviours["openai"] = world.sim.behaviour("openai").updated({"chunks": 50, "chunk_delay_ms": 100})
    app = GatewayApp(
        config=ConfigHolder(),
        engine=build_engine(clock=ManualClock(), config=ConfigSet(TEST_BREAKER)),
        sink=LogSink(flush_seconds=0.05),
        deadline_seconds=0.5,
    )
    with (
        serve(app, lifespan=True) as url,
        httpx.stream(
            "POST",
            f"{url}/v1/chat/completions",
            json={**BODY, "stream": True},
            headers={"authorization": f"Bearer {world.secret}"},
            timeout=10,
        ) as response,
    ):
        events = [line for line in response.iter_lines() if line.startswith("data: ")]

    assert "data: [DONE]" not in events
    assert json.loads(events[-1].removeprefix("data: "))["error"]["code"] == "stream_interrupted"
    assert app.engine.get("openai", "gpt-4o").last_failure_status == "timeout"


def test_reset_close_delimited_stream_is_an_interruption(world, transactional_db):
    """An upstream that streams without length or chunking, then resets the connection mid-way."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]

    def serve_once():
        conn, _ = listener.accept()
        conn.recv(65536)
        conn.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n"
            b'data: {"object":"chat.completion.chunk","choices":[]}\n\n'
        )
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        conn.close()  # RST, not FIN

    threading.Thread(target=serve_once, daemon=True).start()
    Provider.objects.filter(name="openai").update(base_url=f"http://127.0.0.1:{port}/v1")
    from gateway.app import GatewayApp
    from gateway.config import ConfigHolder
    from health.breaker.factory import build_engine
    from tests.servers import serve

    app = GatewayApp(config=ConfigHolder(), engine=build_engine())
    with (
        serve(app, lifespan=True) as url,
        httpx.stream(
            "POST",
            f"{url}/v1/chat/completions",
            json={**BODY, "stream": True},
            headers={"authorization": f"Bearer {world.secret}"},
            timeout=10,
        ) as response,
    ):
        events = [line for line in response.iter_lines() if line.startswith("data: ")]
    listener.close()

    assert "data: [DONE]" not in events
    assert json.loads(events[-1].removeprefix("data: "))["error"]["code"] == "stream_interrupted"
