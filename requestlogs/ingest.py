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
from requestlogs.stream import DEAD_LETTER_MAXLEN, RECORD_FIELD, STREAM_KEY, StreamKeys

if TYPE_CHECKING:
    from redis.typing import EncodableT, FieldT, XReadGroupResponse

log = logging.getLogger(__name__)

GROUP = "ingest"
# A message delivered to a worker that died is taken over after this long (REQUEST_LOG_CLAIM_IDLE_SECONDS).
# A live worker retries its own pending messages first on every run, so this only delays a dead one's.
CLAIM_IDLE_MS = 15_000
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
    """Drain the stream in batches: insert (idempotent on request_id), then XACK. A failed insert acks nothing.

    Each run first retries this consumer's own pending messages (a batch a database outage refused), then
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


def _ingest(*, redis_url: str, batch_size: int, max_batches: int, stream: str, claim_idle_ms: int) -> IngestResult:
    client = redis.Redis.from_url(redis_url, socket_timeout=5)
    keys = StreamKeys(stream)
    _ensure_group(client, stream)
    consumer = consumer_name()
    _forget_dead_consumers(client, stream, consumer, claim_idle_ms)
    read = inserted = dead = 0
    own_pending = True
    for _ in range(max_batches):
        messages: list[tuple[bytes, dict[bytes, bytes] | None]] = []
        if own_pending:
            reply = _stream_entries(client.xreadgroup(GROUP, consumer, {stream: "0"}, count=batch_size))
            for _stream, entries in reply:
                messages.extend(entries)
            own_pending = len(messages) == batch_size
        if len(messages) < batch_size:
            _, claimed, _ = client.xautoclaim(
                stream, GROUP, consumer, claim_idle_ms, "0-0", count=batch_size - len(messages)
            )
            messages.extend(claimed)
        if len(messages) < batch_size:
            reply = _stream_entries(client.xreadgroup(GROUP, consumer, {stream: ">"}, count=batch_size - len(messages)))
            for _stream, entries in reply:
                messages.extend(entries)
        if not messages:
            break
        # An idle claim can return this consumer's own pending messages, read just above: count each once.
        messages = list(dict(messages).items())
        records: list[dict[str, Any]] = []
        undecodable: list[tuple[bytes, dict[bytes, bytes]]] = []
        for mid, fields in messages:
            if not fields:
                continue  # pending, but trimmed by the cap meanwhile: already counted as trimmed
            record = _decode(fields)
            if record is None:
                undecodable.append((mid, fields))
            else:
                records.append(record)
        # A record the database refuses would block the stream forever: it goes to a dead-letter stream.
        # A connection failure raises instead, and nothing is acknowledged.
        count, refused = request_logs_insert_isolating(records=records)
        inserted += count
        pipe = client.pipeline(transaction=False)  # dead letters, XACK and XDEL in one round trip
        for mid, fields in undecodable:
            log.error("request-log stream entry %s cannot be decoded; moved to %s", mid.decode(), keys.dead)
            pipe.xadd(
                keys.dead,
                {**_as_fields(fields), "entry_id": mid, "error": "undecodable entry"},
                maxlen=DEAD_LETTER_MAXLEN,
            )
        for record, error in refused:
            log.error(
                "request log %s refused by the database (%s); moved to %s", record.get("request_id"), error, keys.dead
            )
            pipe.xadd(keys.dead, {RECORD_FIELD: orjson.dumps(record), "error": error}, maxlen=DEAD_LETTER_MAXLEN)
        if undecodable or refused:
            pipe.incrby(keys.dead_lettered, len(undecodable) + len(refused))
        ids = [mid for mid, _ in messages]
        pipe.xack(stream, GROUP, *ids)
        pipe.xdel(stream, *ids)
        pipe.execute()
        read += len(messages)
        dead += len(undecodable) + len(refused)
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


def _decode(fields: dict[bytes, bytes]) -> dict | None:
    try:
        record = orjson.loads(fields[RECORD_FIELD.encode()])
    except (KeyError, orjson.JSONDecodeError):
        return None
    return record if isinstance(record, dict) else None
