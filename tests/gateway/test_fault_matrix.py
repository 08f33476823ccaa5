"""The fault matrix's cells a review found wrong: upstream answers that are not what their status or label says,
over real sockets (a scripted upstream served by uvicorn, or the simulator, in front of the real gateway). Each
test failed before its fix: the gateway crashed (500 gateway_error), broke the response on the wire, counted a
failure as a success or a client's over-long prompt against the provider, or lost an answer's usage."""

from typing import Any

import httpx
import orjson
import pytest

from catalog.models import Provider
from health.breaker.types import State
from tests.gateway.protocol_helpers import PROTOCOLS, ProtocolWorld, build_world
from tests.gateway.resilience_helpers import FAST, Rig, content, rig
from tests.gateway.test_attempts_review import SSE, Upstream, chunk, point, rig2
from tests.servers import serve

JSON = [(b"content-type", b"application/json")]
HTML = [(b"content-type", b"text/html")]
COMPLETION = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1,
    "model": "gpt-4o",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hello"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
}
MESSAGES = {"model": "gpt-4o", "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]}
NO_RETRY = {**FAST, "max_retries": 0}


def answer(status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> Any:
    async def handler(receive: Any, send: Any, _body: bytes) -> None:
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    return handler


def speaks(protocol: str, url: str) -> None:
    """The primary provider `openai` speaks `protocol`, at the scripted upstream (its handler `openai`)."""
    base = f"{url}/openai/v1" if protocol == "openai" else f"{url}/openai"
    Provider.objects.filter(name="openai").update(protocol=protocol, base_url=base, api_version="2024-10-21")


def messages(r: Rig, **extra: Any) -> httpx.Response:
    """An Anthropic client's request (`POST /v1/messages`)."""
    return httpx.post(
        f"{r.url}/v1/messages", json={**MESSAGES, **extra}, headers={"x-api-key": r.world.secret}, timeout=30
    )


def anthropic_error(response: httpx.Response) -> str:
    body = response.json()
    assert set(body) == {"type", "error"} and body["type"] == "error", body
    return str(body["error"]["type"])


def framed(response: httpx.Response) -> None:
    """The body is exactly as long as the response said."""
    assert int(response.headers["content-length"]) == len(response.content)


# --- An Anthropic upstream's 200 whose JSON is not an object ------------------------------------------------


@pytest.mark.parametrize("body", [b"null", b"[]", b'"x"', b"3"], ids=["null", "list", "string", "number"])
def test_an_anthropic_upstreams_200_whose_json_is_not_an_object_is_a_bad_response(world, body):
    upstream = Upstream()
    upstream.handlers["openai"] = answer(200, JSON, body)
    with serve(upstream) as url:
        speaks("anthropic", url)
        with rig2(world, None) as r:
            response = r.post()
            engine = r.app.engine
            log = r.log()

    assert (response.status_code, response.json()["error"]["code"]) == (502, "bad_response"), response.text
    assert engine.recorded == [("openai", "connection_error")]
    assert (log.status, log.error_kind) == (502, "bad_response")


def test_an_anthropic_upstreams_200_whose_json_is_not_an_object_moves_on_with_the_policy_on(world):
    upstream = Upstream()
    upstream.handlers["openai"] = answer(200, JSON, b"[]")
    with serve(upstream) as url:
        speaks("anthropic", url)
        with rig2(world, NO_RETRY) as r:
            response = r.post()
            engine = r.app.engine

    assert response.status_code == 200, response.text
    assert response.headers["x-vidai-model"] == "claude"  # the chain's next entry answered
    assert engine.recorded == [("openai", "connection_error"), ("backup", "200")]


# --- An OpenAI or Azure upstream's 200 that is not a JSON object --------------------------------------------


@pytest.mark.parametrize("protocol", ["openai", "azure"])
@pytest.mark.parametrize(
    ("headers", "body"), [(HTML, b"<html>Bad Gateway</html>"), (JSON, b"null")], ids=["html", "json-null"]
)
def test_an_unreadable_200_from_an_openai_shaped_upstream_is_a_bad_response(world, protocol, headers, body):
    upstream = Upstream()
    upstream.handlers["openai"] = answer(200, headers, body)
    with serve(upstream) as url:
        speaks(protocol, url)
        with rig2(world, None) as r:
            response = r.post()
            engine = r.app.engine
            log = r.log()

    assert (response.status_code, response.json()["error"]["code"]) == (502, "bad_response"), response.text
    assert engine.recorded == [("openai", "connection_error")]
    assert (log.status, log.error_kind) == (502, "bad_response")


def test_an_unreadable_200_from_an_openai_upstream_moves_on_with_the_policy_on(world):
    upstream = Upstream()
    upstream.handlers["openai"] = answer(200, HTML, b"<html>Bad Gateway</html>")
    with serve(upstream) as url:
        point("openai", url)
        with rig2(world, NO_RETRY) as r:
            response = r.post()
            engine = r.app.engine
            log = r.log()

    assert response.status_code == 200, response.text
    assert response.headers["x-vidai-model"] == "claude"
    assert engine.recorded == [("openai", "connection_error"), ("backup", "200")]
    assert log.attempts[0]["error"] == "bad_response"


# --- An Anthropic client: the response's shape is the request's to say, never the upstream's label -----------


def test_an_anthropic_clients_whole_answer_labelled_event_stream_is_sent_whole(world):
    upstream = Upstream()
    upstream.handlers["openai"] = answer(200, SSE, orjson.dumps(COMPLETION))
    with serve(upstream) as url:
        point("openai", url)
        with rig2(world, None) as r:
            response = messages(r)

    assert response.status_code == 200, response.text
    assert response.json()["content"][0]["text"] == "hello"
    assert response.headers["content-type"] == "application/json"
    framed(response)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("status", [500, 429, 201])
def test_an_upstream_status_labelled_event_stream_reaches_an_anthropic_client_whole(world, status, stream):
    """An error (or an unexpected 2xx) whose upstream labelled it `text/event-stream`: one whole Anthropic error,
    with its own length, never an event stream with the OpenAI body's length."""
    upstream = Upstream()
    error = {"error": {"message": "upstream says no", "type": "server_error", "code": None}}
    upstream.handlers["openai"] = answer(status, SSE, orjson.dumps(error))
    with serve(upstream) as url:
        point("openai", url)
        with rig2(world, None) as r:
            response = messages(r, stream=stream)

    assert response.status_code == status
    assert anthropic_error(response) and response.json()["error"]["message"] == "upstream says no"
    assert response.headers["content-type"] == "application/json"
    framed(response)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("label", [JSON, SSE], ids=["json", "event-stream"])
def test_an_upstream_204_reaches_an_anthropic_client_without_a_body(world, label, stream, caplog):
    upstream = Upstream()
    upstream.handlers["openai"] = answer(204, label, b"")
    with serve(upstream) as url:
        point("openai", url)
        with rig2(world, None) as r:
            response = messages(r, stream=stream)
            log = r.log()

    assert (response.status_code, response.content) == (204, b"")
    assert (log.status, log.error_kind) == (204, "upstream_status")
    # Never a translated error body written after a 204's head, which the server refuses.
    assert not [record.getMessage() for record in caplog.records if record.levelname == "ERROR"]


# --- An Anthropic client: an answer it cannot be given is no answer -------------------------------------------


def _tool_call_with_list_arguments() -> bytes:
    call = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "[1, 2]"}}
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    return orjson.dumps({**COMPLETION, "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}]})


UNGIVABLE = [
    (HTML, b"<html>Bad Gateway</html>"),
    (JSON, _tool_call_with_list_arguments()),
]


@pytest.mark.parametrize(("headers", "body"), UNGIVABLE, ids=["html", "tool-arguments-not-an-object"])
def test_an_answer_an_anthropic_client_cannot_be_given_is_a_bad_response(world, headers, body):
    upstream = Upstream()
    upstream.handlers["openai"] = answer(200, headers, body)
    with serve(upstream) as url:
        point("openai", url)
        with rig2(world, None) as r:
            response = messages(r)
            engine = r.app.engine
            log = r.log()

    assert (response.status_code, anthropic_error(response)) == (502, "api_error")
    framed(response)
    assert (log.status, log.error_kind, log.tokens_out) == (502, "bad_response", None)
    assert engine.recorded == [("openai", "connection_error")]


def test_an_answer_an_anthropic_client_cannot_be_given_moves_on_with_the_policy_on(world):
    upstream = Upstream()
    upstream.handlers["openai"] = answer(200, JSON, _tool_call_with_list_arguments())
    with serve(upstream) as url:
        point("openai", url)
        with rig2(world, NO_RETRY) as r:
            response = messages(r)
            engine = r.app.engine

    assert response.status_code == 200, response.text
    assert response.json()["type"] == "message"
    assert response.headers["x-vidai-model"] == "claude"
    assert engine.recorded == [("openai", "connection_error"), ("backup", "200")]


# --- The default path: a stream request answered with no event ------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "body"),
    [(JSON, orjson.dumps(COMPLETION)), (HTML, b"<html>" + b"<p>busy</p>\n" * 8000 + b"</html>")],
    ids=["json", "long-html"],
)
def test_default_path_a_stream_request_answered_with_no_event_is_no_answer(world, headers, body):
    """docs/decisions.md: a 200 whose stream ends before any event is no answer, on both paths. A body of more
    than 64 KiB without an event is not read to its end."""
    upstream = Upstream()
    upstream.handlers["openai"] = answer(200, headers, body)
    with serve(upstream) as url:
        point("openai", url)
        with rig2(world, None) as r:
            response, _ = r.stream()
            engine = r.app.engine
            log = r.log()

    assert response.status_code == 502
    assert engine.recorded == [("openai", "connection_error")]
    assert (log.status, log.error_kind) == (502, "stream_incomplete")


def test_default_path_what_comes_before_the_first_event_is_relayed_with_it(world):
    """A comment before the first event is held until the event begins, then sent with it, unchanged."""
    upstream = Upstream()
    body = b": warming up\n\n" + chunk("c1", {"role": "assistant", "content": "hi"}) + chunk("c1", {}, "stop")
    upstream.handlers["openai"] = answer(200, SSE, body + b"data: [DONE]\n\n")
    with serve(upstream) as url:
        point("openai", url)
        with rig2(world, None) as r:
            with httpx.stream(
                "POST",
                f"{r.url}/v1/chat/completions",
                json={"model": "gpt-4o", "stream": True, "messages": [{"role": "user", "content": "hi"}]},
                headers={"authorization": f"Bearer {r.world.secret}"},
                timeout=30,
            ) as response:
                raw = response.read()
            engine = r.app.engine

    assert response.status_code == 200
    assert raw == body + b"data: [DONE]\n\n"
    assert engine.recorded == [("openai", "200")]


# --- The default path: `data: [DONE]` inside an event's content is no end ------------------------------------


def test_default_path_a_cut_after_content_quoting_done_is_an_interruption(world):
    upstream = Upstream()

    async def quote_then_cut(receive: Any, send: Any, body: bytes) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": SSE})
        events = [chunk("c1", {"role": "assistant", "content": ""}), chunk("c1", {"content": "ends with data: [DONE]"})]
        await send({"type": "http.response.body", "body": b"".join(events), "more_body": True})
        raise RuntimeError("cut: no finish reason, no [DONE]")  # uvicorn drops the connection

    upstream.handlers["openai"] = quote_then_cut
    with serve(upstream) as url:
        point("openai", url)
        with rig2(world, None) as r:
            _, events = r.stream()
            engine = r.app.engine
            log = r.log()

    assert content(events) == "ends with data: [DONE]"
    assert events[-1] != "[DONE]"
    assert orjson.loads(events[-1])["error"]["code"] == "stream_interrupted"
    assert engine.recorded == [("openai", "connection_error")]
    assert log.error_kind == "stream_interrupted"


# --- An Anthropic upstream's stop_reason that is not a string ---------------------------------------------


def _event(name: str, data: dict[str, Any]) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps({"type": name, **data}) + b"\n\n"


ODD_STOP = {"odd": 1}


def anthropic_answer_events(stop_reason: Any, output_tokens: int) -> list[bytes]:
    """An Anthropic Messages stream saying "hello", up to its message_delta (the stop reason and the usage)."""
    message = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "m",
        "content": [],
        "usage": {"input_tokens": 3, "output_tokens": 0},
    }
    return [
        _event("message_start", {"message": message}),
        _event("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}),
        _event("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": "hello"}}),
        _event("content_block_stop", {"index": 0}),
        _event("message_delta", {"delta": {"stop_reason": stop_reason}, "usage": {"output_tokens": output_tokens}}),
    ]


async def _odd_stop_stream(receive: Any, send: Any, body: bytes) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": SSE})
    for event in [*anthropic_answer_events(ODD_STOP, 1), _event("message_stop", {})]:
        await send({"type": "http.response.body", "body": event, "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})


def test_an_anthropic_upstream_stream_whose_stop_reason_is_not_a_string_reads_it_as_absent(world):
    upstream = Upstream()
    upstream.handlers["openai"] = _odd_stop_stream
    with serve(upstream) as url:
        speaks("anthropic", url)
        with rig2(world, None) as r:
            response, events = r.stream()
            log = r.log()

    assert response.status_code == 200
    assert (content(events), events[-1]) == ("hello", "[DONE]")
    finishes = [c["finish_reason"] for e in events[:-1] for c in orjson.loads(e)["choices"] if c["finish_reason"]]
    assert finishes == ["stop"]
    assert (log.status, log.error_kind) == (200, "")


def test_an_anthropic_upstream_answer_whose_stop_reason_is_not_a_string_reads_it_as_absent(world):
    upstream = Upstream()
    message = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "m",
        "content": [{"type": "text", "text": "hello"}],
        "stop_reason": ODD_STOP,
        "usage": {"input_tokens": 3, "output_tokens": 1},
    }
    upstream.handlers["openai"] = answer(200, JSON, orjson.dumps(message))
    with serve(upstream) as url:
        speaks("anthropic", url)
        with rig2(world, None) as r:
            response = r.post()

    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["finish_reason"] == "stop"


# --- A context-length refusal sent as an error event ------------------------------------------------------


@pytest.mark.parametrize("policy", [None, NO_RETRY], ids=["default", "policy"])
def test_a_context_length_error_event_never_counts_against_the_provider(world, policy):
    """docs/resilience.md: an error event of a class never retried on its target is reported as a 400, which
    the breaker does not count, as the same refusal's plain 400 is."""
    with rig2(world, policy) as r:
        r.fault("openai", mode="error_event", fail_after_chunks=0, error_code="context_length_exceeded")
        for _ in range(3):
            r.stream()
        engine = r.app.engine
        state = engine.get("openai", "gpt-4o").state

    assert [outcome for outcome in engine.recorded if outcome[0] == "openai"] == [("openai", "400")] * 3
    assert state is State.CLOSED


# --- A stream that ends after its finish reason without its end marker keeps its usage -----------------------


@pytest.fixture(params=PROTOCOLS)
def pworld(request: pytest.FixtureRequest, transactional_db: None, sim: Any) -> ProtocolWorld:
    simulator, url = sim
    return build_world(simulator, url, request.param)


def _events(text: str) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for block in text.split("\n\n"):
        name, data = "", None
        for line in block.split("\n"):
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                data = orjson.loads(line[6:])
        if data is not None:
            out.append((name, data))
    return out


def test_a_stream_without_its_end_marker_keeps_its_usage_for_an_anthropic_client(pworld: ProtocolWorld) -> None:
    """Mode `nodone`: the upstream's stream ends without `[DONE]` / `message_stop`, after its finish reason and
    usage (an Anthropic upstream's `message_delta`): the answer is whole, and its tokens reach the client and
    the log, whichever protocol the upstream speaks."""
    with rig(pworld, None) as r:
        r.fault("primary", mode="nodone")
        response = httpx.post(
            f"{r.url}/v1/messages", json={**MESSAGES, "stream": True}, headers={"x-api-key": r.world.secret}, timeout=30
        )
        log = r.log()

    seen = _events(response.text)
    assert [n for n, _ in seen][-1] == "message_stop"
    delta = next(d for n, d in seen if n == "message_delta")
    assert delta["usage"]["output_tokens"] > 0
    assert (log.error_kind, log.tokens_out) == ("", delta["usage"]["output_tokens"])


def test_a_stream_without_its_end_marker_keeps_its_usage_for_an_openai_client(pworld: ProtocolWorld) -> None:
    with rig(pworld, None) as r:
        r.fault("primary", mode="nodone")
        response, events = r.stream(
            {
                "model": "gpt-4o",
                "stream": True,
                "stream_options": {"include_usage": True},
                "messages": [{"role": "user", "content": "hi"}],
            }
        )
        log = r.log()

    assert response.status_code == 200 and events[-1] == "[DONE]"
    usage = [orjson.loads(e)["usage"] for e in events[:-1] if orjson.loads(e).get("usage")]
    assert usage and usage[-1]["completion_tokens"] > 0
    assert (log.error_kind, log.tokens_out) == ("", usage[-1]["completion_tokens"])
