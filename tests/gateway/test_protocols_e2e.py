"""Both client protocols against both upstream protocols, with the official SDKs, over real sockets.

An OpenAI-SDK client served by an Anthropic Messages upstream, and an Anthropic-SDK client served by an
OpenAI upstream (the simulator speaks both): plain answers, streams, tool use with a tool-result turn, an
upstream error in the client's own error type, and a fallback across protocols while the primary's circuit
is open.
"""

from decimal import Decimal
from typing import Any

import anthropic
import httpx
import openai
import orjson
import pytest

from catalog.models import LlmModel, Provider
from chains.services import ChainInput, EntryInput, chain_create
from gateway.app import GatewayApp
from gateway.config import ConfigHolder
from gateway.logsink import LogSink
from health.breaker.factory import build_engine
from health.breaker.types import ConfigSet, ManualClock, Outcome
from requestlogs.models import RequestLog
from tests.factories import LlmModelFactory, ProviderFactory, UserFactory
from tests.factories.keys import make_key
from tests.gateway.conftest import TEST_BREAKER
from tests.servers import serve

WORDS = "word1 word2 word3 word4 "
TOOLS_OPENAI = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Look something up.",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
        },
    }
]
TOOLS_ANTHROPIC = [
    {
        "name": "lookup",
        "description": "Look something up.",
        "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
    }
]


def _provider(name: str, protocol: str, url: str) -> Provider:
    path = f"{url}/{name}/v1" if protocol == "openai" else f"{url}/{name}"
    return ProviderFactory(
        name=name, protocol=protocol, base_url=path, api_key=f"sk-{name}", connect_timeout=2, read_timeout=5
    )


def _model(name: str, provider: Provider, **extra: Any) -> LlmModel:
    return LlmModelFactory(
        name=name,
        provider=provider,
        capabilities=["text", "tools"],
        input_price_per_mtok=Decimal("1"),
        output_price_per_mtok=Decimal("2"),
        **extra,
    )


@pytest.fixture
def rig(transactional_db, sim):
    simulator, url = sim
    gpt = _model("gpt-4o", _provider("openai", "openai", url))
    claude = _model("claude-sonnet", _provider("anthropic", "anthropic", url))
    LlmModel.objects.filter(pk=claude.pk).update(max_output_tokens=1024)
    chain_create(
        actor=None, data=ChainInput(name="gpt chain", source_model=gpt.name, entries=[EntryInput(claude.name)])
    )
    chain_create(
        actor=None, data=ChainInput(name="claude chain", source_model=claude.name, entries=[EntryInput(gpt.name)])
    )
    key = make_key(user=UserFactory())
    clock = ManualClock()
    engine = build_engine(clock=clock, config=ConfigSet(default=TEST_BREAKER))
    app = GatewayApp(config=ConfigHolder(), engine=engine, sink=LogSink(flush_seconds=0.05), max_body=256 * 1024)
    with serve(app, lifespan=True) as gateway_url:
        yield {
            "sim": simulator,
            "url": gateway_url,
            "secret": key.secret,
            "engine": engine,
            "oa": openai.OpenAI(base_url=f"{gateway_url}/v1", api_key=key.secret, max_retries=0, timeout=20),
            "an": anthropic.Anthropic(base_url=gateway_url, api_key=key.secret, max_retries=0, timeout=20),
            "reload": app.config.reload,
            "sink": app.sink,
        }


def _open(engine, provider: str, model: str) -> None:
    for _ in range(3):
        engine.record(engine.allow(provider, model), Outcome.of_status(503))


def _fault(sim, name: str, **behaviour: Any) -> None:
    sim.behaviours[name] = sim.behaviour(name).updated(behaviour)


# --- An OpenAI client, an Anthropic upstream --------------------------------------------------------------


def test_openai_sdk_answered_by_an_anthropic_upstream(rig):
    completion = rig["oa"].chat.completions.create(
        model="claude-sonnet",
        messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}],
        stop=["END"],
    )

    assert completion.choices[0].message.content == "Simulated reply from anthropic for claude-sonnet."
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage is not None and completion.usage.completion_tokens > 0
    sent = orjson.loads(rig["sim"].last_bodies["anthropic"])
    assert sent["system"] == "Be brief." or sent["system"][0]["text"] == "Be brief."
    assert sent["max_tokens"] == 1024  # the catalog's default: the OpenAI client did not say
    assert sent["stop_sequences"] == ["END"]
    headers = rig["sim"].last_headers["anthropic"]
    assert headers["x-api-key"] == "sk-anthropic" and headers["anthropic-version"]


def test_openai_sdk_streams_from_an_anthropic_upstream(rig):
    chunks = list(
        rig["oa"].chat.completions.create(
            model="claude-sonnet",
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
            stream_options={"include_usage": True},
        )
    )

    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == WORDS
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 4


def test_openai_sdk_tool_use_through_an_anthropic_upstream(rig):
    first = rig["oa"].chat.completions.create(
        model="claude-sonnet", messages=[{"role": "user", "content": "find x"}], tools=TOOLS_OPENAI
    )
    call = first.choices[0].message.tool_calls[0]
    assert first.choices[0].finish_reason == "tool_calls"
    assert (call.id, call.function.name, orjson.loads(call.function.arguments)) == (
        "toolu_sim_1",
        "lookup",
        {"query": "sim"},
    )

    second = rig["oa"].chat.completions.create(
        model="claude-sonnet",
        tools=TOOLS_OPENAI,
        messages=[
            {"role": "user", "content": "find x"},
            first.choices[0].message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": "42 apples"},
        ],
    )

    assert second.choices[0].message.content == "Tool said: 42 apples"
    sent = orjson.loads(rig["sim"].last_bodies["anthropic"])
    result = sent["messages"][-1]["content"][0]
    assert (result["type"], result["tool_use_id"]) == ("tool_result", "toolu_sim_1")


def test_openai_sdk_streams_a_tool_call_from_an_anthropic_upstream(rig):
    chunks = list(
        rig["oa"].chat.completions.create(
            model="claude-sonnet", messages=[{"role": "user", "content": "find x"}], tools=TOOLS_OPENAI, stream=True
        )
    )
    calls = [tc for c in chunks if c.choices and c.choices[0].delta.tool_calls for tc in c.choices[0].delta.tool_calls]

    assert calls[0].id == "toolu_sim_1" and calls[0].function.name == "lookup"
    assert orjson.loads("".join(tc.function.arguments or "" for tc in calls)) == {"query": "sim"}


def test_an_anthropic_overload_reaches_the_openai_sdk_as_its_own_error(rig):
    _fault(rig["sim"], "anthropic", mode="status", status=529)

    with pytest.raises(openai.InternalServerError) as caught:
        rig["oa"].chat.completions.create(model="claude-sonnet", messages=[{"role": "user", "content": "hi"}])

    assert caught.value.status_code == 503
    assert caught.value.body["code"] == "overloaded_error"


def test_a_parameter_anthropic_cannot_carry_is_refused_before_any_call(rig):
    with pytest.raises(openai.BadRequestError) as caught:
        rig["oa"].chat.completions.create(model="claude-sonnet", messages=[{"role": "user", "content": "hi"}], n=2)

    assert caught.value.body["param"] == "n"
    assert caught.value.body["code"] == "unsupported_parameter"
    assert rig["sim"].requests.get("anthropic", 0) == 0


# --- An Anthropic client, an OpenAI upstream --------------------------------------------------------------


def test_anthropic_sdk_answered_by_an_openai_upstream(rig):
    message = rig["an"].messages.create(
        model="gpt-4o",
        max_tokens=200,
        system="Be brief.",
        messages=[{"role": "user", "content": "hi"}],
        stop_sequences=["END"],
    )

    assert message.content[0].text == "Simulated reply from openai for gpt-4o."
    assert message.stop_reason == "end_turn"
    assert message.usage.output_tokens > 0
    sent = orjson.loads(rig["sim"].last_bodies["openai"])
    assert sent["messages"][0] == {"role": "system", "content": "Be brief."}
    assert (sent["max_tokens"], sent["stop"]) == (200, ["END"])


def test_anthropic_sdk_streams_from_an_openai_upstream(rig):
    with rig["an"].messages.stream(
        model="gpt-4o", max_tokens=200, messages=[{"role": "user", "content": "hi"}]
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()

    assert text == WORDS
    assert final.stop_reason == "end_turn"
    assert final.usage.output_tokens == 4


def test_anthropic_sdk_tool_use_through_an_openai_upstream(rig):
    first = rig["an"].messages.create(
        model="gpt-4o", max_tokens=200, tools=TOOLS_ANTHROPIC, messages=[{"role": "user", "content": "find x"}]
    )
    use = next(b for b in first.content if b.type == "tool_use")
    assert first.stop_reason == "tool_use"
    assert (use.id, use.name, use.input) == ("call_sim_1", "lookup", {"query": "sim"})

    second = rig["an"].messages.create(
        model="gpt-4o",
        max_tokens=200,
        tools=TOOLS_ANTHROPIC,
        messages=[
            {"role": "user", "content": "find x"},
            {"role": "assistant", "content": [b.model_dump() for b in first.content]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "42 apples"}]},
        ],
    )

    assert second.content[0].text == "Tool said: 42 apples"
    sent = orjson.loads(rig["sim"].last_bodies["openai"])
    assert sent["messages"][-1] == {"role": "tool", "tool_call_id": "call_sim_1", "content": "42 apples"}


def test_anthropic_sdk_streams_a_tool_call_from_an_openai_upstream(rig):
    with rig["an"].messages.stream(
        model="gpt-4o", max_tokens=200, tools=TOOLS_ANTHROPIC, messages=[{"role": "user", "content": "find x"}]
    ) as stream:
        final = stream.get_final_message()

    use = next(b for b in final.content if b.type == "tool_use")
    assert (use.id, use.input, final.stop_reason) == ("call_sim_1", {"query": "sim"}, "tool_use")


def test_an_openai_rate_limit_reaches_the_anthropic_sdk_as_its_own_error(rig):
    _fault(rig["sim"], "openai", mode="status", status=429)

    with pytest.raises(anthropic.RateLimitError) as caught:
        rig["an"].messages.create(model="gpt-4o", max_tokens=10, messages=[{"role": "user", "content": "hi"}])

    assert caught.value.status_code == 429
    assert caught.value.body["error"]["type"] == "rate_limit_error"


def test_the_gateways_own_refusals_reach_the_anthropic_sdk_in_its_shape(rig):
    with pytest.raises(anthropic.NotFoundError):
        rig["an"].messages.create(model="nope", max_tokens=10, messages=[{"role": "user", "content": "hi"}])
    bad = anthropic.Anthropic(base_url=rig["url"], api_key="cp-wrong", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError):
        bad.messages.create(model="gpt-4o", max_tokens=10, messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(anthropic.BadRequestError) as caught:
        rig["an"].messages.create(
            model="gpt-4o", max_tokens=10, extra_body={"top_k": 5}, messages=[{"role": "user", "content": "hi"}]
        )
    assert "top_k" in caught.value.message
    assert rig["sim"].requests.get("openai", 0) == 0


def test_anthropic_endpoints_the_gateway_does_not_serve_answer_in_the_anthropic_shape(rig):
    """count_tokens (which Anthropic clients call) is not served: the SDK must read the 404 as its own error."""
    with pytest.raises(anthropic.NotFoundError) as caught:
        rig["an"].messages.count_tokens(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    body = caught.value.body
    assert (body["type"], body["error"]["type"]) == ("error", "not_found_error")
    assert "/v1/messages/count_tokens" in body["error"]["message"]
    assert rig["sim"].requests == {}


def test_an_anthropic_request_refused_before_translation_is_logged_with_what_it_asked_for(rig):
    asked = {"max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
    with pytest.raises(anthropic.BadRequestError):
        rig["an"].messages.create(model="gpt-4o", stream=True, extra_body={"top_k": 5}, **asked)
    with pytest.raises(anthropic.BadRequestError):
        rig["an"].messages.create(model="gpt-4o", max_tokens=0, messages=asked["messages"])
    with pytest.raises(anthropic.BadRequestError):
        rig["an"].messages.create(model="x" * 300, extra_body={"top_k": 5}, **asked)

    assert rig["sink"].flush(timeout=10)

    rows = RequestLog.objects.order_by("created_at")
    assert [(r.error_kind, r.requested_model, r.stream) for r in rows] == [
        ("unsupported_parameter", "gpt-4o", True),
        ("missing_max_tokens", "gpt-4o", False),
        ("unsupported_parameter", "", False),
    ]
    assert rig["sim"].requests.get("openai", 0) == 0


# --- Fallback across protocols ---------------------------------------------------------------------------


def test_an_openai_client_falls_back_to_the_anthropic_entry_while_the_primary_is_open(rig):
    _open(rig["engine"], "openai", "gpt-4o")

    raw = rig["oa"].chat.completions.with_raw_response.create(
        model="gpt-4o", messages=[{"role": "user", "content": "hi"}]
    )
    completion = raw.parse()
    chunks = list(
        rig["oa"].chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}], stream=True)
    )

    assert raw.headers["x-vidai-model"] == "claude-sonnet"
    assert raw.headers["x-vidai-fallback"] == "true"
    assert completion.choices[0].message.content == "Simulated reply from anthropic for claude-sonnet."
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == WORDS
    assert rig["sim"].requests.get("openai", 0) == 0
    assert rig["sim"].requests["anthropic"] == 2


def test_an_anthropic_client_falls_back_to_the_openai_entry_while_the_primary_is_open(rig):
    _open(rig["engine"], "anthropic", "claude-sonnet")

    raw = rig["an"].messages.with_raw_response.create(
        model="claude-sonnet", max_tokens=50, messages=[{"role": "user", "content": "hi"}]
    )
    message = raw.parse()

    assert raw.headers["x-vidai-model"] == "gpt-4o"
    assert message.content[0].text == "Simulated reply from openai for gpt-4o."
    assert rig["sim"].requests.get("anthropic", 0) == 0


def test_models_are_listed_for_both_sdks(rig):
    openai_ids = {m.id for m in rig["oa"].models.list()}
    anthropic_ids = {m.id for m in rig["an"].models.list()}

    assert openai_ids == anthropic_ids == {"gpt-4o", "claude-sonnet"}


def test_x_api_key_and_bearer_both_authenticate(rig):
    body = {"model": "gpt-4o", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
    by_key = httpx.post(f"{rig['url']}/v1/messages", json=body, headers={"x-api-key": rig["secret"]})
    by_bearer = httpx.post(f"{rig['url']}/v1/messages", json=body, headers={"authorization": f"Bearer {rig['secret']}"})

    assert by_key.status_code == by_bearer.status_code == 200
    assert by_key.json()["type"] == "message"


# --- Azure OpenAI ---------------------------------------------------------------------------------------


def test_an_azure_provider_is_called_at_its_deployment_with_its_api_key(rig, sim):
    _, url = sim
    azure = ProviderFactory(
        name="azure",
        protocol="azure",
        base_url=f"{url}/azure",
        api_key="az-key",
        api_version="2024-10-21",
        deployments={"gpt-4o-az": "prod-gpt4o"},
    )
    _model("gpt-4o-az", azure)
    _model("gpt-4o-mini-az", azure)  # no mapping: the deployment is the model's name
    rig_app_reload(rig)
    first = rig["oa"].chat.completions.create(model="gpt-4o-az", messages=[{"role": "user", "content": "hi"}])
    second = rig["oa"].chat.completions.create(model="gpt-4o-mini-az", messages=[{"role": "user", "content": "hi"}])

    assert first.model == "prod-gpt4o"  # the simulator answers with the deployment it was called at
    assert second.model == "gpt-4o-mini-az"
    headers = rig["sim"].last_headers["azure"]
    assert headers["api-key"] == "az-key"
    assert "authorization" not in headers


def rig_app_reload(rig) -> None:
    """The gateway reads the catalog again (a provider was added after it started)."""
    httpx.get(f"{rig['url']}/healthz")
    rig["reload"]()
