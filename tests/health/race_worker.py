"""Entry point of the OS processes in the probe-race test (imported by spawn; no Django here)."""

from health.breaker import BreakerSettings, ConfigSet
from health.breaker.redis_backend import RedisEngine

RACE_CONFIG = ConfigSet(default=BreakerSettings(failure_threshold=1, minimum_requests=1))


class SharedClock:
    """Every process reads the time the test process sets in shared memory."""

    def __init__(self, value) -> None:
        self._value = value

    def now(self) -> float:
        return self._value.value


def race(url: str, namespace: str, clock_value, barrier, results, trials: int, worker: int) -> None:
    engine = RedisEngine(url=url, namespace=namespace, clock=SharedClock(clock_value), config=RACE_CONFIG)
    try:
        for trial in range(trials):
            barrier.wait()  # the test process has opened this trial's circuit and moved the clock
            engine.refresh("race", f"m{trial}")  # deterministic: the mirror now knows the circuit is open
            barrier.wait()  # everyone is ready: race
            decision = engine.allow("race", f"m{trial}")
            results.put((trial, worker, decision.allowed, decision.probe))
    finally:
        engine.close()
