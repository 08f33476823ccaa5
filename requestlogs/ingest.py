"""Copy request logs from the Redis stream into the database, acknowledging only what committed."""

from __future__ import annotations

import logging
import socket
from dataclasses import dataclass

import orjson
import redis

from gateway.logsink import STREAM_KEY
from requestlogs.services import request_logs_insert_isolating

log = logging.getLogger(__name__)

GROUP = "ingest"
# A message delivered to a worker that died is taken over after this long.
CLAIM_IDLE_MS = 60_000


@dataclass(frozen=True)
class IngestResult:
    read: int
    inserted: int


def _ensure_group(client: redis.Redis, stream: str) -> None:
    try:
        client.xgroup_create(stream, GROUP, id="0", mkstream=True)
    except redis.ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise


def request_logs_ingest(
    *,
    redis_url: str,
    batch_size: int = 2000,
    max_batches: int = 50,
    stream: str = STREAM_KEY,
    claim_idle_ms: int = CLAIM_IDLE_MS,
) -> IngestResult:
    """Drain the stream in batches: insert (idempotent on request_id), then XACK. A failed insert acks nothing."""
    client = redis.Redis.from_url(redis_url, socket_timeout=5)
    _ensure_group(client, stream)
    consumer = f"{socket.gethostname()}"
    read = inserted = 0
    for _ in range(max_batches):
        # First take over messages a dead worker left unacknowledged, then read new ones.
        _, claimed, _ = client.xautoclaim(stream, GROUP, consumer, claim_idle_ms, "0-0", count=batch_size)
        messages = list(claimed)
        if len(messages) < batch_size:
            reply = client.xreadgroup(GROUP, consumer, {stream: ">"}, count=batch_size - len(messages))
            for _stream, entries in reply or []:
                messages.extend(entries)
        messages = [(mid, fields) for mid, fields in messages if fields]
        if not messages:
            break
        records = [r for r in (_decode(fields) for _, fields in messages) if r is not None]
        # A record the database refuses would block the stream forever: it goes to a dead-letter stream.
        # A connection failure raises instead, and nothing is acknowledged.
        count, refused = request_logs_insert_isolating(records=records)
        inserted += count
        for record, error in refused:
            log.error(
                "request log %s refused by the database (%s); moved to %s:dead", record.get("request_id"), error, stream
            )
            client.xadd(f"{stream}:dead", {"r": orjson.dumps(record), "error": error})
        ids = [mid for mid, _ in messages]
        pipe = client.pipeline(transaction=False)  # one round trip for both
        pipe.xack(stream, GROUP, *ids)
        pipe.xdel(stream, *ids)
        pipe.execute()
        read += len(messages)
    return IngestResult(read=read, inserted=inserted)


def _decode(fields: dict[bytes, bytes]) -> dict | None:
    try:
        record = orjson.loads(fields[b"r"])
    except (KeyError, orjson.JSONDecodeError):
        return None
    return record if isinstance(record, dict) else None
