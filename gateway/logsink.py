"""Request-log sink: the request path appends a dict; a background thread ships batches.

Embedded mode writes batches straight into the database. Production appends them to
a Redis stream; the `requestlogs.ingest` Celery task copies them into PostgreSQL and
acknowledges only committed rows. Either way a failed write keeps the batch and
retries, so a database or Redis outage loses nothing (up to `max_buffer` records).

In the production gateway, full batches leave from the event loop itself (`ship_from`), sent without waiting
by an asyncio Redis client: a thread that calls Redis takes the GIL back after every system call of the call,
and each time the event loop has to stop and hand it over, which cost the worker more than the sending itself
(docs/performance.md, round twenty-three). The thread still sends what its timer finds (a quiet gateway's
partial batches), retries while Redis fails, replays spill files and drains at shutdown.

A batch is one stream entry (requestlogs/stream.py). The stream is capped in records so a long PostgreSQL
outage cannot fill the Redis that also holds the breakers and the Celery broker; what the cap trims before it
was ingested is counted in Redis (`<stream>:trimmed`), as are the records this buffer had to drop
(`<stream>:dropped`). A sink stopped while its writes fail spills its buffer to a local file, replayed at the
next start with the count of drops not yet counted; so are a record added after `stop` and a batch whose write
fails after `stop` gave up waiting for it (both at once), and a sink nobody stopped is stopped at the
interpreter's exit (`_stop_at_exit`), which then waits a last time for a write still under way.
"""

from __future__ import annotations

import asyncio
import atexit
import fcntl
import logging
import os
import random
import re
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from requestlogs.stream import (
    BATCH_FIELD,
    COUNT_FIELD,
    DEAD_LETTER_MAXLEN,
    DEFAULT_MAXLEN,
    ENTRY_RECORDS_MAX,
    STREAM_KEY,
    StreamKeys,
)

log = logging.getLogger(__name__)

# While the stream stays over its cap (ingestion stopped), every batch trims: one error line a minute says so,
# with the count since the last line, instead of one a batch (a dozen a second under load). The exact total
# is in Redis (`<stream>:trimmed`, exported as a metric).
TRIM_REPORT_SECONDS = 60.0

# Appends a batch as one entry, then trims whole entries, oldest first, until the stream holds at most the cap of
# records, counting in the same atomic step the records it trimmed: every entry still in the stream is not yet
# acknowledged (ingest deletes what it committed), so the count is exact, or too high by an entry trimmed between
# its commit and its acknowledgement (conservative). The batch just added is never trimmed (a cap smaller than a
# batch keeps the newest batch), and one call trims at most TRIM_ENTRIES_MAX entries, so Redis, which also holds
# the breakers and the Celery broker, is never held long; the next append goes on. An entry of the first format
# (one record, written by an earlier release) is not in the records count: trimming it counts one trimmed record
# and leaves the count as is. The records count starts again from nothing whenever the stream is empty, so any
# drift does not last. The sink's own buffer drops ride along.
# KEYS: stream, records, trimmed, dropped, lost_since. ARGV: cap (0 = none), now, dropped delta, count, batch.
TRIM_ENTRIES_MAX = 100
_APPEND_SCRIPT = f"""
if redis.call('XLEN', KEYS[1]) == 0 then redis.call('DEL', KEYS[2]) end
local added = redis.call('XADD', KEYS[1], '*', '{COUNT_FIELD}', ARGV[4], '{BATCH_FIELD}', ARGV[5])
local held = redis.call('INCRBY', KEYS[2], ARGV[4])
local cap = tonumber(ARGV[1])
local trimmed = 0
local budget = {TRIM_ENTRIES_MAX}
while cap > 0 and held > cap and budget > 0 do
  budget = budget - 1
  local oldest = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', 1)[1]
  if not oldest or oldest[1] == added then break end
  local counted = nil
  for i = 1, #oldest[2], 2 do
    if oldest[2][i] == '{COUNT_FIELD}' then counted = tonumber(oldest[2][i + 1]) end
  end
  redis.call('XDEL', KEYS[1], oldest[1])
  if counted then
    held = redis.call('DECRBY', KEYS[2], counted)
    trimmed = trimmed + counted
  else
    trimmed = trimmed + 1
  end
end
local dropped = tonumber(ARGV[3])
if trimmed > 0 then redis.call('INCRBY', KEYS[3], trimmed) end
if dropped > 0 then redis.call('INCRBY', KEYS[4], dropped) end
if trimmed + dropped > 0 then redis.call('SET', KEYS[5], ARGV[2], 'NX') end
return trimmed
"""

# A send from the event loop ends within LOOP_SEND_SECONDS whatever Redis does (each connect and read has 2 s of its
# own, and a send may make several); a stopping sink waits for one under way that long, plus a margin for a busy loop.
LOOP_SEND_SECONDS = 4.0
LOOP_SEND_MARGIN_SECONDS = 2.0

# At the interpreter's exit, a sink that was never stopped (uvicorn's forced exit, a second Ctrl-C, skips the
# lifespan's shutdown) is stopped then, waiting this long at most for its thread; what it could not write is spilled.
EXIT_STOP_SECONDS = 5.0

# A spill file's name carries the buffer drops not yet counted in Redis (`<stamp>-<pid>-<id>.dropped<N>.jsonl`): the
# replay adds them to the count with the file's records. An empty `.partial` older than STALE_PARTIAL_SECONDS is a
# crash's leftover (a spill locks its file at once) and is deleted.
_DROPPED_IN_NAME = re.compile(r"\.dropped(\d+)\.(?:jsonl|partial)$")
STALE_PARTIAL_SECONDS = 600.0

# Request ids are names, not secrets: a generator seeded from the OS (again in a forked child, which would
# otherwise repeat its parent's sequence) instead of a system call per id.
_ids = random.Random(os.urandom(32))
os.register_at_fork(after_in_child=lambda: _ids.seed(os.urandom(32)))


def new_request_id() -> str:
    """A UUIDv7 (RFC 9562) as 32 hex digits: time-ordered to the millisecond, then 74 random bits.

    Ids that grow with time land at one end of the log table's unique index, so a busy table keeps
    taking rows at the same rate (random ids would touch a random index page per row), and sorting
    request ids sorts them by time.
    """
    rand = _ids.getrandbits(80)  # 74 of them used
    value = (time.time_ns() // 1_000_000) << 80 | 0x7 << 76 | (rand >> 68) << 64 | 0b10 << 62 | rand & (2**62 - 1)
    return f"{value:032x}"


class LogSink:
    def __init__(
        self,
        *,
        redis_url: str = "",
        flush_seconds: float = 0.5,
        loop_send_seconds: float = LOOP_SEND_SECONDS,
        batch_size: int = ENTRY_RECORDS_MAX,
        max_buffer: int = 50_000,
        stream_key: str = STREAM_KEY,
        maxlen: int = DEFAULT_MAXLEN,
        spill_dir: Path | str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._redis_url = redis_url
        self._stream_key = stream_key
        self.keys = StreamKeys(stream_key)
        self._maxlen = maxlen
        # Where stop() writes what it could not send, and start() looks for what an earlier process left.
        self._spill_dir = Path(spill_dir) if spill_dir else None
        self._flush_seconds = flush_seconds
        self._loop_send_seconds = loop_send_seconds  # a send from the event loop fails past this, whatever Redis does
        if not 1 <= batch_size <= ENTRY_RECORDS_MAX:
            raise ValueError(f"batch_size must be from 1 to {ENTRY_RECORDS_MAX} (one stream entry), got {batch_size}")
        self._batch_size = batch_size
        self._full_at = batch_size  # `add` acts from this many records on: 1 once stopped (every record, at once)
        # ~1 KiB a record: the cap bounds memory during a long outage (records past it are counted
        # and dropped, oldest first, and the drop is logged).
        self._max_buffer = max_buffer
        self._buffer: deque[dict[str, Any]] = deque()
        self.dropped = 0  # records dropped because the buffer was full
        self._dropped_reported = 0  # of which already added to the Redis counter
        self.spilled = 0
        self.replayed = 0
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._idle = threading.Condition()
        self._in_flight = 0  # records taken from the buffer and not yet written, by the thread or the loop
        self._thread: threading.Thread | None = None
        self._stopped = False  # `stop` has ended the thread's work
        self._failing = False
        self._redis: Any = None  # the sink thread's client, and its registered append script
        self._append: Any = None
        self._probe: Any = None  # short timeouts, for /metrics and /readyz
        self._clock = clock
        self._trimmed_unreported = 0  # trimmed since the last error line
        self._trim_reported_at: float | None = None
        self._report_lock = threading.Lock()  # the thread and the event loop both report trims
        # Shipping from the event loop (ship_from): the loop, its Redis client and script, the send in progress.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_redis: Any = None
        self._loop_append: Any = None
        self._shipping: asyncio.Task[None] | None = None
        self._loop_batch: list[dict[str, Any]] | None = None  # what the loop's send in progress carries

    def add(self, record: dict[str, Any]) -> None:
        """Request path: O(1), never blocks, never raises. Once `ship_from(loop)`, called on that loop only."""
        buffer = self._buffer
        buffer.append(record)
        if len(buffer) > self._max_buffer:
            try:
                buffer.popleft()
            except IndexError:  # emptied since measured, by a spill in another thread (`stop`): nothing dropped
                pass
            else:
                self.dropped += 1
                if self.dropped == 1 or self.dropped % 10_000 == 0:
                    log.error(
                        "request-log buffer full (%d records): %d records dropped so far",
                        self._max_buffer,
                        self.dropped,
                    )
        if len(buffer) >= self._full_at:
            self._batch_full()

    def _batch_full(self) -> None:
        if self._stopped:
            self._spill()  # a request that ended after `stop` (during the shutdown): nothing else would write it
        elif self._loop is not None and not self._failing:
            self._kick()
        else:
            self._wake.set()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="request-log-sink", daemon=True)
        self._thread.start()
        _started.add(self)

    def _at_exit(self) -> None:
        """The interpreter is exiting: stop a sink nobody stopped; then, whoever stopped it, give a thread still
        writing (its stop timed out) a last chance to finish, and spill what is left: the process ends right
        after, and the thread with it."""
        if not self._stop.is_set():
            log.warning("request-log sink not stopped before exit (a forced shutdown?): stopping it now")
            self.stop(timeout=EXIT_STOP_SECONDS)
        if self._thread is not None and self._thread.is_alive():
            self._thread.join(timeout=EXIT_STOP_SECONDS)
        if self._buffer:
            self._spill()

    def stop(self, timeout: float = 10.0) -> None:
        """Drain what is buffered, then stop; what could not be written goes to a spill file."""
        self._stop.set()
        self._wake.set()
        if self._thread:
            self._thread.join(timeout=timeout)
            if self._thread.is_alive():
                log.error("request-log sink still writing at shutdown; %d records in flight", self._in_flight)
            else:
                self._report_trimmed(0, final=True)
        self._stopped = True  # from now on `add` spills each record at once (`_batch_full`)
        self._full_at = 1
        if self._buffer:
            self._spill()

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until everything added so far is written (tests, shutdown)."""
        self._wake.set()
        with self._idle:
            return self._idle.wait_for(lambda: not self._buffer and not self._in_flight, timeout=timeout)

    @property
    def pending(self) -> int:
        with self._idle:
            return len(self._buffer) + self._in_flight

    @property
    def failing(self) -> bool:
        return self._failing

    def counts(self) -> dict[str, int]:
        """The pipeline's counters: this process's, plus (production) those kept in Redis for every gateway.

        Blocks for at most about a second when Redis does not answer; then `redis_up` is 0.
        """
        counts = {
            "buffered": self.pending,
            "buffer_dropped_total": self.dropped,
            "spilled_total": self.spilled,
            "replayed_total": self.replayed,
        }
        if not self._redis_url:
            return counts
        try:
            probe = self._probe
            if probe is None:
                import redis

                probe = self._probe = redis.Redis.from_url(
                    self._redis_url, socket_timeout=0.5, socket_connect_timeout=0.5
                )
            held, trimmed, dead = probe.mget(self.keys.records, self.keys.trimmed, self.keys.dead_lettered)
        except Exception:  # noqa: BLE001 - Redis away: report it as a value
            return {**counts, "redis_up": 0}
        return {
            **counts,
            "redis_up": 1,
            "stream_length": max(int(held or 0), 0),  # records, not entries
            "trimmed_total": int(trimmed or 0),
            "dead_lettered_total": int(dead or 0),
        }

    def _run(self) -> None:
        replay_due = self._spill_dir is not None
        while True:
            if replay_due and not self._stop.is_set():
                replay_due = not self._replay()
            if not self._stop.is_set():  # stopping: what the loop added meanwhile goes now, not at the next tick
                self._wake.wait(timeout=self._flush_seconds)
            self._wake.clear()
            self._drain()
            if self._stop.is_set():
                self._await_loop_send()
            if self._stop.is_set() and (not self._buffer or self._failing):
                if not self._redis_url:
                    from django.db import connections

                    connections.close_all()  # this thread's connection only
                elif self._redis is not None:
                    self._redis.close()  # the sink outlives its thread (`_started`): its socket need not
                    self._redis = self._append = None
                return
            if self._failing:
                self._stop.wait(1.0)

    def _await_loop_send(self) -> None:
        """Stopping: wait for a send the event loop still has under way (a shutdown cancelled while `aclose`
        awaited it, or no `aclose` at all). While the loop runs, it ends within `loop_send_seconds`: written, or
        its batch back in the buffer with the sink failing, for `stop` to spill. What the thread had in flight
        itself is done by now, so whatever is still in flight is the loop's."""
        loop = self._loop
        if loop is not None and loop.is_closed():  # it ended with a send under way, which will never finish
            self._reclaim_loop_batch()
            return
        wait = self._loop_send_seconds + LOOP_SEND_MARGIN_SECONDS
        with self._idle:
            if not self._idle.wait_for(lambda: not self._in_flight, timeout=wait):
                log.error(
                    "request-log sink stopping: the event loop's send of %d records did not end within %.0f s;"
                    " they are lost if it fails",
                    self._in_flight,
                    wait,
                )

    def _drain(self) -> None:
        while True:
            loop = self._loop
            handing = not self._failing and not self._stop.is_set()  # stopping: this thread writes everything
            if loop is not None and handing and len(self._buffer) >= self._batch_size:
                try:  # full batches are the event loop's to send (ship_from); what is left, the next tick's
                    loop.call_soon_threadsafe(self._kick)
                    return
                except RuntimeError:  # that loop has closed: send them from here
                    pass
            batch = self._take()
            if not batch:
                return
            try:
                self._write(batch)
            except Exception as exc:  # noqa: BLE001 - keep the batch and retry later
                self._keep(batch, exc)
                return
            self._recovered()  # before `_written`: whoever `flush` wakes sees a sink that recovered
            self._written(batch)

    def _recovered(self) -> None:
        """A write has just succeeded: the sink is no longer failing."""
        if self._failing:
            log.info("request-log writes recovered")
            self._failing = False

    def _reclaim_loop_batch(self) -> None:
        """The batch of a send the closed loop left under way goes back to the buffer's front, for this thread
        to write or `stop` to spill (spilled at once if `stop` has already spilled, its wait for this thread
        timed out). It may have reached Redis too: the ingest stores a request id once."""
        with self._idle:
            batch, self._loop_batch = self._loop_batch, None
            if batch:
                self._buffer.extendleft(reversed(batch))
                self._in_flight -= len(batch)
                self._idle.notify_all()
        self._spill_if_stopped()

    def _take(self) -> list[dict[str, Any]]:
        """The next batch from the buffer, counted in flight until `_written`."""
        with self._idle:
            batch = self._pop_left(self._batch_size)
            self._in_flight += len(batch)
        return batch

    def _pop_left(self, count: int) -> list[dict[str, Any]]:
        """Up to `count` records from the buffer's front (under `_idle`). `add` may drop the oldest meanwhile
        (a full buffer), without the lock: the buffer can run out before `count`."""
        buffer, records = self._buffer, []
        for _ in range(count):
            try:
                records.append(buffer.popleft())
            except IndexError:
                break
        return records

    def _keep(self, batch: list[dict[str, Any]], exc: BaseException) -> None:
        """A batch whose write failed goes back to the buffer's front, no longer in flight (one step, so that
        `pending` and `flush` never miss it), and the sink is failing: its thread retries until a write
        succeeds. Once `stop` has spilled (its wait for the thread timed out while this write was under way),
        nothing would: the batch is spilled at once."""
        if not self._failing:
            log.warning(
                "request-log write failed (%s: %s); keeping %d records for retry",
                type(exc).__name__,
                exc,
                len(self._buffer) + len(batch),
            )
        with self._idle:
            self._buffer.extendleft(reversed(batch))
            self._in_flight -= len(batch)
            self._failing = True
            self._idle.notify_all()
        self._spill_if_stopped()

    def _spill_if_stopped(self) -> None:
        """After a batch went back to the buffer: spill it if `stop` has already spilled the buffer. This checks
        `_stopped` after the batch is back, `stop` checks the buffer after setting `_stopped`: one of the two
        spills it."""
        if self._stopped and self._buffer:
            self._spill()

    def _written(self, batch: list[dict[str, Any]]) -> None:
        with self._idle:
            self._in_flight -= len(batch)
            self._idle.notify_all()

    def _write(self, batch: list[dict[str, Any]], carried: int = 0) -> None:
        """Write a batch; `carried`: buffer drops a spill file brought, counted in Redis with it."""
        if self._redis_url:
            self._write_redis(batch, carried)
        else:
            from requestlogs.services import request_logs_insert_isolating

            _, refused = request_logs_insert_isolating(records=batch)
            for record, error in refused:
                log.error("request log %s refused by the database and dropped: %s", record.get("request_id"), error)

    def _client(self) -> Any:
        client = self._redis
        if client is None:
            import redis

            client = self._redis = redis.Redis.from_url(self._redis_url, socket_timeout=2, socket_connect_timeout=2)
            self._append = client.register_script(_APPEND_SCRIPT)
        return client

    def _write_redis(self, batch: list[dict[str, Any]], carried: int = 0) -> None:
        client = self._client()
        dropped = self.dropped - self._dropped_reported
        if not batch:  # a spill file whose lines were all torn: its count of drops still goes
            client.pipeline(transaction=True).incrby(self.keys.dropped, carried).set(
                self.keys.lost_since, int(time.time()), nx=True
            ).execute()
            return
        trimmed = self._append(keys=self._append_keys(), args=self._append_args(batch, dropped + carried))
        self._dropped_reported += dropped
        if trimmed:
            self._report_trimmed(trimmed)

    def _append_keys(self) -> list[str]:
        keys = self.keys
        return [keys.stream, keys.records, keys.trimmed, keys.dropped, keys.lost_since]

    def _append_args(self, batch: list[dict[str, Any]], dropped: int) -> list[Any]:
        return [self._maxlen, int(time.time()), dropped, len(batch), orjson.dumps(batch)]

    # -- shipping from the event loop ---------------------------------------------------
    def ship_from(self, loop: asyncio.AbstractEventLoop) -> None:
        """Send each full batch from `loop`, the gateway's event loop, rather than from this sink's thread
        (production only; embedded mode's database writes stay in the thread). From then on `add` runs on
        that loop. One send at a time: records added meanwhile wait in the buffer for the next. While the
        sink is failing, the thread has the buffer: the loop sends again once a write of the thread's
        succeeded."""
        if not self._redis_url:
            return
        import redis.asyncio
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff

        # One try per send, 2 s at most to connect and 2 s for each answer, and `loop_send_seconds` for the whole
        # send (`_ship`): a hung or slow Redis fails the send, the thread retries, and shutdown never waits long
        # for the event loop's send in progress.
        self._loop_redis = redis.asyncio.Redis.from_url(
            self._redis_url, socket_timeout=2, socket_connect_timeout=2, retry=Retry(NoBackoff(), 0)
        )
        self._loop_append = self._loop_redis.register_script(_APPEND_SCRIPT)
        self._loop = loop

    async def aclose(self) -> None:
        """Stop sending from the event loop (before `stop`): no send starts from now on; the one in progress is
        awaited (shielded: cancelling the shutdown does not cancel it); then its client is closed."""
        self._loop = None
        shipping = self._shipping
        if shipping is not None:
            await asyncio.shield(shipping)
        client, self._loop_redis, self._loop_append = self._loop_redis, None, None
        if client is not None:
            await client.aclose()

    def _kick(self) -> None:
        """On the event loop: start sending full batches, unless a send is in progress (it goes on to them)."""
        if self._shipping is None and self._loop is not None and not self._failing:
            self._shipping = self._loop.create_task(self._ship())

    async def _ship(self) -> None:
        """Send full batches from the event loop until fewer than a batch are left, `aclose`, or a write fails."""
        try:
            while (
                self._loop is not None
                and not self._failing
                and not self._stop.is_set()
                and len(self._buffer) >= self._batch_size
            ):
                batch = self._loop_batch = self._take()
                if not batch:
                    return
                try:
                    async with asyncio.timeout(self._loop_send_seconds):
                        trimmed = await self._loop_append(keys=self._append_keys(), args=self._append_args(batch, 0))
                except BaseException as exc:  # a cancelled send keeps its batch too
                    self._loop_batch = None
                    self._keep(batch, exc)
                    self._wake.set()  # the thread retries
                    if not isinstance(exc, Exception):
                        raise
                    return
                self._loop_batch = None
                self._written(batch)
                if trimmed:
                    self._report_trimmed(trimmed)
        finally:
            self._shipping = None

    def _report_trimmed(self, trimmed: int, *, final: bool = False) -> None:
        """Log what the cap trimmed: the first time at once, then at most once per TRIM_REPORT_SECONDS, and
        what is left unreported when the sink stops (`final`)."""
        with self._report_lock:
            self._report_trimmed_locked(trimmed, final=final)

    def _report_trimmed_locked(self, trimmed: int, *, final: bool) -> None:
        self._trimmed_unreported += trimmed
        now = self._clock()
        recent = self._trim_reported_at is not None and now - self._trim_reported_at < TRIM_REPORT_SECONDS
        if not self._trimmed_unreported or (recent and not final):
            return
        log.error(
            "request-log stream over its cap of %d records: %d records not yet ingested were trimmed%s "
            "(is the ingest worker running?)",
            self._maxlen,
            self._trimmed_unreported,
            "" if self._trim_reported_at is None else f" in the last {now - self._trim_reported_at:.0f} s",
        )
        self._trimmed_unreported = 0
        self._trim_reported_at = now

    # -- spill file ------------------------------------------------------------------
    def _spill(self) -> None:
        """Write the buffer to a new file in the spill dir: one JSON record a line, fsynced, then renamed."""
        with self._idle:  # a thread still running (its stop timed out) takes and keeps batches under this lock
            records = self._pop_left(len(self._buffer))  # `add` appends meanwhile
        if not records:
            return  # another spill took them (`stop` and a batch given back after it, say)
        if self._spill_dir is None:
            log.error("request-log sink stopped with %d unwritten records and no spill dir: lost", len(records))
            return
        dropped = self.dropped - self._dropped_reported  # never sent: the file carries them to Redis
        name = f"{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        if dropped > 0:
            name += f".dropped{dropped}"
        partial, final = self._spill_dir / f"{name}.partial", self._spill_dir / f"{name}.jsonl"
        try:
            self._spill_dir.mkdir(parents=True, exist_ok=True)
            with open(partial, "ab") as f:
                # Held until closed, after the rename: a replaying process never reads a file half written.
                fcntl.flock(f, fcntl.LOCK_EX)
                f.write(b"".join(orjson.dumps(record) + b"\n" for record in records))
                f.flush()
                os.fsync(f.fileno())
                os.replace(partial, final)
            dir_fd = os.open(self._spill_dir, os.O_RDONLY)
            try:
                os.fsync(dir_fd)  # the rename itself survives a power cut
            finally:
                os.close(dir_fd)
        except OSError as exc:
            log.error("request-log spill to %s failed (%s): %d records lost", final, exc, len(records))
            return
        with self._idle:  # `stop` (or a record added after it) and a thread it left running may spill at once
            self.spilled += len(records)
            self._dropped_reported += dropped
        log.warning(
            "request-log sink stopped with %d records unwritten: spilled to %s, replayed at the next start",
            len(records),
            final,
        )

    def _replay(self) -> bool:
        """Write the spill files other processes left, deleting each once written; True when none is left.

        An empty `.partial` file is left alone: a spill may have created it and not yet locked it. One older than
        STALE_PARTIAL_SECONDS is a crash's leftover, with nothing in it: it is deleted.

        A crash halfway replays the whole file again at the next start: the stream then holds some records
        twice, which the ingest stores once (it skips a request_id already stored).
        """
        assert self._spill_dir is not None
        paths = sorted([*self._spill_dir.glob("*.jsonl"), *self._spill_dir.glob("*.partial")])
        held = False
        for path in paths:
            try:
                f = open(path, "rb")  # closed by the `with` below, after the unlink
            except FileNotFoundError:
                continue
            with f:
                try:
                    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    held = True  # being written, or replayed by another worker: look again later
                    continue
                try:
                    if os.stat(path).st_ino != os.fstat(f.fileno()).st_ino:
                        continue  # renamed or replayed while we waited for it
                except FileNotFoundError:
                    continue
                content = f.read()
                if not content and path.suffix == ".partial":
                    if time.time() - os.fstat(f.fileno()).st_mtime > STALE_PARTIAL_SECONDS:
                        path.unlink()  # a crash's empty leftover
                    continue  # else a spill that has created it and not yet locked it
                records, broken = [], []
                for number, line in enumerate(content.splitlines(), start=1):
                    try:
                        record = orjson.loads(line)
                    except orjson.JSONDecodeError:
                        record = None
                    if isinstance(record, dict):
                        records.append(record)
                    elif line.strip():
                        broken.append((number, line))  # a line torn by a crash mid-spill, say
                found = _DROPPED_IN_NAME.search(path.name)
                carried = int(found.group(1)) if found else 0
                try:
                    starts = range(0, len(records), self._batch_size)
                    for start in starts:  # the drops go with the last batch: a crash before it counts them once
                        self._write(records[start : start + self._batch_size], carried if start == starts[-1] else 0)
                    if not records and carried and self._redis_url:
                        self._write([], carried)
                    for number, line in broken:
                        self._dead_letter_line(path, number, line)
                except Exception as exc:  # noqa: BLE001 - keep the file and retry later
                    log.warning("request-log replay of %s failed (%s: %s); retrying", path, type(exc).__name__, exc)
                    self._failing = True
                    return False
                path.unlink()
                if records or carried:  # written: a replay that failed before has recovered (an idle gateway's
                    self._recovered()  # readiness would otherwise say "failing" until its next request)
            self.replayed += len(records)
            log.info("request-log replay: %d records from %s", len(records), path)
        return not held

    def _dead_letter_line(self, path: Path, number: int, line: bytes) -> None:
        log.error("request-log spill %s line %d cannot be decoded; dead-lettered: %r", path, number, line[:200])
        if self._redis_url:
            client = self._client()
            pipe = client.pipeline(transaction=False)
            pipe.xadd(
                self.keys.dead,
                {"raw": line, "error": f"undecodable line {number} of spill file {path.name}"},
                maxlen=DEAD_LETTER_MAXLEN,
            )
            pipe.incr(self.keys.dead_lettered)
            pipe.execute()


# Every started sink, for `_stop_at_exit`: held to the end, since the server may drop its app (and so its sink)
# before the interpreter exits, with records added during the shutdown still in the buffer.
_started: set[LogSink] = set()


os.register_at_fork(after_in_child=_started.clear)  # a child's copy of a buffer is its parent's to write


@atexit.register
def _stop_at_exit() -> None:
    for sink in list(_started):
        try:
            sink._at_exit()
        except Exception:  # the next sink's records still matter
            log.exception("request-log sink: stopping it at exit failed")
