"""The simulator over real sockets: each behaviour as a client sees it."""

import json
import socket
from datetime import UTC, datetime
from email.utils import format_datetime, parsedate_to_datetime

import httpx
import pytest

from gateway.simulator import Behaviour, Simulator
from tests.servers import serve

pytestmark = pytest.mark.db_independent

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


# Faults for resilience policies (issue 10), switched per provider through the control endpoint.

STREAM = {**BODY, "stream": True}
PREFILL = {**BODY, "messages": [*BODY["messages"], {"role": "assistant", "content": "General Kenobi"}]}


def put(url, name, **behaviour):
    response = httpx.put(f"{url}/_sim/providers/{name}", json=behaviour)
    assert response.status_code == 200, response.text
    return response.json()


def chat(url, name, body=BODY, **kwargs):
    return httpx.post(f"{url}/{name}/v1/chat/completions", json=body, **kwargs)


def read_stream(url, name, body=STREAM, timeout=None):
    """The `data:` payloads received, and the exception that ended the read (None when it ended cleanly)."""
    received = []
    try:
        with httpx.stream(
            "POST", f"{url}/{name}/v1/chat/completions", json=body, timeout=timeout or httpx.Timeout(5)
        ) as response:
            assert response.status_code == 200
            for line in response.iter_lines():
                if line.startswith("data: "):
                    received.append(line.removeprefix("data: "))
    except httpx.HTTPError as exc:
        return received, exc
    return received, None


class Clock:
    def __init__(self, now):
        self.now = now

    def __call__(self):
        return self.now


@pytest.fixture
def clocked():
    """A simulator on a hand-driven wall clock (for `down_until`) and monotonic clock (for arrivals)."""
    wall, mono = Clock(1_000_000.0), Clock(50.0)
    app = Simulator(clock=wall, monotonic=mono)
    with serve(app) as url:
        yield app, url, wall, mono


def test_429_with_retry_after_seconds(sim):
    _, url = sim
    put(url, "openai", mode="status", status=429, retry_after=2)

    response = chat(url, "openai")

    assert response.status_code == 429
    assert response.headers["retry-after"] == "2"
    assert response.json()["error"]["message"] == "Simulated 429 from openai"


def test_429_with_retry_after_as_an_http_date(sim):
    _, url = sim
    when = format_datetime(datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC), usegmt=True)
    put(url, "openai", mode="status", status=429, retry_after=when)

    response = chat(url, "openai")

    assert response.status_code == 429
    assert response.headers["retry-after"] == "Wed, 02 Jan 2030 03:04:05 GMT"
    assert parsedate_to_datetime(response.headers["retry-after"]) == datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)


def test_429_without_retry_after(sim):
    _, url = sim
    put(url, "openai", mode="status", status=429)

    response = chat(url, "openai")

    assert response.status_code == 429
    assert "retry-after" not in response.headers


def test_500_once_then_healthy(sim):
    app, url = sim
    put(url, "openai", mode="status", status=500, fail_first=1)

    statuses = [chat(url, "openai").status_code for _ in range(3)]
    put(url, "openai", fail_first=2)  # setting the behaviour again starts a new window
    again = [chat(url, "openai").status_code for _ in range(3)]

    assert statuses == [500, 200, 200]
    assert again == [500, 500, 200]
    assert app.requests["openai"] == 6


def test_fail_first_n_counts_from_an_in_process_assignment(sim):
    app, url = sim
    app.behaviours["openai"] = Behaviour(mode="status", status=502, fail_first=2)

    statuses = [chat(url, "openai").status_code for _ in range(4)]

    assert statuses == [502, 502, 200, 200]


def test_persistent_503(sim):
    _, url = sim
    put(url, "openai", mode="status", status=503)

    statuses = [chat(url, "openai").status_code for _ in range(5)]

    assert statuses == [503] * 5


def test_reset_before_headers_sends_no_byte(sim):
    app, url = sim
    put(url, "openai", mode="reset")
    host, port = url.removeprefix("http://").split(":")
    body = json.dumps(BODY).encode()
    request = (
        f"POST /openai/v1/chat/completions HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    ).encode() + body
    received = b""

    with socket.create_connection((host, int(port)), timeout=5) as conn:
        conn.sendall(request)
        with pytest.raises(ConnectionResetError):
            while chunk := conn.recv(4096):
                received += chunk

    assert received == b""
    assert app.requests["openai"] == 1


def test_reset_is_a_connection_error_for_an_http_client_and_the_server_stays_up(sim):
    _, url = sim
    put(url, "openai", mode="reset")

    with pytest.raises(httpx.ReadError):
        chat(url, "openai")
    healthy = chat(url, "backup")

    assert healthy.status_code == 200


def test_accept_and_never_answer(sim):
    app, url = sim
    put(url, "openai", mode="hang")

    with pytest.raises(httpx.ReadTimeout):
        chat(url, "openai", timeout=httpx.Timeout(5, read=0.2))

    assert app.requests["openai"] == 1  # the request was accepted and read


def test_slow_first_token_holds_the_first_chunk_after_the_headers(sim):
    _, url = sim
    put(url, "openai", first_token_ms=600)

    early, early_error = read_stream(url, "openai", timeout=httpx.Timeout(5, read=0.1))
    full, full_error = read_stream(url, "openai")

    assert (early, type(early_error)) == ([], httpx.ReadTimeout)  # headers came (status 200), no chunk
    assert full_error is None
    assert (len(full), full[-1]) == (7, "[DONE]")


def test_slow_first_token_without_streaming_delays_the_body(sim):
    _, url = sim
    put(url, "openai", first_token_ms=600)

    with httpx.stream("POST", f"{url}/openai/v1/chat/completions", json=BODY, timeout=httpx.Timeout(5, read=0.1)) as r:
        status = r.status_code
        with pytest.raises(httpx.ReadTimeout):
            r.read()
    later = chat(url, "openai")

    assert status == 200
    assert later.json()["choices"][0]["message"]["content"] == "Simulated reply from openai for gpt-4o."


def test_cut_after_n_chunks(sim):
    _, url = sim
    put(url, "openai", mode="midstream", fail_after_chunks=3)

    received, error = read_stream(url, "openai")

    assert len(received) == 3
    assert "[DONE]" not in received
    assert isinstance(error, httpx.RemoteProtocolError)


def test_stall_keeps_the_socket_open_after_n_chunks(sim):
    _, url = sim
    put(url, "openai", mode="stall", fail_after_chunks=2)

    received, error = read_stream(url, "openai", timeout=httpx.Timeout(5, read=0.3))

    assert [json.loads(e)["object"] for e in received] == ["chat.completion.chunk"] * 2
    assert isinstance(error, httpx.ReadTimeout)  # not closed: a close would be a protocol error


def test_stall_without_streaming_sends_headers_and_no_body(sim):
    _, url = sim
    put(url, "openai", mode="stall")

    with httpx.stream("POST", f"{url}/openai/v1/chat/completions", json=BODY, timeout=httpx.Timeout(5, read=0.2)) as r:
        status = r.status_code
        with pytest.raises(httpx.ReadTimeout):
            r.read()

    assert status == 200


def test_one_malformed_event_in_an_otherwise_good_stream(sim):
    _, url = sim
    put(url, "openai", mode="malformed", fail_after_chunks=2)

    received, error = read_stream(url, "openai")

    assert error is None
    assert received[2] == "{not json"
    assert received[-1] == "[DONE]"
    good = [json.loads(e) for i, e in enumerate(received[:-1]) if i != 2]
    assert len(good) == 6  # the usual 5 content chunks and the final one, all intact
    with pytest.raises(json.JSONDecodeError):
        json.loads(received[2])


def test_stream_without_done(sim):
    _, url = sim
    put(url, "openai", mode="nodone")

    received, error = read_stream(url, "openai")

    assert error is None  # ends cleanly
    assert len(received) == 6
    assert "[DONE]" not in received
    assert json.loads(received[-1])["choices"][0]["finish_reason"] == "stop"


@pytest.mark.parametrize("body", [BODY, STREAM])
def test_context_length_error_in_openai_shape(sim, body):
    _, url = sim
    put(url, "openai", mode="context_length")

    response = chat(url, "openai", body)

    error = response.json()["error"]
    assert response.status_code == 400
    assert (error["type"], error["code"], error["param"]) == (
        "invalid_request_error",
        "context_length_exceeded",
        "messages",
    )
    assert error["message"].startswith("This model's maximum context length is 8192 tokens.")


@pytest.mark.parametrize(
    ("extra", "code"),
    [({}, "content_filter"), ({"error_code": "content_policy_violation"}, "content_policy_violation")],
)
def test_content_filter_refusal(sim, extra, code):
    _, url = sim
    put(url, "openai", mode="content_filter", **extra)

    response = chat(url, "openai")

    assert response.status_code == 400
    assert (response.json()["error"]["type"], response.json()["error"]["code"]) == ("invalid_request_error", code)


def test_model_rejecting_prefill_answers_other_requests(sim):
    _, url = sim
    put(url, "openai", reject_prefill=True)

    prefilled = chat(url, "openai", PREFILL)
    prefilled_stream = chat(url, "openai", {**PREFILL, "stream": True})
    plain = chat(url, "openai")
    other = chat(url, "backup", PREFILL)

    assert (prefilled.status_code, prefilled_stream.status_code) == (400, 400)
    assert prefilled.json()["error"]["code"] == "prefill_unsupported"
    assert "prefill" in prefilled.json()["error"]["message"]
    assert (plain.status_code, other.status_code) == (200, 200)


def test_primary_down_until_an_epoch_time_then_healthy(clocked):
    _, url, wall, _ = clocked
    put(url, "openai", mode="status", status=503, down_until=wall.now + 30)

    during = [chat(url, "openai").status_code for _ in range(2)]
    wall.now += 30
    after = [chat(url, "openai").status_code for _ in range(2)]

    assert (during, after) == ([503, 503], [200, 200])


def test_primary_down_for_n_calls_then_healthy(sim):
    _, url = sim
    put(url, "openai", mode="reset", fail_first=3)

    errors = 0
    for _ in range(3):
        with pytest.raises(httpx.ReadError):
            chat(url, "openai")
        errors += 1
    healed = chat(url, "openai")

    assert (errors, healed.status_code) == (3, 200)


def test_both_window_limits_must_hold_for_the_fault(clocked):
    _, url, wall, _ = clocked
    put(url, "openai", mode="status", status=503, fail_first=5, down_until=wall.now + 10)

    first = chat(url, "openai").status_code
    wall.now += 10
    second = chat(url, "openai").status_code

    assert (first, second) == (503, 200)


def test_healed_provider_answers_promptly_and_plainly(sim):
    app, url = sim
    app.behaviours["openai"] = Behaviour(
        mode="status", status=429, retry_after="5", first_token_ms=60_000, fail_first=1
    )

    limited = chat(url, "openai")
    healed = chat(url, "openai", timeout=httpx.Timeout(5))

    assert (limited.status_code, limited.headers["retry-after"]) == (429, "5")
    assert healed.status_code == 200
    assert "retry-after" not in healed.headers


def test_arrivals_are_recorded_per_provider_on_the_monotonic_clock(clocked):
    app, url, _, mono = clocked

    chat(url, "openai")
    mono.now += 0.25
    chat(url, "openai")
    chat(url, "backup")
    mono.now += 1.5
    chat(url, "openai")
    state = httpx.get(f"{url}/_sim/state").json()

    assert app.arrivals["openai"] == [50.0, 50.25, 51.75]
    assert app.gaps("openai") == [0.25, 1.5]
    assert app.arrivals["backup"] == [50.25]
    assert state["openai"]["arrivals"] == [50.0, 50.25, 51.75]
    assert app.gaps("never-called") == []


def test_arrivals_count_failed_calls_too_and_use_real_time_by_default(sim):
    app, url = sim
    put(url, "openai", mode="status", status=503)

    for _ in range(3):
        chat(url, "openai")

    assert len(app.arrivals["openai"]) == 3
    assert all(gap >= 0 for gap in app.gaps("openai"))


def test_reset_clears_arrivals_and_fault_windows(sim):
    app, url = sim
    put(url, "openai", mode="status", status=500, fail_first=1)
    chat(url, "openai")

    httpx.post(f"{url}/_sim/reset")
    after = chat(url, "openai")

    assert after.status_code == 200  # the behaviour is gone with the reset
    assert app.arrivals["openai"] == [app.arrivals["openai"][0]]
    assert httpx.get(f"{url}/_sim/state").json()["openai"]["requests"] == 1


def test_control_endpoint_keeps_the_old_fields_and_validates_the_new(sim):
    _, url = sim

    old = put(url, "openai", mode="status", status=503)
    numeric = put(url, "openai", retry_after=3.0)
    bad_flag = httpx.put(f"{url}/_sim/providers/openai", json={"reject_prefill": "yes"})
    bad_mode = httpx.put(f"{url}/_sim/providers/openai", json={"mode": "sulk"})

    assert {k: old[k] for k in ("mode", "status", "latency_ms", "chunks", "chunk_delay_ms", "fail_after_chunks")} == {
        "mode": "status",
        "status": 503,
        "latency_ms": 0.0,
        "chunks": 5,
        "chunk_delay_ms": 0.0,
        "fail_after_chunks": 2,
    }
    assert (numeric["retry_after"], numeric["status"]) == ("3", 503)
    assert bad_flag.status_code == 400
    assert bad_flag.json()["error"]["message"] == "reject_prefill must be true or false"
    assert bad_mode.status_code == 400
