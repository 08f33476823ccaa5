"""The stream holds one entry per batch, its records counted in `<stream>:records`; the ingest reads batches
and entries of the first format (one record each) alike, in rounds bounded in records, and keeps the count
exact through trims and acknowledgements."""

import logging

import orjson
import pytest
import redis

from gateway.logsink import TRIM_ENTRIES_MAX, LogSink
from requestlogs.ingest import READ_ENTRIES_MAX, request_logs_ingest
from requestlogs.models import RequestLog
from requestlogs.stream import ENTRY_RECORDS_MAX, StreamKeys
from tests.requestlogs.test_ingest import database_down, record

pytestmark = [pytest.mark.redis, pytest.mark.django_db(transaction=True)]


def _stored_ids() -> list[str]:
    return sorted(RequestLog.objects.values_list("request_id", flat=True))


def append_records(redis_url: str, stream: str, records: list[dict], **options) -> None:
    """Append `records` through a sink that writes them as one batch (they are all added before it starts)."""
    sink = LogSink(redis_url=redis_url, stream_key=stream, flush_seconds=60, **options)
    for r in records:
        sink.add(r)
    sink.start()
    assert sink.flush(timeout=10)
    sink.stop()


def test_a_batch_is_one_entry_holding_its_records_and_their_count(redis_url, stream):
    client = redis.Redis.from_url(redis_url)
    records = [record(i) for i in range(3)]

    append_records(redis_url, stream, records)

    [(_, fields)] = client.xrange(stream)
    assert fields[b"n"] == b"3"
    assert orjson.loads(fields[b"b"]) == records
    assert int(client.get(StreamKeys(stream).records)) == 3


def test_a_sink_batch_is_never_larger_than_an_entry_may_be():
    with pytest.raises(ValueError, match=f"batch_size must be from 1 to {ENTRY_RECORDS_MAX}"):
        LogSink(batch_size=ENTRY_RECORDS_MAX + 1)


def test_entries_of_the_one_record_format_are_ingested_beside_batches(redis_url, stream):
    client = redis.Redis.from_url(redis_url)
    keys = StreamKeys(stream)
    older = [record(i) for i in range(2)]  # written by a gateway of an earlier release
    for r in older:
        client.xadd(stream, {"r": orjson.dumps(r)})
    newer = [record(i) for i in range(2, 6)]
    append_records(redis_url, stream, newer)

    result = request_logs_ingest(redis_url=redis_url, stream=stream)

    assert (result.read, result.inserted, result.dead_lettered) == (6, 6, 0)
    assert _stored_ids() == sorted(r["request_id"] for r in older + newer)
    assert (client.xlen(stream), client.get(keys.records), client.xpending(stream, "ingest")["pending"]) == (
        0,
        None,  # an empty stream holds no records: the count is gone
        0,
    )


def test_an_undecodable_batch_is_dead_lettered_whole_and_counted_by_its_records(redis_url, stream, caplog):
    client = redis.Redis.from_url(redis_url)
    keys = StreamKeys(stream)
    good = record(1)
    torn = client.xadd(stream, {"n": b"3", "b": b'[{"request_id": "a"}, {"req'})
    not_records = client.xadd(stream, {"n": b"2", "b": b"[1, 2]"})
    no_records = client.xadd(stream, {"n": b"4", "x": b"?"})
    append_records(redis_url, stream, [good])

    with caplog.at_level(logging.ERROR, logger="requestlogs.ingest"):
        result = request_logs_ingest(redis_url=redis_url, stream=stream)

    dead = client.xrange(keys.dead)
    assert (result.read, result.inserted, result.dead_lettered) == (10, 1, 9)
    assert _stored_ids() == [good["request_id"]]
    assert [(fields[b"entry_id"], fields[b"n"], fields.get(b"b")) for _, fields in dead] == [
        (torn, b"3", b'[{"request_id": "a"}, {"req'),
        (not_records, b"2", b"[1, 2]"),
        (no_records, b"4", None),
    ]
    assert int(client.get(keys.dead_lettered)) == 9
    logged = " ".join(r.getMessage() for r in caplog.records)
    assert torn.decode() in logged and not_records.decode() in logged and no_records.decode() in logged
    # Entries not written by a sink were never in the records count: the empty stream holds none.
    assert (client.xlen(stream), client.xpending(stream, "ingest")["pending"], client.get(keys.records)) == (
        0,
        0,
        None,
    )


def test_a_round_takes_at_most_batch_size_records_however_the_entries_are_sized(redis_url, stream):
    client = redis.Redis.from_url(redis_url)
    keys = StreamKeys(stream)
    full = [[record(i) for i in range(n * ENTRY_RECORDS_MAX, (n + 1) * ENTRY_RECORDS_MAX)] for n in range(3)]
    for batch in full:
        append_records(redis_url, stream, batch)
    singles = [record(i) for i in range(30)]
    for r in singles:
        client.xadd(stream, {"r": orjson.dumps(r)})

    # Full entries: two of them make a round of 2 * ENTRY_RECORDS_MAX records, the third waits.
    first = request_logs_ingest(redis_url=redis_url, stream=stream, batch_size=2 * ENTRY_RECORDS_MAX, max_batches=1)
    held_after_first = int(client.get(keys.records))
    # One-record entries: a round of 10 reads ten of them, one read after another, not one entry.
    rest = request_logs_ingest(redis_url=redis_url, stream=stream, batch_size=ENTRY_RECORDS_MAX + 10, max_batches=1)
    last = request_logs_ingest(redis_url=redis_url, stream=stream, batch_size=10, max_batches=1)

    assert (first.read, first.inserted, held_after_first) == (2 * ENTRY_RECORDS_MAX, 2 * ENTRY_RECORDS_MAX, 500)
    assert (rest.read, last.read) == (ENTRY_RECORDS_MAX + 10, 10)
    assert client.xlen(stream) == 10
    assert int(client.get(keys.records)) == 0  # what is left is of the first format, never counted


def test_an_entry_trimmed_while_pending_is_taken_off_the_count_once(redis_url, stream):
    client = redis.Redis.from_url(redis_url)
    keys = StreamKeys(stream)
    first, second = [record(i) for i in range(100)], [record(i) for i in range(100, 200)]
    append_records(redis_url, stream, first, maxlen=150)
    with database_down(), pytest.raises(Exception):  # noqa: B017 - any database error
        request_logs_ingest(redis_url=redis_url, stream=stream)  # the first batch is now pending
    pending = client.xpending(stream, "ingest")["pending"]

    append_records(redis_url, stream, second, maxlen=150)  # 200 records over a cap of 150: the first entry goes
    trimmed, held = int(client.get(keys.trimmed)), int(client.get(keys.records))
    result = request_logs_ingest(redis_url=redis_url, stream=stream, claim_idle_ms=3_600_000)

    assert (pending, trimmed, held) == (1, 100, 100)
    assert (result.read, result.inserted) == (100, 100)
    assert _stored_ids() == sorted(r["request_id"] for r in second)
    assert (client.xlen(stream), client.get(keys.records), client.xpending(stream, "ingest")["pending"]) == (
        0,
        None,  # an empty stream holds no records: the count is gone
        0,
    )


def test_the_records_count_starts_again_when_the_stream_is_empty(redis_url, stream):
    client = redis.Redis.from_url(redis_url)
    keys = StreamKeys(stream)
    client.set(keys.records, 999)  # drifted: say the stream was deleted by hand, its count left behind

    append_records(redis_url, stream, [record(i) for i in range(3)], maxlen=100)

    assert (int(client.get(keys.records)), client.get(keys.trimmed)) == (3, None)


def test_a_cap_smaller_than_a_batch_keeps_the_newest_batch(redis_url, stream):
    client = redis.Redis.from_url(redis_url)
    keys = StreamKeys(stream)
    first, second = [record(i) for i in range(300)], [record(i) for i in range(300, 600)]

    append_records(redis_url, stream, first, maxlen=100)
    alone = (int(client.get(keys.records)), client.get(keys.trimmed))
    append_records(redis_url, stream, second, maxlen=100)
    request_logs_ingest(redis_url=redis_url, stream=stream)

    assert alone == (300, None)  # over the cap, but the newest batch is never trimmed
    assert int(client.get(keys.trimmed)) == 300
    assert _stored_ids() == sorted(r["request_id"] for r in second)


def test_one_append_trims_a_bounded_number_of_entries_and_the_next_goes_on(redis_url, stream):
    client = redis.Redis.from_url(redis_url)
    keys = StreamKeys(stream)
    for i in range(TRIM_ENTRIES_MAX + 50):  # one-record entries of an earlier release, not in the records count
        client.xadd(stream, {"r": orjson.dumps(record(i))})

    append_records(redis_url, stream, [record(i) for i in range(10)], maxlen=5)
    after_first = (int(client.get(keys.trimmed)), client.xlen(stream))
    append_records(redis_url, stream, [record(i) for i in range(10)], maxlen=5)

    assert after_first == (TRIM_ENTRIES_MAX, 51)  # the budget spent on old entries, the batch kept
    # The rest of the old entries (one record each), then the first batch, all but the newest batch.
    assert int(client.get(keys.trimmed)) == TRIM_ENTRIES_MAX + 50 + 10
    assert (client.xlen(stream), int(client.get(keys.records))) == (1, 10)


def test_small_entries_are_read_many_at_a_time_and_a_round_stays_bounded(redis_url, stream):
    client = redis.Redis.from_url(redis_url)
    # Every record names model m0 (each has its own request id): how many records a round reads does not
    # depend on their models, and 12,000 models would make the round's aggregates, one row per model and
    # minute, the slowest part of the suite.
    for _ in range(100):  # one-record entries first (an earlier release's), then full batches
        client.xadd(stream, {"r": orjson.dumps(record(0))})
    for _ in range(30):
        append_records(redis_url, stream, [record(0) for _ in range(ENTRY_RECORDS_MAX)])

    first = request_logs_ingest(redis_url=redis_url, stream=stream, batch_size=2000, max_batches=1)

    # Reads of 4 entries (none seen yet: sized for full ones), then 40 as they turn out to hold one record each:
    # 4 + 40 + 40 singles, then 16 singles and 24 full batches in the last read, which overshoots 2,000.
    assert first.read == 100 + 24 * ENTRY_RECORDS_MAX
    assert first.read <= 2000 + READ_ENTRIES_MAX * ENTRY_RECORDS_MAX


def test_a_dead_consumers_entry_behind_a_live_ones_long_pending_list_is_claimed(redis_url, stream):
    client = redis.Redis.from_url(redis_url)
    for i in range(50):  # one-record entries a live worker is busy with: pending, but not idle
        client.xadd(stream, {"r": orjson.dumps(record(i))})
    batch = [record(i) for i in range(50, 50 + ENTRY_RECORDS_MAX)]
    append_records(redis_url, stream, batch)
    client.xgroup_create(stream, "ingest", id="0")
    assert len(client.xreadgroup("ingest", "busy", {stream: ">"}, count=50)[0][1]) == 50
    [[_, [(left_behind, _)]]] = client.xreadgroup("ingest", "dead", {stream: ">"}, count=1)
    client.xclaim(stream, "ingest", "dead", 0, [left_behind], idle=3_600_000)  # its worker died an hour ago

    # The first claim scans only the start of the pending list (4 entries asked, 40 looked at): all the live
    # worker's. The ingest goes on from the cursor Redis returns until it finds the dead worker's batch.
    result = request_logs_ingest(redis_url=redis_url, stream=stream, claim_idle_ms=60_000, max_batches=1)

    assert (result.read, result.inserted) == (ENTRY_RECORDS_MAX, ENTRY_RECORDS_MAX)
    assert _stored_ids() == sorted(r["request_id"] for r in batch)
    assert client.xpending(stream, "ingest")["pending"] == 50  # the live worker's, still its own
