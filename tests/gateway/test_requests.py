"""Gateway behaviour a client sees: errors in OpenAI shape, streaming, logs, config reload, the SDK."""

import json
import threading

import httpx
import pytest

from catalog.enums import ScopeType
from catalog.models import LlmModel
from catalog.services import api_key_revoke
from chains.models import FallbackChain
from chains.services import ChainInput, EntryInput, chain_create
from core.configbus import config_publish
from gateway.config import wait_for_version
from health.breaker.types import State
from requestlogs.models import RequestLog
from tests.factories import AliasFactory, GuardrailFactory, RoutingRuleFactory, TeamFactory
from tests.factories.keys import make_key
from tests.servers import within

BODY = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}


def post(gateway, secret, body=BODY, **kwargs):
    return httpx.post(
        f"{gateway.url}/v1/chat/completions",
        json=body,
        headers={"authorization": f"Bearer {secret}"},
        timeout=10,
        **kwargs,
    )


def sse_events(lines):
    return [line.removeprefix("data: ") for line in lines if line.startswith("data: ")]


@pytest.mark.parametrize(
    ("headers", "content", "status", "code"),
    [
        ({}, json.dumps(BODY), 401, "missing_api_key"),
        ({"authorization": "Bearer cp-nope"}, json.dumps(BODY), 401, "invalid_api_key"),
        ({"authorization": "Basic abc"}, json.dumps(BODY), 401, "invalid_api_key"),
        (None, "{not json", 400, "invalid_json"),
        (None, "[1, 2]", 400, "invalid_json"),
        (None, json.dumps({"messages": BODY["messages"]}), 400, "missing_model"),
        (None, json.dumps({"model": "gpt-4o"}), 400, "missing_messages"),
        # An upstream that takes any truthy value would stream what the gateway reads as a whole answer.
        (None, json.dumps({**BODY, "stream": 1}), 400, "invalid_type"),
        (None, json.dumps({**BODY, "stream": "true"}), 400, "invalid_type"),
        (None, json.dumps({**BODY, "model": "gpt-99"}), 404, "model_not_found"),
        (None, json.dumps({**BODY, "pad": "x" * 70_000}), 413, "request_too_large"),
    ],
)
def test_gateway_errors_are_openai_shaped(gateway, world, headers, content, status, code):
    headers = {"authorization": f"Bearer {world.secret}"} if headers is None else headers

    response = httpx.post(
        f"{gateway.url}/v1/chat/completions", content=content, headers={**headers, "content-type": "application/json"}
    )

    assert response.status_code == status
    error = response.json()["error"]
    assert error["code"] == code
    assert error["message"]
    assert world.sim.requests == {}


def test_revoked_key_is_refused_after_reload(gateway, world):
    assert post(gateway, world.secret).status_code == 200

    api_key_revoke(actor=None, key=world.key)
    gateway.app.config.reload()

    assert post(gateway, world.secret).status_code == 401


def test_models_lists_catalog_and_aliases(gateway, world):
    AliasFactory(name="smart", model=LlmModel.objects.get(name="gpt-4o"))
    gateway.app.config.reload()

    response = httpx.get(f"{gateway.url}/v1/models", headers={"authorization": f"Bearer {world.secret}"})

    assert [m["id"] for m in response.json()["data"]] == ["claude", "gpt-4o", "mistral", "smart"]


def test_health_and_readiness(gateway, world):
    assert httpx.get(f"{gateway.url}/healthz").json() == {"status": "ok"}
    ready = httpx.get(f"{gateway.url}/readyz")
    assert ready.status_code == 200
    assert ready.json()["ready"] is True


def test_streaming_passes_chunks_before_the_upstream_finishes(gateway, world):
    gate = threading.Event()
    world.sim.gates["openai"] = gate

    with httpx.stream(
        "POST",
        f"{gateway.url}/v1/chat/completions",
        json={**BODY, "stream": True},
        headers={"authorization": f"Bearer {world.secret}"},
        timeout=10,
    ) as response:
        lines = response.iter_lines()
        first = next(line for line in lines if line.startswith("data: "))
        finished_before_release = world.sim.completed_streams["openai"]
        gate.set()
        rest = sse_events(list(lines))

    assert json.loads(first.removeprefix("data: "))["object"] == "chat.completion.chunk"
    assert finished_before_release == 0
    assert rest[-1] == "[DONE]"
    assert response.headers["x-vidai-model"] == "gpt-4o"


def test_midstream_failure_ends_with_error_event_and_never_fails_over(gateway, world):
    world.sim.behaviours["openai"] = world.sim.behaviour("openai").updated(
        {"mode": "midstream", "fail_after_chunks": 2}
    )

    with httpx.stream(
        "POST",
        f"{gateway.url}/v1/chat/completions",
        json={**BODY, "stream": True},
        headers={"authorization": f"Bearer {world.secret}"},
        timeout=10,
    ) as response:
        events = sse_events(list(response.iter_lines()))

    assert len(events) == 3
    assert "[DONE]" not in events
    assert json.loads(events[-1])["error"]["code"] == "stream_interrupted"
    assert world.sim.requests == {"openai": 1}
    assert gateway.app.engine.get("openai", "gpt-4o").failure_count == 1


def test_stream_without_done_is_finished_cleanly(gateway, world):
    world.sim.behaviours["openai"] = world.sim.behaviour("openai").updated({"mode": "nodone"})

    with httpx.stream(
        "POST",
        f"{gateway.url}/v1/chat/completions",
        json={**BODY, "stream": True},
        headers={"authorization": f"Bearer {world.secret}"},
        timeout=10,
    ) as response:
        events = sse_events(list(response.iter_lines()))

    assert events[-1] == "[DONE]"
    assert events.count("[DONE]") == 1
    assert gateway.app.engine.get("openai", "gpt-4o").failure_count == 0


def test_stream_falls_back_before_the_first_chunk(gateway, world):
    engine = gateway.app.engine
    from health.breaker.types import Outcome

    for _ in range(3):
        engine.record(engine.allow("openai", "gpt-4o"), Outcome.of_status(500))

    with httpx.stream(
        "POST",
        f"{gateway.url}/v1/chat/completions",
        json={**BODY, "stream": True},
        headers={"authorization": f"Bearer {world.secret}"},
        timeout=10,
    ) as response:
        events = sse_events(list(response.iter_lines()))

    assert response.headers["x-vidai-fallback"] == "true"
    assert json.loads(events[0])["model"] == "claude"
    assert events[-1] == "[DONE]"


def test_every_request_produces_exactly_one_log_row(gateway, world):
    world.sim.behaviours["openai"] = world.sim.behaviour("openai").updated({"mode": "status", "status": 503})
    statuses = [post(gateway, world.secret).status_code for _ in range(4)]
    statuses.append(post(gateway, "cp-wrong").status_code)

    assert gateway.sink.flush(timeout=10)

    rows = list(RequestLog.objects.order_by("created_at"))
    assert statuses == [503, 503, 503, 200, 401]
    assert [r.status for r in rows] == statuses
    assert len({r.request_id for r in rows}) == 5
    served = rows[3]
    assert (served.served_provider, served.served_model, served.chain_step) == ("backup", "claude", 1)
    assert (served.fallback_triggered, served.fallback_from_provider, served.fallback_original_model) == (
        True,
        "openai",
        "gpt-4o",
    )
    assert (served.tokens_in, served.tokens_out) == (4, 6)
    assert float(served.cost_usd) == pytest.approx((4 * 3.0 + 6 * 3.0) / 1e6)
    assert served.attempts[0]["provider"] == "backup"
    assert rows[0].attempts[0]["status"] == 503
    assert rows[4].key_id is None


def test_a_request_refused_for_its_messages_is_logged_with_the_model_it_asked_for(gateway, world):
    refused = post(gateway, world.secret, body={"model": "gpt-4o", "stream": True, "messages": 5})
    unnamed = post(gateway, world.secret, body={"model": "x" * 300, "messages": 5})

    assert gateway.sink.flush(timeout=10)

    assert (refused.status_code, unnamed.status_code) == (400, 400)
    rows = list(RequestLog.objects.order_by("created_at"))
    assert [(r.error_kind, r.requested_model, r.stream) for r in rows] == [
        ("missing_messages", "gpt-4o", True),
        ("invalid_model", "", False),
    ]
    assert world.sim.requests == {}


def test_routing_rule_alias_and_scope_precedence_pick_the_chain(gateway, world):
    team = TeamFactory()
    created = make_key(user=world.user, team=team, name="team key")
    gpt, claude = LlmModel.objects.get(name="gpt-4o"), LlmModel.objects.get(name="claude")
    mistral = LlmModel.objects.get(name="mistral")
    # Team callers asking for "fast" get claude (alias -> gpt-4o, team rule gpt-4o -> claude) ...
    AliasFactory(name="fast", model=gpt)
    RoutingRuleFactory(
        name="team to claude", source_model=gpt, target_model=claude, scope_type=ScopeType.TEAM, scope_id=team.pk
    )
    # ... and claude's chain for the team wins over the global one.
    chain_create(
        actor=None, data=ChainInput(name="claude global", source_model="claude", entries=[EntryInput("gpt-4o")])
    )
    chain_create(
        actor=None,
        data=ChainInput(
            name="claude team",
            source_model="claude",
            entries=[EntryInput("mistral")],
            scope_type=ScopeType.TEAM,
            scope_id=team.pk,
        ),
    )
    gateway.app.config.reload()
    engine = gateway.app.engine
    from health.breaker.types import Outcome

    for _ in range(3):
        engine.record(engine.allow("backup", "claude"), Outcome.of_status(503))

    team_response = post(gateway, created.secret, {**BODY, "model": "fast"})
    other_response = post(gateway, world.secret, {**BODY, "model": "fast"})

    assert team_response.headers["x-vidai-model"] == "mistral"
    assert team_response.headers["x-vidai-requested-model"] == "fast"
    assert team_response.headers["x-vidai-fallback-from"] == "backup"
    assert other_response.headers["x-vidai-model"] == "gpt-4o"
    assert mistral.name == "mistral"


def test_guardrail_refuses_or_rewrites(gateway, world):
    gpt, mistral = LlmModel.objects.get(name="gpt-4o"), LlmModel.objects.get(name="mistral")
    GuardrailFactory(
        name="no claude",
        model=LlmModel.objects.get(name="claude"),
        action="deny",
        message="claude is not approved for this key",
    )
    GuardrailFactory(name="cheap", model=gpt, action="rewrite", target_model=mistral)
    gateway.app.config.reload()

    refused = post(gateway, world.secret, {**BODY, "model": "claude"})
    rewritten = post(gateway, world.secret)

    assert refused.status_code == 403
    assert refused.json()["error"]["message"] == "Refused by guardrail “no claude”: claude is not approved for this key"
    assert rewritten.headers["x-vidai-model"] == "mistral"
    assert rewritten.headers["x-vidai-requested-model"] == "gpt-4o"


def test_chain_saved_is_used_by_the_next_request(gateway, world):
    FallbackChain.objects.all().delete()
    config_publish()
    engine = gateway.app.engine
    from health.breaker.types import Outcome

    for _ in range(3):
        engine.record(engine.allow("openai", "gpt-4o"), Outcome.of_status(503))
    assert engine.get("openai", "gpt-4o").state is State.OPEN

    chain_create(actor=None, data=ChainInput(name="new", source_model="gpt-4o", entries=[EntryInput("mistral")]))
    version = gateway.app.config._wanted

    assert wait_for_version(gateway.app.config, version, timeout=1.0)
    assert post(gateway, world.secret).headers["x-vidai-model"] == "mistral"


def test_openai_sdk_works_unchanged(gateway, world):
    from openai import OpenAI

    client = OpenAI(base_url=f"{gateway.url}/v1", api_key=world.secret, max_retries=0)

    completion = client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    stream = client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}], stream=True)
    pieces = [chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices]

    assert completion.choices[0].message.content == "Simulated reply from openai for gpt-4o."
    assert completion.model == "gpt-4o"
    assert "".join(pieces) == "word1 word2 word3 word4 "


@pytest.mark.parametrize("served", ["gateway", "production_server_gateway"])
def test_client_disconnect_cancels_the_upstream_call(served, world, request):
    """Under any ASGI server (a task watching `receive`) and under run_gateway's (the server's disconnect hook)."""
    import socket

    gateway = request.getfixturevalue(served)

    from catalog.models import Provider

    Provider.objects.filter(name="openai").update(base_url=f"{world.sim_url}/hang/v1", read_timeout=60)
    gateway.app.config.reload()
    body = json.dumps(BODY).encode()
    host, port = gateway.url.removeprefix("http://").split(":")
    client = socket.create_connection((host, int(port)))
    client.sendall(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"Authorization: Bearer {world.secret}\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        + body
    )

    reached = within(lambda: world.sim.requests["hang"] == 1)
    client.close()
    abandoned = within(lambda: world.sim.abandoned["hang"] == 1)
    logged = within(lambda: gateway.sink.flush(timeout=1) and RequestLog.objects.exists())

    assert (reached, abandoned, logged) == (True, True, True)
    row = RequestLog.objects.get()
    assert (row.status, row.error_kind) == (499, "client_disconnected")
    circuit = gateway.app.engine.get("openai", "gpt-4o")
    # A cancelled call is neither a success nor a failure for the breaker.
    assert (circuit.failure_count, circuit.total_requests) == (0, 0)
