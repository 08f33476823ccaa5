"""Random outcome/time sequences through each backend must match the reference model step by step."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from health.breaker import BreakerSettings, ConfigSet, ManualClock, Outcome
from tests.health.conftest import M, P
from tests.health.reference import Reference

pytestmark = pytest.mark.db_independent

CFG = BreakerSettings(
    failure_threshold=2, window_seconds=10, minimum_requests=2, initial_cooldown_seconds=30, cooldown_cap_seconds=120
)
PROBE_TIMEOUT = 50
# Failures first: hypothesis favours early elements, and circuits must open often to reach half-open.
OUTCOMES = [
    Outcome.of_status(503),
    Outcome.timeout(),
    Outcome.of_status(200),
    Outcome.of_status(429),
    Outcome.connection_error(),
    Outcome.of_status(404),
    Outcome.cancelled(),
]
SLOTS = 3

outcome = st.sampled_from(OUTCOMES)
call = st.tuples(st.just("call"), outcome)
step = st.one_of(
    # Calls dominate so circuits open, half-open and probe often; advances land exactly on the
    # window (10 s), cooldown (30/60/120 s) and probe-timeout (50 s) boundaries.
    call,
    call,
    call,
    st.tuples(st.just("advance"), st.sampled_from([30, 10, 50, 0, 1, 5, 20])),
    st.tuples(st.just("begin"), st.integers(min_value=0, max_value=SLOTS - 1)),
    st.tuples(st.just("end"), st.tuples(st.integers(min_value=0, max_value=SLOTS - 1), outcome)),
)


def view(snapshot) -> tuple:
    cooldown = snapshot.cooldown_until.timestamp() if snapshot.cooldown_until else None
    return (
        str(snapshot.state),
        snapshot.failure_count,
        snapshot.total_requests,
        snapshot.consecutive_opens,
        cooldown,
        snapshot.probe_in_flight,
    )


def take(engine, model: Reference, clock: ManualClock, why: object = None) -> tuple:
    """One allow() on both sides, which must agree: (the engine's decision, the model's ticket)."""
    decision = engine.allow(P, M)
    expected = model.allow(clock.now())
    assert (decision.allowed, decision.probe) == expected[:2], why
    return decision, expected


@settings(
    max_examples=60,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=st.lists(step, min_size=20, max_size=60))
def test_engine_matches_reference_model(make_engine, steps):
    clock = ManualClock(1_700_000_000.0)
    engine = make_engine(config=ConfigSet(default=CFG), clock=clock, probe_timeout_seconds=PROBE_TIMEOUT)
    model = Reference(cfg=CFG, probe_timeout=PROBE_TIMEOUT)
    held: dict[int, tuple] = {}

    for kind, arg in steps:
        if kind == "advance":
            clock.advance(arg)
        elif kind in ("call", "begin"):
            decision, expected = take(engine, model, clock, (kind, arg))
            if kind == "call":
                engine.record(decision, arg)
                model.record(expected, arg, clock.now())
            else:
                held[arg] = (decision, expected)
        elif arg[0] in held:
            decision, expected = held.pop(arg[0])
            engine.record(decision, arg[1])
            model.record(expected, arg[1], clock.now())
        assert engine.flush()
        assert view(engine.get(P, M)) == model.view(clock.now()), (kind, arg)


# Bursts: several outcomes recorded between two flushes, so a Redis engine sends them together (as runs in
# one script call per generation, a new call for each clock time). Small advances inside a burst split it;
# outcomes after the one that opens the circuit must be ignored, exactly as one at a time. The minimum is
# above the threshold, so a success can be the outcome that opens it.
BURST_CFG = BreakerSettings(
    failure_threshold=2, window_seconds=10, minimum_requests=5, initial_cooldown_seconds=30, cooldown_cap_seconds=120
)
# (gap before, outcome, how many in a row): runs of equal outcomes are what the script coalesces.
burst = st.lists(
    st.tuples(st.sampled_from([0, 0, 0, 1, 4]), outcome, st.integers(min_value=1, max_value=6)),
    min_size=1,
    max_size=6,
)
burst_step = st.one_of(
    st.tuples(st.just("burst"), burst),
    st.tuples(st.just("burst"), burst),
    st.tuples(st.just("advance"), st.sampled_from([30, 10, 50, 0, 1, 5, 20])),
    st.tuples(st.just("burst"), outcome.map(lambda result: [(0, result, 1)])),  # one call, alone
)


@settings(
    max_examples=60,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=st.lists(burst_step, min_size=10, max_size=40))
def test_outcomes_sent_together_match_the_reference_one_at_a_time(make_engine, steps):
    clock = ManualClock(1_700_000_000.0)
    engine = make_engine(config=ConfigSet(default=BURST_CFG), clock=clock, probe_timeout_seconds=PROBE_TIMEOUT)
    model = Reference(cfg=BURST_CFG, probe_timeout=PROBE_TIMEOUT)

    for kind, arg in steps:
        if kind == "advance":
            clock.advance(arg)
        else:
            # Every outcome of the burst holds the ticket taken at its start, as concurrent requests do.
            decision, expected = take(engine, model, clock, (kind, arg))
            for gap, result, times in arg:
                clock.advance(gap)
                for _ in range(times):
                    engine.record(decision, result)
                    model.record(expected, result, clock.now())
        assert engine.flush()
        assert view(engine.get(P, M)) == model.view(clock.now()), (kind, arg)
