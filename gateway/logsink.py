"""Request-log sink: the request path appends a dict; a background thread ships batches.

Embedded mode writes batches straight into the database. Production appends them to
a Redis stream; the `requestlogs.ingest` Celery task copies them into PostgreSQL and
acknowledges only committed rows. Either way a failed write keeps the batch and
retries, so a database or Redis outage loses nothing (up to `max_buffer` records).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from typing import Any

import orjson

log = logging.getLogger(__name__)

STREAM_KEY = "cp:requestlogs"


def new_request_id() -> str:
    """A UUIDv7 (RFC 9562) as 32 hex digits: time-ordered to the millisecond, then 74 random bits.

    Ids that grow with time land at one end of the log table's unique index, so a busy table keeps
    taking rows at the same rate (random ids would touch a random index page per row), and sorting
    request ids sorts them by time.
    """
    rand = int.from_bytes(os.urandom(10), "big")  # 80 bits, 74 of them used
    value = (time.time_ns() // 1_000_000) << 80 | 0x7 << 76 | (rand >> 68) << 64 | 0b10 << 62 | rand & (2**62 - 1)
    return f"{value:032x}"


class LogSink:
    def __init__(
        self,
        *,
        redis_url: str = "",
        flush_seconds: float = 0.5,
        batch_size: int = 500,
        max_buffer: int = 50_000,
        stream_key: str = STREAM_KEY,
    ) -> None:
        self._redis_url = redis_url
        self._stream_key = stream_key
        self._flush_seconds = flush_seconds
        self._batch_size = batch_size
        # ~1 KiB a record: the cap bounds memory during a long outage (records past it are counted
        # and dropped, oldest first, and the drop is logged).
        self._max_buffer = max_buffer
        self._buffer: deque[dict[str, Any]] = deque()
        self.dropped = 0
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._idle = threading.Condition()
        self._in_flight = 0
        self._thread: threading.Thread | None = None
        self._failing = False

    def add(self, record: dict[str, Any]) -> None:
        """Request path: O(1), never blocks, never raises."""
        buffer = self._buffer
        buffer.append(record)
        if len(buffer) > self._max_buffer:
            buffer.popleft()
            self.dropped += 1
            if self.dropped == 1 or self.dropped % 10_000 == 0:
                log.error(
                    "request-log buffer full (%d records): %d records dropped so far", self._max_buffer, self.dropped
                )
        if len(buffer) >= self._batch_size:
            self._wake.set()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="request-log-sink", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Drain what is buffered, then stop."""
        self._stop.set()
        self._wake.set()
        if self._thread:
            self._thread.join(timeout=timeout)

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until everything added so far is written (tests, shutdown)."""
        self._wake.set()
        with self._idle:
            return self._idle.wait_for(lambda: not self._buffer and not self._in_flight, timeout=timeout)

    @property
    def pending(self) -> int:
        return len(self._buffer) + self._in_flight

    def _run(self) -> None:
        while True:
            self._wake.wait(timeout=self._flush_seconds)
            self._wake.clear()
            self._drain()
            if self._stop.is_set() and (not self._buffer or self._failing):
                if not self._redis_url:
                    from django.db import connections

                    connections.close_all()  # this thread's connection only
                return
            if self._failing:
                self._stop.wait(1.0)

    def _drain(self) -> None:
        while True:
            with self._idle:
                batch = [self._buffer.popleft() for _ in range(min(self._batch_size, len(self._buffer)))]
                self._in_flight = len(batch)
            if not batch:
                return
            try:
                self._write(batch)
                ok = True
            except Exception as exc:  # noqa: BLE001 - keep the batch and retry later
                ok = False
                if not self._failing:
                    log.warning(
                        "request-log write failed (%s: %s); keeping %d records for retry",
                        type(exc).__name__,
                        exc,
                        len(self._buffer) + len(batch),
                    )
                self._buffer.extendleft(reversed(batch))
            with self._idle:
                self._in_flight = 0
                self._idle.notify_all()
            if not ok:
                self._failing = True
                return
            if self._failing:
                log.info("request-log writes recovered")
                self._failing = False

    def _write(self, batch: list[dict[str, Any]]) -> None:
        if self._redis_url:
            self._write_redis(batch)
        else:
            from requestlogs.services import request_logs_insert_isolating

            _, refused = request_logs_insert_isolating(records=batch)
            for record, error in refused:
                log.error("request log %s refused by the database and dropped: %s", record.get("request_id"), error)

    def _write_redis(self, batch: list[dict[str, Any]]) -> None:
        import redis

        client = getattr(self, "_redis", None)
        if client is None:
            client = self._redis = redis.Redis.from_url(self._redis_url, socket_timeout=2, socket_connect_timeout=2)
        pipe = client.pipeline(transaction=False)
        for record in batch:
            pipe.xadd(self._stream_key, {"r": orjson.dumps(record)})
        pipe.execute()
