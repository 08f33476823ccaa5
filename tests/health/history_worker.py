"""Entry point of the gateway-like OS processes in the circuit-history tests (imported by spawn; no Django here).

Each process has its own Redis engine on the test's namespace and shared clock, and drives one circuit
through real record() calls at the same moment as the others (a barrier), so several processes see, and race
for, each transition.
"""

from health.breaker import BreakerSettings, ConfigSet, Outcome
from health.breaker.redis_backend import RedisEngine
from tests.health.race_worker import SharedClock

# Defaults but for the minimum: 5 failures among at least 10 requests open the circuit.
HISTORY_CONFIG = ConfigSet(default=BreakerSettings(failure_threshold=5, minimum_requests=10))
PROVIDER, MODEL = "openai", "gpt-4o"


def gateway(url: str, namespace: str, clock_value, barrier, results, calls: int) -> None:
    engine = RedisEngine(url=url, namespace=namespace, clock=SharedClock(clock_value), config=HISTORY_CONFIG)
    try:
        barrier.wait()  # every process is up: fail together
        for _ in range(calls):
            engine.record(engine.allow(PROVIDER, MODEL), Outcome.of_status(503))
        assert engine.flush()
        barrier.wait()  # the test process moved the clock past the cooldown
        engine.refresh(PROVIDER, MODEL)  # deterministic: the mirror now knows the circuit is open
        barrier.wait()  # everyone is ready: race for the probe
        decision = engine.allow(PROVIDER, MODEL)
        barrier.wait()  # every process has its answer: only now may the probe close the circuit
        if decision.allowed:
            engine.record(decision, Outcome.of_status(200))
        assert engine.flush()
        results.put((decision.allowed, decision.probe, len(engine.events), engine.events.dropped))
    finally:
        engine.close()
