"""Request logs reach the database exactly once, through a database outage, in both modes."""

import contextlib
import time
import uuid

import pytest
import redis
from django.db import connections, transaction

from gateway.logsink import LogSink
from requestlogs.ingest import request_logs_ingest
from requestlogs.models import RequestLog
from requestlogs.services import request_logs_insert
from tests.helpers.locks import waits_on_a_lock

pytestmark = pytest.mark.django_db(transaction=True)


def record(n: int) -> dict:
    return {
        "request_id": uuid.uuid4().hex,
        "created_at": time.time(),
        "requested_model": f"m{n}",
        "routed_model": f"m{n}",
        "served_provider": "p",
        "served_model": f"m{n}",
        "status": 200,
        "latency_ms": 1.5,
        "ttfb_ms": 1.0,
        "tokens_in": 3,
        "tokens_out": 4,
        "cost_usd": 0.000012,
        "attempts": [{"provider": "p", "model": f"m{n}", "status": 200, "error": None, "duration_ms": 1.0}],
    }


@contextlib.contextmanager
def database_down():
    """Point every new connection at nothing, close the open ones; restore afterwards."""
    config = connections.settings["default"]
    saved = dict(config)
    if config["ENGINE"].endswith("sqlite3"):
        config["NAME"] = "/nonexistent-dir/nowhere.sqlite3"
    else:
        config["PORT"] = "1"
    connections["default"].close()
    try:
        yield
    finally:
        config.clear()
        config.update(saved)
        connections["default"].close()


def test_insert_is_idempotent_on_request_id():
    records = [record(i) for i in range(3)]

    request_logs_insert(records=records)
    request_logs_insert(records=records)

    assert RequestLog.objects.count() == 3
    row = RequestLog.objects.get(request_id=records[0]["request_id"])
    assert (row.tokens_in, row.attempts[0]["status"], float(row.cost_usd)) == (3, 200, 0.000012)


def test_redis_stream_is_copied_and_acknowledged(redis_url, stream):
    sink = LogSink(redis_url=redis_url, stream_key=stream, flush_seconds=0.05)
    sink.start()
    for i in range(5):
        sink.add(record(i))
    assert sink.flush(timeout=10)
    sink.stop()

    first = request_logs_ingest(redis_url=redis_url, stream=stream)
    second = request_logs_ingest(redis_url=redis_url, stream=stream)

    assert (first.read, first.inserted, second.read) == (5, 5, 0)
    assert RequestLog.objects.count() == 5
    assert redis.Redis.from_url(redis_url).xlen(stream) == 0


def test_database_outage_during_ingest_loses_nothing(redis_url, stream):
    client = redis.Redis.from_url(redis_url)
    records = [record(i) for i in range(4)]
    import orjson

    for r in records:
        client.xadd(stream, {"r": orjson.dumps(r)})

    with database_down(), pytest.raises(Exception):  # noqa: B017 - any database error
        request_logs_ingest(redis_url=redis_url, stream=stream)
    pending = client.xpending(stream, "ingest")["pending"]
    # The next run retries its own pending batch at once, not after the idle delay meant for dead workers.
    recovered = request_logs_ingest(redis_url=redis_url, stream=stream, claim_idle_ms=3_600_000)

    assert pending == 4
    assert (recovered.read, recovered.inserted) == (4, 4)
    assert sorted(RequestLog.objects.values_list("request_id", flat=True)) == sorted(r["request_id"] for r in records)


def test_embedded_sink_keeps_records_through_a_database_outage():
    sink = LogSink(flush_seconds=0.05)
    sink.start()
    try:
        with database_down():
            for i in range(3):
                sink.add(record(i))
            assert sink.flush(timeout=0.5) is False
            assert sink.pending == 3
        assert sink.flush(timeout=10)
    finally:
        sink.stop()

    assert RequestLog.objects.count() == 3


def test_a_refused_record_goes_to_dead_letters_and_does_not_block_the_stream(redis_url, stream):
    import orjson

    client = redis.Redis.from_url(redis_url)
    good = [record(i) for i in range(3)]
    bad = {**record(9), "tokens_in": -1}  # violates the column's CHECK (>= 0) on both databases
    for r in (good[0], bad, good[1], good[2]):
        client.xadd(stream, {"r": orjson.dumps(r)})

    result = request_logs_ingest(redis_url=redis_url, stream=stream)

    assert (result.read, result.inserted) == (4, 3)
    assert sorted(RequestLog.objects.values_list("request_id", flat=True)) == sorted(r["request_id"] for r in good)
    dead = client.xrange(f"{stream}:dead")
    client.delete(f"{stream}:dead")
    assert [orjson.loads(fields[b"r"])["request_id"] for _, fields in dead] == [bad["request_id"]]
    assert client.xpending(stream, "ingest")["pending"] == 0


def test_a_record_repeated_within_one_batch_is_stored_once():
    first, other = record(1), record(2)

    inserted = request_logs_insert(records=[first, other, dict(first)])

    assert inserted == 2
    assert sorted(RequestLog.objects.values_list("request_id", flat=True)) == sorted(
        [first["request_id"], other["request_id"]]
    )


@pytest.mark.production
def test_a_concurrent_writer_storing_the_same_id_does_not_fail_the_batch():
    # Writer A stores X but has not committed; writer B's batch [X, Y] does not see X, so its direct COPY
    # waits on the unique index, then is refused once A commits: B falls back to ON CONFLICT DO NOTHING.
    import threading

    x, y = record(1), record(2)
    a_inserted = threading.Event()
    release_a = threading.Event()
    results: dict[str, object] = {}

    def writer_a():
        try:
            with transaction.atomic():
                results["a"] = request_logs_insert(records=[x])
                a_inserted.set()
                release_a.wait(10)
        finally:
            connections.close_all()

    def writer_b():
        try:
            results["b"] = request_logs_insert(records=[x, y])
        except Exception as exc:
            results["b"] = exc
        finally:
            connections.close_all()

    a = threading.Thread(target=writer_a)
    a.start()
    assert a_inserted.wait(10)
    b = threading.Thread(target=writer_b)
    b.start()
    # Wait (bounded) until B's COPY is waiting for A's transaction: the race is then certain.
    blocked = waits_on_a_lock(b, query_like="COPY requestlogs%")
    release_a.set()
    a.join(10)
    b.join(10)

    assert blocked is True
    assert results == {"a": 1, "b": 1}
    assert sorted(RequestLog.objects.values_list("request_id", flat=True)) == sorted([x["request_id"], y["request_id"]])


def test_text_with_tabs_newlines_backslashes_and_nul_survives_the_copy():
    odd = "a\tb\nc\\d\re\x00f “quoted” ✓"
    rec = {
        **record(1),
        "requested_model": odd,
        "error_kind": "x\\y",
        "attempts": [{"provider": "p", "model": odd, "status": None, "error": "line\nbreak\t\\", "duration_ms": 1.25}],
        "stream": True,
        "ttfb_ms": None,
        "cost_usd": None,
    }

    request_logs_insert(records=[rec])

    row = RequestLog.objects.get(request_id=rec["request_id"])
    clean = odd.replace("\x00", "")
    assert (row.requested_model, row.error_kind, row.stream, row.ttfb_ms, row.cost_usd) == (
        clean,
        "x\\y",
        True,
        None,
        None,
    )
    assert row.attempts == [
        {"provider": "p", "model": clean, "status": None, "error": "line\nbreak\t\\", "duration_ms": 1.25}
    ]
    assert row.created_at.timestamp() == pytest.approx(rec["created_at"], abs=1e-6)


@pytest.mark.production  # SQLite stores a string in an integer column without complaint
def test_a_value_of_the_wrong_type_is_refused_alone(redis_url, stream):
    import orjson

    client = redis.Redis.from_url(redis_url)
    good = [record(i) for i in range(2)]
    bad = {**record(9), "tokens_in": "many"}
    for r in (good[0], bad, good[1]):
        client.xadd(stream, {"r": orjson.dumps(r)})

    result = request_logs_ingest(redis_url=redis_url, stream=stream)

    assert (result.read, result.inserted) == (3, 2)
    dead = client.xrange(f"{stream}:dead")
    client.delete(f"{stream}:dead")
    assert [orjson.loads(fields[b"r"])["request_id"] for _, fields in dead] == [bad["request_id"]]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("routed_model", 5),  # a number among model names: the aggregate keys could not be sorted
        ("created_at", "2026-12-01T12:15:00+02:00"),  # PostgreSQL reads the offset, the aggregates did not
        ("optimistic_primary", "no"),  # PostgreSQL reads false, Python read true
        ("status", "503"),
        ("chain_step", 1.5),
    ],
)
def test_a_value_the_aggregates_would_misread_is_refused_alone(redis_url, stream, field, value):
    import orjson
    from django.db.models import Sum

    from requestlogs.models import RequestHour, RequestMinute

    client = redis.Redis.from_url(redis_url)
    good = [record(i) for i in range(3)]
    bad = {**record(9), field: value}
    for r in (good[0], bad, good[1], good[2]):
        client.xadd(stream, {"r": orjson.dumps(r)})

    result = request_logs_ingest(redis_url=redis_url, stream=stream)

    assert (result.read, result.inserted, result.dead_lettered) == (4, 3, 1)
    dead = client.xrange(f"{stream}:dead")
    client.delete(f"{stream}:dead")
    assert [orjson.loads(fields[b"r"])["request_id"] for _, fields in dead] == [bad["request_id"]]
    assert client.xpending(stream, "ingest")["pending"] == 0
    assert sorted(RequestLog.objects.values_list("request_id", flat=True)) == sorted(r["request_id"] for r in good)
    assert RequestMinute.objects.aggregate(n=Sum("requests"))["n"] == 3
    assert RequestHour.objects.aggregate(n=Sum("requests"))["n"] == 3
    assert set(RequestMinute.objects.values_list("tier", flat=True)) == {"primary"}


def test_a_datetime_with_an_offset_is_stored_and_counted_at_its_utc_moment():
    from datetime import UTC, datetime, timedelta, timezone

    from requestlogs.models import RequestMinute

    moment = datetime(2026, 12, 1, 12, 15, 30, tzinfo=timezone(timedelta(hours=2)))

    request_logs_insert(records=[{**record(1), "created_at": moment}])

    assert RequestLog.objects.get().created_at == datetime(2026, 12, 1, 10, 15, 30, tzinfo=UTC)
    assert list(RequestMinute.objects.values_list("start", flat=True)) == [datetime(2026, 12, 1, 10, 15, tzinfo=UTC)]
