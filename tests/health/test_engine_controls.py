"""Operator holds (force open, drain) inside the engines: both backends, degraded mode, and a second process."""

import redis

from health.breaker import BreakerSettings, ConfigSet, Control, ControlKind, ManualClock, Outcome, State
from tests.health.conftest import M, P, closed_port_url, redis_engine, wait_subscribed
from tests.servers import within

T0 = 1_700_000_000.0
OK = Outcome.of_status(200)
FAIL = Outcome.of_status(503)


def forced(model: str = M, until: float | None = None, provider: str = P) -> Control:
    return Control(ControlKind.FORCED_OPEN, provider, model, "maintenance", until=until, since=T0)


def drained(provider: str = P, until: float | None = None) -> Control:
    return Control(ControlKind.DRAINED, provider, "", "provider outage", until=until, since=T0)


def held(*controls: Control, default: BreakerSettings | None = None) -> ConfigSet:
    return ConfigSet(default=default or BreakerSettings(), controls={(c.provider, c.model): c for c in controls})


def answer(engine, provider: str = P, model: str = M) -> tuple[bool, bool, State]:
    d = engine.allow(provider, model)
    return d.allowed, d.probe, d.state


def trip(engine, clock) -> None:
    """Default thresholds: 10 failures, one per second, open the circuit at T0+9 (cooldown 60 s)."""
    for _ in range(10):
        decision = engine.allow(P, M)
        assert decision.allowed
        engine.record(decision, FAIL)
        assert engine.flush()
        clock.advance(1)
    assert engine.get(P, M).state is State.OPEN


def test_forced_open_refuses_a_closed_circuit_and_only_that_one(make_engine, clock):
    engine = make_engine(config=held(forced()))

    assert answer(engine) == (False, False, State.OPEN)
    assert answer(engine, P, "other") == (True, False, State.CLOSED)
    assert answer(engine, "anthropic", M) == (True, False, State.CLOSED)


def test_drain_refuses_every_circuit_of_its_provider(make_engine, clock):
    engine = make_engine(config=held(drained()))

    answers = [answer(engine, P, model) for model in (M, "gpt-4o-mini", "o3")]

    assert answers == [(False, False, State.OPEN)] * 3
    assert answer(engine, "anthropic", "claude") == (True, False, State.CLOSED)


def test_snapshots_carry_the_hold_in_force_and_the_breakers_own_state(make_engine, clock):
    engine = make_engine()
    for model in (M, "gpt-4o-mini"):
        engine.record(engine.allow(P, model), OK)
        engine.record(engine.allow("anthropic", model), OK)
    assert engine.flush()
    engine.configure(held(forced(), drained()))

    got = engine.get(P, M)
    rows = [(s.provider, s.model, s.state, s.control) for s in engine.list_circuits()]

    assert (got.state, got.control) == (State.CLOSED, forced())  # a forced circuit wins over its drain
    assert rows == [
        ("anthropic", "gpt-4o", State.CLOSED, None),
        ("anthropic", "gpt-4o-mini", State.CLOSED, None),
        (P, "gpt-4o", State.CLOSED, forced()),
        (P, "gpt-4o-mini", State.CLOSED, drained()),
    ]


def test_hold_stops_by_itself_when_its_expiry_passes_on_the_engine_clock(make_engine, clock):
    engine = make_engine(config=held(forced(until=T0 + 30)))

    clock.set(T0 + 29.999)
    before = (answer(engine), engine.get(P, M).control)
    clock.set(T0 + 30)
    after = (answer(engine), engine.get(P, M).control)

    assert before == ((False, False, State.OPEN), forced(until=T0 + 30))
    assert after == ((True, False, State.CLOSED), None)


def test_held_circuit_is_never_probed_and_probes_once_released(make_engine, clock):
    engine = make_engine()
    trip(engine, clock)
    engine.configure(held(forced()))
    clock.set(T0 + 200)  # long past the cooldown

    during = [answer(engine) for _ in range(3)]
    snapshot = engine.get(P, M)
    engine.configure(ConfigSet())
    released = answer(engine)

    assert during == [(False, False, State.OPEN)] * 3
    assert (snapshot.state, snapshot.probe_in_flight) == (State.HALF_OPEN, False)  # due, but nobody probed
    assert released == (True, True, State.HALF_OPEN)


def test_outcomes_of_calls_let_through_before_the_hold_are_recorded(make_engine, clock):
    engine = make_engine(config=ConfigSet(default=BreakerSettings(failure_threshold=2, minimum_requests=2)))
    in_flight = [engine.allow(P, M) for _ in range(2)]
    engine.configure(held(forced(), default=BreakerSettings(failure_threshold=2, minimum_requests=2)))

    for decision in in_flight:
        engine.record(decision, FAIL)
    assert engine.flush()

    s = engine.get(P, M)
    assert (s.state, s.failure_count, s.total_requests, s.control) == (State.OPEN, 2, 2, forced())
    assert engine.events.emitted["opened"] == 1


def test_refused_by_a_hold_records_nothing(make_engine, clock):
    engine = make_engine(config=held(forced()))

    refused = engine.allow(P, M)
    engine.record(refused, FAIL)
    assert engine.flush()

    assert (engine.get(P, M).total_requests, engine.list_circuits()) == (0, [])


def test_degraded_engine_still_applies_holds(engines):
    clock = ManualClock(T0)
    engine = redis_engine(engines, closed_port_url(), "test:breaker:down", clock, config=held(drained(until=T0 + 60)))

    during = answer(engine, P, "any")
    clock.set(T0 + 60)
    after = answer(engine, P, "any")

    assert engine.degraded is True
    assert (during, after) == ((False, False, State.OPEN), (True, False, State.CLOSED))


def test_hold_published_by_one_process_is_refused_by_another_and_expires(redis_url, namespace, engines):
    clock = ManualClock(T0)
    channel = f"{namespace}:config"
    # The "database" both processes read their configuration from when a change is published.
    store = {"config": ConfigSet()}

    def loader(version: int) -> ConfigSet:
        return store["config"]

    setter, other = (
        redis_engine(engines, redis_url, namespace, clock, config_channel=channel, config_loader=loader)
        for _ in range(2)
    )
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    wait_subscribed(client, channel, 2)
    trip(setter, clock)  # opened at T0+9, cooldown until T0+69
    other.refresh(P, M)
    clock.set(T0 + 100)  # the cooldown is over: without the hold, the next call would be the probe
    hold = forced(until=T0 + 600)

    store["config"] = held(hold)
    setter.configure(store["config"])  # the in-process listener of the process that made the change
    client.publish(channel, "1")
    reached = within(lambda: other.get(P, M).control == hold)
    refused = answer(other)
    snapshot = other.get(P, M)
    clock.set(T0 + 600)  # the hold's expiry has passed on the engine clock
    probe = answer(other)
    client.close()

    assert reached is True
    assert refused == (False, False, State.OPEN)
    assert (snapshot.state, snapshot.probe_in_flight) == (State.HALF_OPEN, False)
    assert probe == (True, True, State.HALF_OPEN)
    assert (answer(setter), setter.get(P, M).state) == ((False, False, State.HALF_OPEN), State.HALF_OPEN)
