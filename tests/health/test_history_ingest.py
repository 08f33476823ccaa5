"""Circuit history reaches the database once per transition: from this process's engine (embedded mode) and
from the gateways' Redis stream (production), through database outages and with several gateway processes."""

import json
import multiprocessing
import uuid
from datetime import UTC, datetime

import pytest
import redis

from health.breaker import ManualClock, MemoryEngine, Outcome, use_engine
from health.breaker.events import HISTORY_FIELD, history_stream
from health.breaker.redis_backend import RedisEngine
from health.breaker.types import BreakerEvent, EventKind
from health.events import (
    GROUP,
    circuit_events_flush_local,
    circuit_events_ingest,
    circuit_events_store,
    event_decode,
)
from health.models import CircuitEvent
from health.tasks import events_ingest_task
from tests.health.conftest import T0, trip
from tests.health.history_worker import HISTORY_CONFIG, MODEL, PROVIDER, gateway
from tests.health.race_worker import SharedClock
from tests.requestlogs.test_ingest import database_down
from tests.servers import delete_namespace

pytestmark = pytest.mark.django_db(transaction=True)

FIELDS = (
    "kind",
    "provider",
    "model",
    "generation",
    "failures",
    "total",
    "last_status",
    "cooldown_seconds",
    "local",
    "actor",
)


def opened(generation: int, *, model: str = "gpt-4o", local: bool = False, at: float = T0) -> BreakerEvent:
    return BreakerEvent(
        kind=EventKind.OPENED,
        provider="openai",
        model=model,
        at=at,
        generation=generation,
        failures=5,
        total=10,
        last_status="503",
        cooldown_seconds=60.0,
        local=local,
    )


def rows() -> list[tuple]:
    return list(CircuitEvent.objects.order_by("at", "id").values_list(*FIELDS))


@pytest.fixture
def stream(redis_url):
    """A history stream of this test's own (in its own breaker namespace); deleted with its side keys."""
    namespace = f"test:breaker:{uuid.uuid4().hex}"
    yield history_stream(namespace)
    delete_namespace(redis_url, namespace)


def add_entries(url: str, stream: str, *events: BreakerEvent) -> None:
    client = redis.Redis.from_url(url)
    for event in events:
        client.xadd(stream, {HISTORY_FIELD: json.dumps(event.as_record())})
    client.close()


def test_store_writes_every_field_and_skips_a_repeated_transition():
    first = [opened(1), opened(1, model="gpt-4o-mini"), opened(1, local=True)]

    stored = circuit_events_store(first)
    again = circuit_events_store([opened(1), opened(1, local=True), opened(2), opened(2)])

    assert (stored, again) == (3, 2)
    assert rows() == [
        ("opened", "openai", "gpt-4o", 1, 5, 10, "503", 60.0, False, ""),
        ("opened", "openai", "gpt-4o-mini", 1, 5, 10, "503", 60.0, False, ""),
        ("opened", "openai", "gpt-4o", 1, 5, 10, "503", 60.0, True, ""),
        # A local transition is not deduplicated: only its own process saw it, so a second one is another event.
        ("opened", "openai", "gpt-4o", 1, 5, 10, "503", 60.0, True, ""),
        ("opened", "openai", "gpt-4o", 2, 5, 10, "503", 60.0, False, ""),
    ]
    assert CircuitEvent.objects.filter(generation=1, local=False, model="gpt-4o").get().at == datetime.fromtimestamp(
        T0, tz=UTC
    )


def test_store_keeps_a_transition_whose_generation_was_reused():
    # A new embedded process (or a Redis that lost its keys) numbers the circuit's generations from 1 again.
    circuit_events_store([opened(1)])
    restarted = BreakerEvent(kind=EventKind.HALF_OPEN, provider="openai", model="gpt-4o", at=T0 + 3600, generation=1)

    stored = circuit_events_store([restarted, opened(1, at=T0 + 7200), opened(1, at=T0 + 7200)])

    assert stored == 2
    assert [(r[0], r[3]) for r in rows()] == [("opened", 1), ("half_open", None), ("opened", None)]


def test_store_skips_an_event_whose_id_is_stored_local_ones_included():
    local = opened(1, local=True)
    cleared = BreakerEvent(kind=EventKind.HALF_OPEN, provider="openai", model="gpt-4o", at=T0 + 60, generation=1)
    circuit_events_store([opened(1)])

    # The same event twice in a batch, then in a later batch (a re-sent XADD, a requeue, a redelivery).
    stored = circuit_events_store([local, local, cleared])
    again = circuit_events_store([local, cleared])

    assert (stored, again) == (2, 0)
    # `cleared` reuses generation 1 with another kind: stored once, without its generation.
    assert [(r[0], r[3], r[8]) for r in rows()] == [
        ("opened", 1, False),
        ("opened", 1, True),
        ("half_open", None, False),
    ]
    assert set(CircuitEvent.objects.filter(local=True).values_list("event_id", flat=True)) == {local.event_id}
    assert CircuitEvent.objects.get(kind="half_open").event_id == cleared.event_id


def test_store_without_ids_keeps_the_generation_dedup():
    # Records shipped before events had ids decode with event_id "": stored with a null id.
    old = event_decode({k: v for k, v in opened(1).as_record().items() if k != "event_id"})
    assert old is not None and old.event_id == ""

    stored = circuit_events_store([old, old])
    again = circuit_events_store([old])

    assert (stored, again) == (1, 0)
    assert list(CircuitEvent.objects.values_list("generation", "event_id")) == [(1, None)]


def test_decode_refuses_an_event_id_the_table_cannot_hold():
    record = opened(1).as_record()

    assert event_decode(record).event_id == record["event_id"]
    assert event_decode({**record, "event_id": None}).event_id == ""
    assert event_decode({**record, "event_id": 7}) is None
    assert event_decode({**record, "event_id": "x" * 33}) is None


def test_flush_local_moves_a_memory_engines_transitions_into_rows():
    clock = ManualClock(T0)
    engine = MemoryEngine(clock=clock)
    trip(engine)
    clock.advance(60)
    probe = engine.allow("openai", "gpt-4o")
    engine.record(probe, Outcome.of_status(200))

    stored = circuit_events_flush_local(engine)

    assert stored == 3
    assert rows() == [
        ("opened", "openai", "gpt-4o", 1, 10, 10, "503", 60.0, False, ""),
        ("half_open", "openai", "gpt-4o", 2, None, None, "", None, False, ""),
        ("closed", "openai", "gpt-4o", 3, None, None, "", None, False, ""),
    ]
    assert len(engine.events) == 0
    assert circuit_events_flush_local(engine) == 0


def test_flush_local_keeps_the_events_through_a_database_outage():
    engine = MemoryEngine(clock=ManualClock(T0))
    trip(engine)

    with database_down(), pytest.raises(Exception):  # noqa: B017 - any database error
        circuit_events_flush_local(engine)
    kept = len(engine.events)
    stored = circuit_events_flush_local(engine)

    assert (kept, stored) == (1, 1)
    assert [r[0] for r in rows()] == ["opened"]


def test_the_embedded_periodic_job_flushes_the_engine_in_use(settings):
    settings.EMBEDDED = True
    engine = MemoryEngine(clock=ManualClock(T0))
    trip(engine)

    with use_engine(engine):
        stored = events_ingest_task()

    assert stored == 1
    assert [(r[0], r[3]) for r in rows()] == [("opened", 1)]


def test_the_embedded_scheduler_runs_the_history_and_expiry_jobs(settings):
    from controlplane.periodic import JOBS, EmbeddedScheduler

    settings.EMBEDDED = True
    ours = tuple(job for job in JOBS if job.task.startswith("health."))
    engine = MemoryEngine(clock=ManualClock(T0))
    trip(engine)

    with use_engine(engine):
        EmbeddedScheduler(ours).run_due(0.0, due := {})

    assert sorted((job.name, job.every, job.embedded) for job in ours) == [
        ("health-controls-expire", 10.0, True),
        ("health-events-ingest", 1.0, True),
        ("health-events-retention", 86400.0, True),
    ]
    assert due == {"health-controls-expire": 10.0, "health-events-ingest": 1.0, "health-events-retention": 86400.0}
    assert [r[0] for r in rows()] == ["opened"]


def test_the_production_periodic_job_reads_the_namespaces_stream(settings, redis_url):
    namespace = f"test:breaker:{uuid.uuid4().hex}"
    settings.EMBEDDED, settings.REDIS_URL, settings.BREAKER_REDIS_NAMESPACE = False, redis_url, namespace
    add_entries(redis_url, history_stream(namespace), opened(7))
    try:
        stored = events_ingest_task()
    finally:
        delete_namespace(redis_url, namespace)

    assert stored == 1
    assert [(r[0], r[3]) for r in rows()] == [("opened", 7)]


def test_ingest_stores_and_acknowledges_the_stream(redis_url, stream):
    add_entries(redis_url, stream, opened(1), opened(2), opened(1))  # the third: the same transition again

    stored = circuit_events_ingest(redis_url=redis_url, stream=stream)
    again = circuit_events_ingest(redis_url=redis_url, stream=stream)

    client = redis.Redis.from_url(redis_url)
    assert (stored, again) == (2, 0)
    assert [r[3] for r in rows()] == [1, 2]
    assert (client.xlen(stream), client.xpending(stream, GROUP)["pending"]) == (0, 0)


def test_ingest_stores_a_local_event_sent_twice_once(redis_url, stream):
    local = opened(1, local=True)
    add_entries(redis_url, stream, local, local)  # a requeue after a partial pipeline failure re-sends it

    stored = circuit_events_ingest(redis_url=redis_url, stream=stream)

    assert stored == 1
    assert [(r[3], r[8]) for r in rows()] == [(1, True)]


def test_ingest_stores_a_local_event_redelivered_after_a_crash_once(redis_url, stream):
    local = opened(1, local=True)
    add_entries(redis_url, stream, local)
    client = redis.Redis.from_url(redis_url)
    client.xgroup_create(stream, GROUP, id="0")
    [[_, [(_, fields)]]] = client.xreadgroup(GROUP, "dead-worker", {stream: ">"})
    # That worker committed the row, then died before its XACK.
    circuit_events_store([event_decode(json.loads(fields[HISTORY_FIELD.encode()]))])

    stored = circuit_events_ingest(redis_url=redis_url, stream=stream, claim_idle_ms=0)

    assert stored == 0
    assert [(r[3], r[8]) for r in rows()] == [(1, True)]
    assert (client.xlen(stream), client.xpending(stream, GROUP)["pending"]) == (0, 0)


def test_ingest_survives_a_database_outage_without_losing_events(redis_url, stream):
    add_entries(redis_url, stream, opened(1), opened(2), opened(3))
    client = redis.Redis.from_url(redis_url)

    with database_down(), pytest.raises(Exception):  # noqa: B017 - any database error
        circuit_events_ingest(redis_url=redis_url, stream=stream)
    pending = client.xpending(stream, GROUP)["pending"]
    # The next run retries its own pending entries at once, not after the delay meant for dead consumers.
    stored = circuit_events_ingest(redis_url=redis_url, stream=stream, claim_idle_ms=3_600_000)

    assert (pending, stored) == (3, 3)
    assert [r[3] for r in rows()] == [1, 2, 3]
    assert client.xlen(stream) == 0


def test_ingest_takes_over_what_a_dead_consumer_left(redis_url, stream):
    add_entries(redis_url, stream, opened(1), opened(2))
    client = redis.Redis.from_url(redis_url)
    client.xgroup_create(stream, GROUP, id="0")
    client.xreadgroup(GROUP, "dead-worker", {stream: ">"})  # delivered to a worker that then died

    stored = circuit_events_ingest(redis_url=redis_url, stream=stream, claim_idle_ms=0)

    assert stored == 2
    assert client.xpending(stream, GROUP)["pending"] == 0


def test_ingest_moves_undecodable_entries_to_dead_letters(redis_url, stream):
    client = redis.Redis.from_url(redis_url)
    client.xadd(stream, {HISTORY_FIELD: b"not json"})
    add_entries(redis_url, stream, opened(1))
    bad_kind = {**opened(2).as_record(), "kind": "exploded"}
    client.xadd(stream, {HISTORY_FIELD: json.dumps(bad_kind)})
    negative = {**opened(3).as_record(), "failures": -1}
    client.xadd(stream, {HISTORY_FIELD: json.dumps(negative)})
    client.xadd(stream, {"other": b"field"})

    stored = circuit_events_ingest(redis_url=redis_url, stream=stream)

    dead = client.xrange(f"{stream}:dead")
    assert stored == 1
    assert [r[3] for r in rows()] == [1]
    assert [fields.get(b"error") for _, fields in dead] == [b"undecodable entry"] * 4
    assert (client.xlen(stream), client.xpending(stream, GROUP)["pending"]) == (0, 0)


def test_an_entry_no_database_can_store_or_too_deep_to_read_is_dead_lettered_and_the_stream_goes_on(redis_url, stream):
    # A lone surrogate is valid JSON but no UTF-8; 100,000 nested lists make the JSON reader recurse too deep.
    # Either used to fail the whole batch on every run, holding every later event back.
    client = redis.Redis.from_url(redis_url)
    client.xadd(stream, {HISTORY_FIELD: json.dumps({**opened(1).as_record(), "provider": "open\ud800ai"})})
    client.xadd(stream, {HISTORY_FIELD: b"[" * 100_000 + b"]" * 100_000})
    add_entries(redis_url, stream, opened(2))

    stored = circuit_events_ingest(redis_url=redis_url, stream=stream)

    dead = client.xrange(f"{stream}:dead")
    assert stored == 1
    assert [r[3] for r in rows()] == [2]
    assert [fields.get(b"error") for _, fields in dead] == [b"undecodable entry"] * 2
    assert (client.xlen(stream), client.xpending(stream, GROUP)["pending"]) == (0, 0)


def test_ingest_leaves_operator_kinds_to_the_services(redis_url, stream):
    reset = BreakerEvent(kind=EventKind.RESET, provider="openai", model="gpt-4o", at=T0, generation=4)

    add_entries(redis_url, stream, reset, opened(5))
    stored = circuit_events_ingest(redis_url=redis_url, stream=stream)

    assert stored == 1
    assert [(r[0], r[3]) for r in rows()] == [("opened", 5)]


def test_a_redis_engines_transition_travels_through_the_stream(redis_url, engines):
    namespace = f"test:breaker:{uuid.uuid4().hex}"
    engine = RedisEngine(url=redis_url, namespace=namespace, clock=ManualClock(T0))
    engines.append(engine)
    try:
        trip(engine)
        assert engine.flush()

        stored = circuit_events_ingest(redis_url=redis_url, stream=history_stream(namespace))
        generation = engine.get("openai", "gpt-4o").generation
    finally:
        delete_namespace(redis_url, namespace)

    assert stored == 1
    assert rows() == [("opened", "openai", "gpt-4o", generation, 10, 10, "503", 60.0, False, "")]


GATEWAYS = 3
CALLS = 8  # 24 failures in all, at the same moment: the circuit opens once, at the 10th counted outcome


def test_one_transition_is_one_event_with_several_gateway_processes(redis_url):
    namespace = f"test:breaker:{uuid.uuid4().hex}"
    ctx = multiprocessing.get_context("spawn")
    clock_value = ctx.Value("d", T0, lock=False)
    barrier = ctx.Barrier(GATEWAYS + 1, timeout=60)
    results = ctx.Queue()
    workers = [
        ctx.Process(target=gateway, args=(redis_url, namespace, clock_value, barrier, results, CALLS))
        for _ in range(GATEWAYS)
    ]
    for w in workers:
        w.start()
    try:
        barrier.wait()  # fail together
        barrier.wait()  # every process has recorded its failures
        clock_value.value += 60  # the cooldown is over
        barrier.wait()  # every mirror knows the circuit is open: race for the probe
        barrier.wait()  # every process has its answer
        answers = [results.get(timeout=60) for _ in range(GATEWAYS)]
        for w in workers:
            w.join(timeout=30)
        stored = circuit_events_ingest(redis_url=redis_url, stream=history_stream(namespace))
        probe = RedisEngine(url=redis_url, namespace=namespace, clock=SharedClock(clock_value), config=HISTORY_CONFIG)
        generation = probe.get(PROVIDER, MODEL).generation
        probe.close()
    finally:
        for w in workers:
            if w.is_alive():
                w.kill()
        delete_namespace(redis_url, namespace)

    assert [w.exitcode for w in workers] == [0] * GATEWAYS
    # One process took the probe; every process shipped all its events and dropped none.
    assert sorted((allowed, probe) for allowed, probe, _, _ in answers) == [(False, False)] * 2 + [(True, True)]
    assert [(left, dropped) for _, _, left, dropped in answers] == [(0, 0)] * GATEWAYS
    assert stored == 3
    assert [(r[0], r[3], r[4], r[5]) for r in rows()] == [
        ("opened", generation - 2, 10, 10),
        ("half_open", generation - 1, None, None),
        ("closed", generation, None, None),
    ]
