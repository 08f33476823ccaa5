"""Redis-only behaviour: mirror and pub/sub, restart, Redis down or hanging."""

import logging
import socket
import threading

import pytest
import redis

from health.breaker import BreakerUnavailable, ManualClock, Outcome, State, factory
from tests.health.conftest import M, P, closed_port_url, config, redis_engine, trip, wait_subscribed

T0 = 1_700_000_000.0
FAIL = Outcome.of_status(503)
OK = Outcome.of_status(200)


class _Listener:
    """A TCP port that accepts connections and never answers: a hanging Redis."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.url = f"redis://127.0.0.1:{self.sock.getsockname()[1]}/0"

    def close(self) -> None:
        self.sock.close()


def test_restart_resumes_the_remaining_cooldown(redis_url, namespace, engines):
    clock = ManualClock(T0)
    first = redis_engine(engines, redis_url, namespace, clock)
    trip(first)
    assert first.flush()
    opened = first.get(P, M)
    first.close()
    clock.advance(30)

    second = redis_engine(engines, redis_url, namespace, clock)
    restarted = second.get(P, M)
    refused = second.allow(P, M)
    clock.set(opened.cooldown_until.timestamp())
    probe = second.allow(P, M)

    assert (restarted.state, restarted.cooldown_until, restarted.consecutive_opens) == (
        State.OPEN,
        opened.cooldown_until,
        1,
    )
    assert (refused.allowed, probe.allowed, probe.probe) == (False, True, True)


def test_other_process_learns_transitions_through_pubsub(redis_url, namespace, engines):
    clock = ManualClock(T0)
    watcher = redis_engine(engines, redis_url, namespace, clock)
    opener = redis_engine(engines, redis_url, namespace, clock)
    assert watcher.allow(P, M).allowed is True
    learned = threading.Event()

    trip(opener)

    assert opener.flush()
    # Pub/sub delivery is asynchronous (not clock-driven): wait for it, bounded.
    for _ in range(500):
        if watcher.allow(P, M).allowed is False:
            learned.set()
            break
        learned.wait(0.01)

    assert learned.is_set()
    assert watcher.allow(P, M).state is State.OPEN


def test_closed_circuit_is_decided_without_a_round_trip(redis_url, namespace, engines):
    clock = ManualClock(T0)
    engine = redis_engine(engines, redis_url, namespace, clock)
    engine.record(engine.allow(P, M), Outcome.of_status(200))
    engine.flush()
    dead = redis_engine(engines, closed_port_url(), namespace, clock)
    real = engine._client, engine._fast
    # Cut the network: any round trip from here on fails and would flip the engine to degraded.
    engine._client, engine._fast = dead._client, dead._fast

    decisions = [engine.allow(P, M) for _ in range(100)]
    degraded = engine.degraded
    engine._client, engine._fast = real

    assert {(d.allowed, d.probe, d.state) for d in decisions} == {(True, False, State.CLOSED)}
    assert degraded is False


def test_open_and_probing_circuits_are_refused_without_a_round_trip(redis_url, namespace, engines):
    """Inside the cooldown, and while the one probe is in flight (half-open, before the probe timeout), this
    process refuses from its mirror: a cut network is never noticed."""
    clock = ManualClock(T0)
    engine = redis_engine(engines, redis_url, namespace, clock, probe_timeout_seconds=10)
    trip(engine)
    assert engine.flush()
    cooldown_until = engine.get(P, M).cooldown_until.timestamp()
    dead = redis_engine(engines, closed_port_url(), namespace, clock)
    real = engine._client, engine._fast

    def refused_offline(at: float) -> tuple[set[tuple[bool, State]], bool]:
        clock.set(at)
        engine._client, engine._fast = dead._client, dead._fast
        try:
            decisions = {(d.allowed, d.state) for d in (engine.allow(P, M) for _ in range(50))}
            return decisions, engine.degraded
        finally:
            engine._client, engine._fast = real

    in_cooldown = refused_offline(cooldown_until - 0.002)
    clock.set(cooldown_until)
    probe = engine.allow(P, M)
    probing = refused_offline(cooldown_until + 9.99)

    assert in_cooldown == ({(False, State.OPEN)}, False)
    assert (probe.allowed, probe.probe) == (True, True)
    assert probing == ({(False, State.HALF_OPEN)}, False)


def test_redis_down_never_raises_and_decides_locally(engines, caplog):
    caplog.set_level(logging.WARNING, logger="health.breaker.redis_backend")
    clock = ManualClock(T0)
    engine = redis_engine(engines, closed_port_url(), "test:breaker:down", clock, config=config())

    for _ in range(10):
        engine.record(engine.allow(P, M), FAIL)
    engine.flush()
    refused = engine.allow(P, M)
    snapshot = engine.get(P, M)
    rows = engine.list_circuits()

    assert engine.degraded is True
    assert (refused.allowed, snapshot.state, snapshot.failure_count, snapshot.total_requests) == (
        False,
        State.OPEN,
        10,
        10,
    )
    assert [(r.provider, r.model, r.state) for r in rows] == [(P, M, State.OPEN)]
    unreachable = [r for r in caplog.records if "unreachable" in r.getMessage()]
    assert len(unreachable) == 1


def test_hanging_redis_never_raises_and_decides_locally(engines):
    listener = _Listener()
    clock = ManualClock(T0)
    try:
        engine = redis_engine(
            engines, listener.url, "test:breaker:hang", clock, config=config(), background_timeout=0.05
        )
        for _ in range(10):
            engine.record(engine.allow(P, M), FAIL)
        engine.flush()
        refused = engine.allow(P, M)
        state = engine.get(P, M).state
    finally:
        listener.close()

    assert (engine.degraded, refused.allowed, state) == (True, False, State.OPEN)


def test_engine_keeps_the_mirror_when_redis_goes_away_and_resyncs_when_it_returns(redis_url, namespace, engines):
    clock = ManualClock(T0)
    engine = redis_engine(engines, redis_url, namespace, clock)
    trip(engine)
    assert engine.flush()
    real_client = engine._client
    real_fast = engine._fast
    broken = redis_engine(engines, closed_port_url(), namespace, clock)
    # Cut the network: the next round trip fails.
    engine._client, engine._fast = broken._client, broken._fast
    clock.advance(60)

    during_outage = engine.allow(P, M)  # cooldown over: needs Redis for the probe; decides locally
    engine.record(during_outage, Outcome.of_status(200))
    engine.flush()
    local_state = engine.get(P, M).state
    engine._client, engine._fast = real_client, real_fast
    back = engine.resync()

    assert (during_outage.allowed, during_outage.probe, local_state) == (True, True, State.CLOSED)
    assert (back, engine.degraded) == (True, False)
    # Redis is the truth again: the circuit there is still open with its cooldown over (half-open).
    assert engine.get(P, M).state is State.HALF_OPEN


def test_reset_while_redis_is_down_is_refused_and_leaves_the_circuit_open(redis_url, namespace, engines):
    clock = ManualClock(T0)
    engine = redis_engine(engines, redis_url, namespace, clock)
    trip(engine)
    assert engine.flush()
    real = engine._client, engine._fast
    broken = redis_engine(engines, closed_port_url(), namespace, clock)
    # Cut the network: the reset's round trip fails, and the engine is degraded from then on.
    engine._client, engine._fast = broken._client, broken._fast

    with pytest.raises(BreakerUnavailable):
        engine.reset(P, M)
    degraded = engine.degraded
    with pytest.raises(BreakerUnavailable):
        engine.reset(P, M)
    refused_locally = engine.allow(P, M)
    engine._client, engine._fast = real
    back = engine.resync()

    assert (degraded, refused_locally.allowed, refused_locally.state) == (True, False, State.OPEN)
    assert (back, engine.degraded, engine.get(P, M).state, engine.allow(P, M).allowed) == (
        True,
        False,
        State.OPEN,
        False,
    )


def test_keys_keep_the_plain_tag_and_encode_slash_and_percent_in_the_provider(redis_url, namespace, engines):
    engine = redis_engine(engines, redis_url, namespace, ManualClock(T0))
    for provider, model in [(P, M), ("a/b%", "c/d")]:
        engine.record(engine.allow(provider, model), FAIL)
    assert engine.flush()

    keys = sorted(redis.Redis.from_url(redis_url, decode_responses=True).scan_iter(match=f"{namespace}:*"))

    assert keys == sorted(
        [
            f"{namespace}:circuits",
            f"{namespace}:{{openai/gpt-4o}}:s",
            f"{namespace}:{{openai/gpt-4o}}:w2",
            f"{namespace}:{{openai/gpt-4o}}:f2",
            f"{namespace}:{{a%2Fb%25/c/d}}:s",
            f"{namespace}:{{a%2Fb%25/c/d}}:w2",
            f"{namespace}:{{a%2Fb%25/c/d}}:f2",
        ]
    )


def test_config_subscriber_logs_an_unreadable_database_once_without_a_traceback(
    redis_url, namespace, engines, caplog, monkeypatch
):
    # No django_db mark: pytest-django refuses every database access, as a database outage would.
    monkeypatch.setattr(factory, "_config_error", None)
    caplog.set_level(logging.DEBUG, logger="health.breaker")
    loads = threading.Semaphore(0)

    def loader(version: int):
        try:
            return factory._load_config_in_subscriber(version)
        finally:
            loads.release()

    channel = f"{namespace}:config"
    engine = redis_engine(
        engines,
        redis_url,
        namespace,
        ManualClock(T0),
        config=config(failure_threshold=3),
        config_channel=channel,
        config_loader=loader,
    )
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    wait_subscribed(client, channel)

    for _ in range(3):
        client.publish(channel, "0")
    loaded = [loads.acquire(timeout=5) for _ in range(3)]

    assert loaded == [True, True, True]
    assert [(r.name, r.levelno, r.exc_info, r.getMessage()) for r in caplog.records] == [
        (
            "health.breaker.factory",
            logging.WARNING,
            None,
            "breaker: could not load the breaker configuration (RuntimeError: Database access not allowed, "
            'use the "django_db" mark, or the "db" or "transactional_db" fixtures to enable it.); '
            "using the previous/default one",
        )
    ]
    assert engine.config == config(failure_threshold=3)


# ---------- outcomes coalesce: Redis work per circuit, not per request ----------

OK = Outcome.of_status(200)


def test_a_batch_of_a_thousand_outcomes_is_one_member_per_window_set(redis_url, namespace, engines):
    engine = redis_engine(engines, redis_url, namespace, ManualClock(T0), config=config(minimum_requests=2_000))
    decision = engine.allow(P, M)
    batch = [(decision, FAIL if i % 100 == 0 else OK, T0) for i in range(1_000)]

    engine._send(batch)
    direct = redis.Redis.from_url(redis_url, decode_responses=True)
    keys = engine._keys(P, M)
    members = (direct.zrange(keys[1], 0, -1), direct.zrange(keys[2], 0, -1))
    circuit = engine.get(P, M)
    direct.close()

    # One call counted them all: "seq:count" in each set, the sums in the circuit's hash.
    assert members == (["1:1000"], ["1:10"])
    assert (circuit.state, circuit.failure_count, circuit.total_requests) == (State.CLOSED, 10, 1_000)


def test_a_batch_opens_the_circuit_at_the_outcome_that_crosses_the_threshold(redis_url, namespace, engines):
    engine = redis_engine(
        engines, redis_url, namespace, ManualClock(T0), config=config(failure_threshold=4, minimum_requests=5)
    )
    decision = engine.allow(P, M)
    # Sent alone, the fifth outcome (a success: five calls, four failures) opens it; the rest are ignored.
    engine._send([(decision, FAIL, T0)] * 4 + [(decision, OK, T0)] * 3 + [(decision, FAIL, T0)] * 50)

    circuit = engine.get(P, M)
    assert (circuit.state, circuit.failure_count, circuit.total_requests) == (State.OPEN, 4, 5)
    assert [e.kind.value for e in engine.events.drain()] == ["opened"]


def test_window_sums_are_rebuilt_from_the_sets_when_missing(redis_url, namespace, engines):
    clock = ManualClock(T0)
    engine = redis_engine(engines, redis_url, namespace, clock, config=config(minimum_requests=100))
    decision = engine.allow(P, M)
    engine._send([(decision, FAIL, T0)] * 3 + [(decision, OK, T0)] * 4)
    direct = redis.Redis.from_url(redis_url, decode_responses=True)
    keys = engine._keys(P, M)
    # An older member without a count stands for one outcome; lost sums are summed from the sets again.
    direct.zadd(keys[1], {"legacy": T0 * 1000})
    direct.hdel(keys[0], "wt", "wf")

    before = engine.get(P, M)
    engine._send([(decision, FAIL, T0 + 1)])
    after = engine.get(P, M)
    clock.advance(61)  # past the 60 s window: everything is stale
    engine._send([(decision, OK, T0 + 61)])
    later = engine.get(P, M)
    direct.close()

    assert (before.failure_count, before.total_requests) == (3, 8)
    assert (after.failure_count, after.total_requests) == (4, 9)
    assert (later.failure_count, later.total_requests) == (0, 1)


def _count_sends(engine) -> tuple[list[list[int | None]], threading.Event]:
    """Wrap the worker's `_send`: each batch's statuses, in order, and an event set after each send."""
    batches: list[list[int | None]] = []
    sent = threading.Event()
    send = engine._send

    def counted(outcomes):
        send(outcomes)
        batches.append([outcome.status for _, outcome, _ in outcomes])
        sent.set()

    engine._send = counted
    return batches, sent


def test_calm_outcomes_wait_until_an_urgent_one_takes_them_along(redis_url, namespace, engines):
    # Successes of ordinary calls move no circuit: their batch waits for calm_interval (an hour here). A 404 is
    # not among the failure codes, so it is a success too, and a cancelled call counts for nothing. A failure
    # must not wait: it cuts the wait short, and the outcomes queued before it go in its batch, first.
    engine = redis_engine(engines, redis_url, namespace, ManualClock(T0), calm_interval=3600)
    batches, sent = _count_sends(engine)
    for outcome in (OK, OK, Outcome.of_status(404), Outcome.cancelled()):
        engine.record(engine.allow(P, M), outcome)
    calm = not engine._urgent.is_set()
    sent_while_calm = list(batches)

    engine.record(engine.allow(P, M), FAIL)
    delivered = sent.wait(10)
    circuit = engine.get(P, M)

    assert calm is True
    assert sent_while_calm == []
    assert delivered is True
    assert batches == [[200, 200, 404, None, 503]]
    assert (circuit.failure_count, circuit.total_requests) == (1, 4)


def test_a_probes_success_does_not_wait_for_calm(redis_url, namespace, engines):
    # A probe's 200 closes its circuit: it is urgent although it is a success.
    clock = ManualClock(T0)
    engine = redis_engine(engines, redis_url, namespace, clock, calm_interval=3600)
    trip(engine)
    assert engine.flush()
    clock.advance(61)  # past the first cooldown (60 s)
    probe = engine.allow(P, M)
    batches, sent = _count_sends(engine)

    engine.record(probe, OK)
    delivered = sent.wait(10)

    assert probe.probe is True
    assert delivered is True
    assert batches == [[200]]
    assert engine.get(P, M).state is State.CLOSED


def test_flush_does_not_wait_out_the_calm_interval(redis_url, namespace, engines):
    engine = redis_engine(engines, redis_url, namespace, ManualClock(T0), calm_interval=3600, gather_interval=3600)
    for _ in range(3):
        engine.record(engine.allow(P, M), OK)

    flushed = engine.flush(timeout=10)
    circuit = engine.get(P, M)

    assert flushed is True
    assert (circuit.failure_count, circuit.total_requests) == (0, 3)


def test_flush_and_close_do_not_wait_out_the_gather_interval(redis_url, namespace, engines):
    # The worker gathers outcomes for gather_interval after the first; a flush must cut that short (with an
    # hour to gather, a flush that waited would time out).
    engine = redis_engine(engines, redis_url, namespace, ManualClock(T0), gather_interval=3600)
    for _ in range(3):
        engine.record(engine.allow(P, M), FAIL)

    flushed = engine.flush(timeout=10)
    circuit = engine.get(P, M)
    engine.record(engine.allow(P, M), FAIL)
    engine.close()

    assert flushed is True
    assert (circuit.failure_count, circuit.total_requests) == (3, 3)
    assert not engine._worker.is_alive()
