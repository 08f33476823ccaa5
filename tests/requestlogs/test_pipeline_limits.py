"""The request-log pipeline's limits: the stream cap counts what it trims, undecodable entries are
dead-lettered, a sink that cannot write at shutdown spills to a file that the next start replays once, and so
does one left running at the interpreter's exit, one given records after it stopped, one whose event loop
closed with a send under way, and one whose stop gave up waiting for its thread's write; a spill carries the
buffer's drops not yet counted to the replay; a replay never deletes a spill another process is writing (but deletes
a crash's empty leftover), and spills at the same time lose neither records nor their count."""

import asyncio
import concurrent.futures
import fcntl
import logging
import os
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
import redis

from gateway import logsink
from gateway.logsink import LogSink
from requestlogs.ingest import request_logs_ingest
from requestlogs.models import RequestLog
from requestlogs.stream import BATCH_FIELD, StreamKeys
from tests.faults import FaultProxy
from tests.requestlogs.test_ingest import record
from tests.servers import free_port, until, within

pytestmark = [pytest.mark.redis, pytest.mark.django_db(transaction=True)]


def _stored_ids() -> list[str]:
    return sorted(RequestLog.objects.values_list("request_id", flat=True))


def test_the_stream_cap_counts_every_record_it_trims_before_ingestion(redis_url, stream):
    client = redis.Redis.from_url(redis_url)
    keys = StreamKeys(stream)
    records = [record(i) for i in range(1000)]
    sink = LogSink(redis_url=redis_url, stream_key=stream, flush_seconds=0.05, batch_size=100, maxlen=100)
    sink.start()
    for r in records:
        sink.add(r)
    assert sink.flush(timeout=10)
    sink.stop()

    length = int(client.get(keys.records))
    trimmed = int(client.get(keys.trimmed))
    request_logs_ingest(redis_url=redis_url, stream=stream)

    assert 0 < length <= 100  # the cap held, in records (whole entries are trimmed, oldest first)
    assert trimmed == 1000 - length
    assert client.get(keys.lost_since) is not None
    # Every record is either stored or counted as trimmed: none vanished uncounted.
    assert len(_stored_ids()) + trimmed == 1000
    assert _stored_ids() == sorted(r["request_id"] for r in records[-length:])


def test_a_stream_kept_over_its_cap_logs_one_error_a_minute_with_the_count_since_the_last(redis_url, stream, caplog):
    now = [1000.0]
    client = redis.Redis.from_url(redis_url)
    trimmed_total = lambda: int(client.get(StreamKeys(stream).trimmed) or 0)  # noqa: E731
    lines = lambda: [r.getMessage() for r in caplog.records if "over its cap" in r.getMessage()]  # noqa: E731
    sink = LogSink(
        redis_url=redis_url, stream_key=stream, flush_seconds=60, batch_size=100, maxlen=100, clock=lambda: now[0]
    )  # the thread writes when 100 records wait, or at flush()
    sink.start()
    caplog.set_level(logging.ERROR, logger="gateway.logsink")

    for i in range(1000):
        sink.add(record(i))
    assert sink.flush(timeout=10)
    # One line, at the first batch that trimmed; the batches that trimmed after it are counted, not logged.
    [line] = lines()
    at_once = int(line.split(": ")[1].split()[0])
    assert line == (
        f"request-log stream over its cap of 100 records: {at_once} records not yet ingested were trimmed "
        "(is the ingest worker running?)"
    )
    assert 0 < at_once < trimmed_total()

    now[0] += 30
    for i in range(1000, 2000):
        sink.add(record(i))
    assert sink.flush(timeout=10)
    assert len(lines()) == 1  # still trimming, still within the minute

    now[0] += 31
    for i in range(2000, 2100):  # one batch, which trims the oldest entry
        sink.add(record(i))
    assert sink.flush(timeout=10)
    # The next line counts everything trimmed since the first line: the two add up to Redis's total.
    since_first = trimmed_total() - at_once
    assert lines()[1:] == [
        f"request-log stream over its cap of 100 records: {since_first} records not yet ingested "
        "were trimmed in the last 61 s (is the ingest worker running?)"
    ]

    now[0] += 5
    for i in range(2100, 2200):
        sink.add(record(i))
    assert sink.flush(timeout=10)
    assert len(lines()) == 2  # within the minute again
    sink.stop()  # says what is left unreported
    assert lines()[2:] == [
        f"request-log stream over its cap of 100 records: {trimmed_total() - at_once - since_first} records "
        "not yet ingested were trimmed in the last 5 s (is the ingest worker running?)"
    ]


def test_records_the_full_buffer_dropped_are_counted_in_redis(redis_url, stream):
    sink = LogSink(redis_url=redis_url, stream_key=stream, flush_seconds=0.05, max_buffer=5)
    for i in range(8):
        sink.add(record(i))  # not started yet: the buffer fills and drops the 3 oldest

    sink.start()
    assert sink.flush(timeout=10)
    sink.stop()

    client = redis.Redis.from_url(redis_url)
    keys = StreamKeys(stream)
    assert (sink.dropped, int(client.get(keys.dropped)), int(client.get(keys.records))) == (3, 3, 5)


def test_undecodable_entries_are_dead_lettered_with_a_log_line_naming_them(redis_url, stream, caplog):
    client = redis.Redis.from_url(redis_url)
    keys = StreamKeys(stream)
    good = [record(i) for i in range(2)]
    client.xadd(stream, {"r": orjson.dumps(good[0])})
    not_json = client.xadd(stream, {"r": b"{not json"})
    no_field = client.xadd(stream, {"x": b"1"})
    client.xadd(stream, {"r": orjson.dumps(good[1])})

    with caplog.at_level(logging.ERROR, logger="requestlogs.ingest"):
        result = request_logs_ingest(redis_url=redis_url, stream=stream)

    dead = client.xrange(keys.dead)
    assert (result.read, result.inserted, result.dead_lettered) == (4, 2, 2)
    assert _stored_ids() == sorted(r["request_id"] for r in good)
    assert [(fields.get(b"entry_id"), fields.get(b"r"), fields.get(b"x")) for _, fields in dead] == [
        (not_json, b"{not json", None),
        (no_field, None, b"1"),
    ]
    assert int(client.get(keys.dead_lettered)) == 2
    logged = " ".join(r.getMessage() for r in caplog.records)
    assert not_json.decode() in logged and no_field.decode() in logged
    assert (client.xlen(stream), client.xpending(stream, "ingest")["pending"]) == (0, 0)


def test_a_sink_stopped_while_redis_is_down_spills_and_the_next_start_replays(redis_url, stream, tmp_path):
    records = [record(i) for i in range(10)]
    with FaultProxy.for_redis(redis_url) as proxy:
        via_proxy = proxy.url
        first = LogSink(redis_url=via_proxy, stream_key=stream, flush_seconds=0.05, spill_dir=tmp_path)
        first.start()
        proxy.down()
        for r in records:
            first.add(r)
        first.stop()
        spilled = sorted(tmp_path.iterdir())
        lines = spilled[0].read_bytes().splitlines()

        proxy.restore()
        second = LogSink(redis_url=via_proxy, stream_key=stream, flush_seconds=0.05, spill_dir=tmp_path)
        second.start()
        until(lambda: second.replayed == 10, 10, "the replay")
        second.stop()

    request_logs_ingest(redis_url=redis_url, stream=stream)

    assert [p.suffix for p in spilled] == [".jsonl"]
    assert [orjson.loads(line)["request_id"] for line in lines] == [r["request_id"] for r in records]
    assert (first.spilled, first.pending) == (10, 0)
    assert list(tmp_path.iterdir()) == []
    assert _stored_ids() == sorted(r["request_id"] for r in records)


def test_a_sink_whose_replay_failed_is_not_failing_once_the_replay_succeeds(redis_url, stream, tmp_path):
    """A gateway starts while Redis is down with a spill to replay: the replay fails and the sink is failing. Redis
    returns and the replay writes the file: the sink has recovered, though no request has been logged since (an
    idle gateway's readiness said "failing" until its next request)."""
    (tmp_path / "20260101T000000-1-abcdef01.jsonl").write_bytes(orjson.dumps(record(1)) + b"\n")
    with FaultProxy.for_redis(redis_url) as proxy:
        proxy.down()
        sink = LogSink(redis_url=proxy.url, stream_key=stream, flush_seconds=0.05, spill_dir=tmp_path)
        sink.start()
        try:
            until(lambda: sink.failing, 10, "the failed replay")
            proxy.restore()
            until(lambda: sink.replayed == 1, 15, "the replay once Redis is back")
            failing = sink.failing
        finally:
            sink.stop()

    assert failing is False
    assert list(tmp_path.iterdir()) == []


def test_a_replay_repeated_after_a_crash_stores_each_row_once(redis_url, stream, tmp_path):
    records = [record(i) for i in range(10)]
    content = b"".join(orjson.dumps(r) + b"\n" for r in records)
    spill = tmp_path / "20261201T000000-1-abcdef01.jsonl"
    spill.write_bytes(content)
    first = LogSink(redis_url=redis_url, stream_key=stream, flush_seconds=0.05, spill_dir=tmp_path)
    first.start()
    until(lambda: first.replayed == 10, 10, "the first replay")
    first.stop()
    # A crash after the records reached Redis but before the file was deleted: the next start replays it all.
    spill.write_bytes(content)
    second = LogSink(redis_url=redis_url, stream_key=stream, flush_seconds=0.05, spill_dir=tmp_path)
    second.start()
    until(lambda: second.replayed == 10, 10, "the second replay")
    second.stop()

    in_stream = int(redis.Redis.from_url(redis_url).get(StreamKeys(stream).records))
    result = request_logs_ingest(redis_url=redis_url, stream=stream)

    assert (in_stream, result.read, result.inserted) == (20, 20, 10)
    assert _stored_ids() == sorted(r["request_id"] for r in records)


def test_a_torn_spill_line_is_dead_lettered_and_the_rest_replayed(redis_url, stream, tmp_path):
    good = record(1)
    spill = tmp_path / "20261201T000000-1-abcdef02.partial"  # a spill cut short by a crash
    spill.write_bytes(orjson.dumps(good) + b'\n{"request_id": "ab')
    sink = LogSink(redis_url=redis_url, stream_key=stream, flush_seconds=0.05, spill_dir=tmp_path)

    sink.start()
    until(lambda: not spill.exists(), 10, "the replay")
    sink.stop()
    request_logs_ingest(redis_url=redis_url, stream=stream)

    client = redis.Redis.from_url(redis_url)
    dead = client.xrange(StreamKeys(stream).dead)
    assert [fields[b"raw"] for _, fields in dead] == [b'{"request_id": "ab']
    assert _stored_ids() == [good["request_id"]]


def test_a_spill_file_another_process_holds_is_left_alone(redis_url, stream, tmp_path):
    held, free = tmp_path / "a-held.jsonl", tmp_path / "b-free.jsonl"
    held.write_bytes(orjson.dumps(record(1)) + b"\n")
    free.write_bytes(orjson.dumps(record(2)) + b"\n")
    with open(held, "rb") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # what a gateway still writing it (or replaying it) holds
        sink = LogSink(redis_url=redis_url, stream_key=stream, flush_seconds=0.05, spill_dir=tmp_path)
        sink.start()
        until(lambda: not free.exists(), 10, "the free file's replay")
        while_held = (held.exists(), sink.replayed)
    until(lambda: not held.exists(), 10, "the held file's replay once released")
    sink.stop()

    assert while_held == (True, 1)
    assert sink.replayed == 2


def test_drops_of_an_outage_that_ends_in_a_spill_are_counted_when_it_is_replayed(redis_url, stream, tmp_path):
    """The buffer dropped records while Redis was away, and the sink stopped before Redis came back: the drops, which
    only a successful write had counted, go with the spill file and are counted when it is replayed."""
    records = [record(i) for i in range(8)]
    with FaultProxy.for_redis(redis_url) as proxy:
        proxy.down()
        first = LogSink(redis_url=proxy.url, stream_key=stream, flush_seconds=0.05, max_buffer=5, spill_dir=tmp_path)
        for r in records:
            first.add(r)  # the 3 oldest dropped
        first.start()
        first.stop()
        names = [p.name for p in tmp_path.iterdir()]
        proxy.restore()
        second = LogSink(redis_url=proxy.url, stream_key=stream, flush_seconds=0.05, spill_dir=tmp_path)
        second.start()
        until(lambda: second.replayed == 5, 10, "the replay")
        second.stop()

    client = redis.Redis.from_url(redis_url)
    keys = StreamKeys(stream)
    assert (first.dropped, first.spilled) == (3, 5)
    assert [name.split(".", 1)[1] for name in names] == ["dropped3.jsonl"]
    assert (int(client.get(keys.dropped)), int(client.get(keys.records))) == (3, 5)
    assert client.get(keys.lost_since) is not None


def test_a_spill_file_with_drops_and_no_whole_line_still_counts_its_drops(redis_url, stream, tmp_path):
    spill = tmp_path / "20261201T000000-1-abcdef03.dropped4.partial"  # a crash tore its only line
    spill.write_bytes(b'{"request_id": "ab')
    sink = LogSink(redis_url=redis_url, stream_key=stream, flush_seconds=0.05, spill_dir=tmp_path)

    sink.start()
    until(lambda: not spill.exists(), 10, "the replay")
    sink.stop()

    client = redis.Redis.from_url(redis_url)
    keys = StreamKeys(stream)
    assert (int(client.get(keys.dropped)), client.get(keys.records), client.xlen(keys.dead)) == (4, None, 1)


def test_an_empty_partial_spill_file_is_deleted_once_stale_and_left_alone_before(redis_url, stream, tmp_path):
    """A spill creates its `.partial` file and locks it at once: an empty one may be a spill between the two (left
    alone), or, long after, what a crash there left (deleted, instead of staying forever)."""
    fresh, stale = tmp_path / "20261201T000001-1-fresh.partial", tmp_path / "20261201T000000-1-stale.partial"
    fresh.touch()
    stale.touch()
    old = time.time() - logsink.STALE_PARTIAL_SECONDS - 60
    os.utime(stale, (old, old))
    sink = LogSink(redis_url=redis_url, stream_key=stream, flush_seconds=0.05, spill_dir=tmp_path)

    sink.start()
    until(lambda: not stale.exists(), 10, "the replay")
    sink.stop()

    assert [p.name for p in tmp_path.iterdir()] == [fresh.name]


# A process of its own: what happens at the interpreter's exit is the point. argv: the Redis URL (one that refuses),
# the stream, the spill dir, and "fork" or nothing. The records wait in the buffer, the writes failing; then the
# process exits, the sink never stopped (as after uvicorn's forced exit, which skips the lifespan's shutdown). With
# "fork", a child forked first exits before it: its copy of the buffer is the parent's to write, not its own.
_NEVER_STOPPED = """
import os
import sys
from gateway.logsink import LogSink
from tests.servers import until

redis_url, stream, spill_dir, *fork = sys.argv[1:]
sink = LogSink(redis_url=redis_url, stream_key=stream, flush_seconds=0.05, spill_dir=spill_dir)
sink.start()
for i in range(3):
    sink.add({"request_id": f"kept-{i}"})
until(lambda: sink.failing, 10, "a failed write")
if fork:
    child = os.fork()
    if child == 0:
        sys.exit(0)
    os.waitpid(child, 0)
"""


def _hand_the_thread(sink: LogSink, records: list[dict]) -> None:
    """Give `records` to the sink's thread, which takes them as one batch and waits on the frozen Redis (2 s)."""
    for r in records:
        sink.add(r)
    sink.flush(timeout=0)
    until(lambda: sink._in_flight == len(records), 10, "the thread's write")


def _spilled_ids(spill_dir: Path) -> list[str]:
    lines = [line for path in sorted(spill_dir.glob("*.jsonl")) for line in path.read_bytes().splitlines()]
    return [orjson.loads(line)["request_id"] for line in lines]


@pytest.mark.parametrize("fork", [[], ["fork"]], ids=["alone", "after a forked child exited"])
def test_a_sink_nobody_stopped_is_stopped_at_exit_and_spills_what_it_could_not_write(stream, tmp_path, fork):
    refused = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    done = subprocess.run(
        [sys.executable, "-c", _NEVER_STOPPED, refused, stream, str(tmp_path), *fork],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode == 0, done.stderr
    assert _spilled_ids(tmp_path) == ["kept-0", "kept-1", "kept-2"]
    assert "not stopped before exit" in done.stderr


def test_at_exit_a_sink_whose_stop_timed_out_gets_a_last_join_and_spills_the_batch_its_thread_kept(
    redis_url, stream, tmp_path
):
    records = [record(i) for i in range(3)]
    with FaultProxy.for_redis(redis_url) as proxy:
        sink = LogSink(redis_url=proxy.url, stream_key=stream, flush_seconds=60, spill_dir=tmp_path)
        sink.start()
        proxy.freeze()
        _hand_the_thread(sink, records)
        sink.stop(timeout=0.05)  # times out: the write is under way
        spilled_by_stop = _spilled_ids(tmp_path)
        sink._at_exit()  # what `_stop_at_exit` calls

    assert spilled_by_stop == []
    assert _spilled_ids(tmp_path) == [r["request_id"] for r in records]
    assert sink.pending == 0


def test_a_record_added_after_stop_is_spilled_at_once(redis_url, stream, tmp_path):
    """A request that ends while the shutdown runs, after the sink stopped: a SIGTERM's exit runs no `atexit`
    (uvicorn raises the signal again once it has shut down), so the record cannot wait for one."""
    before, after = record(0), record(1)
    sink = LogSink(redis_url=redis_url, stream_key=stream, flush_seconds=0.05, spill_dir=tmp_path)
    sink.start()
    sink.add(before)
    sink.stop()
    sink.add(after)
    written = [
        orjson.loads(batch)
        for _, fields in redis.Redis.from_url(redis_url).xrange(stream)
        for name, batch in fields.items()
        if name == BATCH_FIELD.encode()
    ]

    assert [r["request_id"] for batch in written for r in batch] == [before["request_id"]]
    assert _spilled_ids(tmp_path) == [after["request_id"]]
    assert sink.pending == 0


def _close_a_loop_with_its_send_under_way(sink: LogSink, batch: list[dict]) -> None:
    """Ship `batch` (a full one) from an event loop of its own, then close the loop with that send pending, waiting
    on a frozen Redis (what `asyncio.run` leaves after cancelling the tasks it knew of). In a thread of its own, as
    `run_async` does: the test thread may already run a loop."""
    in_flight = sink._in_flight

    async def fill() -> None:
        for r in batch:
            sink.add(r)  # the last starts the loop's send
        for _ in range(1000):
            if sink._in_flight > in_flight:  # the send has taken the batch
                return
            await asyncio.sleep(0)
        raise AssertionError("the loop's send did not start")

    def run_and_close() -> None:
        loop = asyncio.new_event_loop()
        try:
            sink.ship_from(loop)
            loop.run_until_complete(fill())
        finally:
            loop.close()

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(run_and_close).result()


def test_a_loop_closed_with_its_send_under_way_gives_the_batch_back_to_be_spilled(redis_url, stream, tmp_path):
    """The event loop's last send can be left pending when the loop closes: a request cancelled as the loop shuts
    down fills a batch, and the send it starts is never cancelled."""
    records = [record(i) for i in range(10)]
    with FaultProxy.for_redis(redis_url) as proxy:
        sink = LogSink(redis_url=proxy.url, stream_key=stream, flush_seconds=60, batch_size=10, spill_dir=tmp_path)
        sink.start()
        proxy.freeze()
        _close_a_loop_with_its_send_under_way(sink, records)
        proxy.down()  # the thread's last write fails at once
        sink.stop()

    assert _spilled_ids(tmp_path) == [r["request_id"] for r in records]
    assert sink.pending == 0


def test_a_loop_batch_given_back_after_stop_gave_up_waiting_is_spilled_at_once(redis_url, stream, tmp_path):
    """`stop` gives up waiting while the thread's own write is under way, and the event loop closed with its send
    under way too: once its write fails, the thread gives the loop's batch back to the buffer, after `stop` has
    spilled it and returned. Nothing else would write or spill that batch."""
    own, loops = [record(i) for i in range(3)], [record(i) for i in range(3, 13)]
    with FaultProxy.for_redis(redis_url) as proxy:
        sink = LogSink(redis_url=proxy.url, stream_key=stream, flush_seconds=60, batch_size=10, spill_dir=tmp_path)
        sink.start()
        proxy.freeze()
        _hand_the_thread(sink, own)
        _close_a_loop_with_its_send_under_way(sink, loops)
        sink.stop(timeout=0.05)  # times out: the thread's write is under way
        spilled_by_stop = _spilled_ids(tmp_path)
        sink._thread.join(timeout=10)
        assert not sink._thread.is_alive()

    assert spilled_by_stop == []
    assert sorted(_spilled_ids(tmp_path)) == sorted(r["request_id"] for r in own + loops)
    assert sink.pending == 0


def test_a_batch_whose_write_fails_after_stop_gave_up_waiting_is_spilled_at_once(redis_url, stream, tmp_path):
    """The lifespan's `stop` gives up waiting while the thread's write is under way (a hung Redis), then that write
    fails and its batch goes back to the buffer, after `stop` spilled it and returned. The batch is spilled at once:
    a SIGTERM's exit runs no `atexit` (uvicorn raises the signal again once it has shut down)."""
    records = [record(i) for i in range(3)]
    with FaultProxy.for_redis(redis_url) as proxy:
        sink = LogSink(redis_url=proxy.url, stream_key=stream, flush_seconds=60, spill_dir=tmp_path)
        sink.start()
        proxy.freeze()
        _hand_the_thread(sink, records)
        sink.stop(timeout=0.05)  # times out: the write is under way
        spilled_by_stop = _spilled_ids(tmp_path)
        sink._thread.join(timeout=10)  # the write fails at its timeout, and the thread ends
        assert not sink._thread.is_alive()

    assert spilled_by_stop == []
    assert _spilled_ids(tmp_path) == [r["request_id"] for r in records]
    assert (sink.spilled, sink.pending) == (3, 0)


# A process of its own, exiting with the sink never stopped while its thread's write is under way: the exit's stop
# gives up waiting for it (EXIT_STOP_SECONDS, shortened here), and the write fails a moment later. argv: the spill
# dir. The write is a stand-in, failing 0.2 s after the stop gave up.
_WRITING_AT_EXIT = """
import sys
import time
import gateway.logsink as logsink
from tests.servers import until

logsink.EXIT_STOP_SECONDS = 0.5
sink = logsink.LogSink(redis_url="redis://127.0.0.1:1/0", flush_seconds=60, spill_dir=sys.argv[1])

def write_failing_after_stop(batch, carried=0):
    until(lambda: sink._stopped, 10, "the exit's stop to give up waiting")
    time.sleep(0.2)  # a slow failure (fault injection)
    raise ConnectionError("Redis went away")

sink._write_redis = write_failing_after_stop
sink.start()
for i in range(3):
    sink.add({"request_id": f"kept-{i}"})
sink.flush(timeout=0)
until(lambda: sink._in_flight == 3, 10, "the write")
"""


def test_at_exit_a_sink_nobody_stopped_gets_a_last_join_too_and_spills_the_batch_its_write_gave_back(tmp_path):
    """The exit's own stop of a sink nobody stopped can time out during a write, like the lifespan's: the thread
    gets a last chance to finish there too, before the process ends and the thread with it."""
    done = subprocess.run(
        [sys.executable, "-c", _WRITING_AT_EXIT, str(tmp_path)],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode == 0, done.stderr
    assert "not stopped before exit" in done.stderr
    assert _spilled_ids(tmp_path) == ["kept-0", "kept-1", "kept-2"]


class _MeasuredThen(deque):
    """A buffer whose len() runs `between` once, after measuring: another thread taking the GIL right after `add`
    measured the buffer, before it drops the oldest record."""

    between: Callable[[], None] | None = None

    def __len__(self) -> int:
        n = deque.__len__(self)
        between, self.between = self.between, None
        if between is not None:
            between()
        return n


def test_a_record_added_to_a_full_buffer_while_stop_spills_it_neither_raises_nor_counts_a_drop(tmp_path):
    """A full buffer (Redis down), a record added on the event loop while `stop` spills the buffer in another
    thread: the spill can empty it between `add`'s check that it is full and its drop of the oldest record."""
    records = [record(i) for i in range(6)]
    sink = LogSink(redis_url=f"redis://127.0.0.1:{free_port()}/0", max_buffer=5, spill_dir=tmp_path)
    for r in records[:5]:
        sink.add(r)
    buffer = sink._buffer = _MeasuredThen(sink._buffer)
    buffer.between = sink.stop  # spills the five, and the sixth just appended

    sink.add(records[5])  # the request path never raises

    assert sink.dropped == 0
    assert _spilled_ids(tmp_path) == [r["request_id"] for r in records]
    assert (sink.spilled, sink.pending) == (6, 0)


def test_a_replay_that_finds_a_spill_created_and_not_yet_locked_leaves_it_to_its_writer(
    redis_url, stream, tmp_path, monkeypatch
):
    """Workers share the spill dir: one stopping spills while one starting replays. The spill creates its
    `.partial` file, then locks it; a replay in between finds it empty and unlocked. It must not delete it: the
    spill would then write into a deleted file, and its rename fail."""
    records = [record(i) for i in range(3)]
    stopping = LogSink(redis_url=redis_url, stream_key=stream, spill_dir=tmp_path)
    for r in records:
        stopping.add(r)
    starting = LogSink(redis_url=redis_url, stream_key=stream, spill_dir=tmp_path)
    real_flock = fcntl.flock
    replays: list[tuple[bool, list[str]]] = []

    def flock(f, op):
        if op == fcntl.LOCK_EX and not replays:  # the spill's blocking lock (a replay's does not block)
            finished = starting._replay()  # the other worker's replay runs at this instant
            replays.append((finished, sorted(path.suffix for path in tmp_path.iterdir())))
        return real_flock(f, op)

    monkeypatch.setattr(fcntl, "flock", flock)
    stopping._spill()
    monkeypatch.undo()

    assert replays == [(True, [".partial"])]
    assert _spilled_ids(tmp_path) == [r["request_id"] for r in records]
    assert (stopping.spilled, starting.replayed) == (3, 0)
    assert redis.Redis.from_url(redis_url).xlen(stream) == 0


class _CountRace(LogSink):
    """`spilled` behind a property whose first read runs `between` once: another thread taking the GIL in the middle
    of `_spill`'s `spilled += n`, after it read the count and before it stores the sum."""

    between: Callable[[], None] | None = None

    @property
    def spilled(self) -> int:
        n = self._spilled
        between, self.between = self.between, None
        if between is not None:
            between()
        return n

    @spilled.setter
    def spilled(self, value: int) -> None:
        self._spilled = value


def test_two_spills_at_once_count_every_record_spilled(tmp_path):
    """`stop` and a thread it left running (or a record added after it) can spill at the same time."""
    records = [record(i) for i in range(3)]
    sink = _CountRace(spill_dir=tmp_path)
    sink.add(records[0])
    others: list[threading.Thread] = []

    def another_spill() -> None:
        sink.add(records[1])
        sink.add(records[2])
        other = threading.Thread(target=sink._spill)
        other.start()
        others.append(other)
        within(lambda: not other.is_alive(), 0.5)  # it waits for this spill's count, if that is kept under a lock

    sink.between = another_spill
    sink._spill()
    others[0].join(timeout=10)

    assert sorted(_spilled_ids(tmp_path)) == sorted(r["request_id"] for r in records)
    assert sink.spilled == 3
