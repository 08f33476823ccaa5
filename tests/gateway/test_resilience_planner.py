"""The pure core of the attempt loop: policy, taxonomy, Retry-After and the planner (no I/O, no clock)."""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Callable
from datetime import UTC, datetime
from email.utils import format_datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chains.resilience import resilience_effective
from gateway.resilience import (
    Attempt,
    Call,
    Candidate,
    Continue,
    FailureClass,
    GiveUp,
    GiveUpReason,
    ResiliencePolicy,
    backoff,
    classify,
    next_action,
    retry_after,
)

pytestmark = pytest.mark.db_independent

F = FailureClass
ON = ResiliencePolicy(enabled=True)
OFF = ResiliencePolicy()


class Circuit:
    """A circuit the test controls: counts how often it was asked."""

    def __init__(self, open_: bool = False) -> None:
        self.open = open_
        self.asked = 0

    def __call__(self) -> bool:
        self.asked += 1
        return not self.open


def cand(
    name: str,
    *,
    step: int = 0,
    window: int | None = 8192,
    prefill: bool = False,
    allows: Callable[[], bool] | None = None,
) -> Candidate:
    return Candidate(name, f"{name}-model", window, prefill, allows or Circuit(), step)


def chain(*names: str, **kw: object) -> list[Candidate]:
    return [cand(n, step=i, **kw) for i, n in enumerate(names)]  # type: ignore[arg-type]


def plan(
    cands: list[Candidate],
    attempts: list[Attempt],
    *,
    policy: ResiliencePolicy = ON,
    now: float = 10.0,
    started: float = 0.0,
    seed: int = 1,
) -> Call | Continue | GiveUp:
    return next_action(
        candidates=cands, policy=policy, attempts=attempts, now=now, started=started, rng=random.Random(seed)
    )


# --- Policy ---------------------------------------------------------------------------------------------


def test_policy_defaults_are_todays_behaviour_and_the_issues_numbers() -> None:
    p = ResiliencePolicy()
    assert p.enabled is False
    assert (p.max_retries, p.max_attempts, p.retry_after_cap_seconds) == (1, 6, 5.0)
    assert (p.connect_timeout_seconds, p.first_token_timeout_seconds, p.idle_timeout_seconds) == (3.0, 15.0, 15.0)


def test_the_planner_reads_the_chains_policy_class() -> None:
    # One class: what the snapshot carries (chain knobs over the global defaults) is what the planner reads.
    p = resilience_effective({"enabled": True, "idle_timeout_seconds": 4.0}, {"max_retries": 2})
    assert isinstance(p, ResiliencePolicy)
    assert (p.enabled, p.idle_timeout_seconds, p.max_retries, p.deadline_seconds, p.floor) == (True, 4.0, 2, 60.0, 0.05)


# --- Taxonomy -------------------------------------------------------------------------------------------


def _openai(code: str | None, message: str, type_: str = "invalid_request_error") -> bytes:
    return json.dumps({"error": {"message": message, "type": type_, "param": None, "code": code}}).encode()


def _anthropic(type_: str, message: str) -> bytes:
    return json.dumps({"type": "error", "error": {"type": type_, "message": message}}).encode()


@pytest.mark.parametrize(
    ("status", "kind", "body", "expected"),
    [
        (429, None, _openai("rate_limit_exceeded", "Rate limit reached", "requests"), F.RATE_LIMIT),
        (429, None, None, F.RATE_LIMIT),
        (529, None, _anthropic("overloaded_error", "Overloaded"), F.OVERLOADED),
        (503, None, b"Service Unavailable", F.OVERLOADED),
        (500, None, _openai(None, "The server had an error", "server_error"), F.SERVER_ERROR),
        (502, None, b"<html>Bad Gateway</html>", F.SERVER_ERROR),
        (504, None, None, F.SERVER_ERROR),
        (501, None, None, F.SERVER_ERROR),
        (None, "timeout", None, F.TIMEOUT),
        (None, "connect_timeout", None, F.TIMEOUT),
        (None, "first_token_timeout", None, F.TIMEOUT),
        (None, "idle_timeout", None, F.TIMEOUT),
        (None, "deadline", None, F.TIMEOUT),
        (408, None, None, F.TIMEOUT),
        (None, "connection_error", None, F.CONNECTION),
        (None, "connection_reset", None, F.CONNECTION),
        (None, None, None, F.CONNECTION),
        (
            400,
            None,
            _openai("context_length_exceeded", "This model's maximum context length is 8192"),
            F.CONTEXT_LENGTH,
        ),
        (
            400,
            None,
            _anthropic("invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum"),
            F.CONTEXT_LENGTH,
        ),
        (
            400,
            None,
            _anthropic("invalid_request_error", "input length and `max_tokens` exceed context limit"),
            F.CONTEXT_LENGTH,
        ),
        (
            400,
            None,
            _openai(None, "This model's maximum context length is 4097 tokens. However, you requested 5000"),
            F.CONTEXT_LENGTH,
        ),
        (
            400,
            None,
            json.dumps(
                {
                    "error": {
                        "code": 400,
                        "message": "The input token count (40000) exceeds the maximum number of tokens allowed "
                        "(32768).",
                        "status": "INVALID_ARGUMENT",
                    }
                }
            ).encode(),
            F.CONTEXT_LENGTH,
        ),
        (400, None, json.dumps({"message": "Input is too long for requested model."}).encode(), F.CONTEXT_LENGTH),
        (
            400,
            None,
            json.dumps(
                {
                    "object": "error",
                    "message": "Prompt contains 40000 tokens and 0 draft tokens, too large for model with 32768 "
                    "maximum context length",
                }
            ).encode(),
            F.CONTEXT_LENGTH,
        ),
        (413, None, b"context window exceeded", F.CONTEXT_LENGTH),
        (
            400,
            None,
            _openai(
                "content_filter",
                "The response was filtered due to the prompt triggering Azure OpenAI's content management policy.",
            ),
            F.CONTENT_FILTER,
        ),
        (
            400,
            None,
            _openai("content_policy_violation", "Your request was rejected as a result of our safety system."),
            F.CONTENT_FILTER,
        ),
        (
            400,
            None,
            json.dumps(
                {
                    "error": {
                        "code": "BadRequest",
                        "message": "filtered",
                        "innererror": {"code": "ResponsibleAIPolicyViolation"},
                    }
                }
            ).encode(),
            F.CONTENT_FILTER,
        ),
        (400, None, _openai(None, "Invalid value for 'temperature'"), F.INVALID_REQUEST),
        (404, None, _openai("model_not_found", "The model `x` does not exist"), F.INVALID_REQUEST),
        (422, None, None, F.INVALID_REQUEST),
        (409, None, None, F.INVALID_REQUEST),
        (401, None, _openai("invalid_api_key", "Incorrect API key provided"), F.AUTH),
        (403, None, _anthropic("permission_error", "not allowed"), F.AUTH),
        # Error events inside a stream: no status of their own, the body's type says.
        (None, None, {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}, F.OVERLOADED),
        (None, None, {"error": {"type": "server_error", "message": "boom"}}, F.SERVER_ERROR),
        (None, None, {"error": {"message": "something odd"}}, F.SERVER_ERROR),
        (200, None, {"error": {"code": "content_filter", "message": "filtered"}}, F.CONTENT_FILTER),
    ],
)
def test_classify(status: int | None, kind: str | None, body: bytes | dict[str, object] | None, expected: F) -> None:
    assert classify(status, kind, body) is expected


def test_classify_a_non_json_body_by_its_text() -> None:
    assert classify(400, None, b"Error: prompt is too long") is F.CONTEXT_LENGTH
    assert classify(400, None, b"\xff\xfe not utf-8") is F.INVALID_REQUEST


# --- Retry-After ----------------------------------------------------------------------------------------

NOW = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC).timestamp()


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"Retry-After": "3"}, 3.0),
        ({"retry-after": "0"}, 0.0),
        ([(b"retry-after", b"120")], 120.0),
        ({"Retry-After": format_datetime(datetime(2026, 12, 1, 12, 0, 4, tzinfo=UTC), usegmt=True)}, 4.0),
        ({"Retry-After": "Tue, 01 Dec 2026 11:59:00 GMT"}, 0.0),  # in the past
        ({"retry-after-ms": "1500", "retry-after": "9"}, 1.5),  # the finer one wins
        ({"retry-after-ms": "junk", "retry-after": "9"}, 9.0),
        ({"Retry-After": "soon"}, None),
        ({"Retry-After": "-3"}, None),
        ({"Retry-After": ""}, None),
        ({}, None),
        ([(b"content-type", b"application/json")], None),
    ],
)
def test_retry_after(headers: dict[str, str] | list[tuple[bytes, bytes]], expected: float | None) -> None:
    assert retry_after(headers, NOW) == expected


# --- Backoff --------------------------------------------------------------------------------------------


def test_backoff_is_full_jitter_within_bounds_and_never_below_the_floor() -> None:
    p = ResiliencePolicy(backoff_base_ms=100, backoff_floor_ms=20, backoff_cap_ms=500)
    rng = random.Random(7)
    for retry, ceiling in [(1, 0.1), (2, 0.2), (3, 0.4), (4, 0.5), (9, 0.5)]:
        values = [backoff(p, retry, rng) for _ in range(500)]
        assert all(0.02 <= v <= ceiling for v in values)
        assert max(values) > ceiling * 0.9  # full jitter reaches near the ceiling...
        assert sum(v < ceiling / 2 for v in values) > 100  # ...and spreads below it
    assert backoff(p, 1, random.Random(3)) == backoff(p, 1, random.Random(3))  # seeded: replayable


# --- The planner: today's behaviour (policy off) ---------------------------------------------------------


def test_off_closed_primary_is_called_and_chain_not_asked() -> None:
    cands = chain("p", "a", "b")
    action = plan(cands, [], policy=OFF)
    assert action == Call(cands[0], 10.0)
    assert [c.allows.asked for c in cands] == [1, 0, 0]  # type: ignore[attr-defined]


def test_off_open_primary_goes_to_the_first_allowed_entry() -> None:
    cands = [cand("p", allows=Circuit(True)), cand("a", step=1, allows=Circuit(True)), cand("b", step=2)]
    assert plan(cands, [], policy=OFF) == Call(cands[2], 10.0)


def test_off_every_circuit_refusing_is_the_optimistic_primary() -> None:
    cands = [cand("p", allows=Circuit(True)), cand("a", step=1, allows=Circuit(True))]
    assert plan(cands, [], policy=OFF) == Call(cands[0], 10.0, optimistic=True)


@pytest.mark.parametrize("failure", list(F))
def test_off_never_makes_a_second_call(failure: F) -> None:
    cands = chain("p", "a")
    last = Attempt(cands[0], failure, at=0.0, status=503)
    assert plan(cands, [last], policy=OFF) == GiveUp(GiveUpReason.DISABLED, last)


def test_no_candidates_gives_up() -> None:
    assert plan([], []) == GiveUp(GiveUpReason.EXHAUSTED, None)


# --- The planner: the policy on ---------------------------------------------------------------------------


@pytest.mark.parametrize("failure", [F.RATE_LIMIT, F.OVERLOADED, F.CONNECTION])
def test_retryable_failure_retries_the_same_target_after_backoff(failure: F) -> None:
    cands = chain("p", "a")
    action = plan(cands, [Attempt(cands[0], failure, at=9.0, status=None)], now=10.0)
    assert isinstance(action, Call) and action.target is cands[0]
    assert 10.0 + ON.floor <= action.not_before <= 10.0 + ON.backoff_base_ms / 1000


@pytest.mark.parametrize(("status", "retried"), [(500, True), (502, True), (504, True), (501, False), (None, False)])
def test_server_errors_retry_only_the_issues_statuses(status: int | None, retried: bool) -> None:
    cands = chain("p", "a")
    action = plan(cands, [Attempt(cands[0], F.SERVER_ERROR, at=9.0, status=status)])
    assert isinstance(action, Call)
    assert action.target is (cands[0] if retried else cands[1])


def test_spent_retries_move_to_the_next_entry_immediately() -> None:
    cands = chain("p", "a")
    attempts = [Attempt(cands[0], F.RATE_LIMIT, at=1.0), Attempt(cands[0], F.RATE_LIMIT, at=2.0)]
    assert plan(cands, attempts, now=3.0) == Call(cands[1], 3.0)


def test_max_retries_zero_moves_on_at_once() -> None:
    cands = chain("p", "a")
    policy = ResiliencePolicy(enabled=True, max_retries=0)
    assert plan(cands, [Attempt(cands[0], F.OVERLOADED, at=1.0)], policy=policy, now=2.0) == Call(cands[1], 2.0)


def test_retry_after_within_the_cap_is_honoured() -> None:
    cands = chain("p", "a")
    action = plan(cands, [Attempt(cands[0], F.RATE_LIMIT, at=9.5, retry_after=2.0)], now=10.0)
    assert action == Call(cands[0], 12.0)


def test_retry_after_zero_still_respects_the_floor() -> None:
    cands = chain("p")
    action = plan(cands, [Attempt(cands[0], F.RATE_LIMIT, at=10.0, retry_after=0.0)], now=10.0)
    assert action == Call(cands[0], 10.0 + ON.floor)


def test_retry_after_above_the_cap_moves_on_instead_of_waiting() -> None:
    cands = chain("p", "a")
    action = plan(cands, [Attempt(cands[0], F.RATE_LIMIT, at=9.5, retry_after=30.0)], now=10.0)
    assert action == Call(cands[1], 10.0)


def test_a_retry_that_would_pass_the_deadline_moves_on() -> None:
    cands = chain("p", "a")
    policy = ResiliencePolicy(enabled=True, deadline_seconds=11.0)
    action = plan(cands, [Attempt(cands[0], F.RATE_LIMIT, at=9.5, retry_after=2.0)], policy=policy, now=10.0)
    assert action == Call(cands[1], 10.0)


def test_a_retry_asks_the_circuit_and_moves_on_when_it_opened() -> None:
    primary_circuit = Circuit()
    cands = [cand("p", allows=primary_circuit), cand("a", step=1)]
    primary_circuit.open = True  # the failure that is being retried opened it
    assert plan(cands, [Attempt(cands[0], F.CONNECTION, at=9.0)]) == Call(cands[1], 10.0)


@pytest.mark.parametrize("failure", [F.RATE_LIMIT, F.OVERLOADED, F.SERVER_ERROR, F.TIMEOUT, F.CONNECTION])
def test_every_movable_failure_moves_to_the_next_entry(failure: F) -> None:
    cands = chain("p", "a")
    policy = ResiliencePolicy(enabled=True, max_retries=0)
    assert plan(cands, [Attempt(cands[0], failure, at=9.0, status=503)], policy=policy) == Call(cands[1], 10.0)


@pytest.mark.parametrize("failure", [F.INVALID_REQUEST, F.AUTH, F.CONTENT_FILTER])
def test_never_retry_or_move_on_for_client_errors_and_content_filter(failure: F) -> None:
    cands = chain("p", "a")
    last = Attempt(cands[0], failure, at=9.0, status=400)
    assert plan(cands, [last]) == GiveUp(GiveUpReason.NOT_RETRYABLE, last)
    assert cands[1].allows.asked == 0  # type: ignore[attr-defined]


def test_timeout_is_never_retried_on_the_same_target() -> None:
    cands = chain("p", "a")
    policy = ResiliencePolicy(enabled=True, max_retries=5)
    assert plan(cands, [Attempt(cands[0], F.TIMEOUT, at=9.0)], policy=policy) == Call(cands[1], 10.0)


def test_a_target_that_timed_out_is_not_tried_again_even_listed_twice() -> None:
    p = cand("p")
    cands = [p, cand("a", step=1), Candidate("p", "p-model", 8192, False, Circuit(), 2)]
    attempts = [Attempt(p, F.TIMEOUT, at=1.0), Attempt(cands[1], F.TIMEOUT, at=2.0)]
    last = attempts[-1]
    assert plan(cands, attempts, now=3.0) == GiveUp(GiveUpReason.EXHAUSTED, last)


def test_context_length_moves_only_to_a_larger_window() -> None:
    cands = [
        cand("p", window=8192),
        cand("a", step=1, window=8192),
        cand("b", step=2, window=4096),
        cand("c", step=3, window=128_000),
    ]
    action = plan(cands, [Attempt(cands[0], F.CONTEXT_LENGTH, at=9.0, status=400)])
    assert action == Call(cands[3], 10.0)
    assert [c.allows.asked for c in cands[1:3]] == [0, 0]  # type: ignore[attr-defined]


def test_context_length_with_no_larger_window_gives_the_providers_error() -> None:
    cands = [cand("p", window=128_000), cand("a", step=1, window=8192), cand("b", step=2, window=None)]
    last = Attempt(cands[0], F.CONTEXT_LENGTH, at=9.0, status=400)
    assert plan(cands, [last]) == GiveUp(GiveUpReason.EXHAUSTED, last)


def test_context_length_is_never_retried_on_the_same_target() -> None:
    cands = [cand("p", window=8192)]
    last = Attempt(cands[0], F.CONTEXT_LENGTH, at=9.0, status=400)
    assert plan(cands, [last], policy=ResiliencePolicy(enabled=True, max_retries=5)) == GiveUp(
        GiveUpReason.EXHAUSTED, last
    )


def test_a_refusing_circuit_is_skipped_never_waited_for() -> None:
    cands = [cand("p"), cand("a", step=1, allows=Circuit(True)), cand("b", step=2)]
    policy = ResiliencePolicy(enabled=True, max_retries=0)
    assert plan(cands, [Attempt(cands[0], F.SERVER_ERROR, at=9.0, status=500)], policy=policy) == Call(cands[2], 10.0)


def test_nothing_left_gives_up_with_the_last_failure() -> None:
    cands = [cand("p"), cand("a", step=1, allows=Circuit(True))]
    last = Attempt(cands[0], F.SERVER_ERROR, at=9.0, status=500)
    assert plan(cands, [last], policy=ResiliencePolicy(enabled=True, max_retries=0)) == GiveUp(
        GiveUpReason.EXHAUSTED, last
    )


def test_the_attempt_cap_wins_over_retries_and_chain_length() -> None:
    cands = chain("p", "a", "b", "c")
    policy = ResiliencePolicy(enabled=True, max_retries=3, max_attempts=2)
    attempts = [Attempt(cands[0], F.RATE_LIMIT, at=1.0), Attempt(cands[0], F.RATE_LIMIT, at=2.0)]
    assert plan(cands, attempts, policy=policy, now=3.0) == GiveUp(GiveUpReason.MAX_ATTEMPTS, attempts[-1])


def test_the_deadline_wins() -> None:
    cands = chain("p", "a")
    last = Attempt(cands[0], F.RATE_LIMIT, at=1.0)
    policy = ResiliencePolicy(enabled=True, deadline_seconds=5.0)
    assert plan(cands, [last], policy=policy, now=5.0, started=0.0) == GiveUp(GiveUpReason.DEADLINE, last)


def test_an_optimistic_primary_that_fails_moves_only_to_allowed_circuits() -> None:
    cands = [cand("p", allows=Circuit(True)), cand("a", step=1, allows=Circuit(True))]
    first = plan(cands, [])
    assert first == Call(cands[0], 10.0, optimistic=True)
    last = Attempt(cands[0], F.CONNECTION, at=10.0)
    assert plan(cands, [last], now=11.0) == GiveUp(GiveUpReason.EXHAUSTED, last)


# --- After the first byte -------------------------------------------------------------------------------


def test_after_the_first_byte_continue_on_the_next_prefill_entry() -> None:
    cands = [cand("p", prefill=True), cand("a", step=1), cand("b", step=2, prefill=True)]
    broke = Attempt(cands[0], F.CONNECTION, at=1.0, delivered=True)
    assert plan(cands, [broke]) == Continue(cands[2])
    assert cands[1].allows.asked == 0  # type: ignore[attr-defined]


def test_after_the_first_byte_with_no_prefill_entry_the_original_failure_is_named() -> None:
    cands = [cand("p"), cand("a", step=1)]
    broke = Attempt(cands[0], F.TIMEOUT, at=1.0, delivered=True)
    assert plan(cands, [broke]) == GiveUp(GiveUpReason.NO_CONTINUATION, broke)


def test_a_prefill_rejection_moves_on_but_the_client_hears_of_the_original_failure() -> None:
    cands = [cand("p"), cand("a", step=1, prefill=True), cand("b", step=2, prefill=True)]
    broke = Attempt(cands[0], F.CONNECTION, at=1.0, delivered=True)
    rejected = Attempt(cands[1], F.INVALID_REQUEST, at=2.0, delivered=True, status=400)
    assert plan(cands, [broke, rejected], now=3.0) == Continue(cands[2])
    rejected_too = Attempt(cands[2], F.INVALID_REQUEST, at=3.0, delivered=True, status=400)
    assert plan(cands, [broke, rejected, rejected_too], now=4.0) == GiveUp(GiveUpReason.NO_CONTINUATION, broke)


def test_after_the_first_byte_the_cap_and_deadline_still_name_the_original_failure() -> None:
    cands = [cand("p"), cand("a", step=1, prefill=True)]
    broke = Attempt(cands[0], F.CONNECTION, at=1.0, delivered=True)
    assert plan(cands, [broke], policy=ResiliencePolicy(enabled=True, max_attempts=1)) == GiveUp(
        GiveUpReason.MAX_ATTEMPTS, broke
    )
    assert plan(cands, [broke], policy=ResiliencePolicy(enabled=True, deadline_seconds=2.0)) == GiveUp(
        GiveUpReason.DEADLINE, broke
    )


def test_a_content_filter_mid_stream_ends_it() -> None:
    cands = [cand("p"), cand("a", step=1, prefill=True)]
    last = Attempt(cands[0], F.CONTENT_FILTER, at=1.0, delivered=True)
    assert plan(cands, [last]) == GiveUp(GiveUpReason.NOT_RETRYABLE, last)


def test_off_after_the_first_byte_gives_up() -> None:
    cands = [cand("p"), cand("a", step=1, prefill=True)]
    broke = Attempt(cands[0], F.CONNECTION, at=1.0, delivered=True)
    assert plan(cands, [broke], policy=OFF) == GiveUp(GiveUpReason.DISABLED, broke)


# --- Properties: simulate whole requests against random failures and circuits ----------------------------

_failures = st.sampled_from(list(F))
_policies = st.builds(
    ResiliencePolicy,
    enabled=st.sampled_from([True, True, True, False]),
    max_retries=st.integers(0, 5),
    backoff_base_ms=st.integers(0, 2_000),
    backoff_floor_ms=st.one_of(st.sampled_from([50, 500]), st.integers(0, 500)),
    backoff_cap_ms=st.integers(0, 5_000),
    retry_after_cap_seconds=st.floats(0, 10),
    max_attempts=st.integers(1, 20),
    deadline_seconds=st.one_of(st.sampled_from([0.5, 1.0, 2.0]), st.floats(0.5, 60)),
)


@st.composite
def _requests(draw: st.DrawFn) -> dict[str, object]:
    n = draw(st.integers(1, 6))
    return {
        "policy": draw(_policies),
        "windows": draw(st.lists(st.sampled_from([None, 4096, 8192, 128_000]), min_size=n, max_size=n)),
        "prefill": draw(st.lists(st.booleans(), min_size=n, max_size=n)),
        # Per ask of a circuit: allowed or not (cycled), so circuits open and close mid-request.
        "circuits": draw(st.lists(st.lists(st.booleans(), min_size=1, max_size=4), min_size=n, max_size=n)),
        "outcomes": draw(
            st.lists(
                st.tuples(
                    _failures,
                    st.sampled_from([None, 429, 500, 501, 502, 503, 504]),
                    st.one_of(st.sampled_from([None, 0.0, 0.01, 1.0, 4.0, 20.0]), st.floats(0, 20)),
                    st.booleans(),  # delivered a byte
                    st.one_of(st.sampled_from([0.0, 0.001]), st.floats(0, 3)),  # how long the attempt took
                ),
                min_size=1,
                max_size=30,
            )
        ),
        "seed": draw(st.integers(0, 2**32)),
    }


class _ScriptedCircuit:
    def __init__(self, answers: list[bool]) -> None:
        self.answers, self.i, self.last = answers, 0, False

    def __call__(self) -> bool:
        self.last = self.answers[self.i % len(self.answers)]
        self.i += 1
        return self.last


def _simulate(req: dict[str, object]) -> tuple[ResiliencePolicy, list[tuple[Candidate, float, bool]], list[Candidate]]:
    """Run one request to its end. Returns the policy, every call (target, time, whether its circuit had
    allowed it) and the candidates."""
    policy: ResiliencePolicy = req["policy"]  # type: ignore[assignment]
    circuits = [_ScriptedCircuit(a) for a in req["circuits"]]  # type: ignore[attr-defined]
    cands = [
        Candidate(f"p{i}", "m", w, pf, circuits[i], i)
        for i, (w, pf) in enumerate(zip(req["windows"], req["prefill"], strict=True))  # type: ignore[call-overload]
    ]
    rng = random.Random(req["seed"])  # type: ignore[arg-type]
    outcomes = list(req["outcomes"])  # type: ignore[call-overload]
    now, started, delivered = 0.0, 0.0, False
    attempts: list[Attempt] = []
    calls: list[tuple[Candidate, float, bool]] = []
    for _ in range(100):
        for c in circuits:
            c.last = False
        action = next_action(candidates=cands, policy=policy, attempts=attempts, now=now, started=started, rng=rng)
        if isinstance(action, GiveUp) or not outcomes:
            break
        target = action.target
        at = action.not_before if isinstance(action, Call) else now
        assert at >= now
        optimistic = isinstance(action, Call) and action.optimistic
        calls.append((target, at, circuits[target.step].last or optimistic))
        failure, status, ra, byte, took = outcomes.pop(0)
        delivered = delivered or byte
        attempts.append(Attempt(target, failure, at=at, delivered=delivered, status=status, retry_after=ra))
        now = at + took
    return policy, calls, cands


@settings(max_examples=400, deadline=None)
@given(_requests())
def test_property_attempts_never_exceed_the_cap(req: dict[str, object]) -> None:
    policy, calls, _ = _simulate(req)
    assert len(calls) <= (policy.max_attempts if policy.enabled else 1)


@settings(max_examples=400, deadline=None)
@given(_requests())
def test_property_two_calls_to_one_target_are_never_closer_than_the_floor(req: dict[str, object]) -> None:
    policy, calls, _ = _simulate(req)
    by_target: dict[tuple[str, str], list[float]] = {}
    for target, at, _allowed in calls:
        by_target.setdefault(target.key, []).append(at)
    for times in by_target.values():
        assert all(b - a >= policy.floor - 1e-9 for a, b in itertools.pairwise(times))


@settings(max_examples=400, deadline=None)
@given(_requests())
def test_property_never_a_call_after_the_deadline(req: dict[str, object]) -> None:
    policy, calls, _ = _simulate(req)
    for _target, at, _allowed in calls[1:]:
        assert at < policy.deadline_seconds


@settings(max_examples=400, deadline=None)
@given(_requests())
def test_property_never_a_call_to_a_target_whose_circuit_refuses(req: dict[str, object]) -> None:
    _, calls, _ = _simulate(req)
    first, *rest = calls
    assert first[2]  # allowed, or today's optimistic primary
    assert all(allowed for _t, _at, allowed in rest)


@settings(max_examples=400, deadline=None)
@given(_requests())
def test_property_default_policy_one_upstream_call_for_a_closed_primary(req: dict[str, object]) -> None:
    req = {**req, "policy": ResiliencePolicy(), "circuits": [[True], *req["circuits"][1:]]}  # type: ignore[index]
    _, calls, cands = _simulate(req)
    assert len(calls) == 1
    assert calls[0][0] is cands[0]
