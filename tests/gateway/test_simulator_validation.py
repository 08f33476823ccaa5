"""The simulator's control endpoint refuses what it cannot act on (a 400 in its documented error shape, and the
behaviour left as it was); its chat routes refuse a malformed request with a 400, never a 500; the stream faults
count the chunks sent and fault at the end of a stream shorter than N; `hang` holds until the client goes."""

import asyncio
import json

import httpx
import pytest

import gateway.simulator as simulator_module
from gateway.simulator import Behaviour, Simulator

pytestmark = pytest.mark.db_independent

BODY = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hello there"}]}
PREFILLED = {
    "model": "gpt-4o",
    "stream": True,
    "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "word1 word2"}],
}


def _put(url: str, raw: bytes | dict, name: str = "openai") -> httpx.Response:
    if isinstance(raw, dict):
        return httpx.put(f"{url}/_sim/providers/{name}", json=raw)
    return httpx.put(f"{url}/_sim/providers/{name}", content=raw, headers={"content-type": "application/json"})


def _assert_refused(response: httpx.Response, url: str, words: str) -> None:
    """A 400 in the control endpoint's error shape, naming the problem; no behaviour was set."""
    assert response.status_code == 400, (response.status_code, response.text[:200])
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert words in error["message"], error["message"]
    assert "openai" not in httpx.get(f"{url}/_sim/state").json()


# --- control endpoint: values out of range, non-finite, wrongly typed -------------------------------------


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("status", 700, "status must be between 100 and 599"),
        ("status", 99, "status must be between 100 and 599"),
        ("chunks", -1, "chunks must be at least 0"),
        ("latency_ms", -5, "latency_ms must be at least 0"),
        ("chunk_delay_ms", -5, "chunk_delay_ms must be at least 0"),
        ("first_token_ms", -5, "first_token_ms must be at least 0"),
        ("fail_after_chunks", -2, "fail_after_chunks must be at least 0"),
        ("fail_first", -1, "fail_first must be at least 0"),
        ("down_until", -1, "down_until must be at least 0"),
        ("fail_rate", -0.5, "fail_rate must be between 0 and 1"),
        ("fail_rate", 1.5, "fail_rate must be between 0 and 1"),
    ],
)
def test_a_value_out_of_its_range_is_refused(sim, field, value, words):
    _, url = sim

    _assert_refused(_put(url, {field: value}), url, words)


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        (b'{"status": 1e999}', "status must be a finite number"),
        (b'{"chunks": Infinity}', "chunks must be a finite number"),
        (b'{"fail_first": -Infinity}', "fail_first must be a finite number"),
        (b'{"latency_ms": NaN}', "latency_ms must be a finite number"),
        (b'{"fail_rate": NaN}', "fail_rate must be a finite number"),
        (b'{"down_until": 1e999}', "down_until must be a finite number"),
        (b'{"latency_ms": 1' + b"0" * 400 + b"}", "latency_ms must be a finite number"),
        (b'{"retry_after": NaN}', "retry_after must be a string or a finite number"),
    ],
    ids=["status-1e999", "chunks-Infinity", "fail_first--Infinity", "latency-NaN", "fail_rate-NaN", "down-1e999",
         "latency-huge-integer", "retry_after-NaN"],
)  # fmt: skip
def test_a_non_finite_number_is_a_400_not_a_500(sim, raw, words):
    _, url = sim

    _assert_refused(_put(url, raw), url, words)


@pytest.mark.parametrize(
    ("payload", "words"),
    [
        ({"status": "503"}, "status must be a number"),
        ({"chunks": 2.7}, "chunks must be an integer"),
        ({"fail_first": "3"}, "fail_first must be a number"),
        ({"latency_ms": "Infinity"}, "latency_ms must be a number"),
        ({"fail_rate": None}, "fail_rate must be a number"),
        ({"status": True}, "status must be a number"),
        ({"retry_after": ["2"]}, "retry_after must be a string"),
    ],
)
def test_a_wrongly_typed_value_is_a_400_as_documented(sim, payload, words):
    _, url = sim

    _assert_refused(_put(url, payload), url, words)


@pytest.mark.parametrize(
    ("payload", "words"),
    [
        ({"retry_after": "2\n"}, "retry_after must not contain control characters"),
        ({"retry_after": "2\r\nX-Injected: 1"}, "retry_after must not contain control characters"),
        ({"retry_after": "2\x00"}, "retry_after must not contain control characters"),
        ({"retry_after": "zwei\u00e9"}, "retry_after must be ASCII"),
        ({"error_code": "quota\x07"}, "error_code must not contain control characters"),
        ({"error_code": "a\x7fb"}, "error_code must not contain control characters"),
        ({"retry_after": -3}, "retry_after must be a string or a finite number"),
    ],
)
def test_a_header_or_code_that_cannot_be_sent_is_refused(sim, payload, words):
    _, url = sim

    _assert_refused(_put(url, {"mode": "status", "status": 429, **payload}), url, words)


def test_the_edges_of_each_range_and_whole_floats_are_accepted(sim):
    _, url = sim

    low = _put(url, {"status": 100, "fail_rate": 0, "chunks": 0, "fail_after_chunks": 0, "fail_first": 0})
    high = _put(url, {"status": 599, "fail_rate": 1, "latency_ms": 0, "down_until": 0})
    whole = _put(url, {"status": 503.0, "chunks": 3.0, "retry_after": 3.0, "error_code": "quota exceeded"})

    assert (low.status_code, high.status_code, whole.status_code) == (200, 200, 200)
    assert (whole.json()["status"], whole.json()["chunks"], whole.json()["retry_after"]) == (503, 3, "3")
    assert isinstance(whole.json()["status"], int)


def test_a_refused_put_keeps_the_behaviour_set_before(sim):
    _, url = sim
    _put(url, {"mode": "status", "status": 503, "fail_first": 2})

    refused = _put(url, {"mode": "status", "status": 503, "fail_first": -1})
    call = httpx.post(f"{url}/openai/v1/chat/completions", json=BODY)

    assert refused.status_code == 400
    assert call.status_code == 503  # still inside the first window: a negative fail_first did not turn it off


@pytest.mark.parametrize(
    "raw", [b"[" * 100_000, b'{"mode": "\xff"}'], ids=["nested-too-deep", "not-utf8"]
)  # fmt: skip
def test_a_body_the_control_endpoint_cannot_parse_is_a_400(sim, raw):
    _, url = sim

    response = _put(url, raw)

    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize("data", [{"status": 700}, {"latency_ms": float("nan")}, {"chunks": -1}, {"status": "503"}])
def test_behaviour_updated_refuses_what_the_endpoint_refuses(data):
    with pytest.raises(ValueError):
        Behaviour().updated(data)


# --- provider names that carry a fault ------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["fail-700", "fail-99", "slow-nan", "slow-inf", "slow--5", "midstream--1", "flaky-150"]
)
def test_a_fault_name_with_an_invalid_value_is_an_ordinary_name(sim, name):
    _, url = sim

    response = httpx.post(f"{url}/{name}/v1/chat/completions", json=BODY)
    state = _put(url, {"mode": "status"}, name=name)

    assert response.status_code == 200, (name, response.status_code, response.text[:80])
    assert state.status_code == 200
    assert state.json()["status"] == 500  # the default status, not the name's invalid one
    assert Behaviour.from_name(name) == Behaviour()


def test_a_fault_name_with_a_valid_value_still_works(sim):
    _, url = sim

    assert httpx.post(f"{url}/fail-503/v1/chat/completions", json=BODY).status_code == 503
    assert Behaviour.from_name("flaky-25").fail_rate == 0.25
    assert Behaviour.from_name("midstream-3").fail_after_chunks == 3


# --- chat routes: request checks ------------------------------------------------------------------------


@pytest.mark.parametrize("stream_options", [True, "include_usage", [1], 5])
def test_stream_options_that_is_not_an_object_is_a_400_not_a_500(sim, stream_options):
    _, url = sim

    response = httpx.post(
        f"{url}/openai/v1/chat/completions", json={**BODY, "stream": True, "stream_options": stream_options}
    )

    assert response.status_code == 400, (response.status_code, response.text[:80])
    assert response.json()["error"] == {
        "message": "stream_options must be an object",
        "type": "invalid_request_error",
        "param": None,
        "code": None,
    }


@pytest.mark.parametrize("raw", [b"[" * 100_000, b'{"model": "\xff"}'], ids=["nested-too-deep", "not-utf8"])
def test_a_chat_body_that_cannot_be_parsed_is_a_400_not_a_500(sim, raw):
    _, url = sim

    response = httpx.post(
        f"{url}/openai/v1/chat/completions", content=raw, headers={"content-type": "application/json"}
    )

    assert response.status_code == 400
    assert response.json()["error"]["message"] == "Invalid JSON body"


# --- stream faults ---------------------------------------------------------------------------------------


def _stream(url: str, body: dict, provider: str = "openai", read: float = 5.0) -> tuple[list[str], str]:
    """The data lines received, and how the stream ended: "complete", "dropped" or "silent" (the read timed
    out: the simulator holds the socket open and sends nothing)."""
    lines: list[str] = []
    timeout = httpx.Timeout(5, read=read)
    try:
        with httpx.stream("POST", f"{url}/{provider}/v1/chat/completions", json=body, timeout=timeout) as response:
            for line in response.iter_lines():
                if line.startswith("data: "):
                    lines.append(line.removeprefix("data: "))
    except httpx.ReadTimeout:
        return lines, "silent"
    except httpx.RemoteProtocolError:
        return lines, "dropped"
    return lines, "complete"


def _contents(lines: list[str]) -> list[str]:
    return [json.loads(x)["choices"][0]["delta"].get("content") for x in lines if x.startswith('{"id"')]


def test_stall_past_the_end_of_the_stream_stalls_at_its_end(sim):
    app, url = sim
    _put(url, {"mode": "stall", "fail_after_chunks": 10})  # the stream has 5 chunks

    lines, how = _stream(url, {**BODY, "stream": True}, read=0.5)

    assert how == "silent", (how, lines)
    assert len(lines) == 5  # every chunk, then silence instead of the final chunk and [DONE]
    assert "[DONE]" not in lines
    assert app.completed_streams["openai"] == 0


def test_malformed_past_the_end_of_the_stream_sends_its_event_before_the_end(sim):
    _, url = sim
    _put(url, {"mode": "malformed", "fail_after_chunks": 10})

    lines, how = _stream(url, {**BODY, "stream": True})

    assert how == "complete"
    assert lines.index("{not json") == 5  # after the 5 chunks, before the final chunk
    assert lines[-1] == "[DONE]"
    assert lines.count("{not json") == 1


@pytest.mark.parametrize("mode", ["midstream", "error_event"])
def test_midstream_and_error_event_past_the_end_still_fault_at_its_end(sim, mode):
    _, url = sim
    _put(url, {"mode": mode, "fail_after_chunks": 10})

    lines, how = _stream(url, {**BODY, "stream": True})

    assert len([x for x in lines if x.startswith('{"id"')]) == 5
    assert "[DONE]" not in lines
    assert how == ("dropped" if mode == "midstream" else "complete")


def test_midstream_sends_n_chunks_for_a_prefilled_request(sim):
    _, url = sim
    _put(url, {"mode": "midstream", "fail_after_chunks": 2})

    lines, how = _stream(url, PREFILLED)

    assert how == "dropped"
    assert _contents(lines) == ["", "word3 "]  # N = 2 chunks sent: the role, then the first word after the prefill


def test_stall_and_malformed_count_the_chunks_sent_for_a_prefilled_request(sim):
    _, url = sim
    _put(url, {"mode": "malformed", "fail_after_chunks": 1})
    malformed, _ = _stream(url, PREFILLED)
    _put(url, {"mode": "stall", "fail_after_chunks": 2})
    stalled, how = _stream(url, PREFILLED, read=0.5)

    assert malformed[1] == "{not json"  # after the first chunk (the role), before word3
    assert _contents(malformed[2:3]) == ["word3 "]
    assert (how, _contents(stalled)) == ("silent", ["", "word3 "])


def test_a_stream_fault_at_zero_comes_before_the_first_chunk(sim):
    _, url = sim
    _put(url, {"mode": "malformed", "fail_after_chunks": 0})

    lines, how = _stream(url, {**BODY, "stream": True})

    assert (how, lines[0], lines[-1]) == ("complete", "{not json", "[DONE]")


# --- hang: held until the client goes --------------------------------------------------------------------


def test_hang_holds_until_the_client_goes_however_long_that_takes(monkeypatch):
    """The hold waits for the disconnect in slices; a slice that ends without one is not the end of the hold (an
    app that returned there unanswered would make the server send a 500)."""
    waits: list[float] = []

    async def wait_disconnect(receive, limit):
        waits.append(limit)
        return len(waits) == 4  # three slices pass in silence, then the client goes

    monkeypatch.setattr(simulator_module, "_wait_disconnect", wait_disconnect)
    app = Simulator()
    app.behaviours["openai"] = Behaviour(mode="hang")
    sent: list[dict] = []

    async def receive():
        return {"type": "http.request", "body": json.dumps(BODY).encode(), "more_body": False}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/openai/v1/chat/completions", "headers": []}
    asyncio.run(app(scope, receive, send))

    assert len(waits) == 4
    assert sent == []  # nothing, not even the headers
    assert app.abandoned["openai"] == 1
