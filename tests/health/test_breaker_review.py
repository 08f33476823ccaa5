"""The Redis breaker across a Redis outage: a probe's outcome that could not reach Redis, a probe the local view
granted while Redis was away, and calls that read the degraded flag just before Redis came back (real Redis, through
a real TCP proxy that goes down and comes back)."""

import redis

from health.breaker import ManualClock, Outcome, State
from health.breaker.redis_backend import RedisEngine
from health.breaker.types import WINDOW_MAX
from tests.faults import FaultProxy
from tests.health.conftest import M, P, config, redis_engine, trip

T0 = 1_700_000_000.0
OK = Outcome.of_status(200)


def _only_the_test_resyncs(engine: RedisEngine, redis_url: str) -> None:
    """Stop the engine's subscriber thread (its own stop flag, as close() does), so that the engine leaves degraded
    mode when the test calls resync() and at no other moment."""
    engine._stop.set()
    client = redis.Redis.from_url(redis_url)
    client.publish(engine._channel, "")  # the wake-up close() sends: the subscriber sees the flag at once
    client.close()
    engine._subscriber.join(10)
    assert not engine._subscriber.is_alive()


def _probing(proxy: FaultProxy, redis_url: str, namespace: str, engines: list[RedisEngine], clock: ManualClock):
    """A gateway process reaching Redis through `proxy`, another process reaching it directly, and one circuit
    open (by the gateway, at T0, cooldown 60 s) whose cooldown is over now."""
    gateway = redis_engine(engines, proxy.url, namespace, clock)
    other = redis_engine(engines, redis_url, namespace, clock)
    _only_the_test_resyncs(gateway, redis_url)
    trip(gateway)
    assert gateway.flush()
    other.refresh(P, M)  # its mirror may not have seen the pub/sub message of the trip yet
    clock.advance(60)
    return gateway, other


def test_probe_outcome_whose_batch_failed_reaches_redis_when_it_returns(redis_proxy, redis_url, namespace, engines):
    """Redis granted this process the probe; the probe succeeded, but the batch carrying its outcome failed (Redis
    went away). Once Redis answers again the circuit must close: the outcome must not be lost, leaving the slot held
    in Redis (every process refused) until the probe timeout, 330 s."""
    clock = ManualClock(T0)
    gateway, other = _probing(redis_proxy, redis_url, namespace, engines, clock)
    probe = gateway.allow(P, M)

    redis_proxy.down()
    gateway.record(probe, OK)
    assert gateway.flush()  # the batch fails: the engine is degraded and applies it locally
    degraded = gateway.degraded
    redis_proxy.restore()
    back = gateway.resync()
    assert gateway.flush()
    circuit = other.get(P, M)

    assert (probe.allowed, probe.probe, degraded, back) == (True, True, True, True)
    assert (circuit.state, circuit.probe_in_flight) == (State.CLOSED, False)


def test_probe_cancelled_while_redis_was_away_gives_its_slot_back_when_it_returns(
    redis_proxy, redis_url, namespace, engines
):
    """The probe's client went away while the engine was degraded: its slot in Redis must be given back once Redis
    answers again, so that the next caller anywhere probes (not only after the probe timeout)."""
    clock = ManualClock(T0)
    gateway, other = _probing(redis_proxy, redis_url, namespace, engines, clock)
    probe = gateway.allow(P, M)

    redis_proxy.down()
    gateway.get(P, M)  # Redis unreachable: degraded from here on
    degraded = gateway.degraded
    gateway.record(probe, Outcome.cancelled())
    assert gateway.flush()
    redis_proxy.restore()
    back = gateway.resync()
    assert gateway.flush()
    circuit = other.get(P, M)
    other.refresh(P, M)
    next_probe = other.allow(P, M)

    assert (probe.probe, degraded, back) == (True, True, True)
    assert (circuit.state, circuit.probe_in_flight) == (State.HALF_OPEN, False)
    assert (next_probe.allowed, next_probe.probe) == (True, True)


def test_probe_granted_locally_while_redis_was_away_leaves_another_process_probe_alone(
    redis_proxy, redis_url, namespace, engines
):
    """While degraded, this process's local view grants its own probe, numbered from the mirror's generation; Redis
    meanwhile grants the circuit's one probe to another process under the same number. The local probe's outcome,
    recorded after Redis answers again, must not move the circuit in Redis: a cancellation there would free the
    other process's slot, and the next caller would be a second probe in flight."""
    clock = ManualClock(T0)
    gateway, other = _probing(redis_proxy, redis_url, namespace, engines, clock)

    redis_proxy.down()
    local_probe = gateway.allow(P, M)  # Redis unreachable: decided by this process alone
    degraded = gateway.degraded
    redis_probe = other.allow(P, M)  # the circuit's one probe, granted by Redis
    redis_proxy.restore()
    back = gateway.resync()
    gateway.record(local_probe, Outcome.cancelled())
    assert gateway.flush()
    circuit = other.get(P, M)
    other.refresh(P, M)
    second = other.allow(P, M)

    assert (local_probe.allowed, local_probe.probe, degraded, back) == (True, True, True, True)
    assert (redis_probe.allowed, redis_probe.probe) == (True, True)
    assert local_probe.generation == redis_probe.generation  # the two numberings met
    assert (circuit.state, circuit.probe_in_flight) == (State.HALF_OPEN, True)
    assert (second.allowed, second.probe) == (False, False)


class _RedisReturnsRightAfterTheRead(RedisEngine):
    """The engine, with one interleaving forced: once armed, the next caller that reads the degraded flag as true sees
    Redis come back (`resync()`, which the subscriber thread runs in production) before it goes on."""

    @property
    def _degraded(self) -> bool:
        degraded = self.__dict__["_degraded"]
        if degraded and self.__dict__.pop("_race_armed", False):
            assert self.resync()
        return degraded

    @_degraded.setter
    def _degraded(self, value: bool) -> None:
        self.__dict__["_degraded"] = value


def _racing(proxy: FaultProxy, redis_url: str, namespace: str, engines: list[RedisEngine], *, trip_it: bool):
    """A gateway process reaching Redis through `proxy` (`_RedisReturnsRightAfterTheRead`), with the circuit opened
    by it or not; and another process, for Redis's view."""
    clock = ManualClock(T0)
    gateway = redis_engine(engines, proxy.url, namespace, clock)
    other = redis_engine(engines, redis_url, namespace, clock)
    _only_the_test_resyncs(gateway, redis_url)
    if trip_it:
        trip(gateway)
        assert gateway.flush()
    gateway.__class__ = _RedisReturnsRightAfterTheRead
    return gateway, other


def _outage_over_and_race_armed(proxy: FaultProxy, gateway: RedisEngine) -> None:
    """Redis goes away (the engine degrades) and comes back; the engine's next read of the flag races the resync."""
    proxy.down()
    gateway.get(P, M)  # Redis unreachable: degraded from here on
    assert gateway.degraded
    proxy.restore()
    gateway.__dict__["_race_armed"] = True


def test_call_deciding_as_redis_returns_is_refused_by_an_open_circuit(redis_proxy, redis_url, namespace, engines):
    """allow() read the flag while Redis was away; Redis came back before it asked the local engine, which the resync
    had just dropped. The open circuit must still refuse the call (a fresh engine, closed, let it through)."""
    gateway, _ = _racing(redis_proxy, redis_url, namespace, engines, trip_it=True)
    _outage_over_and_race_armed(redis_proxy, gateway)

    decision = gateway.allow(P, M)

    assert (decision.allowed, decision.state, gateway.degraded) == (False, State.OPEN, False)


def test_outcome_recorded_as_redis_returns_reaches_redis(redis_proxy, redis_url, namespace, engines):
    """A call allowed while Redis was away ends as Redis comes back: record() read the flag before the return, and
    the local engine was gone when it went on. The outcome goes to Redis, as one recorded a moment later would (it
    went to a throwaway engine)."""
    gateway, other = _racing(redis_proxy, redis_url, namespace, engines, trip_it=False)
    redis_proxy.down()
    gateway.get(P, M)  # Redis unreachable: degraded from here on
    decision = gateway.allow(P, M)  # decided locally
    degraded = gateway.degraded
    redis_proxy.restore()
    gateway.__dict__["_race_armed"] = True

    gateway.record(decision, Outcome.of_status(503))
    assert gateway.flush()
    circuit = other.get(P, M)

    assert (decision.allowed, degraded, gateway.degraded) == (True, True, False)
    assert (circuit.total_requests, circuit.failure_count) == (1, 1)


def test_console_reading_as_redis_returns_sees_the_open_circuit(redis_proxy, redis_url, namespace, engines):
    """get() and list_circuits() read the flag while Redis was away, and Redis came back before they asked the local
    engine: they answer from Redis, the circuit open (a throwaway engine answered closed, and listed nothing)."""
    gateway, _ = _racing(redis_proxy, redis_url, namespace, engines, trip_it=True)
    _outage_over_and_race_armed(redis_proxy, gateway)
    one = gateway.get(P, M)
    _outage_over_and_race_armed(redis_proxy, gateway)
    listed = gateway.list_circuits()

    assert one.state is State.OPEN
    assert [(c.provider, c.model, c.state) for c in listed] == [(P, M, State.OPEN)]


# --- The window's events, on both engines (round twenty-nine's review) --------------------------------------

FAIL = Outcome.of_status(503)


def _call(engine, outcome: Outcome) -> None:
    decision = engine.allow(P, M)
    assert decision.allowed
    engine.record(decision, outcome)
    assert engine.flush()


def test_window_after_the_clock_steps_back_still_drops_only_events_older_than_the_window(make_engine, clock):
    """The embedded engine runs on the wall clock (epoch seconds, not monotonic), so an NTP step can hand record() a
    time earlier than the last event's. The window is still "events with t <= now - window drop out", as Redis's
    sorted sets keep it: a failure older than the window must not trip the circuit, and a read counts every event
    inside it. The memory engine appended out of order, and its trim and reads stopped at the first event inside."""
    engine = make_engine(config=config(failure_threshold=2, minimum_requests=1, window_seconds=60))
    clock.set(T0 + 100)
    _call(engine, OK)
    clock.set(T0 + 99)  # the wall clock steps back one second
    _call(engine, FAIL)
    clock.set(T0 + 158)
    read_inside = engine.get(P, M)  # the success at +100 and the failure at +99 are both within 60 s
    clock.set(T0 + 159.5)  # the failure at +99 is now older than the window; the success at +100 is not
    read_after = engine.get(P, M)
    _call(engine, FAIL)

    s = engine.get(P, M)
    assert (
        (read_inside.failure_count, read_inside.total_requests),
        (read_after.failure_count, read_after.total_requests),
        (s.state, s.failure_count, s.total_requests),
    ) == ((1, 2), (0, 1), (State.CLOSED, 1, 2))


def test_redis_keeps_the_window_sets_as_long_as_the_longest_window(redis_url, namespace, engines, clock):
    """Reads never drop window events, so both engines agree when a window is widened again (docs/breaker.md). Redis
    expired a circuit's window sets after the window then in force: one failure under a 1 s window, the window
    widened to 60 s after a quiet second, and Redis counted nothing where the memory engine counted the failure.
    The sets now live as long as the longest window the settings allow after their last outcome (Redis's own
    expiry runs on real time, which no test clock moves: its TTL is what is read here)."""
    engine = redis_engine(engines, redis_url, namespace, clock, config=config(window_seconds=1))
    _call(engine, FAIL)
    client = redis.Redis.from_url(redis_url)
    counted, failures = engine._keys(P, M)[1:3]

    ttls = (client.pttl(counted), client.pttl(failures))
    client.close()

    assert min(ttls) > (WINDOW_MAX - 60) * 1000, ttls
