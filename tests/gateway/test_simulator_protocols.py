"""The simulator's other protocols over real sockets: Anthropic Messages, Azure OpenAI, tool use, error events."""

import json

import httpx
import openai
import pytest

pytestmark = pytest.mark.db_independent

ANTHROPIC_HEADERS = {"x-api-key": "sk-ant-test", "anthropic-version": "2023-06-01"}
AZURE_HEADERS = {"api-key": "az-test"}
MESSAGES = {"model": "claude-x", "max_tokens": 64, "messages": [{"role": "user", "content": "hello there"}]}
CHAT = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hello there"}]}
OPENAI_TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
ANTHROPIC_TOOLS = [{"name": "lookup", "input_schema": {"type": "object"}}]
EVENT_NAMES = [
    "message_start",
    "content_block_start",
    "ping",
    "content_block_delta",
    "content_block_delta",
    "content_block_delta",
    "content_block_delta",
    "content_block_stop",
    "message_delta",
    "message_stop",
]


def put(url, name, **behaviour):
    response = httpx.put(f"{url}/_sim/providers/{name}", json=behaviour)
    assert response.status_code == 200, response.text
    return response.json()


def messages(url, name, body=MESSAGES, headers=ANTHROPIC_HEADERS, **kwargs):
    return httpx.post(f"{url}/{name}/v1/messages", json=body, headers=headers, **kwargs)


def azure(url, name, deployment="prod-gpt", body=CHAT, headers=AZURE_HEADERS, version="2024-06-01"):
    query = f"?api-version={version}" if version else ""
    return httpx.post(
        f"{url}/{name}/openai/deployments/{deployment}/chat/completions{query}", json=body, headers=headers
    )


def read_events(url, name, body=None, timeout=None):
    """Anthropic stream: the (event name, raw data) pairs received, and the exception that ended the read."""
    received: list[tuple[str, str]] = []
    event = ""
    try:
        with httpx.stream(
            "POST",
            f"{url}/{name}/v1/messages",
            json=body or {**MESSAGES, "stream": True},
            headers=ANTHROPIC_HEADERS,
            timeout=timeout or httpx.Timeout(5),
        ) as response:
            assert response.status_code == 200
            assert response.headers["content-type"] == "text/event-stream"
            for line in response.iter_lines():
                if line.startswith("event: "):
                    event = line.removeprefix("event: ")
                elif line.startswith("data: "):
                    received.append((event, line.removeprefix("data: ")))
    except httpx.HTTPError as exc:
        return received, exc
    return received, None


def read_chunks(url, path, body, headers=None):
    """OpenAI-shaped stream: the `data:` payloads and the exception that ended the read."""
    received = []
    try:
        with httpx.stream("POST", f"{url}{path}", json=body, headers=headers, timeout=httpx.Timeout(5)) as response:
            assert response.status_code == 200
            for line in response.iter_lines():
                if line.startswith("data: "):
                    received.append(line.removeprefix("data: "))
    except httpx.HTTPError as exc:
        return received, exc
    return received, None


def names(events):
    return [name for name, _ in events]


def decoded(events):
    return [json.loads(data) for _, data in events]


def text_of(events):
    return "".join(e["delta"]["text"] for e in decoded(events) if e["type"] == "content_block_delta")


def openai_text(chunks):
    return "".join(
        json.loads(c)["choices"][0]["delta"].get("content") or ""
        for c in chunks
        if c != "[DONE]" and json.loads(c)["choices"]
    )


# Anthropic Messages: the happy path and request checks.


def test_messages_returns_an_anthropic_message(sim):
    app, url = sim

    response = messages(url, "claude")

    assert response.status_code == 200
    assert response.json() == {
        "id": "msg_sim-1",
        "type": "message",
        "role": "assistant",
        "model": "claude-x",
        "content": [{"type": "text", "text": "Simulated reply from claude for claude-x."}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 5, "output_tokens": 6},
    }
    assert app.requests["claude"] == 1
    assert json.loads(app.last_bodies["claude"]) == MESSAGES


def test_messages_counts_the_system_prompt_as_input(sim):
    _, url = sim

    response = messages(url, "claude", {**MESSAGES, "system": "be brief please"})

    assert response.json()["usage"]["input_tokens"] == 8


@pytest.mark.parametrize(
    ("headers", "status", "kind", "message"),
    [
        ({"anthropic-version": "2023-06-01"}, 401, "authentication_error", "x-api-key header is required"),
        ({"x-api-key": "sk-ant-test"}, 400, "invalid_request_error", "anthropic-version: header is required"),
    ],
)
def test_messages_require_the_anthropic_headers(sim, headers, status, kind, message):
    app, url = sim

    response = messages(url, "claude", headers=headers)

    assert response.status_code == status
    assert response.json() == {"type": "error", "error": {"type": kind, "message": message}}
    assert app.requests["claude"] == 1  # counted, like every call


def test_messages_require_max_tokens_and_json(sim):
    _, url = sim
    body = {k: v for k, v in MESSAGES.items() if k != "max_tokens"}

    missing = messages(url, "claude", body)
    garbled = httpx.post(f"{url}/claude/v1/messages", content=b"{not json", headers=ANTHROPIC_HEADERS)

    assert missing.status_code == 400
    assert missing.json()["error"] == {"type": "invalid_request_error", "message": "max_tokens: Field required"}
    assert (garbled.status_code, garbled.json()["error"]["type"]) == (400, "invalid_request_error")


def test_a_rejected_request_does_not_use_up_the_fault_window(sim):
    _, url = sim
    put(url, "claude", mode="status", status=529, fail_first=1)

    unauthenticated = messages(url, "claude", headers={})
    faulted = messages(url, "claude")
    healed = messages(url, "claude")

    assert [r.status_code for r in (unauthenticated, faulted, healed)] == [401, 529, 200]


def test_messages_stream_sends_the_real_event_sequence(sim):
    app, url = sim

    events, error = read_events(url, "claude")

    assert error is None
    assert names(events) == EVENT_NAMES
    start, block, ping, *deltas, stop, delta, end = decoded(events)
    assert [e["type"] for e in decoded(events)] == EVENT_NAMES  # each data repeats its event name
    assert start["message"]["id"] == "msg_sim-1"
    assert start["message"]["usage"]["input_tokens"] == 5
    assert (start["message"]["content"], start["message"]["stop_reason"]) == ([], None)
    assert block == {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
    assert ping == {"type": "ping"}
    assert [d["delta"] for d in deltas] == [{"type": "text_delta", "text": f"word{i} "} for i in range(1, 5)]
    assert stop == {"type": "content_block_stop", "index": 0}
    assert delta["delta"] == {"stop_reason": "end_turn", "stop_sequence": None}
    assert delta["usage"] == {"output_tokens": 4}
    assert end == {"type": "message_stop"}
    assert app.completed_streams["claude"] == 1


def test_both_protocols_stream_the_same_words(sim):
    _, url = sim

    events, _ = read_events(url, "claude")
    chunks, _ = read_chunks(url, "/openai/v1/chat/completions", {**CHAT, "stream": True})

    assert text_of(events) == openai_text(chunks) == "word1 word2 word3 word4 "


def test_a_prefilled_messages_stream_goes_on_after_the_prefill_on_both_protocols(sim):
    _, url = sim
    prefill = [{"role": "user", "content": "hello there"}, {"role": "assistant", "content": "word1 word2"}]

    events, _ = read_events(url, "claude", {**MESSAGES, "messages": prefill, "stream": True})
    chunks, _ = read_chunks(url, "/openai/v1/chat/completions", {**CHAT, "messages": prefill, "stream": True})

    assert text_of(events) == openai_text(chunks) == "word3 word4 "


def test_messages_prefill_given_as_content_blocks_is_continued_too(sim):
    _, url = sim
    prefill = [
        {"role": "user", "content": [{"type": "text", "text": "hello there"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "word1 word2 word3"}]},
    ]

    events, _ = read_events(url, "claude", {**MESSAGES, "messages": prefill, "stream": True})

    assert text_of(events) == "word4 "
    assert decoded(events)[0]["message"]["usage"]["input_tokens"] == 8


# Anthropic-shaped faults.


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (529, "overloaded_error"),
        (429, "rate_limit_error"),
        (500, "api_error"),
        (503, "api_error"),
        (400, "invalid_request_error"),
        (422, "invalid_request_error"),
        (401, "authentication_error"),
        (403, "permission_error"),
        (404, "not_found_error"),
    ],
)
def test_status_faults_use_anthropic_error_types(sim, status, kind):
    _, url = sim
    put(url, "claude", mode="status", status=status)

    response = messages(url, "claude")
    streamed = messages(url, "claude", {**MESSAGES, "stream": True})

    assert response.status_code == streamed.status_code == status
    assert response.json() == {
        "type": "error",
        "error": {"type": kind, "message": f"Simulated {status} from claude"},
    }
    assert streamed.json() == response.json()  # errors come before a stream starts


def test_rate_limit_carries_retry_after_and_error_code_replaces_the_type(sim):
    _, url = sim
    put(url, "claude", mode="status", status=429, retry_after=7)
    limited = messages(url, "claude")
    put(url, "claude", mode="status", status=500, retry_after="", error_code="overloaded_error")
    relabelled = messages(url, "claude")

    assert (limited.status_code, limited.headers["retry-after"]) == (429, "7")
    assert limited.json()["error"]["type"] == "rate_limit_error"
    assert "retry-after" not in relabelled.headers
    assert (relabelled.status_code, relabelled.json()["error"]["type"]) == (500, "overloaded_error")


def test_flaky_messages_fail_the_given_fraction_in_anthropic_shape(sim):
    _, url = sim
    put(url, "claude", mode="flaky", fail_rate=0.5)

    responses = [messages(url, "claude") for _ in range(4)]

    assert [r.status_code for r in responses] == [200, 500, 200, 500]
    assert responses[1].json()["error"]["type"] == "api_error"


def test_messages_reset_hang_and_close(sim):
    app, url = sim
    put(url, "reset", mode="reset")
    put(url, "hang", mode="hang")

    with pytest.raises(httpx.ReadError):
        messages(url, "reset")
    with pytest.raises(httpx.ReadTimeout):
        messages(url, "hang", timeout=httpx.Timeout(5, read=0.2))
    with pytest.raises(httpx.RemoteProtocolError):
        messages(url, "close")

    assert (app.requests["reset"], app.requests["hang"], app.requests["close"]) == (1, 1, 1)


def test_messages_midstream_drops_after_n_events(sim):
    _, url = sim
    put(url, "claude", mode="midstream", fail_after_chunks=4)

    events, error = read_events(url, "claude")

    assert names(events) == ["message_start", "content_block_start", "ping", "content_block_delta"]
    assert isinstance(error, httpx.RemoteProtocolError)


def test_messages_stall_keeps_the_socket_open_after_n_events(sim):
    _, url = sim
    put(url, "claude", mode="stall", fail_after_chunks=3)

    events, error = read_events(url, "claude", timeout=httpx.Timeout(5, read=0.3))
    with httpx.stream(
        "POST",
        f"{url}/claude/v1/messages",
        json=MESSAGES,
        headers=ANTHROPIC_HEADERS,
        timeout=httpx.Timeout(5, read=0.2),
    ) as plain:
        with pytest.raises(httpx.ReadTimeout):
            plain.read()

    assert names(events) == ["message_start", "content_block_start", "ping"]
    assert isinstance(error, httpx.ReadTimeout)
    assert plain.status_code == 200


def test_messages_one_malformed_event_in_an_otherwise_complete_stream(sim):
    _, url = sim
    put(url, "claude", mode="malformed", fail_after_chunks=3)

    events, error = read_events(url, "claude")

    assert error is None
    assert events[3] == ("content_block_delta", "{not json")
    with pytest.raises(json.JSONDecodeError):
        json.loads(events[3][1])
    rest = events[:3] + events[4:]
    assert names(rest) == EVENT_NAMES
    assert all(isinstance(e, dict) for e in decoded(rest))


def test_messages_stream_without_message_stop(sim):
    _, url = sim
    put(url, "claude", mode="nodone")

    events, error = read_events(url, "claude")

    assert error is None
    assert names(events) == EVENT_NAMES[:-1]
    assert decoded(events)[-1]["delta"]["stop_reason"] == "end_turn"


@pytest.mark.parametrize("stream", [False, True])
def test_messages_context_length_error(sim, stream):
    _, url = sim
    put(url, "claude", mode="context_length")

    response = messages(url, "claude", {**MESSAGES, "stream": stream})

    assert response.status_code == 400
    assert response.json() == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": "prompt is too long: 8193 tokens > 8192 maximum"},
    }


@pytest.mark.parametrize(("extra", "kind"), [({}, "invalid_request_error"), ({"error_code": "refusal"}, "refusal")])
def test_messages_content_filter_refusal(sim, extra, kind):
    _, url = sim
    put(url, "claude", mode="content_filter", **extra)

    response = messages(url, "claude")

    assert response.status_code == 400
    assert response.json()["error"] == {"type": kind, "message": "Output blocked by content filtering policy"}


def test_messages_model_rejecting_prefill(sim):
    _, url = sim
    put(url, "claude", reject_prefill=True)
    prefill = {**MESSAGES, "messages": [*MESSAGES["messages"], {"role": "assistant", "content": "Well"}]}

    rejected = messages(url, "claude", prefill)
    plain = messages(url, "claude")

    assert rejected.status_code == 400
    assert rejected.json()["error"]["type"] == "invalid_request_error"
    assert "prefill" in rejected.json()["error"]["message"]
    assert plain.status_code == 200


def test_messages_slow_first_token_holds_the_first_event(sim):
    _, url = sim
    put(url, "claude", first_token_ms=600)

    early, early_error = read_events(url, "claude", timeout=httpx.Timeout(5, read=0.1))
    full, full_error = read_events(url, "claude")

    assert (early, type(early_error)) == ([], httpx.ReadTimeout)  # status 200 came, no event
    assert (names(full), full_error) == (EVENT_NAMES, None)


def test_messages_badusage(sim):
    _, url = sim
    put(url, "claude", mode="badusage")

    usage = messages(url, "claude").json()["usage"]
    events, _ = read_events(url, "claude")

    assert usage == {"input_tokens": "5", "output_tokens": -1}
    assert decoded(events)[-2]["usage"] == []


# A mid-stream error event (new mode "error_event"), on both protocols.


def test_messages_error_event_after_n_events(sim):
    app, url = sim
    put(url, "claude", mode="error_event", fail_after_chunks=4)

    events, error = read_events(url, "claude")

    assert error is None  # the stream ends cleanly, after the error
    assert names(events) == [*EVENT_NAMES[:4], "error"]
    assert decoded(events)[-1] == {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    assert app.completed_streams["claude"] == 0


def test_openai_error_event_after_n_chunks_with_error_code_as_type(sim):
    _, url = sim
    put(url, "openai", mode="error_event", fail_after_chunks=2, error_code="server_error")

    chunks, error = read_chunks(url, "/openai/v1/chat/completions", {**CHAT, "stream": True})

    assert error is None
    assert len(chunks) == 3
    assert [json.loads(c)["object"] for c in chunks[:2]] == ["chat.completion.chunk"] * 2
    assert json.loads(chunks[2]) == {
        "error": {"message": "Overloaded", "type": "server_error", "param": None, "code": None}
    }
    assert "[DONE]" not in chunks


def test_error_event_mode_answers_a_non_streaming_call_normally(sim):
    _, url = sim
    put(url, "openai", mode="error_event")
    put(url, "claude", mode="error_event")

    assert httpx.post(f"{url}/openai/v1/chat/completions", json=CHAT).status_code == 200
    assert messages(url, "claude").status_code == 200


def test_error_event_after_every_content_event_comes_before_the_end(sim):
    _, url = sim
    put(url, "claude", mode="error_event", fail_after_chunks=50)

    events, _ = read_events(url, "claude")

    assert names(events) == [*EVENT_NAMES[:7], "error"]


# Tool use.


def test_openai_tool_call(sim):
    _, url = sim

    data = httpx.post(f"{url}/openai/v1/chat/completions", json={**CHAT, "tools": OPENAI_TOOLS}).json()

    choice = data["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] is None
    assert choice["message"]["tool_calls"] == [
        {"id": "call_sim_1", "type": "function", "function": {"name": "lookup", "arguments": '{"query": "sim"}'}}
    ]


def test_openai_tool_call_streamed_in_pieces(sim):
    _, url = sim

    chunks, error = read_chunks(
        url,
        "/openai/v1/chat/completions",
        {**CHAT, "tools": OPENAI_TOOLS, "stream": True, "stream_options": {"include_usage": True}},
    )

    assert (error, chunks[-1]) == (None, "[DONE]")
    parsed = [json.loads(c) for c in chunks[:-1]]
    calls = [c["choices"][0]["delta"]["tool_calls"][0] for c in parsed if c["choices"] and c["choices"][0]["delta"]]
    assert (calls[0]["index"], calls[0]["id"], calls[0]["type"]) == (0, "call_sim_1", "function")
    assert calls[0]["function"]["name"] == "lookup"
    pieces = [c["function"]["arguments"] for c in calls if c["function"]["arguments"]]
    assert len(pieces) >= 2
    assert json.loads("".join(pieces)) == {"query": "sim"}
    assert parsed[-2]["choices"][0]["finish_reason"] == "tool_calls"
    assert parsed[-1]["usage"]["completion_tokens"] > 0


def test_openai_tool_result_is_echoed(sim):
    _, url = sim
    conversation = [
        {"role": "user", "content": "look it up"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "call_sim_1", "type": "function"}]},
        {"role": "tool", "tool_call_id": "call_sim_1", "content": "42 apples"},
    ]
    body = {**CHAT, "messages": conversation, "tools": OPENAI_TOOLS}

    data = httpx.post(f"{url}/openai/v1/chat/completions", json=body).json()
    chunks, _ = read_chunks(url, "/openai/v1/chat/completions", {**body, "stream": True})

    assert data["choices"][0]["message"]["content"] == "Tool said: 42 apples"
    assert data["choices"][0]["finish_reason"] == "stop"
    assert openai_text(chunks) == "Tool said: 42 apples"


def test_anthropic_tool_use(sim):
    _, url = sim

    data = messages(url, "claude", {**MESSAGES, "tools": ANTHROPIC_TOOLS}).json()

    assert data["stop_reason"] == "tool_use"
    assert data["content"] == [{"type": "tool_use", "id": "toolu_sim_1", "name": "lookup", "input": {"query": "sim"}}]


def test_anthropic_tool_use_streamed_as_input_json_deltas(sim):
    _, url = sim

    events, error = read_events(url, "claude", {**MESSAGES, "tools": ANTHROPIC_TOOLS, "stream": True})

    assert error is None
    parsed = decoded(events)
    assert parsed[1]["content_block"] == {"type": "tool_use", "id": "toolu_sim_1", "name": "lookup", "input": {}}
    pieces = [e["delta"]["partial_json"] for e in parsed if e["type"] == "content_block_delta"]
    assert {e["delta"]["type"] for e in parsed if e["type"] == "content_block_delta"} == {"input_json_delta"}
    assert len(pieces) >= 2
    assert json.loads("".join(pieces)) == {"query": "sim"}
    message_delta = next(e for e in parsed if e["type"] == "message_delta")
    assert message_delta["delta"]["stop_reason"] == "tool_use"
    assert names(events)[-1] == "message_stop"


def test_anthropic_tool_result_is_echoed(sim):
    _, url = sim
    conversation = [
        {"role": "user", "content": "look it up"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_sim_1", "name": "lookup", "input": {}}]},
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_sim_1",
                    "content": [{"type": "text", "text": "42 apples"}],
                }
            ],
        },
    ]
    body = {**MESSAGES, "messages": conversation, "tools": ANTHROPIC_TOOLS}

    data = messages(url, "claude", body).json()
    events, _ = read_events(url, "claude", {**body, "stream": True})

    assert data["content"] == [{"type": "text", "text": "Tool said: 42 apples"}]
    assert data["stop_reason"] == "end_turn"
    assert text_of(events) == "Tool said: 42 apples"


def test_faults_apply_to_tool_streams(sim):
    _, url = sim
    put(url, "openai", mode="midstream", fail_after_chunks=2)

    chunks, error = read_chunks(url, "/openai/v1/chat/completions", {**CHAT, "tools": OPENAI_TOOLS, "stream": True})

    assert len(chunks) == 2
    assert isinstance(error, httpx.RemoteProtocolError)


# Azure OpenAI deployments.


def test_azure_deployment_path_reports_the_deployment_as_model(sim):
    app, url = sim

    response = azure(url, "azure")

    data = response.json()
    assert response.status_code == 200
    assert data["model"] == "prod-gpt"
    assert data["choices"][0]["message"]["content"] == "Simulated reply from azure for prod-gpt."
    assert app.requests["azure"] == 1
    assert app.last_headers["azure"]["api-key"] == "az-test"


def test_azure_requires_api_key_and_api_version(sim):
    _, url = sim

    no_key = azure(url, "azure", headers={})
    no_version = azure(url, "azure", version="")

    assert no_key.status_code == 401
    assert no_key.json()["error"]["code"] == "401"
    assert "Access denied" in no_key.json()["error"]["message"]
    assert no_version.status_code == 400
    assert "api-version" in no_version.json()["error"]["message"]


def test_azure_streams_and_takes_the_same_faults(sim):
    _, url = sim
    path = "/azure/openai/deployments/prod-gpt/chat/completions?api-version=2024-06-01"

    chunks, error = read_chunks(url, path, {**CHAT, "stream": True}, headers=AZURE_HEADERS)
    put(url, "azure", mode="status", status=503)
    failed = azure(url, "azure")
    put(url, "azure", mode="midstream", fail_after_chunks=3)
    cut, cut_error = read_chunks(url, path, {**CHAT, "stream": True}, headers=AZURE_HEADERS)

    assert (error, chunks[-1]) == (None, "[DONE]")
    assert {json.loads(c)["model"] for c in chunks[:-1]} == {"prod-gpt"}
    assert failed.status_code == 503
    assert failed.json()["error"]["message"] == "Simulated 503 from azure"
    assert (len(cut), type(cut_error)) == (3, httpx.RemoteProtocolError)


def test_azure_tool_call(sim):
    _, url = sim

    data = azure(url, "azure", body={**CHAT, "tools": OPENAI_TOOLS}).json()

    assert data["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "lookup"


# What reached the upstream.


def test_last_headers_are_kept_per_provider_lower_cased_and_cleared_by_reset(sim):
    app, url = sim

    messages(url, "claude", headers={"X-Api-Key": "sk-ant-1", "Anthropic-Version": "2023-06-01"})
    httpx.post(f"{url}/openai/v1/chat/completions", json=CHAT, headers={"Authorization": "Bearer sk-1"})
    state = httpx.get(f"{url}/_sim/state").json()
    httpx.post(f"{url}/_sim/reset")

    assert state["claude"].keys() == {"behaviour", "requests", "arrivals"}  # the state's shape is unchanged
    assert "last_headers" not in state
    assert app.last_headers == {}
    assert app.requests == {}


def test_last_headers_hold_what_each_protocol_sent(sim):
    app, url = sim

    messages(url, "claude", headers={"X-Api-Key": "sk-ant-1", "Anthropic-Version": "2023-06-01"})
    azure(url, "azure", headers={"Api-Key": "az-1"})
    httpx.post(f"{url}/openai/v1/chat/completions", json=CHAT, headers={"Authorization": "Bearer sk-1"})

    assert app.last_headers["claude"]["x-api-key"] == "sk-ant-1"
    assert app.last_headers["claude"]["anthropic-version"] == "2023-06-01"
    assert app.last_headers["azure"]["api-key"] == "az-1"
    assert app.last_headers["openai"]["authorization"] == "Bearer sk-1"
    assert all(k == k.lower() for headers in app.last_headers.values() for k in headers)
    assert len(app.arrivals["claude"]) == len(app.arrivals["azure"]) == 1


# A real client library reads the new shapes (the official `openai` SDK, its Azure client included).


def test_the_openai_sdks_azure_client_reaches_the_deployment_and_joins_a_streamed_tool_call(sim):
    app, url = sim
    client = openai.AzureOpenAI(
        azure_endpoint=f"{url}/azure", api_key="az-sdk", api_version="2024-06-01", max_retries=0, timeout=10
    )

    plain = client.chat.completions.create(model="prod-gpt", messages=[{"role": "user", "content": "hi"}])
    stream = client.chat.completions.create(
        model="prod-gpt", messages=[{"role": "user", "content": "hi"}], tools=OPENAI_TOOLS, stream=True
    )
    arguments = "".join(
        call.function.arguments or ""
        for chunk in stream
        if chunk.choices
        for call in chunk.choices[0].delta.tool_calls or []
        if call.function is not None
    )

    assert (plain.model, plain.choices[0].message.content) == ("prod-gpt", "Simulated reply from azure for prod-gpt.")
    assert json.loads(arguments) == {"query": "sim"}
    assert app.last_headers["azure"]["api-key"] == "az-sdk"


def test_the_openai_sdk_raises_on_the_error_event(sim):
    _, url = sim
    put(url, "openai", mode="error_event", fail_after_chunks=2)
    client = openai.OpenAI(base_url=f"{url}/openai/v1", api_key="sk-sdk", max_retries=0, timeout=10)
    received = []

    with pytest.raises(openai.APIError, match="Overloaded"):
        for chunk in client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "hi"}], stream=True
        ):
            received.append(chunk)

    assert len(received) == 2
