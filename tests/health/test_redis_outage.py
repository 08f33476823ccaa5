"""Redis back after an outage with none of the breaker's keys (a restart without persistence, a flush): open
circuits whose cooldown is still running stay open on every gateway; the rest start again from nothing."""

import redis

from health.breaker import ManualClock, Outcome, State
from tests.health.conftest import T0, M, P, redis_engine, trip
from tests.servers import delete_namespace, until


def test_an_open_circuit_stays_open_when_redis_comes_back_empty(redis_proxy, redis_url, namespace, engines):
    clock = ManualClock(T0)
    gateway = redis_engine(engines, redis_proxy.url, namespace, clock, reconnect_interval=0.1)
    trip(gateway)
    assert gateway.flush()
    trip(gateway, model="gpt-4o-mini")
    assert gateway.flush()
    assert gateway.allow(P, M).allowed is False

    redis_proxy.down()
    gateway.get(P, M)  # any Redis call: degraded from here on
    assert gateway.degraded
    delete_namespace(redis_url, namespace)  # Redis restarted empty
    redis_proxy.restore()
    until(lambda: not gateway.degraded, 10, "the engine back on Redis")
    clock.advance(1)  # 59 s of the 60 s cooldown left

    decisions = [gateway.allow(P, M) for _ in range(5)]
    for decision in decisions:
        gateway.record(decision, Outcome.of_status(503))
    assert gateway.flush()
    newcomer = redis_engine(engines, redis_url, namespace, clock)  # a gateway started after the restart

    assert [d.allowed for d in decisions] == [False] * 5
    assert newcomer.get(P, M).state is State.OPEN
    assert newcomer.allow(P, "gpt-4o-mini").allowed is False
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    assert client.smembers(f"{namespace}:circuits") == {f'["{P}", "{M}"]', f'["{P}", "gpt-4o-mini"]'}
    client.close()


def test_a_circuit_whose_cooldown_ended_during_the_outage_is_not_put_back(redis_proxy, redis_url, namespace, engines):
    clock = ManualClock(T0)
    gateway = redis_engine(engines, redis_proxy.url, namespace, clock, reconnect_interval=0.1)
    trip(gateway)
    assert gateway.flush()

    redis_proxy.down()
    gateway.get(P, M)
    assert gateway.degraded
    delete_namespace(redis_url, namespace)
    clock.advance(61)  # the cooldown is over: the next call would have been a probe anyway
    redis_proxy.restore()
    until(lambda: not gateway.degraded, 10, "the engine back on Redis")

    assert gateway.allow(P, M).allowed is True
    assert gateway.get(P, M).state is State.CLOSED
