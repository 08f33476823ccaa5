"""The Anthropic translation under input it did not expect: tool-call arguments past the body's limits or with numbers
a re-serialisation would change, malformed upstream chunks and error bodies, an error event in the middle of a stream,
a refusal streamed with usage in every chunk, a base64 image without its fields. Each is a clear refusal or an answer
in the client's own shape, never a crash (a 500, the provider blamed for it, or no answer at all)."""

from typing import Any

import orjson
import pytest

from gateway.bodies import BodyLimits, parse_body
from gateway.clients import AnthropicClientSend
from gateway.exchange import SendTracker
from gateway.snapshot import ProviderInfo
from gateway.translate import (
    OpenAIToAnthropicStream,
    TranslationError,
    anthropic_error_to_openai,
    anthropic_to_openai_request,
    openai_error_to_anthropic,
    openai_to_anthropic_request,
)
from gateway.upstream.anthropic import AnthropicAdapter
from gateway.upstream.transport import FastTransport
from tests.servers import run_async

pytestmark = pytest.mark.db_independent

SSE = [(b"content-type", b"text/event-stream")]
JSON = [(b"content-type", b"application/json")]


def _drive(messages: list[dict[str, Any]], *, stream: bool = False) -> list[dict[str, Any]]:
    """Push ASGI messages through AnthropicClientSend (`stream`: the request asked for a stream); return what
    reached the real `send`."""
    out: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        out.append(message)

    async def run() -> None:
        client = AnthropicClientSend(send, model="m")
        client.stream = stream
        for message in messages:
            await client(message)

    run_async(run())
    return out


def _events(sent: list[dict[str, Any]]) -> list[str]:
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return [line[7:].decode() for line in body.split(b"\n") if line.startswith(b"event: ")]


def _sse(*chunks: Any) -> bytes:
    return b"".join(b"data: " + (c if isinstance(c, bytes) else orjson.dumps(c)) + b"\n\n" for c in chunks)


def _chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"id": "c1", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}


def _stream(body: bytes) -> list[str]:
    return _events(
        _drive(
            [
                {"type": "http.response.start", "status": 200, "headers": SSE},
                {"type": "http.response.body", "body": body, "more_body": True},
                {"type": "http.response.body", "body": b"", "more_body": False},
            ],
            stream=True,
        )
    )


# ---- 1. Anthropic client streams: events keep coming after an `error` event ---------------------------


def test_no_events_after_an_error_event_when_tool_arguments_interleave():
    call = lambda i, **f: {"index": i, **f}  # noqa: E731
    body = _sse(
        _chunk({"role": "assistant", "content": ""}),
        _chunk({"tool_calls": [call(0, id="a", type="function", function={"name": "f", "arguments": ""})]}),
        _chunk({"tool_calls": [call(1, id="b", type="function", function={"name": "g", "arguments": ""})]}),
        _chunk({"tool_calls": [call(0, function={"arguments": "{}"})]}),  # back to call 0: untranslatable
        _chunk({}, "tool_calls"),
        {"id": "c1", "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}},
        b"[DONE]",
    )
    events = _stream(body)
    assert "error" in events
    assert events[-1] == "error", events  # the error must end the stream; nothing may follow it


def test_no_events_after_an_upstream_error_chunk_followed_by_done():
    # vLLM and others send `data: {"error": ...}` and then `data: [DONE]`; the default path relays both.
    body = _sse(
        _chunk({"role": "assistant", "content": ""}),
        _chunk({"content": "Hel"}),
        {"error": {"message": "boom", "type": "server_error", "code": None}},
        b"[DONE]",
    )
    events = _stream(body)
    assert "error" in events
    assert events[-1] == "error", events  # no message_delta / message_stop dressing up a failed stream


# ---- 2. OpenAI tool-call `arguments` parsed with the stdlib: limits bypassed, crashes, silent changes ----


def _history(arguments: str) -> dict[str, Any]:
    return {
        "model": "claude",
        "messages": [
            {"role": "user", "content": "hi"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "t1", "type": "function", "function": {"name": "f", "arguments": arguments}}],
            },
            {"role": "tool", "tool_call_id": "t1", "content": "ok"},
        ],
    }


def test_deeply_nested_tool_arguments_are_a_400_not_a_crash():
    payload = _history("[" * 5000 + "]" * 5000)
    parse_body(orjson.dumps(payload), BodyLimits())  # the body itself is within every limit
    with pytest.raises(TranslationError):
        openai_to_anthropic_request(payload, max_tokens_default=64)


def _adapter_chat(payload: dict[str, Any]) -> bytes:
    """What AnthropicAdapter.chat would send upstream (the send is a stand-in: nothing leaves the process)."""
    adapter = AnthropicAdapter(
        ProviderInfo(name="p", protocol="anthropic", base_url="http://x", api_key="k"), FastTransport()
    )
    sent: list[bytes] = []

    async def fake_send(body: bytes, *, connect_timeout: Any = None) -> Any:
        sent.append(body)
        raise RuntimeError("stop here")

    adapter.send = fake_send  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="stop here"):
        run_async(adapter.chat(orjson.dumps(payload), stream=False, model="claude", max_tokens_default=64))
    return sent[0]


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        ('{"a": ' + "[" * 300 + "]" * 300 + "}", "nest at most 64 levels"),  # over orjson's own 255 when written
        ('{"x": NaN, "y": Infinity}', "must be a JSON object"),  # not JSON; written back as null
        ('{"a":[' + ",".join(["{}"] * 100_001) + "]}", "at most 100,000 keys and values"),  # one value to the body
    ],
)
def test_tool_arguments_the_anthropic_adapter_cannot_send_as_written_are_refused_before_anything_is_sent(
    arguments, says
):
    payload = _history(arguments)
    parse_body(orjson.dumps(payload), BodyLimits())  # the body itself is within every limit
    with pytest.raises(TranslationError, match=says) as refused:
        _adapter_chat(payload)
    assert refused.value.param == "messages[1].tool_calls[0].function.arguments"


def test_tool_arguments_over_the_values_limit_in_all_are_refused():
    """Each string within the limit, together over it: parsing them all would build every object they hold."""
    half = '{"a":[' + ",".join(["{}"] * 30_000) + "]}"  # 60,003 keys and values by the body's count
    payload = _history(half)
    payload["messages"][1]["tool_calls"].append(
        {"id": "t2", "type": "function", "function": {"name": "f", "arguments": half}}
    )
    payload["messages"].append({"role": "tool", "tool_call_id": "t2", "content": "ok"})
    with pytest.raises(TranslationError, match="in all calls") as refused:
        openai_to_anthropic_request(payload, max_tokens_default=64)
    assert refused.value.param == "messages[1].tool_calls[1].function.arguments"


def test_an_integer_beyond_64_bits_in_tool_arguments_reaches_the_anthropic_upstream_exact():
    """A model's own earlier call holding, say, an order number: orjson reads it as a float and cannot write it."""
    sent = _adapter_chat(_history('{"order": 123456789012345678901234567890, "n": 1e+100}'))
    assert b'"input":{"order":123456789012345678901234567890,"n":1e+100}' in sent


def test_tool_arguments_within_the_limits_are_sent_as_parsed():
    sent = orjson.loads(_adapter_chat(_history('{"city": "Paris", "days": [1, 2.5], "deep": {"a": {"b": null}}}')))
    assert sent["messages"][1]["content"][0]["input"] == {"city": "Paris", "days": [1, 2.5], "deep": {"a": {"b": None}}}


# ---- 3. Whole answers and error bodies for Anthropic clients -------------------------------------------


def _whole(status: int, body: bytes) -> list[dict[str, Any]]:
    return _drive(
        [
            {"type": "http.response.start", "status": status, "headers": JSON},
            {"type": "http.response.body", "body": body, "more_body": False},
        ]
    )


# An OpenAI answer whose tool call's arguments hold an integer beyond 64 bits.
_WIDE_ANSWER = {
    "id": "c1",
    "model": "gpt",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "t1",
                        "type": "function",
                        "function": {"name": "f", "arguments": '{"order": 123456789012345678901234567890}'},
                    }
                ],
            },
            "finish_reason": "tool_calls",
        }
    ],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1},
}


def test_an_openai_answer_with_an_integer_beyond_64_bits_in_tool_arguments_reaches_the_client_exact():
    sent = _whole(200, orjson.dumps(_WIDE_ANSWER))
    assert sent[0]["status"] == 200
    assert b'"input":{"order":123456789012345678901234567890}' in sent[1]["body"]


def test_a_deeply_nested_error_body_keeps_its_text():
    # The doc: "A body that is not JSON keeps its text (first 500 characters)."
    body = b"[" * 5000
    status, error = openai_error_to_anthropic(400, body)
    assert (status, error["error"]["type"], error["error"]["message"]) == (400, "invalid_request_error", "[" * 500)
    status, error = anthropic_error_to_openai(400, body)
    assert (status, error["error"]["message"]) == (400, "[" * 500)


def test_a_deeply_nested_error_body_reaches_an_anthropic_client_in_its_shape():
    sent = _whole(400, b"[" * 5000)
    assert sent[0]["status"] == 400
    assert orjson.loads(sent[1]["body"])["type"] == "error"


# ---- 4. Streams: a refusal is cut short when usage arrived earlier ------------------------------------


def test_refusal_pieces_are_not_dropped_when_every_chunk_carries_usage():
    # Servers with continuous usage stats (vLLM's `continuous_usage_stats`) put usage in every chunk.
    stream = OpenAIToAnthropicStream("m")
    usage = {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}
    events = []
    for chunk in (
        _chunk({"role": "assistant", "content": ""}, usage=usage),
        _chunk({"refusal": "I can't "}, usage=usage),
        _chunk({"refusal": "help with that."}, usage=usage),
        _chunk({}, "stop", usage=usage),
    ):
        events.extend(stream.feed(chunk))
    events.extend(stream.finish())
    text = "".join(d["delta"]["text"] for e, d in events if e == "content_block_delta")
    assert text == "I can't help with that."


# ---- 5. Malformed upstream chunks crash the Anthropic client's stream ---------------------------------


@pytest.mark.parametrize(
    "chunk",
    [
        {"id": "c1", "choices": [None]},
        {"id": "c1", "choices": [{"index": 0, "delta": {"tool_calls": [None]}}]},
        {"id": "c1", "choices": [{"index": 0, "delta": {"tool_calls": [{"index": None}]}}]},
        {"id": "c1", "choices": [], "usage": {"prompt_tokens": "many"}},
    ],
)
def test_a_malformed_upstream_chunk_does_not_raise_out_of_the_client_send(chunk):
    events = _stream(_sse(_chunk({"role": "assistant", "content": ""}), chunk, _chunk({}, "stop"), b"[DONE]"))
    assert events[0] == "message_start"
    assert events[-2:] == ["message_delta", "message_stop"]  # the malformed part reads as absent


# ---- 6. Limits are checked on the Anthropic shape only ---------------------------------------------


def test_an_anthropic_body_whose_translation_breaks_a_limit_is_refused_with_the_limit_named():
    """200 tool_use blocks are within one message's content parts, and become 200 tool calls, over the 128 that
    OpenAI allows: the translated request meets the body's limits too."""
    app, _ = _app_world()
    calls = [{"type": "tool_use", "id": f"t{i}", "name": "f", "input": {}} for i in range(200)]
    results = [{"type": "tool_result", "tool_use_id": f"t{i}", "content": "ok"} for i in range(200)]
    payload = {
        "model": "claude",
        "max_tokens": 10,
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": calls},
            {"role": "user", "content": results},
        ],
    }
    parse_body(orjson.dumps(payload), BodyLimits())  # accepted as it came

    status, body = _post(app, "/v1/messages", payload)

    error = orjson.loads(body)
    assert (status, error["type"], error["error"]["type"]) == (400, "error", "invalid_request_error")
    assert "maximum length 128" in error["error"]["message"]


# ---- 7. App level: the adapter crash is a 500 and is blamed on the provider ----------------------------


def _app_world():
    import hashlib

    from gateway.app import GatewayApp
    from gateway.config import ConfigHolder
    from gateway.snapshot import KeyInfo, ModelInfo, Snapshot
    from health.breaker.factory import build_engine
    from health.breaker.types import ConfigSet, ManualClock
    from tests.gateway.conftest import TEST_BREAKER

    key = KeyInfo(
        id=1, prefix="sk", user_id=1, team_id=None, application_id=None, agent_id=None, scopes=(("global", None),)
    )
    provider = ProviderInfo(name="claude", protocol="anthropic", base_url="http://127.0.0.1:9", api_key="k")
    model = ModelInfo(
        name="claude",
        provider="claude",
        capabilities=frozenset({"text"}),
        input_price_per_mtok=1,
        output_price_per_mtok=1,
    )
    config = ConfigHolder()
    config.current = Snapshot(
        version=1,
        keys={hashlib.sha256(b"secret").hexdigest(): key},
        providers={"claude": provider},
        models={"claude": model},
    )
    engine = build_engine(clock=ManualClock(), config=ConfigSet(default=TEST_BREAKER))
    return GatewayApp(config=config, engine=engine), engine


def _post(app, path: str, payload: dict[str, Any]) -> tuple[int, bytes]:
    raw = orjson.dumps(payload)
    out: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": raw, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        out.append(message)

    scope = {
        "type": "http",
        "path": path,
        "method": "POST",
        "headers": [(b"authorization", b"Bearer secret"), (b"content-length", str(len(raw)).encode())],
        "extensions": {"controlplane.disconnect_hooks": []},
    }
    run_async(app.handle(scope, receive, send))
    assert out, "the ASGI app returned without sending any response (the server answers a plain-text 500)"
    return out[0]["status"], b"".join(m.get("body", b"") for m in out[1:])


def test_tool_arguments_that_are_not_json_are_a_400_and_not_the_providers_failure():
    app, engine = _app_world()
    payload = _history('{"x": NaN}')
    answers = [_post(app, "/v1/chat/completions", payload) for _ in range(3)]
    assert engine.allow("claude", "claude").allowed, "a client's request opened the provider's circuit"
    assert [status for status, _ in answers] == [400, 400, 400]
    assert orjson.loads(answers[0][1])["error"]["param"] == "messages[1].tool_calls[0].function.arguments"


def test_an_upstream_error_body_nested_deep_reaches_an_anthropic_client_as_an_anthropic_error():
    from gateway.upstream.base import UpstreamResponse

    app, _ = _app_world()

    class Fake:
        protocol = "openai"

        async def chat(self, body: Any, **_: Any) -> UpstreamResponse:
            return UpstreamResponse(400, list(JSON), b"[" * 5000)

    app._adapter = lambda provider: Fake()  # type: ignore[method-assign]
    app.attempts._adapter = app._adapter
    payload = {"model": "claude", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
    status, body = _post(app, "/v1/messages", payload)  # must not raise out of the ASGI app
    assert status == 400
    assert orjson.loads(body)["type"] == "error"


def _fake_upstream(app, status: int, body: bytes) -> None:
    from gateway.upstream.base import UpstreamResponse

    class Fake:
        protocol = "openai"

        async def chat(self, _body: Any, **_: Any) -> UpstreamResponse:
            return UpstreamResponse(status, list(JSON), body)

    app._adapter = lambda provider: Fake()  # type: ignore[method-assign]
    app.attempts._adapter = app._adapter


def test_an_anthropic_client_gets_an_answer_whose_tool_arguments_hold_an_integer_beyond_64_bits():
    app, _ = _app_world()
    _fake_upstream(app, 200, orjson.dumps(_WIDE_ANSWER))
    payload = {"model": "claude", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
    status, body = _post(app, "/v1/messages", payload)
    assert status == 200
    assert b'"input":{"order":123456789012345678901234567890}' in body


def test_a_base64_image_without_media_type_or_data_is_refused_not_sent_as_data_none():
    payload = {
        "model": "m",
        "max_tokens": 10,
        "messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "base64"}}]}],
    }
    with pytest.raises(TranslationError) as refused:
        anthropic_to_openai_request(payload)
    assert refused.value.param == "messages[0].content[0].source"


@pytest.mark.parametrize("flag", [1, "true", []])
def test_a_stream_flag_that_is_no_boolean_is_refused_by_both_translations(flag):
    """The gateway streams only for `true`; a translation that read `1` as true made the upstream stream an answer
    the gateway then read as a whole one (a 502, charged to the provider)."""
    openai_request = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": flag}
    anthropic_request = {**openai_request, "max_tokens": 10}
    with pytest.raises(TranslationError) as to_anthropic:
        openai_to_anthropic_request(openai_request, max_tokens_default=64)
    with pytest.raises(TranslationError) as to_openai:
        anthropic_to_openai_request(anthropic_request)
    assert to_anthropic.value.param == to_openai.value.param == "stream"


def test_a_stream_flag_of_false_or_true_translates_as_itself():
    request = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 10}
    assert openai_to_anthropic_request({**request, "stream": False}, max_tokens_default=64)["stream"] is False
    assert anthropic_to_openai_request({**request, "stream": True})["stream"] is True
    assert "stream" not in anthropic_to_openai_request({**request, "stream": False})


def test_a_body_whose_send_fails_leaves_the_response_unfinished_for_the_last_resort_error():
    """The tracker counted a final body as sent before it was: when the send failed (an Anthropic client's
    translation, say), the app's last-resort error thought the response finished and sent nothing."""
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            raise ValueError("cannot be written")
        sent.append(message)

    async def run() -> tuple[bool, bool]:
        tracker = SendTracker(send)
        await tracker({"type": "http.response.start", "status": 200, "headers": []})
        with pytest.raises(ValueError, match="cannot be written"):
            await tracker({"type": "http.response.body", "body": b"{}"})
        return tracker.started, tracker.finished

    assert run_async(run()) == (True, False)
    assert [m["type"] for m in sent] == ["http.response.start"]
