"""The adapter contract (issue 11), the same for the `openai`, `anthropic` and `azure` upstream protocols.

Every test runs once per protocol of the primary, over real sockets against the simulator: whatever the
upstream speaks, the client gets OpenAI-shaped answers and errors, the resilience policy sees the same
failure classes (retry, move on, move to a larger window, continue a cut stream, give up), and the breaker
counts the same failures. A last group checks an Anthropic-shaped client gets those errors in its own
shape. The chain is `gpt-4o` (primary) → `fallback` (OpenAI, same window) → `claude-long` (Anthropic,
larger window, assistant prefill); see tests/gateway/protocol_helpers.py.
"""

from typing import Any

import httpx
import orjson
import pytest

from health.breaker.types import State
from tests.gateway.protocol_helpers import (
    PROTOCOLS,
    ProtocolWorld,
    build_world,
    cut_after_first_token,
    overload_status,
)
from tests.gateway.resilience_helpers import FAST, WORDS, Rig, content, rig

ON = FAST
OFF = None
FILTERED_OPENAI = {
    "message": (
        "The response was filtered due to the prompt triggering the content management policy. "
        "Please modify your prompt and retry."
    ),
    "type": "invalid_request_error",
    "param": "prompt",
    "code": "content_filter",
}
# Anthropic's refusal, carried into the OpenAI shape: its type becomes the `code`.
FILTERED_ANTHROPIC = {
    "message": "Output blocked by content filtering policy",
    "type": "invalid_request_error",
    "param": None,
    "code": "invalid_request_error",
}


@pytest.fixture(params=PROTOCOLS)
def pworld(request: pytest.FixtureRequest, transactional_db: None, sim: Any) -> ProtocolWorld:
    simulator, url = sim
    return build_world(simulator, url, request.param)


def classes(r: Rig) -> list[str | None]:
    """Each attempt's failure class, in order (None for the attempt that answered)."""
    return [a.get("class") for a in r.log().attempts]


def errors_and_classes(r: Rig) -> list[tuple[str | None, str | None]]:
    """Each attempt's (error kind, failure class), in order."""
    return [(a.get("error"), a.get("class")) for a in r.log().attempts]


# --- Before the first byte: retry the same target -----------------------------------------------------


def test_a_429_with_retry_after_is_retried_on_the_same_target_then_served(pworld: ProtocolWorld) -> None:
    with rig(pworld, ON) as r:
        r.fault("primary", mode="status", status=429, retry_after="1", fail_first=1)
        response = r.post()
        log = r.log()

    assert response.status_code == 200
    assert response.json()["model"] == pworld.served_as
    assert response.json()["object"] == "chat.completion"
    assert response.headers["x-vidai-model"] == "gpt-4o"
    assert r.calls() == {"primary": 2}
    assert r.time.waits == [pytest.approx(1.0, abs=0.01)]  # the upstream's Retry-After, whatever its protocol
    assert [a.get("class") for a in log.attempts] == ["rate_limit", None]
    assert log.attempts[0]["retry_after"] == 1.0


def test_an_overload_is_retried_then_moved_on(pworld: ProtocolWorld) -> None:
    with rig(pworld, ON) as r:
        r.fault("primary", mode="status", status=overload_status(pworld.protocol))
        response = r.post()
        seen = classes(r)

    assert response.status_code == 200
    assert response.headers["x-vidai-model"] == "fallback"
    assert response.headers["x-vidai-fallback"] == "true"
    assert response.json()["choices"][0]["message"]["content"] == "Simulated reply from backup for fallback."
    assert r.calls() == {"primary": 2, "backup": 1}
    assert seen == ["overloaded", "overloaded", None]


def test_a_500_is_retried(pworld: ProtocolWorld) -> None:
    with rig(pworld, ON) as r:
        r.fault("primary", mode="status", status=500, fail_first=1)
        response = r.post()
        seen = classes(r)

    assert response.status_code == 200
    assert response.headers["x-vidai-model"] == "gpt-4o"
    assert r.calls() == {"primary": 2}
    assert seen == ["server_error", None]


def test_a_reset_is_retried(pworld: ProtocolWorld) -> None:
    with rig(pworld, ON) as r:
        r.fault("primary", mode="reset", fail_first=1)
        response = r.post()
        seen = errors_and_classes(r)

    assert response.status_code == 200
    assert response.headers["x-vidai-model"] == "gpt-4o"
    assert r.calls() == {"primary": 2}
    assert seen == [("connection_error", "connection"), (None, None)]


# --- Before the first byte: give up or move by kind ---------------------------------------------------


def test_a_content_filter_is_the_clients_own_error_after_one_call(pworld: ProtocolWorld) -> None:
    with rig(pworld, ON) as r:
        r.fault("primary", mode="content_filter")
        response = r.post()
        seen = classes(r)

    assert response.status_code == 400
    expected = FILTERED_ANTHROPIC if pworld.protocol == "anthropic" else FILTERED_OPENAI
    assert response.json() == {"error": expected}
    assert response.headers["x-vidai-attempts"] == "1"
    assert r.calls() == {"primary": 1}
    assert seen == ["content_filter"]


def test_a_context_length_error_moves_only_to_a_larger_window(pworld: ProtocolWorld) -> None:
    with rig(pworld, ON) as r:
        r.fault("primary", mode="context_length")
        response = r.post()
        seen = classes(r)

    assert response.status_code == 200
    assert response.headers["x-vidai-model"] == "claude-long"  # `fallback`'s window is no larger: skipped
    assert response.json()["choices"][0]["message"]["content"] == "Simulated reply from claude for claude-long."
    assert r.calls() == {"primary": 1, "claude": 1}
    assert seen == ["context_length", None]


def test_an_auth_error_is_returned_after_one_call(pworld: ProtocolWorld) -> None:
    with rig(pworld, ON) as r:
        r.fault("primary", mode="status", status=401)
        response = r.post()
        seen = classes(r)

    assert response.status_code == 401
    error = response.json()["error"]
    assert error["message"] == "Simulated 401 from primary"
    if pworld.protocol == "anthropic":
        assert (error["type"], error["code"]) == ("authentication_error", "authentication_error")
    assert r.calls() == {"primary": 1}
    assert seen == ["auth"]


def test_a_stream_that_never_starts_moves_on_after_the_first_token_timeout(pworld: ProtocolWorld) -> None:
    with rig(pworld, ON) as r:
        r.fault("primary", mode="hang")
        response, events = r.stream()
        seen = errors_and_classes(r)

    assert response.status_code == 200
    assert response.headers["x-vidai-model"] == "fallback"
    assert content(events) == WORDS and events[-1] == "[DONE]"
    assert r.calls() == {"primary": 1, "backup": 1}
    assert seen == [("first_token_timeout", "timeout"), (None, None)]


def test_a_stream_refused_with_an_overload_before_its_first_byte_is_retried_then_moved_on(
    pworld: ProtocolWorld,
) -> None:
    with rig(pworld, ON) as r:
        r.fault("primary", mode="status", status=overload_status(pworld.protocol))
        response, events = r.stream()
        seen = classes(r)

    assert response.status_code == 200
    assert response.headers["x-vidai-model"] == "fallback"
    assert content(events) == WORDS and events[-1] == "[DONE]"
    assert r.calls() == {"primary": 2, "backup": 1}
    assert seen == ["overloaded", "overloaded", None]


# --- After the first byte: continue on the Anthropic entry with prefill ------------------------------


def _assert_continued_into_anthropic(pworld: ProtocolWorld, r: Rig, events: list[str]) -> list[tuple[Any, Any]]:
    """The stream is one answer (the primary's first word, then the Anthropic entry's continuation), and
    the entry was sent the delivered text as a trailing assistant message in Messages shape. Returns each
    logged attempt's (class, next), for the caller's own check."""
    assert content(events) == WORDS
    assert events[-1] == "[DONE]" and events.count("[DONE]") == 1
    assert all("error" not in orjson.loads(e) for e in events if e != "[DONE]")
    assert r.calls() == {"primary": 1, "claude": 1}
    sent = orjson.loads(pworld.sim.last_bodies["claude"])
    assert sent["model"] == "claude-long"
    assert "max_tokens" in sent and "stream_options" not in sent  # Messages shape, not the client's
    # Anthropic refuses a prefill that ends in whitespace: the delivered "word1 " goes as "word1".
    assert sent["messages"][-1] == {"role": "assistant", "content": "word1"}
    assert sent["messages"][-2]["role"] == "user"
    headers = pworld.sim.last_headers["claude"]
    assert headers["x-api-key"] == "sk-claude" and headers["anthropic-version"]
    log = r.log()
    assert log.attempts[1].get("continuation") is True
    return [(a.get("class"), a.get("next")) for a in log.attempts]


def test_a_stream_cut_after_the_first_token_continues_into_an_anthropic_upstream(pworld: ProtocolWorld) -> None:
    with rig(pworld, ON) as r:
        r.fault("primary", mode="midstream", fail_after_chunks=cut_after_first_token(pworld.protocol))
        response, events = r.stream()
        attempts = _assert_continued_into_anthropic(pworld, r, events)

    assert response.status_code == 200
    assert response.headers["x-vidai-model"] == "gpt-4o"  # the headers went out with the first word
    assert attempts == [("connection", "continue"), (None, None)]


def test_an_error_event_mid_stream_continues(pworld: ProtocolWorld) -> None:
    with rig(pworld, ON) as r:
        r.fault("primary", mode="error_event", fail_after_chunks=cut_after_first_token(pworld.protocol))
        response, events = r.stream()
        attempts = _assert_continued_into_anthropic(pworld, r, events)

    assert response.status_code == 200
    assert attempts == [("overloaded", "continue"), (None, None)]


# --- The breaker counts the same failures whatever the protocol ---------------------------------------


def test_three_overloads_open_the_primarys_circuit(pworld: ProtocolWorld) -> None:
    with rig(pworld, OFF) as r:
        r.fault("primary", mode="status", status=overload_status(pworld.protocol))
        statuses = [r.post().status_code for _ in range(3)]
        state = r.app.engine.get("primary", "gpt-4o").state
        after = r.post()

    assert statuses == [503] * 3  # Anthropic's 529 reaches an OpenAI client as 503
    assert state is State.OPEN
    assert after.status_code == 200 and after.headers["x-vidai-model"] == "fallback"
    assert r.calls() == {"primary": 3, "backup": 1}


def test_content_filter_refusals_never_open_the_circuit(pworld: ProtocolWorld) -> None:
    with rig(pworld, OFF) as r:
        r.fault("primary", mode="content_filter")
        statuses = [r.post().status_code for _ in range(4)]
        state = r.app.engine.get("primary", "gpt-4o").state

    assert statuses == [400] * 4
    assert state is State.CLOSED
    assert r.calls() == {"primary": 4}


def test_a_content_filter_error_event_mid_stream_never_opens_the_circuit(pworld: ProtocolWorld) -> None:
    # Policy off: the stream is passed through; its error event is the client's, once, and the breaker is
    # told what it was (a refusal is not the provider failing).
    with rig(pworld, OFF) as r:
        r.fault("primary", mode="error_event", fail_after_chunks=2, error_code="content_filter")
        runs = [r.stream()[1] for _ in range(4)]
        state = r.app.engine.get("primary", "gpt-4o").state
        log = r.log()

    for events in runs:
        errors = [e for e in events if e != "[DONE]" and "error" in orjson.loads(e)]
        assert len(errors) == 1 and "[DONE]" not in events
    assert state is State.CLOSED
    assert r.calls() == {"primary": 4}
    assert log.attempts[0]["error"] == "error_event"


def test_an_overloaded_error_event_mid_stream_counts_against_the_provider(pworld: ProtocolWorld) -> None:
    with rig(pworld, OFF) as r:
        r.fault("primary", mode="error_event", fail_after_chunks=2)
        for _ in range(3):
            _, events = r.stream()
            assert sum(1 for e in events if e != "[DONE]" and "error" in orjson.loads(e)) == 1
        state = r.app.engine.get("primary", "gpt-4o").state

    assert state is State.OPEN


# --- An Anthropic client gets the same errors in its own shape ----------------------------------------


def _messages(r: Rig, *, stream: bool) -> httpx.Response:
    """A Messages request; an error comes before any stream starts, so both are one JSON body."""
    body = {"model": "gpt-4o", "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}], "stream": stream}
    return httpx.post(f"{r.url}/v1/messages", json=body, headers={"x-api-key": r.world.secret}, timeout=30)


@pytest.mark.parametrize(
    ("fault", "status", "kind"),
    [
        ({"mode": "status", "status": 429, "retry_after": "1"}, 429, "rate_limit_error"),
        ({"mode": "status", "status": "overload"}, 529, "overloaded_error"),
        ({"mode": "status", "status": 500}, 500, "api_error"),
        ({"mode": "status", "status": 401}, 401, "authentication_error"),
        ({"mode": "content_filter"}, 400, "invalid_request_error"),
        ({"mode": "context_length"}, 400, "invalid_request_error"),
    ],
    ids=["rate_limit", "overloaded", "server_error", "auth", "content_filter", "context_length"],
)
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_an_anthropic_client_gets_each_error_in_its_own_shape(
    pworld: ProtocolWorld, fault: dict[str, Any], status: int, kind: str, stream: bool
) -> None:
    if fault.get("status") == "overload":
        fault = {**fault, "status": overload_status(pworld.protocol)}
    with rig(pworld, OFF) as r:
        r.fault("primary", **fault)
        response = _messages(r, stream=stream)

    assert response.status_code == status
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"type", "error"} and body["type"] == "error"
    assert body["error"]["type"] == kind
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    if fault["mode"] == "status":
        assert body["error"]["message"] == f"Simulated {fault['status']} from primary"
    if status == 429:
        assert response.headers["retry-after"] == "1"
    assert r.calls() == {"primary": 1}
