"""The breaker contract: every test runs against the memory AND the Redis backend, on an injected clock."""

import threading
from datetime import UTC, datetime

from health.breaker import BreakerSettings, ConfigSet, Control, ControlKind, Decision, Outcome, State
from tests.health.conftest import M, P, config

T0 = 1_700_000_000.0
OK = Outcome.of_status(200)
FAIL = Outcome.of_status(503)


def at(offset: float) -> datetime:
    return datetime.fromtimestamp(T0 + offset, tz=UTC)


def call(engine, outcome: Outcome, provider: str = P, model: str = M) -> Decision:
    decision = engine.allow(provider, model)
    assert decision.allowed
    engine.record(decision, outcome)
    assert engine.flush()
    return decision


def open_circuit(engine, clock, provider: str = P, model: str = M) -> None:
    """Default thresholds: 5 successes then 5 failures, one per second, open it."""
    for outcome in [OK] * 5 + [FAIL] * 5:
        call(engine, outcome, provider, model)
        clock.advance(1)
    assert engine.get(provider, model).state is State.OPEN


def counts(engine) -> tuple[State, int, int]:
    s = engine.get(P, M)
    return s.state, s.failure_count, s.total_requests


def test_window_opens_on_failures_spread_across_one_window(make_engine, clock):
    engine = make_engine()
    for _ in range(7):
        call(engine, OK)
    for offset in (1, 15, 29):  # 3 failures in the first 30 s
        clock.set(T0 + offset)
        call(engine, FAIL)
    clock.set(T0 + 40)
    call(engine, FAIL)
    before_fifth = counts(engine)

    clock.set(T0 + 55)  # 2 more in the next 30 s: 5 within 60 s
    call(engine, FAIL)

    assert before_fifth == (State.CLOSED, 4, 11)
    snapshot = engine.get(P, M)
    assert (snapshot.state, snapshot.failure_count, snapshot.total_requests) == (State.OPEN, 5, 12)
    assert (snapshot.opened_at, snapshot.cooldown_until) == (at(55), at(115))
    assert (snapshot.last_failure_at, snapshot.last_failure_status) == (at(55), 503)


def test_window_never_opens_on_failures_spread_over_90_seconds(make_engine, clock):
    engine = make_engine(config=config(failure_threshold=3, minimum_requests=1))
    seen = []
    for offset in (0, 45, 90):
        clock.set(T0 + offset)
        call(engine, FAIL)
        seen.append(counts(engine))

    assert seen == [(State.CLOSED, 1, 1), (State.CLOSED, 2, 2), (State.CLOSED, 2, 2)]


def test_window_boundary_drops_an_event_exactly_one_window_old(make_engine, clock):
    engine = make_engine(config=config(failure_threshold=3, minimum_requests=1))
    call(engine, FAIL)
    clock.set(T0 + 30)
    call(engine, FAIL)

    clock.set(T0 + 59.999)
    inside = counts(engine)
    clock.set(T0 + 60)
    outside = counts(engine)

    assert (inside, outside) == ((State.CLOSED, 2, 2), (State.CLOSED, 1, 1))


def test_minimum_requests_holds_the_circuit_closed_until_reached(make_engine, clock):
    engine = make_engine()
    for _ in range(5):
        call(engine, FAIL)
    after_failures = counts(engine)
    for _ in range(4):
        call(engine, OK)
    after_nine = counts(engine)

    call(engine, OK)  # the 10th request in the window: 5 failures / 10 requests

    assert after_failures == (State.CLOSED, 5, 5)
    assert after_nine == (State.CLOSED, 5, 9)
    assert counts(engine) == (State.OPEN, 5, 10)


def test_open_circuit_refuses_until_cooldown_ends(make_engine, clock):
    engine = make_engine()
    open_circuit(engine, clock)  # opened at T0+9, cooldown 60 s

    clock.set(T0 + 68.999)
    refused = engine.allow(P, M)
    clock.set(T0 + 69)
    probe = engine.allow(P, M)

    assert (refused.allowed, refused.state) == (False, State.OPEN)
    assert (probe.allowed, probe.probe, probe.state) == (True, True, State.HALF_OPEN)


def test_cooldown_doubles_on_each_consecutive_open_and_is_capped(make_engine, clock):
    engine = make_engine()
    open_circuit(engine, clock)
    cooldowns = []
    opens = []
    for _ in range(5):
        s = engine.get(P, M)
        cooldowns.append((s.cooldown_until - s.opened_at).total_seconds())
        opens.append(s.consecutive_opens)
        clock.set(s.cooldown_until.timestamp())
        probe = engine.allow(P, M)
        assert probe.probe
        engine.record(probe, Outcome.timeout())
        assert engine.flush()

    assert cooldowns == [60, 120, 240, 300, 300]
    assert opens == [1, 2, 3, 4, 5]


def test_half_open_lets_exactly_one_probe_through(make_engine, clock):
    engine = make_engine()
    open_circuit(engine, clock)
    clock.advance(60)

    first = engine.allow(P, M)
    second = engine.allow(P, M)
    third = engine.allow(P, M)

    assert (first.allowed, first.probe) == (True, True)
    assert [(d.allowed, d.probe, d.state) for d in (second, third)] == [(False, False, State.HALF_OPEN)] * 2
    snapshot = engine.get(P, M)
    assert (snapshot.state, snapshot.probe_in_flight) == (State.HALF_OPEN, True)


def test_probe_success_closes_clears_window_and_resets_growth(make_engine, clock):
    engine = make_engine()
    open_circuit(engine, clock)
    clock.advance(60)
    failed_probe = engine.allow(P, M)
    engine.record(failed_probe, FAIL)
    engine.flush()
    clock.advance(120)
    probe = engine.allow(P, M)

    engine.record(probe, OK)
    engine.flush()

    closed = engine.get(P, M)
    assert (closed.state, closed.failure_count, closed.total_requests) == (State.CLOSED, 0, 0)
    assert (closed.consecutive_opens, closed.cooldown_until, closed.opened_at) == (0, None, None)
    assert engine.allow(P, M).allowed is True
    open_circuit(engine, clock)
    reopened = engine.get(P, M)
    assert (reopened.consecutive_opens, (reopened.cooldown_until - reopened.opened_at).total_seconds()) == (1, 60)


def test_probe_failure_reopens_with_doubled_cooldown(make_engine, clock):
    engine = make_engine()
    open_circuit(engine, clock)
    clock.advance(60)
    probe = engine.allow(P, M)
    probe_time = clock.now()

    engine.record(probe, Outcome.connection_error())
    engine.flush()

    s = engine.get(P, M)
    assert (s.state, s.consecutive_opens) == (State.OPEN, 2)
    assert (s.opened_at.timestamp(), s.cooldown_until.timestamp()) == (probe_time, probe_time + 120)
    assert (s.last_failure_at.timestamp(), s.last_failure_status) == (probe_time, "connection_error")
    assert engine.allow(P, M).allowed is False


def test_probe_that_never_reports_frees_its_slot_after_the_probe_timeout(make_engine, clock):
    engine = make_engine(probe_timeout_seconds=90)
    open_circuit(engine, clock)
    clock.advance(60)
    lost = engine.allow(P, M)
    clock.advance(89.999)
    still_held = engine.allow(P, M)
    clock.advance(0.001)
    replacement = engine.allow(P, M)

    engine.record(lost, OK)  # the lost probe reports at last: stale, it no longer owns the slot
    engine.flush()

    assert (lost.probe, still_held.allowed, replacement.probe) == (True, False, True)
    s = engine.get(P, M)
    assert (s.state, s.probe_in_flight) == (State.HALF_OPEN, True)
    engine.record(replacement, OK)
    engine.flush()
    assert engine.get(P, M).state is State.CLOSED


def test_cancelled_outcomes_count_as_neither(make_engine, clock):
    engine = make_engine(config=config(failure_threshold=1, minimum_requests=1))
    for _ in range(20):
        call(engine, Outcome.cancelled())

    assert counts(engine) == (State.CLOSED, 0, 0)
    assert engine.list_circuits() == []


def test_cancelled_probe_gives_the_slot_back(make_engine, clock):
    engine = make_engine()
    open_circuit(engine, clock)
    clock.advance(60)
    probe = engine.allow(P, M)

    engine.record(probe, Outcome.cancelled())
    engine.flush()

    s = engine.get(P, M)
    assert (s.state, s.probe_in_flight, s.consecutive_opens) == (State.HALF_OPEN, False, 1)
    next_probe = engine.allow(P, M)
    assert (next_probe.allowed, next_probe.probe) == (True, True)


def test_outcomes_of_calls_started_before_a_transition_are_ignored(make_engine, clock):
    engine = make_engine()
    in_flight = [engine.allow(P, M) for _ in range(3)]  # started while closed
    open_circuit(engine, clock)
    for d in in_flight:
        engine.record(d, FAIL)
    engine.flush()
    after_open = engine.get(P, M)
    clock.advance(60)
    probe = engine.allow(P, M)
    for d in in_flight:  # closed-era failures arriving during half-open: only the probe counts
        engine.record(d, FAIL)
    engine.flush()
    during_probe = engine.get(P, M)

    engine.record(probe, OK)
    for d in in_flight:  # and they do not count in the fresh closed window either
        engine.record(d, FAIL)
    engine.flush()

    assert (after_open.failure_count, after_open.total_requests, after_open.last_failure_at) == (5, 10, at(9))
    assert (during_probe.state, during_probe.consecutive_opens) == (State.HALF_OPEN, 1)
    assert counts(engine) == (State.CLOSED, 0, 0)


def test_reset_closes_at_once_and_forgets_window_and_growth(make_engine, clock):
    engine = make_engine()
    open_circuit(engine, clock)
    clock.advance(60)
    probe = engine.allow(P, M)
    engine.record(probe, FAIL)  # second open: cooldown 120
    engine.flush()
    in_flight = probe

    result = engine.reset(P, M)
    engine.record(in_flight, FAIL)
    engine.flush()

    assert (result.before.state, result.before.consecutive_opens) == (State.OPEN, 2)
    assert (result.before.failure_count, result.before.total_requests) == (0, 0)  # aged out 60 s later
    after = engine.get(P, M)
    assert after == result.after
    assert (after.state, after.failure_count, after.total_requests, after.consecutive_opens) == (State.CLOSED, 0, 0, 0)
    assert (after.cooldown_until, after.last_failure_at, after.last_failure_status) == (None, None, None)
    assert engine.allow(P, M).allowed is True
    open_circuit(engine, clock)
    reopened = engine.get(P, M)
    assert (reopened.consecutive_opens, (reopened.cooldown_until - reopened.opened_at).total_seconds()) == (1, 60)


def test_list_shows_tracked_circuits_sorted(make_engine, clock):
    engine = make_engine()
    engine.allow("zeta", "m1")  # asked but never recorded: not tracked
    call(engine, OK, "beta", "m2")
    call(engine, FAIL, "alpha", "m9")
    engine.reset("gamma", "m3")

    rows = [(s.provider, s.model, s.state, s.failure_count, s.total_requests) for s in engine.list_circuits()]

    assert rows == [
        ("alpha", "m9", State.CLOSED, 1, 1),
        ("beta", "m2", State.CLOSED, 0, 1),
        ("gamma", "m3", State.CLOSED, 0, 0),
    ]


def test_config_edits_apply_at_once(make_engine, clock):
    engine = make_engine()
    for _ in range(6):
        call(engine, OK)
    for _ in range(3):
        call(engine, FAIL)
        clock.advance(10)
    before = counts(engine)

    engine.configure(config(failure_threshold=4, window_seconds=15))
    narrowed = counts(engine)
    engine.configure(config(failure_threshold=2, minimum_requests=2, window_seconds=15))
    call(engine, FAIL)

    assert before == (State.CLOSED, 3, 9)
    assert narrowed == (State.CLOSED, 1, 1)  # only the failure at +20 s is within 15 s of +30 s
    assert counts(engine) == (State.OPEN, 2, 2)


def test_override_applies_to_its_circuit_only(make_engine, clock):
    strict = BreakerSettings(failure_threshold=1, minimum_requests=1, initial_cooldown_seconds=30)
    engine = make_engine(config=ConfigSet(default=BreakerSettings(), overrides={(P, "strict"): strict}))

    call(engine, FAIL, P, "strict")
    call(engine, FAIL, P, M)

    s = engine.get(P, "strict")
    assert (s.state, (s.cooldown_until - s.opened_at).total_seconds()) == (State.OPEN, 30)
    assert counts(engine) == (State.CLOSED, 1, 1)


def test_status_codes_classify_outcomes(make_engine, clock):
    engine = make_engine(config=config(failure_threshold=100, minimum_requests=1))
    outcomes = [Outcome.of_status(c) for c in (200, 201, 400, 401, 403, 404, 422, 429, 500, 502, 503, 504, 501)]
    for outcome in [*outcomes, Outcome.timeout(), Outcome.connection_error()]:
        call(engine, outcome)
    default_counts = counts(engine)
    engine.reset(P, M)
    engine.configure(config(failure_threshold=100, minimum_requests=1, failure_status_codes=frozenset({418})))
    for outcome in (Outcome.of_status(500), Outcome.of_status(418), Outcome.of_status(200)):
        call(engine, outcome)

    assert default_counts == (State.CLOSED, 7, 15)  # 429, 500, 502, 503, 504, timeout, connection error
    s = engine.get(P, M)
    assert (s.failure_count, s.total_requests, s.last_failure_status) == (1, 3, 418)


def test_last_failure_reports_error_kind(make_engine, clock):
    engine = make_engine()
    call(engine, FAIL)
    clock.advance(2)
    call(engine, Outcome.timeout())
    clock.advance(2)
    call(engine, OK)

    s = engine.get(P, M)
    assert (s.last_failure_at, s.last_failure_status) == (at(2), "timeout")


def test_untracked_circuit_reads_as_fresh_and_closed(make_engine, clock):
    engine = make_engine()

    s = engine.get("nobody", "nothing")

    assert (s.state, s.failure_count, s.total_requests, s.consecutive_opens, s.cooldown_until) == (
        State.CLOSED,
        0,
        0,
        0,
        None,
    )


def test_refused_decisions_record_nothing(make_engine, clock):
    engine = make_engine()
    open_circuit(engine, clock)
    refused = engine.allow(P, M)

    engine.record(refused, OK)
    engine.flush()

    assert counts(engine) == (State.OPEN, 5, 10)


def test_concurrent_threads_take_one_probe(make_engine, clock):
    engine = make_engine()
    open_circuit(engine, clock)
    clock.advance(60)
    barrier = threading.Barrier(8)
    decisions: list[Decision] = []
    lock = threading.Lock()

    def racer() -> None:
        barrier.wait()
        d = engine.allow(P, M)
        with lock:
            decisions.append(d)

    threads = [threading.Thread(target=racer) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert sorted((d.allowed, d.probe) for d in decisions) == [(False, False)] * 7 + [(True, True)]


def test_circuits_whose_names_join_to_the_same_text_are_independent(make_engine, clock):
    engine = make_engine()
    open_circuit(engine, clock, "a/b", "c")

    other = call(engine, FAIL, "a", "b/c")
    call(engine, OK, "a%2Fb", "c")
    rows = [(s.provider, s.model, s.state, s.failure_count, s.total_requests) for s in engine.list_circuits()]

    assert (other.allowed, other.state) == (True, State.CLOSED)
    assert rows == [
        ("a", "b/c", State.CLOSED, 1, 1),
        ("a%2Fb", "c", State.CLOSED, 0, 1),
        ("a/b", "c", State.OPEN, 5, 10),
    ]


def test_each_transition_appends_one_event_named_by_its_generation(make_engine, clock):
    engine = make_engine(config=config(failure_threshold=1, minimum_requests=1))
    seen = engine.events.emitted.copy()
    call(engine, FAIL)  # opens
    opened = engine.get(P, M).generation
    clock.advance(60)
    probe = engine.allow(P, M)  # half-open
    engine.record(probe, OK)  # closes
    assert engine.flush()

    counts = {kind: n - seen[kind] for kind, n in engine.events.emitted.items() if n != seen[kind]}

    assert counts == {"opened": 1, "half_open": 1, "closed": 1}
    assert (opened, probe.generation, engine.get(P, M).generation) == (opened, opened + 1, opened + 2)


def test_a_hold_leaves_the_circuit_as_it_was_once_it_expires(make_engine, clock):
    engine = make_engine(config=config(failure_threshold=3, minimum_requests=1))
    for _ in range(2):
        call(engine, FAIL)
    hold = Control(ControlKind.DRAINED, P, "", "maintenance", until=T0 + 10)
    engine.configure(ConfigSet(default=engine.config.default, controls={(P, ""): hold}))

    refused = engine.allow(P, M)
    during = (counts(engine), engine.get(P, M).control)
    clock.set(T0 + 10)
    after = (counts(engine), engine.get(P, M).control)
    call(engine, FAIL)  # the third failure in the window opens it as it would have

    assert (refused.allowed, refused.probe, refused.state) == (False, False, State.OPEN)
    assert during == ((State.CLOSED, 2, 2), hold)
    assert after == ((State.CLOSED, 2, 2), None)
    assert counts(engine) == (State.OPEN, 3, 3)
