"""The chain editor's timeline preview: a pure function that tells, in plain words, what the policy does
when the primary answers 503, and what other failures do. Checked against the gateway's planner."""

import random
import re

import pytest

from chains.resilience import DEFAULT_POLICY, ResiliencePolicy, TimelineStep, resilience_timeline
from gateway.resilience import Attempt, Call, Candidate, FailureClass, GiveUp, next_action

ON = ResiliencePolicy(enabled=True)


def story(steps: list[TimelineStep]) -> list[TimelineStep]:
    return [s for s in steps if s.kind != "note"]


def notes(steps: list[TimelineStep]) -> dict[str, str]:
    return {s.when: s.text for s in steps if s.kind == "note"}


def called(steps: list[TimelineStep]) -> list[str]:
    """The target of every call the story makes, in order."""
    out = []
    for step in steps:
        if step.kind in ("call", "retry", "move"):
            out.append(re.match(r"(?:call|retry|move to) (\S+)", step.text).group(1))
    return out


def test_policy_off_is_one_call_and_the_client_gets_the_503():
    steps = resilience_timeline(DEFAULT_POLICY, ["claude"], "gpt-4o")

    assert [(s.when, s.text) for s in story(steps)] == [
        ("0 s", "call gpt-4o (primary) → 503"),
        (
            "then",
            "the client gets the 503: nothing is retried and no entry is tried. The chain takes over once the "
            "circuit opens (new requests then start at entry 1).",
        ),
    ]
    assert notes(steps)["A stream cut after the first token"] == "the stream ends with an error event."


def test_built_in_defaults_retry_each_target_once_then_move_on():
    steps = story(resilience_timeline(ON, ["claude", "mini"], "gpt-4o"))

    assert [s.kind for s in steps] == ["call", "retry", "move", "retry", "move", "retry", "give_up", "bound"]
    assert (steps[0].when, steps[0].text) == ("0 s", "call gpt-4o (primary) → 503")
    assert steps[1].when == "≤ 0.2 s later"
    assert steps[1].text == (
        "retry gpt-4o once (backoff with jitter, at least 50 ms after the previous call) → 503 again"
    )
    assert (steps[2].when, steps[2].text) == ("then, at once", "move to claude (entry 1) → 503")
    assert steps[4].text == "move to mini (entry 2) → 503"
    assert steps[6].text == "no entry left; the client gets the last 503."
    assert steps[7].text.startswith("at most 6 calls; gives up at 60 s")


def test_the_attempt_cap_cuts_the_story_short():
    policy = ResiliencePolicy(enabled=True, max_retries=2, max_attempts=3)

    steps = story(resilience_timeline(policy, ["claude"], "gpt-4o"))

    assert called(steps) == ["gpt-4o", "gpt-4o", "gpt-4o"]
    assert [s.text for s in steps if s.kind == "retry"][1].startswith("retry gpt-4o (2 of 2;")
    assert steps[-2].text == "stop: 3 calls made, the attempt cap; the client gets the last 503."
    assert steps[-1].text.startswith("at most 3 calls; gives up at 60 s")


def test_cap_reached_before_the_next_entry_says_so():
    policy = ResiliencePolicy(enabled=True, max_retries=1, max_attempts=2)

    steps = story(resilience_timeline(policy, ["claude"], "gpt-4o"))

    assert called(steps) == ["gpt-4o", "gpt-4o"]
    assert "the attempt cap" in steps[-2].text


def test_waits_double_up_to_the_cap_and_never_go_below_the_floor():
    doubling = ResiliencePolicy(enabled=True, max_retries=4, backoff_base_ms=200, backoff_cap_ms=500, max_attempts=20)
    floored = ResiliencePolicy(enabled=True, backoff_base_ms=0, backoff_floor_ms=100, backoff_cap_ms=100)

    waits = [s.when for s in story(resilience_timeline(doubling, [], "gpt-4o")) if s.kind == "retry"]
    floor_wait = next(s for s in story(resilience_timeline(floored, [], "gpt-4o")) if s.kind == "retry")

    assert waits == ["≤ 0.2 s later", "≤ 0.4 s later", "≤ 0.5 s later", "≤ 0.5 s later"]
    assert floor_wait.when == "≤ 0.1 s later"
    assert "at least 100 ms after the previous call" in floor_wait.text


def test_no_retries_moves_on_at_once_and_drops_the_retry_after_note():
    policy = ResiliencePolicy(enabled=True, max_retries=0)

    steps = resilience_timeline(policy, ["claude"], "gpt-4o")

    assert [s.kind for s in story(steps)] == ["call", "move", "give_up", "bound"]
    assert "429 with Retry-After" not in notes(steps)
    assert "429 with Retry-After" in notes(resilience_timeline(ON, ["claude"], "gpt-4o"))


def test_a_chain_without_entries_says_there_is_nowhere_to_move():
    steps = story(resilience_timeline(ON, [], "gpt-4o"))

    assert called(steps) == ["gpt-4o", "gpt-4o"]
    assert steps[-2].text == "no entry to move to (the chain has none yet); the client gets the last 503."


@pytest.mark.parametrize("policy", [DEFAULT_POLICY, ON])
def test_not_retryable_errors_are_returned_unchanged_policy_on_or_off(policy):
    text = notes(resilience_timeline(policy, ["claude"], "gpt-4o"))["400, 401, 403, 404, 422 or a content filter"]

    assert text == "returned to the client unchanged after the one call: never retried, never moved on."


def test_a_stream_cut_continues_on_the_first_entry_with_prefill():
    with_prefill = notes(resilience_timeline(ON, ["mini", "claude", "opus"], "gpt-4o", prefill={"claude", "opus"}))
    without = notes(resilience_timeline(ON, ["mini"], "gpt-4o", prefill={"gpt-4o"}))

    assert with_prefill["A stream cut after the first token"].startswith(
        "continues on claude (entry 2), the next entry whose model supports assistant prefill"
    )
    # The primary's own prefill support does not matter: it is the stream that broke.
    assert without["A stream cut after the first token"] == (
        "ends with an error event: no entry's model supports assistant prefill, so none can continue it."
    )


def test_notes_use_the_policy_values():
    policy = ResiliencePolicy(
        enabled=True,
        retry_after_cap_seconds=2.5,
        connect_timeout_seconds=1.5,
        first_token_timeout_seconds=20,
        idle_timeout_seconds=7,
    )

    text = notes(resilience_timeline(policy, ["claude"], "gpt-4o"))

    assert "up to 2.5 s" in text["429 with Retry-After"]
    assert text["A timeout"].startswith(
        "each call has 1.5 s to connect; a stream has 20 s to its first token and may then be silent for 7 s"
    )


def test_labels_are_used_as_given():
    steps = story(resilience_timeline(ON, ["claude via bedrock"], "gpt-4o"))

    assert steps[2].text == "move to claude via bedrock (entry 1) → 503"


def _planner_calls(policy: ResiliencePolicy, names: list[str], seed: int) -> list[tuple[str, float]]:
    """What the gateway's planner calls when every target answers 503: (target, wait before the call)."""
    candidates = [Candidate(n, f"{n}-model", None, False, lambda: True, i) for i, n in enumerate(names)]
    rng = random.Random(seed)
    attempts: list[Attempt] = []
    now, out = 0.0, []
    while True:
        action = next_action(candidates=candidates, policy=policy, attempts=attempts, now=now, started=0.0, rng=rng)
        if isinstance(action, GiveUp):
            return out
        assert isinstance(action, Call)
        out.append((action.target.provider, action.not_before - now))
        now = action.not_before
        attempts.append(Attempt(action.target, FailureClass.OVERLOADED, now, status=503))


@pytest.mark.parametrize(
    "policy",
    [
        ON,
        ResiliencePolicy(enabled=True, max_retries=3, max_attempts=7, backoff_base_ms=300, backoff_cap_ms=900),
        ResiliencePolicy(enabled=True, max_retries=0, max_attempts=2),
        ResiliencePolicy(enabled=True, max_retries=5, max_attempts=20, backoff_base_ms=0, backoff_floor_ms=80),
    ],
)
@pytest.mark.parametrize("seed", range(5))
def test_the_story_matches_the_planner(policy, seed):
    names = ["p", "a", "b"]
    steps = story(resilience_timeline(policy, names[1:], names[0]))
    planned = _planner_calls(policy, names, seed)

    assert called(steps) == [name for name, _ in planned]
    bounds = [s.when for s in steps if s.kind in ("call", "retry", "move")]
    for (_, wait), when in zip(planned, bounds, strict=True):
        if when.startswith("≤ "):
            ceiling = float(when.removeprefix("≤ ").removesuffix(" s later"))
            # (now + delay) - now is the delay up to float rounding.
            assert policy.backoff_floor_ms / 1000 - 1e-9 <= wait <= ceiling + 1e-9
        else:
            assert wait == 0
