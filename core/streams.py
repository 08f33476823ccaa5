"""Reading a Redis stream through a consumer group, acknowledging only what the caller committed.

    result = stream_drain(client, stream="cp:breaker:history", group="history", store=store_batch)

Each round takes up to `batch_size` entries: first this consumer's own pending ones (a batch a database
outage refused: retried at once), then entries a dead consumer left pending for `claim_idle_ms` (XAUTOCLAIM),
then new ones. `store(entries)` must commit them (idempotently: an entry can be delivered again after a crash
between the commit and the XACK) and return the entries it could not use, with the reason; those go to the
dead-letter stream `<stream>:dead` so they never block the stream. If `store` raises, nothing of the round is
acknowledged and the error propagates: the next run retries the same entries.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import redis

if TYPE_CHECKING:
    from redis.typing import EncodableT, FieldT

log = logging.getLogger(__name__)

# One stream entry: its id and its fields (None when the entry was trimmed while pending).
Entry = tuple[bytes, dict[bytes, bytes] | None]
# An entry `store` refused, and why.
DeadLetter = tuple[bytes, dict[bytes, bytes], str]

DEAD_LETTER_MAXLEN = 10_000


@dataclass(frozen=True)
class DrainResult:
    read: int  # entries taken (and acknowledged)
    dead_lettered: int


def stream_dead_key(stream: str) -> str:
    """The dead-letter stream of `stream`: entries that cannot be decoded or stored, kept for inspection."""
    return f"{stream}:dead"


def stream_consumer_name() -> str:
    """This process's consumer in a group: a restarted worker is a new consumer."""
    return f"{socket.gethostname()}-{os.getpid()}"


def stream_group_ensure(client: redis.Redis, stream: str, group: str) -> None:
    """Create the group (and the stream) if missing; the group starts at the stream's beginning."""
    try:
        client.xgroup_create(stream, group, id="0", mkstream=True)
    except redis.ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise


def stream_consumers_forget(client: redis.Redis, stream: str, group: str, *, keep: str, idle_ms: int) -> int:
    """Remove the group's consumers left by dead workers (nothing pending, idle longer than `idle_ms`)."""
    removed = 0
    for info in client.xinfo_consumers(stream, group):
        name = info["name"].decode() if isinstance(info["name"], bytes) else info["name"]
        if name != keep and info["pending"] == 0 and info["idle"] > idle_ms:
            removed += int(client.xgroup_delconsumer(stream, group, name) == 0)
    return removed


def _entries(reply: Any) -> list[Entry]:
    """XREADGROUP's answer in RESP2: [[stream, entries], ...], None when nothing came."""
    out: list[Entry] = []
    for _stream, entries in cast("list[list[Any]]", reply or []):
        out.extend(entries)
    return out


def stream_drain(
    client: redis.Redis,
    *,
    stream: str,
    group: str,
    store: Callable[[list[tuple[bytes, dict[bytes, bytes]]]], list[DeadLetter]],
    consumer: str | None = None,
    batch_size: int = 1000,
    max_batches: int = 50,
    claim_idle_ms: int = 15_000,
) -> DrainResult:
    """Read, store, then XACK + XDEL, batch by batch, until the stream has nothing for this consumer."""
    stream_group_ensure(client, stream, group)
    consumer = consumer or stream_consumer_name()
    dead_key = stream_dead_key(stream)
    read = dead = 0
    own_pending = True
    for _ in range(max_batches):
        messages: list[Entry] = []
        if own_pending:
            messages.extend(_entries(client.xreadgroup(group, consumer, {stream: "0"}, count=batch_size)))
            own_pending = len(messages) == batch_size
        if len(messages) < batch_size:
            _, claimed, *_ = client.xautoclaim(
                stream, group, consumer, claim_idle_ms, "0-0", count=batch_size - len(messages)
            )
            messages.extend(claimed)
        if len(messages) < batch_size:
            reply = client.xreadgroup(group, consumer, {stream: ">"}, count=batch_size - len(messages))
            messages.extend(_entries(reply))
        if not messages:
            break
        # An idle claim can return this consumer's own pending entries, read just above: count each once.
        unique = dict(messages)
        present = [(mid, fields) for mid, fields in unique.items() if fields]  # None: trimmed while pending
        refused = store(present)
        pipe = client.pipeline(transaction=False)  # dead letters, XACK and XDEL in one round trip
        for mid, fields, error in refused:
            log.error("stream %s: entry %s refused (%s); moved to %s", stream, mid.decode(), error, dead_key)
            dead_fields = cast("dict[FieldT, EncodableT]", {**fields, b"entry_id": mid, b"error": error})
            pipe.xadd(dead_key, dead_fields, maxlen=DEAD_LETTER_MAXLEN)
        ids = list(unique)
        pipe.xack(stream, group, *ids)
        pipe.xdel(stream, *ids)
        pipe.execute()
        read += len(ids)
        dead += len(refused)
    return DrainResult(read=read, dead_lettered=dead)
