"""Copy request logs from the Redis stream into the database, acknowledging only what committed."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import orjson
import redis

from requestlogs.services import request_logs_insert_isolating
from requestlogs.stream import (
    BATCH_FIELD,
    COUNT_FIELD,
    DEAD_LETTER_MAXLEN,
    ENTRY_RECORDS_MAX,
    RECORD_FIELD,
    STREAM_KEY,
    StreamKeys,
)

if TYPE_CHECKING:
    from redis.typing import EncodableT, FieldT, XReadGroupResponse

log = logging.getLogger(__name__)

GROUP = "ingest"
# A message delivered to a worker that died is taken over after this long (REQUEST_LOG_CLAIM_IDLE_SECONDS).
# A live worker retries its own pending messages first on every run, so this only delays a dead one's.
CLAIM_IDLE_MS = 15_000
# Entries one read takes at most (_Round).
READ_ENTRIES_MAX = 40
# Consumers left behind by dead workers (nothing pending, idle) are removed this often.
_FORGET_EVERY_SECONDS = 60.0

# One run at a time per process: two would both re-read this consumer's pending messages.
_running = threading.Lock()
_forgotten_at = 0.0


@dataclass(frozen=True)
class IngestResult:
    read: int
    inserted: int
    dead_lettered: int = 0


def _ensure_group(client: redis.Redis, stream: str) -> None:
    try:
        client.xgroup_create(stream, GROUP, id="0", mkstream=True)
    except redis.ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise


def _stream_entries(reply: XReadGroupResponse | None) -> list[list[Any]]:
    """XREADGROUP's answer in RESP2 (this client's protocol): [[stream, entries], ...], None when nothing came."""
    return cast("list[list[Any]]", reply or [])


def _as_fields(fields: dict[bytes, bytes]) -> dict[FieldT, EncodableT]:
    """An entry's own fields, copied into a dead letter (redis's types take only the wider key type)."""
    return cast("dict[FieldT, EncodableT]", fields)


def consumer_name() -> str:
    """This process's consumer in the group: a restarted worker is a new consumer."""
    return f"{socket.gethostname()}-{os.getpid()}"


def request_logs_ingest(
    *,
    redis_url: str,
    batch_size: int = 2000,
    max_batches: int = 50,
    stream: str = STREAM_KEY,
    claim_idle_ms: int = CLAIM_IDLE_MS,
) -> IngestResult:
    """Drain the stream in rounds of about `batch_size` records: insert (idempotent on request_id), then XACK
    and XDEL. A failed insert acks nothing.

    Each round first retries this consumer's own pending messages (a batch a database outage refused), then
    takes over those a dead consumer left for `claim_idle_ms`, then reads new ones.
    """
    if not _running.acquire(blocking=False):
        return IngestResult(read=0, inserted=0)  # another run of this process is draining
    try:
        return _ingest(
            redis_url=redis_url,
            batch_size=batch_size,
            max_batches=max_batches,
            stream=stream,
            claim_idle_ms=claim_idle_ms,
        )
    finally:
        _running.release()


# Acknowledges and deletes what committed, taking the records of the batch entries it deleted off
# `<stream>:records` (an entry the cap trimmed meanwhile was taken off by the trim: XDEL answers 0 for it).
# An empty stream holds no records, whatever the count said (entries not written by a gateway's sink).
# KEYS: stream, records. ARGV: group, then each entry's id and its counted records (0 for the first format).
_ACK_SCRIPT = """
local gone = 0
for i = 2, #ARGV, 2 do
  redis.call('XACK', KEYS[1], ARGV[1], ARGV[i])
  if redis.call('XDEL', KEYS[1], ARGV[i]) == 1 then gone = gone + tonumber(ARGV[i + 1]) end
end
if redis.call('XLEN', KEYS[1]) == 0 then
  redis.call('DEL', KEYS[2])
elseif gone > 0 then
  redis.call('DECRBY', KEYS[2], gone)
end
return gone
"""


@dataclass
class _Entry:
    """One stream entry as read: its records (None when undecodable), how many it holds, and how many of them
    `<stream>:records` counts."""

    id: bytes
    fields: dict[bytes, bytes]
    records: list[dict[str, Any]] | None
    size: int
    counted: int


class _Round:
    """The entries one round takes, about `batch_size` records; each entry once, though two reads return it.

    An entry holds 1 to ENTRY_RECORDS_MAX records, unknown until read. Each read takes as many entries as the
    records still missing allow at the size of the largest entry this run has seen (ENTRY_RECORDS_MAX before
    the first), at least one and at most READ_ENTRIES_MAX: full entries are taken a few at a time and a round
    overshoots by less than one, small ones (a quiet gateway's, an earlier release's one-record entries) up to
    READ_ENTRIES_MAX a read rather than one read each. A read of small entries followed by full ones can reach
    READ_ENTRIES_MAX * ENTRY_RECORDS_MAX records, the bound on a round.
    """

    def __init__(self, batch_size: int, largest: int) -> None:
        self.batch_size = batch_size
        self.largest = largest  # the largest entry seen in this run, in records (0: none yet)
        self.entries: dict[bytes, _Entry | None] = {}  # None: pending, but trimmed by the cap meanwhile
        self.size = 0

    def room(self) -> int:
        """Entries the next read may take: 0 once the round holds `batch_size` records."""
        left = self.batch_size - self.size
        if left <= 0:
            return 0
        return max(1, min(left // (self.largest or ENTRY_RECORDS_MAX), READ_ENTRIES_MAX))

    def take(self, entries: list[Any]) -> None:
        for mid, fields in entries:
            if mid in self.entries:
                continue
            entry = _decode(mid, fields) if fields else None
            self.entries[mid] = entry
            if entry is not None:
                self.size += entry.size
                self.largest = max(self.largest, entry.size)


def _read(client: redis.Redis, consumer: str, stream: str, start: str, count: int) -> list[Any]:
    entries: list[Any] = []
    for _stream, got in _stream_entries(client.xreadgroup(GROUP, consumer, {stream: start}, count=count)):
        entries.extend(got)
    return entries


def _ingest(*, redis_url: str, batch_size: int, max_batches: int, stream: str, claim_idle_ms: int) -> IngestResult:
    client = redis.Redis.from_url(redis_url, socket_timeout=5)
    keys = StreamKeys(stream)
    ack = client.register_script(_ACK_SCRIPT)
    _ensure_group(client, stream)
    consumer = consumer_name()
    _forget_dead_consumers(client, stream, consumer, claim_idle_ms)
    read = inserted = dead = largest = 0
    own_pending = True
    for _ in range(max_batches):
        batch = _Round(batch_size, largest)
        # This consumer's own pending entries first (a batch an outage refused), page by page from the start.
        after = "0"
        while own_pending and (count := batch.room()):
            entries = _read(client, consumer, stream, after, count)
            batch.take(entries)
            own_pending = len(entries) == count
            after = entries[-1][0] if entries else after
        # Then what a dead consumer left, scanning its pending list to the end if need be.
        cursor: Any = "0-0"
        while count := batch.room():
            cursor, claimed, _ = client.xautoclaim(stream, GROUP, consumer, claim_idle_ms, cursor, count=count)
            batch.take(claimed)
            if cursor in (b"0-0", "0-0"):
                break
        while count := batch.room():
            entries = _read(client, consumer, stream, ">", count)
            batch.take(entries)
            if len(entries) < count:
                break
        if not batch.entries:
            break
        records: list[dict[str, Any]] = []
        undecodable: list[_Entry] = []
        for entry in batch.entries.values():
            if entry is None:
                continue  # already counted as trimmed
            if entry.records is None:
                undecodable.append(entry)
            else:
                records.extend(entry.records)
        # A record the database refuses would block the stream forever: it goes to a dead-letter stream.
        # A connection failure raises instead, and nothing is acknowledged.
        stored, refused = request_logs_insert_isolating(records=records)
        inserted += stored
        pipe = client.pipeline(transaction=False)  # dead letters and the acknowledgement in one round trip
        for entry in undecodable:
            log.error("request-log stream entry %s cannot be decoded; moved to %s", entry.id.decode(), keys.dead)
            pipe.xadd(
                keys.dead,
                {**_as_fields(entry.fields), "entry_id": entry.id, "error": "undecodable entry"},
                maxlen=DEAD_LETTER_MAXLEN,
            )
        for record, error in refused:
            log.error(
                "request log %s refused by the database (%s); moved to %s", record.get("request_id"), error, keys.dead
            )
            pipe.xadd(keys.dead, {RECORD_FIELD: orjson.dumps(record), "error": error}, maxlen=DEAD_LETTER_MAXLEN)
        lost = sum(entry.size for entry in undecodable) + len(refused)
        if lost:
            pipe.incrby(keys.dead_lettered, lost)
        acked: list[Any] = [GROUP]
        for mid, entry in batch.entries.items():
            acked += [mid, entry.counted if entry is not None else 0]
        ack(keys=[stream, keys.records], args=acked, client=pipe)
        pipe.execute()
        read += batch.size
        dead += lost
        largest = batch.largest
    return IngestResult(read=read, inserted=inserted, dead_lettered=dead)


def _forget_dead_consumers(client: redis.Redis, stream: str, consumer: str, idle_ms: int) -> None:
    """Remove consumers with nothing pending that have been idle longer than the claim delay."""
    global _forgotten_at
    now = time.monotonic()
    if now - _forgotten_at < _FORGET_EVERY_SECONDS:
        return
    _forgotten_at = now
    for info in client.xinfo_consumers(stream, GROUP):
        name = info["name"].decode() if isinstance(info["name"], bytes) else info["name"]
        if name != consumer and info["pending"] == 0 and info["idle"] > idle_ms:
            client.xgroup_delconsumer(stream, GROUP, name)


def _decode(mid: bytes, fields: dict[bytes, bytes]) -> _Entry:
    """A batch entry, or an entry of the first format (one record); `records` is None when it cannot be read."""
    raw_count = fields.get(COUNT_FIELD.encode())
    counted = int(raw_count) if raw_count is not None and raw_count.isdigit() else 0
    if BATCH_FIELD.encode() in fields:
        try:
            records = orjson.loads(fields[BATCH_FIELD.encode()])
        except orjson.JSONDecodeError:
            records = None
        if not isinstance(records, list) or not all(isinstance(record, dict) for record in records):
            return _Entry(mid, fields, None, max(counted, 1), counted)
        return _Entry(mid, fields, records, len(records), counted)
    if RECORD_FIELD.encode() not in fields:
        return _Entry(mid, fields, None, max(counted, 1), counted)
    try:
        record = orjson.loads(fields[RECORD_FIELD.encode()])
    except orjson.JSONDecodeError:
        record = None
    return _Entry(mid, fields, [record] if isinstance(record, dict) else None, 1, counted)
