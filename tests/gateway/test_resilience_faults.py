"""The resilience policy over real sockets, one simulator fault at a time, with the policy on and off.

Each test checks what the client received, how many calls each upstream saw and how far apart (the
simulator stamps arrivals with the planner's virtual clock, so gaps are the planned waits), and the
request's total time on that clock (its planned waits; real time only adds to it).
"""

import random

import orjson
import pytest

from catalog.models import LlmModel, Provider
from chains.resilience import resilience_effective
from gateway.resilience import backoff
from health.breaker.types import State
from tests.gateway.resilience_helpers import BODY, FAST, STREAM, WORDS, chunks, content, rig

ON = FAST
OFF = None


def backoffs(policy: dict, n: int, seed: int = 7) -> list[float]:
    """The first n backoff waits the gateway plans with this seed (the same formula, the same draws)."""
    effective = resilience_effective(policy, {})
    rng = random.Random(seed)
    return [backoff(effective, i, rng) for i in range(1, n + 1)]


def prefill(*models: str) -> None:
    for name in models:
        model = LlmModel.objects.get(name=name)
        model.capabilities = [*model.capabilities, "assistant_prefill"]
        model.save()


# --- Retry the same target ---------------------------------------------------------------------------------


def test_429_with_retry_after_waits_that_long_then_retries_the_same_target(world):
    with rig(world, ON) as r:
        r.fault("openai", mode="status", status=429, retry_after="1", fail_first=1)
        response = r.post()
        log = r.log()

    assert response.status_code == 200
    assert response.json()["model"] == "gpt-4o"
    assert response.headers["x-vidai-attempts"] == "2"
    assert "x-vidai-fallback" not in response.headers
    assert r.calls() == {"openai": 2}
    assert r.time.waits == [pytest.approx(1.0, abs=0.01)], r.time.waits
    assert world.sim.gaps("openai")[0] >= 1.0
    assert 1.0 <= r.elapsed < 60  # the Retry-After wait, within the deadline
    assert [(a["status"], a.get("next")) for a in log.attempts] == [(429, "retry"), (200, None)]
    assert log.attempts[0]["retry_after"] == 1.0
    assert log.attempts[0]["class"] == "rate_limit"


def test_429_with_retry_after_past_the_cap_moves_on_at_once(world):
    with rig(world, ON) as r:
        r.fault("openai", mode="status", status=429, retry_after="30")
        response = r.post()

    assert response.status_code == 200
    assert response.headers["x-vidai-model"] == "claude"
    assert response.headers["x-vidai-fallback"] == "true"
    assert response.headers["x-vidai-attempts"] == "2"
    assert r.calls() == {"openai": 1, "backup": 1}
    assert r.time.waits == []
    assert r.elapsed < 5.0  # never waited for the 30 s asked


def test_429_with_retry_after_off_is_the_clients(world):
    with rig(world, OFF) as r:
        r.fault("openai", mode="status", status=429, retry_after="1")
        response = r.post()

    assert response.status_code == 429
    assert response.headers["retry-after"] == "1"
    assert response.json()["error"]["message"] == "Simulated 429 from openai"
    assert r.calls() == {"openai": 1}
    assert r.time.waits == []


def test_429_without_retry_after_backs_off_with_jitter_then_moves_on(world):
    with rig(world, ON) as r:
        r.fault("openai", mode="status", status=429)
        response = r.post()
        log = r.log()

    assert response.status_code == 200
    assert response.headers["x-vidai-model"] == "claude"
    assert response.headers["x-vidai-attempts"] == "3"
    assert r.calls() == {"openai": 2, "backup": 1}
    (planned,) = backoffs(ON, 1)
    assert r.time.waits == [pytest.approx(planned, abs=2e-3)]
    assert 0.05 <= planned <= 0.2  # full jitter over [0, base], never below the floor
    assert world.sim.gaps("openai")[0] >= planned
    assert planned <= r.elapsed < 60
    assert [a.get("next") for a in log.attempts] == ["retry", "move_on", None]


@pytest.mark.parametrize("status", [500, 502, 503, 504])
def test_a_5xx_once_then_healthy_is_answered_by_the_same_target(world, status):
    with rig(world, ON) as r:
        r.fault("openai", mode="status", status=status, fail_first=1)
        response = r.post()

    assert response.status_code == 200
    assert response.headers["x-vidai-model"] == "gpt-4o"
    assert r.calls() == {"openai": 2}
    assert r.time.waits == [pytest.approx(backoffs(ON, 1)[0], abs=2e-3)]


def test_a_500_once_off_is_the_clients(world):
    with rig(world, OFF) as r:
        r.fault("openai", mode="status", status=500, fail_first=1)
        first, second = r.post(), r.post()

    assert (first.status_code, second.status_code) == (500, 200)
    assert r.calls() == {"openai": 2}


def test_a_reset_before_headers_is_retried_then_moved_on(world):
    with rig(world, ON) as r:
        r.fault("openai", mode="reset")
        response = r.post()
        log = r.log()

    assert response.status_code == 200
    assert response.headers["x-vidai-model"] == "claude"
    assert r.calls() == {"openai": 2, "backup": 1}
    assert [a["error"] for a in log.attempts] == ["connection_error", "connection_error", None]
    assert [a["class"] for a in log.attempts[:2]] == ["connection", "connection"]


def test_a_reset_off_is_a_502(world):
    with rig(world, OFF) as r:
        r.fault("openai", mode="reset")
        response = r.post()

    assert response.status_code == 502
    assert response.json()["error"]["code"] == "connection_error"
    assert r.calls() == {"openai": 1}


# --- A persistent outage, the breaker's discipline ---------------------------------------------------------


def test_persistent_503_every_request_is_answered_and_the_open_primary_costs_one_call_per_cooldown(world):
    with rig(world, ON) as r:
        r.fault("openai", mode="status", status=503)
        responses = [r.post() for _ in range(6)]
        calls_while_open = r.calls()["openai"]
        state = r.app.engine.get("openai", "gpt-4o").state
        r.clock.advance(31)  # past the first cooldown: one half-open probe
        probe_round = [r.post() for _ in range(3)]
        after_probe = r.calls()["openai"]

    assert [x.status_code for x in responses + probe_round] == [200] * 9
    assert all(x.headers["x-vidai-model"] == "claude" for x in responses + probe_round)
    # Request 1: a call and a retry; request 2: one call opens the circuit (3 failures), the retry is refused.
    assert calls_while_open == 3
    assert state is State.OPEN
    # After the cooldown: exactly one probe (it fails, the circuit re-opens), never a retry of it.
    assert after_probe == 4
    assert r.calls()["backup"] == 9


def test_persistent_503_off_fails_until_the_circuit_opens(world):
    with rig(world, OFF) as r:
        r.fault("openai", mode="status", status=503)
        statuses = [r.post().status_code for _ in range(5)]

    assert statuses == [503, 503, 503, 200, 200]
    assert r.calls() == {"openai": 3, "backup": 2}


def test_a_primary_down_for_a_while_then_healthy_is_back_within_one_cooldown(world):
    now = [1_000_000.0]
    world.sim.clock = lambda: now[0]  # the simulator's wall clock decides `down_until`
    with rig(world, ON) as r:
        r.fault("openai", mode="status", status=503, down_until=now[0] + 20)
        during = [r.post() for _ in range(4)]
        now[0] += 25  # the outage is over...
        r.clock.advance(31)  # ...and one cooldown later the probe succeeds and closes the circuit
        after = [r.post() for _ in range(3)]

    assert all(x.status_code == 200 and x.headers["x-vidai-model"] == "claude" for x in during)
    assert [x.headers["x-vidai-model"] for x in after] == ["gpt-4o"] * 3
    assert r.app.engine.get("openai", "gpt-4o").state is State.CLOSED


# --- Move on ----------------------------------------------------------------------------------------------


def test_timeouts_are_not_retried_on_the_same_target(world):
    Provider.objects.filter(name="openai").update(read_timeout=0.5)
    with rig(world, ON) as r:
        r.fault("openai", mode="hang")
        response = r.post()
        log = r.log()

    assert response.status_code == 200
    assert response.headers["x-vidai-model"] == "claude"
    assert r.calls() == {"openai": 1, "backup": 1}
    assert log.attempts[0]["error"] == "timeout" and log.attempts[0]["class"] == "timeout"
    assert r.time.waits == []
    assert 0.5 <= r.elapsed < 60  # the read timeout, then the entry; never the hang's 600 s


def test_hang_off_is_a_504_after_the_read_timeout(world):
    Provider.objects.filter(name="openai").update(read_timeout=0.5)
    with rig(world, OFF) as r:
        r.fault("openai", mode="hang")
        response = r.post()

    assert response.status_code == 504
    assert r.calls() == {"openai": 1}


def test_a_stream_that_never_answers_moves_on_after_the_first_token_timeout(world):
    with rig(world, ON) as r:
        r.fault("openai", mode="hang")
        response, events = r.stream()
        log = r.log()

    assert response.status_code == 200
    assert response.headers["x-vidai-model"] == "claude"
    assert content(events) == WORDS and events[-1] == "[DONE]"
    assert r.calls() == {"openai": 1, "backup": 1}
    assert log.attempts[0]["error"] == "first_token_timeout"
    assert 0.5 <= r.elapsed < 60  # the first-token timeout, then the entry; never the hang's 600 s


def test_a_slow_first_token_moves_on(world):
    with rig(world, ON) as r:
        r.fault("openai", first_token_ms=1500)
        response, events = r.stream()

    assert response.headers["x-vidai-model"] == "claude"
    assert content(events) == WORDS
    assert r.calls() == {"openai": 1, "backup": 1}
    assert r.elapsed >= 0.5


def test_a_slow_first_token_off_is_waited_for(world):
    with rig(world, OFF) as r:
        r.fault("openai", first_token_ms=700)
        response, events = r.stream()

    assert response.headers["x-vidai-model"] == "gpt-4o"
    assert content(events) == WORDS
    assert r.calls() == {"openai": 1}
    assert r.elapsed >= 0.7  # the slow token was waited for


def test_a_context_length_error_moves_only_to_a_larger_window(world):
    LlmModel.objects.filter(name="gpt-4o").update(context_window=8192)
    LlmModel.objects.filter(name="claude").update(context_window=8192)
    LlmModel.objects.filter(name="mistral").update(context_window=32768)
    with rig(world, ON) as r:
        r.fault("openai", mode="context_length")
        response = r.post()
        log = r.log()

    assert response.status_code == 200
    assert response.headers["x-vidai-model"] == "mistral"
    assert r.calls() == {"openai": 1, "third": 1}
    assert log.attempts[0]["class"] == "context_length"


def test_a_context_length_error_off_is_the_providers_400(world):
    with rig(world, OFF) as r:
        r.fault("openai", mode="context_length")
        response = r.post()

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "context_length_exceeded"
    assert r.calls() == {"openai": 1}


@pytest.mark.parametrize("policy", [ON, OFF], ids=["on", "off"])
def test_a_content_filter_refusal_is_never_retried_nor_moved_on(world, policy):
    with rig(world, policy) as r:
        r.fault("openai", mode="content_filter")
        response = r.post()

    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["code"], error["param"]) == ("content_filter", "prompt")
    assert r.calls() == {"openai": 1}


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
def test_client_errors_are_returned_unchanged(world, status):
    with rig(world, ON) as r:
        r.fault("openai", mode="status", status=status)
        response = r.post()

    assert response.status_code == status
    assert response.json()["error"]["message"] == f"Simulated {status} from openai"
    assert response.headers["x-vidai-attempts"] == "1"
    assert r.calls() == {"openai": 1}


# --- Bounds -----------------------------------------------------------------------------------------------


def test_attempts_never_exceed_the_cap_whatever_the_retries(world):
    policy = {**ON, "max_retries": 5, "max_attempts": 4}
    with rig(world, policy) as r:
        for name in ("openai", "backup", "third"):
            r.fault(name, mode="status", status=500)
        response = r.post()

    assert response.status_code == 500
    assert response.json()["error"]["message"].startswith("Simulated 500 from")
    assert sum(r.calls().values()) == 4
    assert response.headers["x-vidai-attempts"] == "4"


def test_retries_times_entries_never_multiply(world):
    # One retry per target, three targets, all failing: 2 + 2 + 2 calls, never (1+R)^2 or more.
    with rig(world, ON) as r:
        for name in ("openai", "backup", "third"):
            r.fault(name, mode="status", status=502)
        response = r.post()

    assert response.status_code == 502
    assert r.calls() == {"openai": 2, "backup": 2, "third": 2}
    # No two calls on one target closer than the floor.
    for name in ("openai", "backup", "third"):
        assert all(gap >= 0.05 for gap in world.sim.gaps(name))


def test_the_deadline_wins_over_retries(world):
    policy = {**ON, "deadline_seconds": 2, "max_retries": 5}
    with rig(world, policy) as r:
        for name in ("openai", "backup", "third"):
            r.fault(name, mode="status", status=429, retry_after="1")
        response = r.post()

    assert response.status_code == 429
    # openai at 0 and 1 s; its next retry would land on the deadline, so the others are tried at once
    # and none of them waits either.
    assert r.calls() == {"openai": 2, "backup": 1, "third": 1}
    assert r.time.waits == [pytest.approx(1.0, abs=2e-3)]
    assert world.sim.gaps("openai")[0] >= 1.0


# --- After the first byte ---------------------------------------------------------------------------------


def test_a_stream_cut_continues_on_an_entry_with_prefill_as_one_answer(world):
    prefill("claude")
    with rig(world, ON) as r:
        r.fault("openai", mode="midstream", fail_after_chunks=3)
        response, events = r.stream()
        log = r.log()
        sent = orjson.loads(world.sim.last_bodies["backup"])

    assert response.status_code == 200
    assert response.headers["x-vidai-model"] == "gpt-4o"  # the headers went out with the first part
    assert content(events) == WORDS
    assert events[-1] == "[DONE]" and events.count("[DONE]") == 1
    parts = chunks(events)
    assert {c["id"] for c in parts} == {parts[0]["id"]}
    assert sum(1 for c in parts if (c["choices"] or [{}])[0].get("delta", {}).get("role")) == 1
    # The continuation's own opening (a role delta with empty content) is not relayed.
    assert [c["choices"][0]["delta"] for c in parts if c["choices"]][3] == {"content": "word3 "}
    assert sent["messages"][-1] == {"role": "assistant", "content": "word1 word2 "}
    assert sent["model"] == "claude"
    assert r.calls() == {"openai": 1, "backup": 1}
    assert [a.get("next") for a in log.attempts] == ["continue", None]
    assert log.attempts[1]["continuation"] is True
    assert log.served_model == "claude"
    # The continuation's usage is the request's (the cut part reported none), and the client saw it.
    assert (log.tokens_in, log.tokens_out) == (parts[-1]["usage"]["prompt_tokens"], 2)


def test_a_stream_cut_without_a_prefill_entry_ends_with_an_error_naming_the_cut(world):
    with rig(world, ON) as r:
        r.fault("openai", mode="midstream", fail_after_chunks=3)
        response, events = r.stream()

    assert response.status_code == 200
    assert "[DONE]" not in events
    error = orjson.loads(events[-1])["error"]
    assert error["code"] == "stream_interrupted"
    assert "dropped" in error["message"] or "interrupted" in error["message"]
    assert content(events[:-1]) == "word1 word2 "
    assert r.calls() == {"openai": 1}


def test_a_prefill_rejection_is_never_the_error_the_client_sees(world):
    prefill("claude")
    with rig(world, ON) as r:
        r.fault("openai", mode="midstream", fail_after_chunks=3)
        r.fault("backup", reject_prefill=True)
        _response, events = r.stream()

    error = orjson.loads(events[-1])["error"]
    assert error["code"] == "stream_interrupted"
    assert "prefill" not in error["message"]
    assert "[DONE]" not in events
    assert r.calls() == {"openai": 1, "backup": 1}


def test_a_stream_cut_off_is_an_error_event(world):
    prefill("claude")
    with rig(world, OFF) as r:
        r.fault("openai", mode="midstream", fail_after_chunks=3)
        _, events = r.stream()

    assert "[DONE]" not in events
    assert orjson.loads(events[-1])["error"]["code"] == "stream_interrupted"
    assert r.calls() == {"openai": 1}


def test_a_stall_past_the_idle_timeout_continues(world):
    prefill("claude")
    with rig(world, ON) as r:
        r.fault("openai", mode="stall", fail_after_chunks=3)
        _, events = r.stream()
        log = r.log()

    assert content(events) == WORDS and events[-1] == "[DONE]"
    assert r.calls() == {"openai": 1, "backup": 1}
    assert log.attempts[0]["error"] == "idle_timeout"
    assert 0.5 <= r.elapsed < 60  # the idle timeout, then the continuation; never the stall's 600 s


def test_a_stall_off_ends_with_an_error_after_the_read_timeout(world):
    Provider.objects.filter(name="openai").update(read_timeout=0.5)
    with rig(world, OFF) as r:
        r.fault("openai", mode="stall", fail_after_chunks=3)
        _, events = r.stream()

    assert "[DONE]" not in events
    assert orjson.loads(events[-1])["error"]["code"] == "stream_interrupted"


def test_a_malformed_event_is_dropped_and_counted(world):
    with rig(world, ON) as r:
        r.fault("openai", mode="malformed", fail_after_chunks=2)
        _, events = r.stream()
        log = r.log()

    assert content(events) == WORDS and events[-1] == "[DONE]"
    assert all(e == "[DONE]" or (e.startswith("{") and e.endswith("}")) for e in events)
    assert "{not json" not in events
    assert log.attempts[0]["malformed_events"] == 1
    assert r.calls() == {"openai": 1}


def test_a_malformed_event_off_passes_through(world):
    with rig(world, OFF) as r:
        r.fault("openai", mode="malformed", fail_after_chunks=2)
        _, events = r.stream()

    assert "{not json" in events


@pytest.mark.parametrize("policy", [ON, OFF], ids=["on", "off"])
def test_a_finished_stream_without_done_is_closed_cleanly(world, policy):
    with rig(world, policy) as r:
        r.fault("openai", mode="nodone")
        _, events = r.stream()

    assert content(events) == WORDS
    assert events[-1] == "[DONE]" and events.count("[DONE]") == 1
    assert r.calls() == {"openai": 1}


def test_a_non_streamed_request_body_is_resent_whole(world):
    body = {**BODY, "temperature": 0.5, "messages": [{"role": "user", "content": "é" * 50}]}
    with rig(world, ON) as r:
        r.fault("openai", mode="status", status=503, fail_first=1)
        response = r.post(body)

    assert response.status_code == 200
    assert orjson.loads(world.sim.last_bodies["openai"]) == body


def test_stream_before_the_first_token_moves_on_like_a_plain_request(world):
    with rig(world, ON) as r:
        r.fault("openai", mode="status", status=503)
        response, events = r.stream()

    assert response.headers["x-vidai-model"] == "claude"
    assert response.headers["x-vidai-attempts"] == "3"
    assert content(events) == WORDS
    assert r.calls() == {"openai": 2, "backup": 1}


def test_a_failed_stream_before_its_first_byte_gives_the_last_providers_error(world):
    with rig(world, {**ON, "max_retries": 0}) as r:
        for name in ("openai", "backup", "third"):
            r.fault(name, mode="status", status=503)
        response, _ = r.stream(STREAM)

    assert response.status_code == 503
    assert response.headers["x-vidai-model"] == "mistral"
    assert r.calls() == {"openai": 1, "backup": 1, "third": 1}


# --- Refused connections and operator holds --------------------------------------------------------------


def test_a_refused_connection_is_retried_then_moved_on(world):
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    Provider.objects.filter(name="openai").update(base_url=f"http://127.0.0.1:{port}/openai/v1")
    with rig(world, ON) as r:
        response = r.post()
        log = r.log()

    assert response.status_code == 200
    assert response.headers["x-vidai-model"] == "claude"
    assert r.calls() == {"backup": 1}
    assert [a["error"] for a in log.attempts] == ["connection_error", "connection_error", None]
    assert [a.get("next") for a in log.attempts] == ["retry", "move_on", None]


def _hold(r, *targets: tuple[str, str]) -> None:
    from health.breaker.types import ConfigSet, Control, ControlKind
    from tests.gateway.conftest import TEST_BREAKER

    r.app.engine.configure(
        ConfigSet(
            default=TEST_BREAKER,
            controls={
                (p, m): Control(
                    kind=ControlKind.DRAINED if not m else ControlKind.FORCED_OPEN, provider=p, model=m, reason="maint"
                )
                for p, m in targets
            },
        )
    )


def test_a_move_never_calls_a_held_entry(world):
    with rig(world, ON) as r:
        _hold(r, ("backup", ""))
        r.fault("openai", mode="status", status=503)
        response = r.post()

    assert response.headers["x-vidai-model"] == "mistral"
    assert r.calls() == {"openai": 2, "third": 1}


def test_a_held_primary_without_an_available_entry_is_refused_with_the_policy_on(world):
    with rig(world, ON) as r:
        _hold(r, ("openai", "gpt-4o"), ("backup", ""), ("third", ""))
        response = r.post()

    assert response.status_code == 503
    assert response.json()["error"]["code"] == "circuit_held"
    assert r.calls() == {}
