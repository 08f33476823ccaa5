"""Entry point of the OS processes in the one-event-per-transition test (imported by spawn; no Django here)."""

from health.breaker import BreakerSettings, ConfigSet, Outcome
from health.breaker.redis_backend import RedisEngine
from tests.health.race_worker import SharedClock

# 5 failures among at least 5 requests open a circuit: each process alone sends enough to trip it.
EVENTS_CONFIG = ConfigSet(default=BreakerSettings(failure_threshold=5, minimum_requests=5))
FAILURES_PER_PROCESS = 20


def fail_together(url: str, namespace: str, clock_value, barrier, results, trials: int) -> None:
    """Per trial: every process records its failures on circuit ("race", "m<trial>") at the same moment."""
    engine = RedisEngine(url=url, namespace=namespace, clock=SharedClock(clock_value), config=EVENTS_CONFIG)
    try:
        for trial in range(trials):
            before = engine.events.emitted["opened"]
            barrier.wait()  # everyone is ready: fail together
            for _ in range(FAILURES_PER_PROCESS):
                engine.record(engine.allow("race", f"m{trial}"), Outcome.of_status(503))
            shipped = engine.flush()
            results.put((trial, engine.events.emitted["opened"] - before, shipped, len(engine.events)))
    finally:
        engine.close()
