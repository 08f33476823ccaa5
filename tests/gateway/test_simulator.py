"""The simulator over real sockets: each behaviour as a client sees it."""

import json

import httpx
import pytest

BODY = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hello there"}]}


def test_ok_returns_completion_with_usage(sim):
    app, url = sim

    response = httpx.post(f"{url}/openai/v1/chat/completions", json=BODY)

    data = response.json()
    assert response.status_code == 200
    assert data["model"] == "gpt-4o"
    assert data["choices"][0]["message"]["content"] == "Simulated reply from openai for gpt-4o."
    assert data["usage"] == {"prompt_tokens": 5, "completion_tokens": 6, "total_tokens": 11}
    assert app.requests["openai"] == 1


@pytest.mark.parametrize("status", [429, 500, 502, 503, 504, 400, 401])
def test_fail_path_returns_that_status_in_openai_shape(sim, status):
    _, url = sim

    response = httpx.post(f"{url}/fail-{status}/v1/chat/completions", json=BODY)

    assert response.status_code == status
    assert response.json()["error"]["message"] == f"Simulated {status} from fail-{status}"


def test_control_endpoint_switches_behaviour_and_counts(sim):
    _, url = sim

    put = httpx.put(f"{url}/_sim/providers/openai", json={"mode": "status", "status": 503})
    failed = httpx.post(f"{url}/openai/v1/chat/completions", json=BODY)
    httpx.delete(f"{url}/_sim/providers/openai")
    healed = httpx.post(f"{url}/openai/v1/chat/completions", json=BODY)
    state = httpx.get(f"{url}/_sim/state").json()

    assert put.json()["status"] == 503
    assert (failed.status_code, healed.status_code) == (503, 200)
    assert state["openai"]["requests"] == 2


def test_control_endpoint_rejects_unknown_fields(sim):
    _, url = sim

    response = httpx.put(f"{url}/_sim/providers/openai", json={"mood": "grumpy"})

    assert response.status_code == 400
    assert response.json()["error"]["message"] == "unknown fields: mood"


def test_stream_sends_chunks_then_done(sim):
    _, url = sim

    with httpx.stream(
        "POST",
        f"{url}/openai/v1/chat/completions",
        json={**BODY, "stream": True, "stream_options": {"include_usage": True}},
    ) as response:
        events = [line.removeprefix("data: ") for line in response.iter_lines() if line.startswith("data: ")]

    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert [c["object"] for c in chunks] == ["chat.completion.chunk"] * 7
    assert chunks[-1]["usage"]["completion_tokens"] == 4


def test_midstream_failure_cuts_the_stream_without_done(sim):
    _, url = sim
    received = []

    with (
        pytest.raises(httpx.RemoteProtocolError),
        httpx.stream("POST", f"{url}/midstream-2/v1/chat/completions", json={**BODY, "stream": True}) as response,
    ):
        for line in response.iter_lines():
            received.append(line)

    data_lines = [line for line in received if line.startswith("data: ")]
    assert len(data_lines) == 2
    assert "data: [DONE]" not in received


def test_close_drops_the_connection(sim):
    _, url = sim

    with pytest.raises(httpx.RemoteProtocolError):
        httpx.post(f"{url}/close/v1/chat/completions", json=BODY)


def test_hang_holds_until_the_client_times_out(sim):
    _, url = sim

    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{url}/hang/v1/chat/completions", json=BODY, timeout=httpx.Timeout(5, read=0.2))


def test_flaky_fails_the_given_fraction(sim):
    _, url = sim

    statuses = [httpx.post(f"{url}/flaky-25/v1/chat/completions", json=BODY).status_code for _ in range(8)]

    assert statuses.count(500) == 2
    assert statuses.count(200) == 6


def test_invalid_json_is_a_400(sim):
    _, url = sim

    response = httpx.post(f"{url}/openai/v1/chat/completions", content=b"{not json")

    assert response.status_code == 400
