"""The production gateway's sink sends full batches from the event loop (`LogSink.ship_from`), not from its
thread; the thread keeps what is left over, the retries while Redis fails, and the drain at shutdown. Real
Redis, reached directly or through a FaultProxy that goes down."""

import asyncio
import logging
import threading

import httpx
import orjson
import pytest
import redis

from gateway.app import GatewayApp
from gateway.config import ConfigHolder
from gateway.logsink import LogSink
from gateway.server import CorkedHttpToolsProtocol
from health.breaker.factory import build_engine
from health.breaker.types import ManualClock
from requestlogs.stream import StreamKeys
from tests.faults import FaultProxy
from tests.gateway.conftest import sim, world  # noqa: F401 - the gateway test fixtures
from tests.requestlogs.test_ingest import record
from tests.servers import run_async, serve, until

pytestmark = pytest.mark.redis


def _entries(client: redis.Redis, stream: str) -> list[list[dict]]:
    return [orjson.loads(fields[b"b"]) for _, fields in client.xrange(stream)]


def _add_on_loop(sink: LogSink, records: list[dict]) -> None:
    """Attach the sink to a running event loop, add `records` there as the gateway does, let the loop send
    (or fail to), then detach."""

    async def run() -> None:
        sink.ship_from(asyncio.get_running_loop())
        for r in records:
            sink.add(r)
        async with asyncio.timeout(10):
            while sink._shipping is not None:
                await asyncio.sleep(0.01)
        await sink.aclose()

    run_async(run())


def test_full_batches_leave_from_the_event_loop_and_the_rest_waits_for_the_thread(redis_url, stream):
    client = redis.Redis.from_url(redis_url)
    records = [record(i) for i in range(25)]
    # The thread's timer is an hour: only the event loop can have sent anything before stop().
    sink = LogSink(redis_url=redis_url, stream_key=stream, batch_size=10, flush_seconds=3600)
    sink.start()
    try:
        _add_on_loop(sink, records)

        assert _entries(client, stream) == [records[:10], records[10:20]]
        assert int(client.get(StreamKeys(stream).records)) == 20
        assert sink.pending == 5
    finally:
        sink.stop()
    assert _entries(client, stream)[2] == records[20:]  # the thread drained the rest at stop
    assert sink.pending == 0


def test_a_send_from_the_loop_that_fails_keeps_its_batch_for_the_thread_to_retry(redis_url, stream, caplog):
    client = redis.Redis.from_url(redis_url)
    records = [record(i) for i in range(10)]
    with FaultProxy.for_redis(redis_url) as proxy:
        sink = LogSink(redis_url=proxy.url, stream_key=stream, batch_size=10, flush_seconds=3600)
        proxy.down()
        sink.start()
        try:
            with caplog.at_level(logging.WARNING, logger="gateway.logsink"):
                _add_on_loop(sink, records)

            assert sink.failing
            assert sink.pending == 10  # back in the buffer, nothing lost
            assert client.xlen(stream) == 0
            assert "request-log write failed" in caplog.text

            proxy.restore()
            assert sink.flush(timeout=10)  # the thread's retry
            assert not sink.failing
        finally:
            sink.stop()
    assert _entries(client, stream) == [records]


def test_while_the_sink_is_failing_full_batches_are_left_to_the_thread(redis_url, stream):
    client = redis.Redis.from_url(redis_url)
    first, second = [record(i) for i in range(10)], [record(i) for i in range(10, 20)]
    with FaultProxy.for_redis(redis_url) as proxy:
        sink = LogSink(redis_url=proxy.url, stream_key=stream, batch_size=10, flush_seconds=3600)
        proxy.down()
        sink.start()
        try:
            _add_on_loop(sink, first)
            assert sink.failing

            async def run() -> bool:
                sink.ship_from(asyncio.get_running_loop())
                for r in second:
                    sink.add(r)
                started = sink._shipping is not None
                await sink.aclose()
                return started

            assert run_async(run()) is False  # the thread has the buffer until one of its writes succeeds
            assert sink.pending == 20

            proxy.restore()
            assert sink.flush(timeout=10)
        finally:
            sink.stop()
    assert sorted(r["request_id"] for batch in _entries(client, stream) for r in batch) == sorted(
        r["request_id"] for r in first + second
    )


def test_embedded_mode_keeps_its_database_writes_in_the_thread():
    sink = LogSink(flush_seconds=3600)  # no Redis URL: the database writer

    async def run() -> None:
        sink.ship_from(asyncio.get_running_loop())
        for i in range(sink._batch_size):
            sink.add(record(i))
        assert sink._shipping is None

    run_async(run())
    assert sink.pending == sink._batch_size


def test_a_served_gateway_sends_full_batches_from_its_loop_and_the_rest_at_shutdown(world, redis_url, stream):  # noqa: F811
    client = redis.Redis.from_url(redis_url)
    sink = LogSink(redis_url=redis_url, stream_key=stream, batch_size=5, flush_seconds=3600)
    app = GatewayApp(config=ConfigHolder(), engine=build_engine(clock=ManualClock()), sink=sink)
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
    with serve(app, lifespan=True, http=CorkedHttpToolsProtocol, loop="uvloop") as url:
        ids = []
        for _ in range(12):
            response = httpx.post(
                f"{url}/v1/chat/completions", json=body, headers={"authorization": f"Bearer {world.secret}"}
            )
            assert response.status_code == 200
            ids.append(response.headers["x-vidai-request-id"])
        # The thread's timer is an hour: the two full batches can only have left from the event loop.
        until(lambda: client.xlen(stream) == 2 and sink.pending == 2, 10, "two batches sent from the event loop")
        assert [[r["request_id"] for r in batch] for batch in _entries(client, stream)] == [ids[:5], ids[5:10]]
    # Shutdown: the loop's client closed, the thread drained the rest.
    assert [len(batch) for batch in _entries(client, stream)] == [5, 5, 2]
    assert sorted(r["request_id"] for batch in _entries(client, stream) for r in batch) == sorted(ids)


def test_full_batches_the_thread_finds_are_left_to_the_event_loop(redis_url, stream):
    client = redis.Redis.from_url(redis_url)
    records = [record(i) for i in range(25)]
    sink = LogSink(redis_url=redis_url, stream_key=stream, batch_size=10, flush_seconds=3600)
    for r in records:  # before any loop: they wait for the thread's first pass
        sink.add(r)

    async def run() -> None:
        sink.ship_from(asyncio.get_running_loop())
        sink.start()  # its first pass finds two full batches and hands them to the loop
        async with asyncio.timeout(10):
            while client.xlen(stream) < 2 or sink.pending > 5:
                await asyncio.sleep(0.01)
        await sink.aclose()

    try:
        run_async(run())
        assert _entries(client, stream) == [records[:10], records[10:20]]
        assert sink.pending == 5  # less than a batch: the thread's, at its next tick
    finally:
        sink.stop()
    assert _entries(client, stream)[2] == records[20:]


def test_a_send_cancelled_on_the_event_loop_keeps_its_batch(redis_url, stream):
    client = redis.Redis.from_url(redis_url)
    records = [record(i) for i in range(10)]
    with FaultProxy.for_redis(redis_url) as proxy:
        sink = LogSink(redis_url=proxy.url, stream_key=stream, batch_size=10, flush_seconds=3600)
        sink.start()
        try:

            async def run() -> None:
                sink.ship_from(asyncio.get_running_loop())
                proxy.freeze()  # Redis hangs: the send waits for its answer
                for r in records:
                    sink.add(r)
                async with asyncio.timeout(10):
                    while sink._buffer:  # the batch taken: the send is under way
                        await asyncio.sleep(0.01)
                shipping = sink._shipping
                assert shipping is not None
                shipping.cancel()
                await asyncio.gather(shipping, return_exceptions=True)
                assert sink.pending == 10  # back in the buffer
                await sink.aclose()

            run_async(run())
            assert sink.failing
            proxy.restore()
            assert sink.flush(timeout=10)  # the thread sent it
        finally:
            sink.stop()
    # The cancelled send's bytes may reach Redis after the restore too: a duplicate the ingest stores once.
    assert {r["request_id"] for batch in _entries(client, stream) for r in batch} == {r["request_id"] for r in records}


def test_a_send_to_a_hung_redis_fails_at_its_timeout_and_keeps_its_batch(redis_url, stream):
    records = [record(i) for i in range(10)]
    with FaultProxy.for_redis(redis_url) as proxy:
        sink = LogSink(redis_url=proxy.url, stream_key=stream, batch_size=10, flush_seconds=3600)
        try:

            async def run() -> None:
                sink.ship_from(asyncio.get_running_loop())
                proxy.freeze()  # connections open, nothing answered
                for r in records:
                    sink.add(r)
                async with asyncio.timeout(10):  # the send's own timeout is 2 s, tried once
                    while sink._shipping is not None:
                        await asyncio.sleep(0.01)
                await sink.aclose()

            run_async(run())
            assert sink.failing
            assert sink.pending == 10  # kept for the thread
        finally:
            proxy.restore()


def test_a_sink_stopped_during_the_event_loops_send_waits_for_it_and_spills_the_batch_it_kept(
    redis_url, stream, tmp_path
):
    """`stop` while the event loop still sends (a shutdown cancelled while `aclose` awaited the send, or no `aclose`
    at all): the thread waits for that send to end, here failing at its timeout, and the batch it gave back is
    spilled."""
    records = [record(i) for i in range(10)]
    with FaultProxy.for_redis(redis_url) as proxy:
        sink = LogSink(redis_url=proxy.url, stream_key=stream, batch_size=10, flush_seconds=3600, spill_dir=tmp_path)
        sink.start()

        async def run() -> None:
            sink.ship_from(asyncio.get_running_loop())
            proxy.freeze()  # Redis hangs: the loop's send waits for its 2 s timeout
            for r in records:
                sink.add(r)
            async with asyncio.timeout(10):
                while sink._buffer:  # the batch taken: the send is under way
                    await asyncio.sleep(0.01)
            await asyncio.to_thread(sink.stop)  # the loop runs on meanwhile, as it does during a shutdown

        try:
            run_async(run())
        finally:
            proxy.restore()
    spilled = sorted(tmp_path.iterdir())
    assert (sink.spilled, sink.pending) == (10, 0)
    assert [orjson.loads(line)["request_id"] for line in spilled[0].read_bytes().splitlines()] == [
        r["request_id"] for r in records
    ]


def test_a_gateway_shutdown_cancelled_during_the_loops_send_spills_the_batch_and_stops_its_threads(
    world,  # noqa: F811 - the fixture
    redis_url,
    stream,
    tmp_path,
):
    """The gateway's shutdown cancelled while it awaits the event loop's send: the sink is stopped all the same and
    what it holds spilled, not lost, and the shutdown's later steps (the metrics and configuration threads) run."""
    records = [record(i) for i in range(10)]
    with FaultProxy.for_redis(redis_url) as proxy:
        sink = LogSink(redis_url=proxy.url, stream_key=stream, batch_size=10, flush_seconds=3600, spill_dir=tmp_path)
        app = GatewayApp(config=ConfigHolder(), engine=build_engine(clock=ManualClock()), sink=sink)

        async def run() -> None:
            await app.startup()
            proxy.freeze()
            for r in records:
                sink.add(r)
            async with asyncio.timeout(10):
                while sink._buffer:
                    await asyncio.sleep(0.01)
                shutdown = asyncio.get_running_loop().create_task(app.shutdown())
                while sink._loop is not None:  # aclose has begun: it awaits the send
                    await asyncio.sleep(0.01)
            shutdown.cancel()
            with pytest.raises(asyncio.CancelledError):
                await shutdown

        try:
            run_async(run())
        finally:
            proxy.restore()
    assert (sink.spilled, sink.pending) == (10, 0)
    threads = [sink._thread, app.metrics._thread, *app.config._threads]
    assert [t.name for t in threads if t is not None and t.is_alive()] == []


def test_a_send_from_the_event_loop_fails_past_its_time_even_when_every_answer_comes(redis_url, stream):
    """Every chunk 0.4 s late both ways (under the client's 2 s per read), over a send of several round trips
    (the connection's handshake, the script): the send outlasts its 0.5 s and fails, keeping its batch, instead of
    holding the loop's sending, and a stopping sink's wait, for as long as Redis takes."""
    records = [record(i) for i in range(10)]
    with FaultProxy.for_redis(redis_url) as proxy:
        sink = LogSink(redis_url=proxy.url, stream_key=stream, batch_size=10, flush_seconds=3600, loop_send_seconds=0.5)
        try:
            proxy.slow(0.4)
            _add_on_loop(sink, records)
            assert (sink.failing, sink.pending) == (True, 10)
        finally:
            proxy.restore()


def test_a_stopping_sink_writes_the_full_batches_itself(redis_url, stream):
    """`stop` without `aclose`, while the event loop runs and the buffer holds a full batch: the loop sends nothing
    once the sink stops, so the thread writes that batch itself (it used to hand it to the loop again and again
    until `stop` gave up and spilled it)."""
    client = redis.Redis.from_url(redis_url)
    records = [record(i) for i in range(10)]
    sink = LogSink(redis_url=redis_url, stream_key=stream, batch_size=10, flush_seconds=3600)
    sink.start()

    async def run() -> None:
        sink.ship_from(asyncio.get_running_loop())
        for r in records:
            sink.add(r)  # a full batch: the loop's send is created, and runs at the loop's next turn
        stopping = threading.Thread(target=sink.stop)
        stopping.start()
        while not sink._stop.is_set():  # the loop holds still until the sink is stopping: its send then refuses
            pass
        await asyncio.to_thread(stopping.join)

    run_async(run())
    assert (sink.spilled, sink.pending) == (0, 0)
    assert _entries(client, stream) == [records]


def test_records_added_while_a_stopping_sink_waits_for_the_loops_send_are_written_at_once(redis_url, stream):
    """The thread, stopping, waits for the event loop's send under way; what the loop adds meanwhile is written
    as soon as that send has ended, not at the thread's next tick (an hour here)."""
    client = redis.Redis.from_url(redis_url)
    first, late = [record(i) for i in range(10)], [record(i) for i in range(10, 13)]
    with FaultProxy.for_redis(redis_url) as proxy:
        sink = LogSink(redis_url=proxy.url, stream_key=stream, batch_size=10, flush_seconds=3600)
        sink.start()

        async def run() -> None:
            sink.ship_from(asyncio.get_running_loop())
            proxy.slow(0.2)  # the loop's send takes a few round trips of 0.4 s: the late records come before it ends
            for r in first:
                sink.add(r)
            async with asyncio.timeout(10):
                while sink._buffer:  # the batch taken: the send is under way
                    await asyncio.sleep(0.01)
            stopping = threading.Thread(target=sink.stop)
            stopping.start()
            async with asyncio.timeout(10):
                while not sink._stop.is_set():
                    await asyncio.sleep(0.01)
            for r in late:
                sink.add(r)
            await asyncio.to_thread(stopping.join)

        try:
            run_async(run())
        finally:
            proxy.restore()
    assert (sink.spilled, sink.pending) == (0, 0)
    assert _entries(client, stream) == [first, late]
