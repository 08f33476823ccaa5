"""health.history: a circuit's events and its states over time, from hand-made CircuitEvent rows."""

from datetime import UTC, datetime, timedelta

import pytest

from health.history import Segment, circuit_event_list, circuit_segments, circuit_timeline
from health.models import CircuitEvent

pytestmark = pytest.mark.django_db

T = datetime(2026, 12, 1, 0, 0, tzinfo=UTC)
P, M = "openai", "gpt-4o"


def at(minutes: float) -> datetime:
    return T + timedelta(minutes=minutes)


def event(kind: str, minutes: float, provider: str = P, model: str = M, **fields) -> CircuitEvent:
    return CircuitEvent.objects.create(provider=provider, model=model, kind=kind, at=at(minutes), **fields)


def states(segments: list[Segment]) -> list[tuple[str, float, float]]:
    return [(s.state, (s.start - T).total_seconds() / 60, (s.end - T).total_seconds() / 60) for s in segments]


def test_timeline_without_events_is_one_closed_segment():
    assert circuit_timeline(provider=P, model=M, since=at(0), until=at(60)) == [Segment(P, M, "closed", at(0), at(60))]


def test_timeline_follows_the_breakers_transitions():
    event("opened", 10, failures=5, total=10, last_status="503", cooldown_seconds=60)
    event("half_open", 11)
    event("reopened", 11.5, last_status="503", cooldown_seconds=120)
    event("half_open", 13.5)
    event("closed", 14)
    event("opened", 30)  # another circuit's events do not count
    CircuitEvent.objects.filter(at=at(30)).update(model="gpt-4o-mini")

    segments = circuit_timeline(provider=P, model=M, since=at(0), until=at(60))

    assert states(segments) == [
        ("closed", 0, 10),
        ("open", 10, 11),
        ("half_open", 11, 11.5),
        ("open", 11.5, 13.5),
        ("half_open", 13.5, 14),
        ("closed", 14, 60),
    ]


def test_timeline_state_at_since_comes_from_the_last_event_before_it():
    event("opened", -30)
    event("half_open", -5)
    event("reopened", -2)
    event("closed", 20)

    segments = circuit_timeline(provider=P, model=M, since=at(0), until=at(60))

    assert states(segments) == [("open", 0, 20), ("closed", 20, 60)]


def test_timeline_hold_ends_at_its_release_or_its_expiry():
    event("forced_open", 5, actor="alice", reason="maintenance")
    event("released", 15, actor="alice")
    event("forced_open", 30, actor="alice", reason="again", until=at(40))

    segments = circuit_timeline(provider=P, model=M, since=at(0), until=at(60))

    assert states(segments) == [
        ("closed", 0, 5),
        ("forced_open", 5, 15),
        ("closed", 15, 30),
        ("forced_open", 30, 40),
        ("closed", 40, 60),
    ]


def test_timeline_drain_overrides_the_breaker_and_the_breaker_state_shows_after_it():
    event("drained", -10, model="", actor="alice", reason="provider incident")  # before since, no expiry
    event("opened", 5)
    event("released", 20, model="", actor="alice")
    event("half_open", 25)
    event("closed", 26)
    event("drained", 50, provider="anthropic", model="")  # another provider's drain

    segments = circuit_timeline(provider=P, model=M, since=at(0), until=at(60))

    assert states(segments) == [("drained", 0, 20), ("open", 20, 25), ("half_open", 25, 26), ("closed", 26, 60)]


def test_timeline_expired_hold_before_since_does_not_hold():
    event("forced_open", -20, until=at(-10))
    event("drained", -20, model="", until=at(5))

    segments = circuit_timeline(provider=P, model=M, since=at(0), until=at(60))

    assert states(segments) == [("drained", 0, 5), ("closed", 5, 60)]


def test_timeline_forced_hold_wins_over_the_drain():
    event("drained", 0, model="")
    event("forced_open", 10)
    event("released", 20, model="")
    event("released", 30)

    segments = circuit_timeline(provider=P, model=M, since=at(0), until=at(60))

    assert states(segments) == [("drained", 0, 10), ("forced_open", 10, 30), ("closed", 30, 60)]


def test_timeline_takes_two_queries(django_assert_num_queries):
    event("opened", -5)
    event("closed", 5)

    with django_assert_num_queries(2):
        circuit_timeline(provider=P, model=M, since=at(0), until=at(60))


def test_event_list_newest_first_with_provider_wide_events_and_a_limit():
    for i in range(60):
        event("opened" if i % 2 == 0 else "closed", i)
    event("drained", 70, model="", reason="incident")
    event("opened", 80, model="gpt-4o-mini")
    event("opened", 90, provider="anthropic")

    events = circuit_event_list(provider=P, model=M)

    assert len(events) == 50
    assert [(e.kind, e.model, e.at) for e in events[:3]] == [
        ("drained", "", at(70)),
        ("closed", M, at(59)),
        ("opened", M, at(58)),
    ]
    assert events[-1].at == at(11)  # the drain and minutes 59..11
    assert len(circuit_event_list(provider=P, model=M, limit=5)) == 5


def test_segments_of_every_circuit_non_closed_only_with_drains_on_their_own():
    event("opened", -5)  # open at since
    event("closed", 10)
    event("opened", 20, model="gpt-4o-mini")
    event("forced_open", 30, provider="anthropic", model="claude-haiku", until=at(45))
    event("drained", 40, provider="anthropic", model="")
    event("opened", 50, provider="anthropic", model="claude-haiku")
    event("closed", -30, provider="mistral", model="small")  # closed all along: no segment

    segments = circuit_segments(since=at(0), until=at(60))

    assert [(s.provider, s.model, *states([s])[0]) for s in segments] == [
        ("anthropic", "", "drained", 40, 60),
        ("anthropic", "claude-haiku", "forced_open", 30, 45),
        ("anthropic", "claude-haiku", "open", 50, 60),
        ("openai", "gpt-4o", "open", 0, 10),
        ("openai", "gpt-4o-mini", "open", 20, 60),
    ]


def test_segments_take_two_queries(django_assert_num_queries):
    event("opened", -5)
    event("opened", 5, model="gpt-4o-mini")

    with django_assert_num_queries(2):
        circuit_segments(since=at(0), until=at(60))
