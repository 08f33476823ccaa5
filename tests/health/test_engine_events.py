"""Circuit events: the buffer, one event per transition (both backends, several processes), shipping to the
history stream, and events of a process deciding alone."""

import multiprocessing
import threading
import time
import uuid

import orjson
import redis

from health.breaker import (
    HISTORY_FIELD,
    BreakerEvent,
    EventBuffer,
    EventKind,
    ManualClock,
    Outcome,
    State,
    history_stream,
)
from health.breaker.redis_backend import RedisEngine
from tests.health.conftest import M, P, closed_port_url, config, redis_engine
from tests.health.events_worker import EVENTS_CONFIG, fail_together
from tests.servers import delete_namespace

T0 = 1_700_000_000.0
OK = Outcome.of_status(200)
FAIL = Outcome.of_status(503)


def ev(kind: EventKind, at: float = T0, **fields) -> BreakerEvent:
    return BreakerEvent(kind=kind, provider=P, model=M, at=at, **fields)


def call(engine, outcome: Outcome, provider: str = P, model: str = M):
    decision = engine.allow(provider, model)
    assert decision.allowed
    engine.record(decision, outcome)
    assert engine.flush()
    return decision


def trip(engine, clock, provider: str = P, model: str = M) -> None:
    """Default thresholds: 5 successes then 5 failures, one per second (opens at T0+9 with a 60 s cooldown)."""
    for outcome in [OK] * 5 + [FAIL] * 5:
        call(engine, outcome, provider, model)
        clock.advance(1)
    assert engine.get(provider, model).state is State.OPEN


def emitted(engine) -> list[BreakerEvent]:
    """The events the engine made so far: drained from a memory engine, read back from a Redis one's stream."""
    if not isinstance(engine, RedisEngine):
        return engine.events.drain()
    assert engine.flush()
    return stream_events(engine._client, engine._history)


def stream_events(client: redis.Redis, stream: str) -> list[BreakerEvent]:
    rows = []
    for _, fields in client.xrange(stream):
        record = orjson.loads(fields[HISTORY_FIELD])
        rows.append(BreakerEvent(**{**record, "kind": EventKind(record["kind"])}))
    return rows


# ----- the buffer -----------------------------------------------------------------------------------------


def test_buffer_drains_oldest_first_up_to_the_limit():
    buffer = EventBuffer()
    for i in range(5):
        buffer.add(ev(EventKind.OPENED, T0 + i))

    first = buffer.drain(limit=2)
    rest = buffer.drain()

    assert [e.at for e in first] == [T0, T0 + 1]
    assert [e.at for e in rest] == [T0 + 2, T0 + 3, T0 + 4]
    assert (len(buffer), buffer.drain()) == (0, [])


def test_buffer_over_its_capacity_drops_the_oldest_and_counts_them():
    buffer = EventBuffer(capacity=3)
    for i in range(5):
        buffer.add(ev(EventKind.HALF_OPEN, T0 + i))

    assert (len(buffer), buffer.dropped) == (3, 2)
    assert [e.at for e in buffer.drain()] == [T0 + 2, T0 + 3, T0 + 4]


def test_buffer_requeue_puts_events_back_in_front_in_order():
    buffer = EventBuffer(capacity=4)
    for i in range(3):
        buffer.add(ev(EventKind.OPENED, T0 + i))
    taken = buffer.drain(limit=2)
    buffer.add(ev(EventKind.CLOSED, T0 + 10))
    buffer.add(ev(EventKind.CLOSED, T0 + 11))

    buffer.requeue(taken)  # 3 queued + 2 back > 4: the oldest requeued one goes

    assert buffer.dropped == 1
    assert [e.at for e in buffer.drain()] == [T0 + 1, T0 + 2, T0 + 10, T0 + 11]


def test_buffer_counts_every_event_added_per_kind_requeues_excluded():
    buffer = EventBuffer(capacity=2)
    for kind in (EventKind.OPENED, EventKind.HALF_OPEN, EventKind.REOPENED, EventKind.HALF_OPEN):
        buffer.add(ev(kind))
    buffer.requeue(buffer.drain())

    assert buffer.emitted == {
        "opened": 1,
        "half_open": 2,
        "closed": 0,
        "reopened": 1,
        "reset": 0,
        "forced_open": 0,
        "drained": 0,
        "released": 0,
    }


def test_buffer_loses_nothing_between_concurrent_writers():
    buffer = EventBuffer()
    barrier = threading.Barrier(4)

    def writer(n: int) -> None:
        barrier.wait()
        for i in range(2_000):
            buffer.add(ev(EventKind.OPENED, T0 + n * 10_000 + i))

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    drained = buffer.drain(limit=100_000)
    assert (len(drained), len({e.at for e in drained}), buffer.emitted["opened"], buffer.dropped) == (
        8_000,
        8_000,
        8_000,
        0,
    )


def test_history_stream_is_named_after_the_namespace():
    assert (history_stream("cp:breaker"), HISTORY_FIELD) == ("cp:breaker:history", "e")


# ----- one event per transition (both backends) ----------------------------------------------------------


def test_a_trip_emits_one_opened_event_with_the_window_figures(make_engine, clock):
    engine = make_engine()

    trip(engine, clock)

    gen = engine.get(P, M).generation
    assert emitted(engine) == [
        ev(EventKind.OPENED, T0 + 9, generation=gen, failures=5, total=10, last_status="503", cooldown_seconds=60.0)
    ]


def test_a_trip_on_the_request_reaching_the_minimum_names_the_last_failure(make_engine, clock):
    engine = make_engine(config=config(failure_threshold=2, minimum_requests=4))
    for outcome in (Outcome.of_status(429), Outcome.timeout(), OK, OK):
        call(engine, outcome)
        clock.advance(1)

    [opened] = emitted(engine)

    assert (opened.kind, opened.at, opened.failures, opened.total, opened.last_status) == (
        EventKind.OPENED,
        T0 + 3,
        2,
        4,
        "timeout",
    )


def test_probe_grants_failures_and_success_each_emit_one_event(make_engine, clock):
    engine = make_engine()
    trip(engine, clock)  # opened at T0+9, cooldown 60
    gens = [engine.get(P, M).generation]
    clock.set(T0 + 69)
    probe = engine.allow(P, M)
    gens.append(probe.generation)
    clock.advance(2)
    engine.record(probe, Outcome.connection_error())  # reopens at T0+71, cooldown 120
    assert engine.flush()
    gens.append(engine.get(P, M).generation)
    clock.set(T0 + 191)
    second = engine.allow(P, M)
    gens.append(second.generation)
    clock.advance(1)
    engine.record(second, OK)
    assert engine.flush()
    gens.append(engine.get(P, M).generation)

    assert emitted(engine) == [
        ev(EventKind.OPENED, T0 + 9, generation=gens[0], failures=5, total=10, last_status="503", cooldown_seconds=60),
        ev(EventKind.HALF_OPEN, T0 + 69, generation=gens[1]),
        ev(EventKind.REOPENED, T0 + 71, generation=gens[2], last_status="connection_error", cooldown_seconds=120.0),
        ev(EventKind.HALF_OPEN, T0 + 191, generation=gens[3]),
        ev(EventKind.CLOSED, T0 + 192, generation=gens[4]),
    ]
    assert gens == sorted(set(gens))  # each transition its own, growing generation
    assert engine.events.emitted == {
        "opened": 1,
        "half_open": 2,
        "closed": 1,
        "reopened": 1,
        "reset": 0,
        "forced_open": 0,
        "drained": 0,
        "released": 0,
    }


def test_an_abandoned_probe_slot_granted_again_is_one_more_half_open_event(make_engine, clock):
    engine = make_engine(probe_timeout_seconds=90)
    trip(engine, clock)
    clock.set(T0 + 69)
    lost = engine.allow(P, M)
    clock.advance(90)

    replacement = engine.allow(P, M)

    kinds = [(e.kind, e.at, e.generation) for e in emitted(engine)]
    assert kinds == [
        (EventKind.OPENED, T0 + 9, lost.generation - 1),
        (EventKind.HALF_OPEN, T0 + 69, lost.generation),
        (EventKind.HALF_OPEN, T0 + 159, replacement.generation),
    ]


def test_reset_a_cancelled_probe_and_refusals_emit_nothing(make_engine, clock):
    engine = make_engine()
    trip(engine, clock)
    clock.set(T0 + 69)
    probe = engine.allow(P, M)
    refused = engine.allow(P, M)  # the slot is taken
    engine.record(refused, FAIL)
    engine.record(probe, Outcome.cancelled())  # gives the slot back
    assert engine.flush()
    engine.reset(P, M)
    for _ in range(3):
        call(engine, OK)

    assert [e.kind for e in emitted(engine)] == [EventKind.OPENED, EventKind.HALF_OPEN]


def test_stale_outcomes_emit_nothing(make_engine, clock):
    engine = make_engine(config=config(failure_threshold=1, minimum_requests=1))
    in_flight = [engine.allow(P, M) for _ in range(3)]
    call(engine, FAIL)

    for decision in in_flight:  # started before the open: they do not move the circuit
        engine.record(decision, FAIL)
    assert engine.flush()

    assert [e.kind for e in emitted(engine)] == [EventKind.OPENED]


def test_engine_uses_the_buffer_it_is_given(make_engine, clock):
    shared = EventBuffer()
    engine = make_engine(events=shared)

    trip(engine, clock)
    assert engine.flush()

    assert engine.events is shared
    assert shared.emitted["opened"] == 1


# ----- Redis: one process per transition, the stream, degraded mode --------------------------------------


def test_two_processes_failing_together_emit_one_opened_event_per_trip(redis_url):
    trials, processes = 30, 2
    namespace = f"test:breaker:{uuid.uuid4().hex}"
    ctx = multiprocessing.get_context("spawn")
    clock_value = ctx.Value("d", T0, lock=False)
    barrier = ctx.Barrier(processes, timeout=60)
    results = ctx.Queue()
    workers = [
        ctx.Process(target=fail_together, args=(redis_url, namespace, clock_value, barrier, results, trials))
        for _ in range(processes)
    ]
    for w in workers:
        w.start()
    try:
        rows = [results.get(timeout=120) for _ in range(trials * processes)]
        for w in workers:
            w.join(timeout=60)
        client = redis.Redis.from_url(redis_url, decode_responses=True)
        events = stream_events(client, history_stream(namespace))
        states = [client.hget(f"{namespace}:{{race/m{trial}}}:s", "state") for trial in range(trials)]
        client.close()
    finally:
        for w in workers:
            if w.is_alive():
                w.kill()
        delete_namespace(redis_url, namespace)

    assert [w.exitcode for w in workers] == [0] * processes
    assert all(shipped and pending == 0 for _, _, shipped, pending in rows)
    opened_per_trial = [sum(n for t, n, _, _ in rows if t == trial) for trial in range(trials)]
    assert opened_per_trial == [1] * trials
    assert states == ["open"] * trials
    assert sorted((e.kind, e.model, e.failures) for e in events) == sorted(
        (EventKind.OPENED, f"m{trial}", EVENTS_CONFIG.default.failure_threshold) for trial in range(trials)
    )
    assert {(e.total, e.local, e.generation) for e in events} == {(5, False, 1)}


def test_events_are_shipped_to_the_history_stream_as_records(redis_url, namespace, engines):
    clock = ManualClock(T0)
    engine = redis_engine(engines, redis_url, namespace, clock)
    trip(engine, clock)

    assert engine.flush()

    client = redis.Redis.from_url(redis_url, decode_responses=True)
    entries = client.xrange(history_stream(namespace))
    info = client.xinfo_stream(history_stream(namespace))
    client.close()
    gen = engine.get(P, M).generation
    [record] = [orjson.loads(fields["e"]) for _, fields in entries]
    assert len(record.pop("event_id")) == 32  # a uuid4, in hex
    assert [record] == [
        {
            "kind": "opened",
            "provider": P,
            "model": M,
            "at": T0 + 9,
            "generation": gen,
            "failures": 5,
            "total": 10,
            "last_status": "503",
            "cooldown_seconds": 60.0,
            "local": False,
        }
    ]
    assert [list(fields) for _, fields in entries] == [["e"]]
    assert (len(engine.events), info["length"]) == (0, 1)


def test_a_probe_grant_is_shipped_without_waiting_for_an_outcome(redis_url, namespace, engines):
    clock = ManualClock(T0)
    engine = redis_engine(engines, redis_url, namespace, clock)
    trip(engine, clock)
    assert engine.flush()
    clock.set(T0 + 69)

    probe = engine.allow(P, M)  # no record() and no flush() follow

    client = redis.Redis.from_url(redis_url, decode_responses=True)
    stream = history_stream(namespace)
    # The worker ships on its own within its ship interval (a background thread, not clock-driven): bounded wait.
    deadline = time.monotonic() + 10
    while client.xlen(stream) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    kinds = [(e.kind, e.generation) for e in stream_events(client, stream)]
    client.close()
    assert kinds == [(EventKind.OPENED, probe.generation - 1), (EventKind.HALF_OPEN, probe.generation)]


def test_a_failed_ship_keeps_the_events_and_ships_them_later(redis_url, namespace, engines):
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    stream = history_stream(namespace)
    client.set(stream, "not a stream")  # every XADD now fails (WRONGTYPE)
    clock = ManualClock(T0)
    engine = redis_engine(engines, redis_url, namespace, clock)
    trip(engine, clock)
    clock.set(T0 + 69)
    engine.allow(P, M)

    assert engine.flush()
    kept = len(engine.events)
    client.delete(stream)
    call_after = engine.flush()

    kinds = [e.kind for e in stream_events(client, stream)]
    client.close()
    assert (kept, engine.degraded, call_after, len(engine.events)) == (2, False, True, 0)
    assert kinds == [EventKind.OPENED, EventKind.HALF_OPEN]


def test_degraded_engine_emits_its_own_transitions_as_local(engines):
    clock = ManualClock(T0)
    engine = redis_engine(engines, closed_port_url(), "test:breaker:down", clock, config=config())

    trip(engine, clock)
    clock.set(T0 + 69)
    probe = engine.allow(P, M)
    engine.record(probe, OK)
    engine.flush()

    assert engine.degraded is True
    assert [(e.kind, e.at, e.local) for e in engine.events.drain()] == [
        (EventKind.OPENED, T0 + 9, True),
        (EventKind.HALF_OPEN, T0 + 69, True),
        (EventKind.CLOSED, T0 + 69, True),
    ]


def test_local_events_are_shipped_once_redis_answers_again(redis_url, namespace, engines):
    clock = ManualClock(T0)
    engine = redis_engine(engines, redis_url, namespace, clock)
    call(engine, OK)
    # The subscriber's first resync (its thread, not clock-driven) must be over: one finishing after the cut
    # would take the engine out of degraded mode. Bounded wait.
    deadline = time.monotonic() + 10
    while engine._measurements < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    real = engine._client, engine._fast
    broken = redis_engine(engines, closed_port_url(), namespace, clock)
    engine._client, engine._fast = broken._client, broken._fast  # cut the network

    trip(engine, clock)  # the outcome batch fails: degraded, replayed locally, opened here alone
    degraded, pending = engine.degraded, len(engine.events)
    engine._client, engine._fast = real
    assert engine.resync()
    assert engine.flush()

    client = redis.Redis.from_url(redis_url, decode_responses=True)
    events = stream_events(client, history_stream(namespace))
    client.close()
    assert (degraded, pending) == (True, 1)
    assert [(e.kind, e.local, e.failures) for e in events] == [(EventKind.OPENED, True, 5)]
