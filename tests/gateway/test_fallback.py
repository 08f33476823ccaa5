"""The gateway over real sockets against the simulator: breakers, fallback, attribution headers."""

import json
import threading

import httpx
import pytest

from chains.models import FallbackChain
from chains.services import chain_set_enabled
from health.breaker.types import ConfigSet, Control, ControlKind, Outcome, State
from tests.gateway.conftest import TEST_BREAKER, parsed_alive_during_stream

BODY = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}


def post(gateway, world, body=BODY, **kwargs):
    return httpx.post(
        f"{gateway.url}/v1/chat/completions", json=body, headers=gateway.headers(world.secret), timeout=10, **kwargs
    )


def vidai(response) -> dict[str, str]:
    # x-vidai-attempts is checked on its own (always 1 here: the default path makes one call).
    assert response.headers.get("x-vidai-attempts") in (None, "1")
    skip = ("x-vidai-request-id", "x-vidai-attempts")
    return {k: v for k, v in response.headers.items() if k.startswith("x-vidai-") and k not in skip}


def open_circuit(gateway, world, provider="openai", model="gpt-4o", *, via_engine=False):
    if via_engine:
        engine = gateway.app.engine
        for _ in range(3):
            engine.record(engine.allow(provider, model), Outcome.of_status(503))
    else:
        world.sim.behaviours[provider] = world.sim.behaviour(provider).updated({"mode": "status", "status": 503})
        for _ in range(3):
            assert post(gateway, world, {**BODY, "model": model}).status_code == 503
    assert gateway.app.engine.get(provider, model).state is State.OPEN


def test_closed_target_serves_primary_without_fallback_headers(gateway, world):
    response = post(gateway, world)

    assert response.status_code == 200
    assert response.json()["model"] == "gpt-4o"
    assert vidai(response) == {"x-vidai-model": "gpt-4o"}
    assert response.headers["x-vidai-attempts"] == "1"
    assert world.sim.requests["openai"] == 1


def test_closed_target_failure_goes_back_to_client_and_is_counted(gateway, world):
    world.sim.behaviours["openai"] = world.sim.behaviour("openai").updated({"mode": "status", "status": 503})

    response = post(gateway, world)

    assert response.status_code == 503
    assert response.json()["error"]["message"] == "Simulated 503 from openai"
    assert world.sim.requests == {"openai": 1}
    circuit = gateway.app.engine.get("openai", "gpt-4o")
    assert (circuit.failure_count, circuit.total_requests, circuit.last_failure_status) == (1, 1, 503)


def test_open_circuit_serves_first_healthy_entry_with_four_headers(gateway, world):
    open_circuit(gateway, world)

    responses = [post(gateway, world) for _ in range(5)]

    assert [r.status_code for r in responses] == [200] * 5
    assert vidai(responses[0]) == {
        "x-vidai-model": "claude",
        "x-vidai-requested-model": "gpt-4o",
        "x-vidai-fallback": "true",
        "x-vidai-fallback-from": "openai",
    }
    assert responses[0].json()["model"] == "claude"
    # While open, nothing more reached the failing upstream.
    assert world.sim.requests == {"openai": 3, "backup": 5}


def test_open_circuit_skips_entries_whose_circuit_is_open(gateway, world):
    open_circuit(gateway, world)
    open_circuit(gateway, world, provider="backup", model="claude", via_engine=True)

    response = post(gateway, world)

    assert vidai(response)["x-vidai-model"] == "mistral"
    assert world.sim.requests["backup"] == 0


def test_half_open_lets_exactly_one_probe_through(gateway, world):
    open_circuit(gateway, world)
    gateway.clock.advance(31)

    probe = post(gateway, world)
    after = [post(gateway, world) for _ in range(3)]

    # The probe went to the (still failing) primary and its failure reached the client.
    assert probe.status_code == 503
    assert [vidai(r)["x-vidai-model"] for r in after] == ["claude"] * 3
    assert world.sim.requests["openai"] == 4
    circuit = gateway.app.engine.get("openai", "gpt-4o")
    assert (circuit.state, circuit.consecutive_opens) == (State.OPEN, 2)


def test_successful_probe_closes_the_circuit(gateway, world):
    open_circuit(gateway, world)
    world.sim.behaviours.pop("openai")
    gateway.clock.advance(31)

    probe = post(gateway, world)
    next_one = post(gateway, world)

    assert vidai(probe) == {"x-vidai-model": "gpt-4o"}
    assert vidai(next_one) == {"x-vidai-model": "gpt-4o"}
    assert gateway.app.engine.get("openai", "gpt-4o").state is State.CLOSED


def test_optimistic_primary_when_every_entry_is_open(gateway, world):
    open_circuit(gateway, world, via_engine=True)
    open_circuit(gateway, world, provider="backup", model="claude", via_engine=True)
    open_circuit(gateway, world, provider="third", model="mistral", via_engine=True)

    response = post(gateway, world)

    assert response.status_code == 200
    assert vidai(response) == {"x-vidai-model": "gpt-4o"}
    assert world.sim.requests == {"openai": 1}


def test_disabled_chain_is_ignored(gateway, world):
    chain = FallbackChain.objects.get()
    chain_set_enabled(actor=None, chain_id=chain.pk, enabled=False)
    assert gateway.app.config.current is not None
    gateway.app.config.reload()
    open_circuit(gateway, world, via_engine=True)

    response = post(gateway, world)

    assert vidai(response) == {"x-vidai-model": "gpt-4o"}
    assert world.sim.requests == {"openai": 1}


@pytest.mark.parametrize(
    ("behaviour", "status", "code"), [("hang", 504, "timeout"), ("close", 502, "connection_error")]
)
def test_upstream_timeout_and_drop_are_openai_errors_and_count(gateway, world, behaviour, status, code):
    from catalog.models import Provider

    Provider.objects.filter(name="openai").update(base_url=f"{world.sim_url}/{behaviour}/v1", read_timeout=0.3)
    gateway.app.config.reload()

    response = post(gateway, world)

    assert response.status_code == status
    assert response.json()["error"]["code"] == code
    circuit = gateway.app.engine.get("openai", "gpt-4o")
    assert (circuit.failure_count, circuit.last_failure_status) == (1, code)


def test_unreachable_upstream_is_502(gateway, world):
    from catalog.models import Provider

    Provider.objects.filter(name="openai").update(base_url="http://127.0.0.1:9/v1")
    gateway.app.config.reload()

    response = post(gateway, world)

    assert response.status_code == 502
    assert response.json()["error"]["code"] == "connection_error"


def hold(gateway, *controls) -> None:
    """Operator holds, as the health app's configuration would deliver them to the engine."""
    gateway.app.engine.configure(
        ConfigSet(
            default=TEST_BREAKER,
            controls={
                (provider, model): Control(
                    kind=ControlKind.DRAINED if not model else ControlKind.FORCED_OPEN,
                    provider=provider,
                    model=model,
                    reason="maintenance",
                )
                for provider, model in controls
            },
        )
    )


def test_forced_open_primary_is_served_by_its_chain_and_never_called(gateway, world):
    hold(gateway, ("openai", "gpt-4o"))

    responses = [post(gateway, world) for _ in range(3)]

    assert [r.status_code for r in responses] == [200, 200, 200]
    assert {vidai(r)["x-vidai-model"] for r in responses} == {"claude"}
    assert world.sim.requests.get("openai", 0) == 0


def test_held_primary_without_an_available_entry_is_refused_not_tried(gateway, world):
    # The primary forced open and both chain entries' provider drained: no optimistic attempt on a hold.
    hold(gateway, ("openai", "gpt-4o"), ("backup", ""), ("third", ""))

    response = post(gateway, world)

    assert response.status_code == 503
    assert response.json()["error"]["code"] == "circuit_held"
    assert "held open by an operator" in response.json()["error"]["message"]
    assert world.sim.requests == {}


def test_drained_provider_gets_no_traffic_even_without_a_chain(gateway, world):
    chain_set_enabled(actor=None, chain_id=FallbackChain.objects.get().pk, enabled=False)
    gateway.app.config.reload()
    hold(gateway, ("openai", ""))

    response = post(gateway, world)

    assert response.status_code == 503
    assert response.json()["error"]["code"] == "circuit_held"
    assert world.sim.requests.get("openai", 0) == 0


def test_the_fallback_gets_the_clients_body_with_only_the_model_changed(gateway, world):
    open_circuit(gateway, world)
    body = {
        **BODY,
        "temperature": 0.25,
        "metadata": {"model": "not this one", "note": "caf\u00e9 \u2603"},
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"model": {"type": "string"}}}}],
    }

    response = post(gateway, world, body)

    assert response.status_code == 200
    assert vidai(response)["x-vidai-model"] == "claude"
    assert json.loads(world.sim.last_bodies["backup"]) == {**body, "model": "claude"}


def test_a_body_with_many_values_is_renamed_for_the_fallback_in_a_worker_thread(gateway, world):
    """6,000 values in 53 kB: over the event loop's value limit, so the rename goes to a worker thread
    (the byte limit leads there too, but this gateway's body limit is the same 64 KiB)."""
    open_circuit(gateway, world)
    body = {**BODY, "logit_bias": {str(n): 1 for n in range(6_000)}}

    response = post(gateway, world, body)

    assert response.status_code == 200
    assert vidai(response)["x-vidai-model"] == "claude"
    assert json.loads(world.sim.last_bodies["backup"]) == {**body, "model": "claude"}


def test_no_parsed_body_is_alive_while_a_fallback_streams(gateway, world):
    """A small body renamed for the fallback: while the fallback streams, nothing the parse allocated
    (gateway/bodies.py) is alive."""
    open_circuit(gateway, world)
    gate = world.sim.gates["backup"] = threading.Event()
    # 20 kB: small enough to be parsed in the event loop
    body = {**BODY, "stream": True, "messages": [{"role": "user", "content": "w " * 10_000}]}
    response, first, rest, alive = parsed_alive_during_stream(
        gateway.url, gate, gateway.headers(world.secret), json=body
    )

    assert response.headers["x-vidai-fallback"] == "true"
    assert first and rest.rstrip().endswith(b"[DONE]")
    assert alive < 2_000  # the body's text alone is 20,000 bytes
