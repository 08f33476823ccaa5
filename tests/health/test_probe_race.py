"""Half-open lets exactly one probe through when callers race: 4 OS processes (Redis), 4 threads (memory)."""

import multiprocessing
import threading
import uuid

from health.breaker import ManualClock, Outcome
from health.breaker.memory import MemoryEngine
from health.breaker.redis_backend import RedisEngine
from tests.health.race_worker import RACE_CONFIG, SharedClock, race
from tests.servers import delete_namespace

TRIALS = 200
RACERS = 4
T0 = 1_700_000_000.0


def _open(engine, model: str) -> None:
    decision = engine.allow("race", model)
    engine.record(decision, Outcome.of_status(500))  # threshold 1: opens, cooldown 60 s
    assert engine.flush()


def test_probe_race_between_processes_grants_one_probe_per_trial(redis_url):
    namespace = f"test:breaker:{uuid.uuid4().hex}"
    ctx = multiprocessing.get_context("spawn")
    clock_value = ctx.Value("d", T0, lock=False)
    barrier = ctx.Barrier(RACERS + 1, timeout=60)
    results = ctx.Queue()
    workers = [
        ctx.Process(target=race, args=(redis_url, namespace, clock_value, barrier, results, TRIALS, i))
        for i in range(RACERS)
    ]
    for w in workers:
        w.start()
    engine = RedisEngine(url=redis_url, namespace=namespace, clock=SharedClock(clock_value), config=RACE_CONFIG)
    outcomes = []
    try:
        for trial in range(TRIALS):
            _open(engine, f"m{trial}")
            clock_value.value += 60  # exactly at the end of the cooldown
            barrier.wait()
            barrier.wait()
            rows = [results.get(timeout=60) for _ in range(RACERS)]
            outcomes.append(
                (
                    {row[0] for row in rows},
                    sum(1 for row in rows if row[2]),
                    sum(1 for row in rows if row[3]),
                )
            )
    finally:
        engine.close()
        for w in workers:
            w.join(timeout=30)
        delete_namespace(redis_url, namespace)

    assert [w.exitcode for w in workers] == [0] * RACERS
    # Each trial: the four answers belong to it, one call allowed, and that call is the probe.
    assert outcomes == [({trial}, 1, 1) for trial in range(TRIALS)]


def test_probe_race_between_threads_grants_one_probe_per_trial():
    clock = ManualClock(T0)
    engine = MemoryEngine(clock=clock, config=RACE_CONFIG)
    barrier = threading.Barrier(RACERS + 1, timeout=60)
    lock = threading.Lock()
    answers: list[tuple[int, bool, bool]] = []

    def racer() -> None:
        for trial in range(TRIALS):
            barrier.wait()
            d = engine.allow("race", f"m{trial}")
            with lock:
                answers.append((trial, d.allowed, d.probe))
            barrier.wait()

    threads = [threading.Thread(target=racer) for _ in range(RACERS)]
    for t in threads:
        t.start()
    for trial in range(TRIALS):
        _open(engine, f"m{trial}")
        clock.advance(60)
        barrier.wait()  # race
        barrier.wait()  # all answered
    for t in threads:
        t.join()

    per_trial = [
        (sum(1 for a in answers if a[0] == trial and a[1]), sum(1 for a in answers if a[0] == trial and a[2]))
        for trial in range(TRIALS)
    ]
    assert len(answers) == TRIALS * RACERS
    assert per_trial == [(1, 1)] * TRIALS
