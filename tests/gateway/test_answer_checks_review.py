"""What a review of the answer checks found: JSON objects orjson refuses, answers orjson cannot write back, usage
owed by an Anthropic stream held open after its stop reason, and what may come before a stream's first event
(keep-alive comments, a long preamble, a BOM)."""

import asyncio
from typing import Any

import httpx
import orjson
import pytest

from tests.gateway.resilience_helpers import FAST, content
from tests.gateway.test_attempts_review import SSE, Upstream, chunk, point, rig2, wait_disconnect
from tests.gateway.test_fault_matrix import COMPLETION, JSON, NO_RETRY, answer, anthropic_answer_events, speaks
from tests.servers import serve

STREAM_BODY = {"model": "gpt-4o", "stream": True, "messages": [{"role": "user", "content": "hi"}]}


# --- 1. An OpenAI-shaped 200 that IS a JSON object, but one orjson refuses -----------------------------------


def _lone_surrogate() -> bytes:
    # Valid JSON (RFC 8259 grammar): a \\u escape of a lone surrogate, as servers that cut an emoji between tokens
    # write it. Python's json (the OpenAI SDK's parser) reads it; orjson refuses it.
    return orjson.dumps(COMPLETION).replace(b'"hello"', b'"hello \\ud83d"')


@pytest.mark.parametrize(
    "body",
    [_lone_surrogate(), b"\xef\xbb\xbf" + orjson.dumps(COMPLETION)],
    ids=["lone-surrogate-escape", "utf8-bom"],
)
def test_openai_client_a_200_json_object_orjson_refuses_is_still_an_answer(world, body):
    upstream = Upstream()
    upstream.handlers["openai"] = answer(200, JSON, body)
    with serve(upstream) as url:
        point("openai", url)
        with rig2(world, None) as r:
            response = r.post()
            engine = r.app.engine

    # Before 6f18532 the body went through unchanged (the usage parse just failed); docs: only a body that is
    # "not a JSON object" is a bad_response.
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"].startswith("hello")
    assert engine.recorded == [("openai", "200")]


# --- 2. An Anthropic upstream's 200 object whose OpenAI form orjson cannot write ------------------------------


def _deep_id_message() -> bytes:
    deep = b"[" * 300 + b"]" * 300
    message = {
        "id": "ID",
        "type": "message",
        "role": "assistant",
        "model": "m",
        "content": [{"type": "text", "text": "hello"}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 3, "output_tokens": 1},
    }
    return orjson.dumps(message).replace(b'"ID"', deep)


@pytest.mark.parametrize("policy", [None, NO_RETRY], ids=["default", "policy"])
def test_anthropic_upstream_200_object_that_cannot_be_rewritten_is_a_bad_response_not_a_500(world, policy):
    upstream = Upstream()
    upstream.handlers["openai"] = answer(200, JSON, _deep_id_message())
    with serve(upstream) as url:
        speaks("anthropic", url)
        with rig2(world, policy) as r:
            response = r.post()
            engine = r.app.engine
            log = r.log()

    if policy is None:
        assert (response.status_code, response.json()["error"]["code"]) == (502, "bad_response"), response.text
        assert (log.status, log.error_kind) == (502, "bad_response")
    else:
        # The policy moves on to the chain's next entry, as for any bad_response.
        assert response.status_code == 200, response.text
        assert engine.recorded == [("openai", "connection_error"), ("backup", "200")]


# --- 3. An Anthropic stream held open after message_delta: its usage is owed (docs/protocols.md) ---------------


async def _delta_then_hold(receive: Any, send: Any, body: bytes) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": SSE})
    events = anthropic_answer_events("end_turn", 7)
    await send({"type": "http.response.body", "body": b"".join(events), "more_body": True})
    await wait_disconnect(receive)  # held open: no message_stop


def test_policy_on_an_anthropic_stream_held_open_after_message_delta_keeps_its_usage(world):
    upstream = Upstream()
    upstream.handlers["openai"] = _delta_then_hold
    with serve(upstream) as url:
        speaks("anthropic", url)
        with rig2(world, FAST) as r:
            response, events = r.stream()  # STREAM asks include_usage
            log = r.log()

    assert response.status_code == 200 and content(events) == "hello" and events[-1] == "[DONE]"
    usage = [orjson.loads(e)["usage"] for e in events[:-1] if orjson.loads(e).get("usage")]
    # docs/protocols.md: "A stream that ends (cleanly, cut, or held open) after message_delta ... the usage chunk
    # ... still goes out".
    assert usage and usage[-1]["completion_tokens"] == 7, events
    assert log.tokens_out == 7


# --- 4. Keep-alive comments before the first event no longer keep the client's connection alive ---------------


async def _keepalive_then_answer(receive: Any, send: Any, body: bytes) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": SSE})
    for _ in range(10):  # a model thinking for 3 s, its server sending a comment every 0.3 s (OpenRouter does)
        await send({"type": "http.response.body", "body": b": PROCESSING\n\n", "more_body": True})
        await asyncio.sleep(0.3)
    events = chunk("c1", {"role": "assistant", "content": "hi"}) + chunk("c1", {}, "stop") + b"data: [DONE]\n\n"
    await send({"type": "http.response.body", "body": events, "more_body": False})


def test_default_path_keepalive_comments_reach_the_client_while_the_model_thinks(world):
    upstream = Upstream()
    upstream.handlers["openai"] = _keepalive_then_answer
    with serve(upstream) as url:
        point("openai", url)
        with rig2(world, None, virtual=False) as r:
            # A client (or a proxy in front of the gateway) that drops a connection silent for 1 s.
            with httpx.stream(
                "POST",
                f"{r.url}/v1/chat/completions",
                json=STREAM_BODY,
                headers={"authorization": f"Bearer {r.world.secret}"},
                timeout=httpx.Timeout(30, read=1.0),
            ) as response:
                raw = response.read()

    assert response.status_code == 200
    assert raw.endswith(b"data: [DONE]\n\n")


# --- 5. More than 64 KiB of comments before the first event -------------------------------------------------


async def _long_preamble(receive: Any, send: Any, body: bytes) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": SSE})
    pad = b":" + b" " * 2046 + b"\n\n"  # 2 KiB padding comments, as proxies send to defeat buffering
    for _ in range(40):
        await send({"type": "http.response.body", "body": pad, "more_body": True})
    events = chunk("c1", {"role": "assistant", "content": "hi"}) + chunk("c1", {}, "stop") + b"data: [DONE]\n\n"
    await send({"type": "http.response.body", "body": events, "more_body": False})


def test_default_path_a_long_preamble_before_the_first_event_is_still_an_answer(world):
    upstream = Upstream()
    upstream.handlers["openai"] = _long_preamble
    with serve(upstream) as url:
        point("openai", url)
        with rig2(world, None) as r:
            response, events = r.stream(STREAM_BODY)
            engine = r.app.engine
            log = r.log()

    assert response.status_code == 200, (response.status_code, log.error_kind)
    assert content(events) == "hi"
    assert engine.recorded == [("openai", "200")]


# --- 6. A BOM before the only event ------------------------------------------------------------------------


def test_default_path_a_bom_before_a_single_error_event_relays_it(world):
    upstream = Upstream()
    error = {"error": {"message": "filtered", "type": "invalid_request_error", "code": "content_filter"}}
    upstream.handlers["openai"] = answer(200, SSE, b"\xef\xbb\xbfdata: " + orjson.dumps(error) + b"\n\n")
    with serve(upstream) as url:
        point("openai", url)
        with rig2(world, None) as r:
            response, _ = r.stream(STREAM_BODY)
            engine = r.app.engine

    assert response.status_code == 200
    assert engine.recorded == [("openai", "400")]  # a content filter, not the provider failing


def test_default_path_an_anthropic_stream_held_open_after_message_delta_keeps_its_usage(world):
    """The same hold with the policy off: the gateway's deadline (1 s here) ends it before the provider's read
    timeout (5 s), and the owed usage chunk is lost the same way."""
    upstream = Upstream()
    upstream.handlers["openai"] = _delta_then_hold
    with serve(upstream) as url:
        speaks("anthropic", url)
        with rig2(world, None, virtual=False, deadline_seconds=1.0) as r:
            response, events = r.stream()
            log = r.log()

    assert response.status_code == 200 and content(events) == "hello" and events[-1] == "[DONE]"
    usage = [orjson.loads(e)["usage"] for e in events[:-1] if orjson.loads(e).get("usage")]
    assert usage and usage[-1]["completion_tokens"] == 7, events
    assert log.tokens_out == 7
