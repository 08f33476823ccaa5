"""Circuit history: breaker transitions from the engines into CircuitEvent rows, off the request path.

Embedded mode: the one process's MemoryEngine buffers its events (`engine.events`) and a periodic job drains
them into the database (`circuit_events_flush_local`). Production: every gateway process's Redis engine ships
its events to the stream `history_stream(namespace)`, and the periodic job of a Celery worker reads it
through a consumer group (`circuit_events_ingest`), acknowledging entries only after their rows committed.

One transition is one row: (provider, model, generation) names a transition whichever process reports it,
and the partial unique constraint `circuitevent_one_per_transition` skips a repeat (several processes
reporting it, or an entry delivered again after a crash between the commit and the acknowledgement). Each
event also carries the id its engine gave it (`event_id`, unique in the table), which skips a repeat of an
event without a shared generation too: a local one, re-sent after a partial failure or delivered again.
Operator actions (reset, forced open, drained, released) are written by health.services, with their actor,
in the transaction of their audit event; the same kinds coming from an engine are not stored twice.

Retention (`circuit_events_retention`, daily): events older than CIRCUIT_EVENT_RETENTION_DAYS are deleted,
except the last of each layer of each circuit (its breaker state, forced hold, provider drain), so a
timeline from the cutoff on still starts in the state the circuit was in.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import redis
from django.db import DatabaseError, transaction
from django.db.models import Q

from core.db import delete_in_batches
from core.streams import DeadLetter, stream_consumer_name, stream_consumers_forget, stream_drain
from health.breaker.base import BreakerEngine
from health.breaker.events import HISTORY_FIELD
from health.breaker.types import BreakerEvent, EventKind
from health.history import circuit_events_last_before
from health.models import CircuitEvent

log = logging.getLogger(__name__)

GROUP = "history"
# Events the services record themselves (with the operator and the reason); an engine's copy is not kept.
OPERATOR_KINDS = frozenset({EventKind.RESET, EventKind.FORCED_OPEN, EventKind.DRAINED, EventKind.RELEASED})
FLUSH_BATCH = 1000
_MAX = {
    "provider": CircuitEvent._meta.get_field("provider").max_length or 64,
    "model": CircuitEvent._meta.get_field("model").max_length or 128,
    "last_status": CircuitEvent._meta.get_field("last_status").max_length or 32,
    "event_id": CircuitEvent._meta.get_field("event_id").max_length or 32,
}
_COUNT_MAX = 2_147_483_647  # PositiveIntegerField on both databases
_GENERATION_MAX = 2**63 - 1
# Consumers left by dead workers are removed this often (each restart of a worker is a new consumer).
_FORGET_EVERY_SECONDS = 60.0
_forgotten_at = 0.0


def _row(event: BreakerEvent) -> CircuitEvent:
    return CircuitEvent(
        provider=event.provider,
        model=event.model,
        kind=str(event.kind),
        at=_at(event),
        generation=event.generation,
        failures=event.failures,
        total=event.total,
        last_status=event.last_status,
        cooldown_seconds=event.cooldown_seconds,
        local=event.local,
        event_id=event.event_id or None,
    )


def circuit_events_store(events: list[BreakerEvent]) -> int:
    """Insert the events as CircuitEvent rows; an event already stored (the same `event_id`, or for an event
    without one the same provider, model and generation, not local, with the same kind and time) is skipped,
    within the batch too. Returns how many rows were new (a concurrent writer of the same event can make
    this an overcount; the table still holds it once).

    The same (provider, model, generation) with another kind or time is not a repeat but a reused generation
    (a new embedded process, or a Redis that lost its keys, numbers a circuit's generations from the start
    again): that event is stored without its generation rather than lost.
    """
    ids = {e.event_id for e in events if e.event_id}
    seen = set(CircuitEvent.objects.filter(event_id__in=ids).values_list("event_id", flat=True)) if ids else set()
    fresh: list[BreakerEvent] = []
    for event in events:
        if event.event_id in seen:
            continue  # this very event is stored already (or earlier in this batch)
        if event.event_id:
            seen.add(event.event_id)
        fresh.append(event)
    events = fresh
    shared = [e for e in events if e.generation is not None and not e.local]
    stored: dict[tuple[str, str, int | None], tuple[str, datetime]] = {}
    if shared:
        wanted = Q()
        for (provider, model), generations in _by_circuit(shared).items():
            wanted |= Q(provider=provider, model=model, generation__in=generations)
        stored = {
            (p, m, g): (k, at)
            for p, m, g, k, at in CircuitEvent.objects.filter(wanted, local=False).values_list(
                "provider", "model", "generation", "kind", "at"
            )
        }
    rows: list[BreakerEvent] = []
    reused: set[tuple[str, str, int, str, float]] = set()
    for event in events:
        if event.generation is None or event.local:
            rows.append(event)
            continue
        key = (event.provider, event.model, event.generation)
        found = stored.get(key)
        if found is None:
            stored[key] = (str(event.kind), _at(event))
            rows.append(event)
        elif found != (str(event.kind), _at(event)) and (*key, str(event.kind), event.at) not in reused:
            reused.add((*key, str(event.kind), event.at))
            rows.append(replace(event, generation=None))
        # else: this transition is stored already (or earlier in this batch)
    if not rows:
        return 0
    # ignore_conflicts (ON CONFLICT DO NOTHING / INSERT OR IGNORE): another writer may store the same
    # transition between the read above and this insert.
    CircuitEvent.objects.bulk_create([_row(e) for e in rows], ignore_conflicts=True)
    return len(rows)


def circuit_events_retention(*, cutoff: datetime) -> int:
    """Delete the events before `cutoff` but the last of each layer of each circuit before it (what the
    timelines need to know the state at `cutoff`), in batches (core.db.delete_in_batches). Returns the rows
    deleted."""
    keep = circuit_events_last_before(Q(), cutoff).values("id")
    return delete_in_batches(CircuitEvent.objects.filter(at__lt=cutoff).exclude(id__in=keep))


def _by_circuit(events: Iterable[BreakerEvent]) -> dict[tuple[str, str], set[int]]:
    circuits: dict[tuple[str, str], set[int]] = {}
    for event in events:
        if event.generation is not None:
            circuits.setdefault((event.provider, event.model), set()).add(event.generation)
    return circuits


def _at(event: BreakerEvent) -> datetime:
    return datetime.fromtimestamp(event.at, tz=UTC)


def _from_engine(events: Iterable[BreakerEvent]) -> list[BreakerEvent]:
    return [e for e in events if e.kind not in OPERATOR_KINDS]


def circuit_events_flush_local(engine: BreakerEngine, *, batch: int = FLUSH_BATCH) -> int:
    """Move this process's buffered events into the database (embedded mode). Returns the rows stored.

    A batch the database refuses goes back to the front of the buffer, in order, and the error propagates.
    """
    stored = 0
    while True:
        events = engine.events.drain(batch)
        if not events:
            return stored
        try:
            with transaction.atomic():
                stored += circuit_events_store(_from_engine(events))
        except DatabaseError:
            engine.events.requeue(events)
            raise
        if len(events) < batch:
            return stored


def _text(record: Mapping[str, Any], field: str, *, required: bool = False) -> str | None:
    value = record.get(field, "")
    if value is None:
        value = ""
    if not isinstance(value, str) or len(value) > _MAX[field] or "\x00" in value or (required and not value):
        return None
    if not value.isascii():
        try:
            value.encode()
        except UnicodeEncodeError:  # a lone surrogate ("\ud800" in the JSON): no database can store it
            return None
    return value


def _count(value: Any, *, maximum: int = _COUNT_MAX) -> tuple[bool, int | None]:
    if value is None:
        return True, None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= maximum:
        return False, None
    return True, value


def _number(value: Any) -> tuple[bool, float | None]:
    if value is None:
        return True, None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        return False, None
    return True, float(value)


def event_decode(record: Any) -> BreakerEvent | None:
    """A BreakerEvent from the JSON of `BreakerEvent.as_record()`; None when it is not one the table can hold."""
    if not isinstance(record, dict):
        return None
    try:
        kind = EventKind(str(record.get("kind")))
    except ValueError:
        return None
    provider = _text(record, "provider", required=True)
    model = _text(record, "model")
    last_status = _text(record, "last_status")
    ok_at, at = _number(record.get("at"))
    ok_gen, generation = _count(record.get("generation"), maximum=_GENERATION_MAX)
    ok_failures, failures = _count(record.get("failures"))
    ok_total, total = _count(record.get("total"))
    ok_cooldown, cooldown = _number(record.get("cooldown_seconds"))
    local = record.get("local", False)
    # Records shipped before events had ids carry none: they are deduplicated by their generation only.
    event_id = _text(record, "event_id")
    if (
        provider is None
        or model is None
        or last_status is None
        or event_id is None
        or not (ok_at and at is not None and ok_gen and ok_failures and ok_total and ok_cooldown)
        or not isinstance(local, bool)
    ):
        return None
    try:
        datetime.fromtimestamp(at, tz=UTC)
    except (OverflowError, ValueError, OSError):
        return None
    return BreakerEvent(
        kind=kind,
        provider=provider,
        model=model,
        at=at,
        generation=generation,
        failures=failures,
        total=total,
        last_status=last_status,
        cooldown_seconds=cooldown,
        local=local,
        event_id=event_id,
    )


def _decode_entries(entries: list[tuple[bytes, dict[bytes, bytes]]]) -> tuple[list[BreakerEvent], list[DeadLetter]]:
    events: list[BreakerEvent] = []
    refused: list[DeadLetter] = []
    field = HISTORY_FIELD.encode()
    for mid, fields in entries:
        try:
            event = event_decode(json.loads(fields[field]))
        except Exception:  # noqa: BLE001 - any entry that cannot be read (deep nesting: RecursionError) is refused
            event = None  # and dead-lettered: one bad entry must never hold the stream's later ones back
        if event is None:
            refused.append((mid, fields, "undecodable entry"))
        else:
            events.append(event)
    return events, refused


def circuit_events_ingest(*, redis_url: str, stream: str, claim_idle_ms: int = 15_000) -> int:
    """Copy the gateways' events from the history stream into the database; returns the rows stored.

    Entries are acknowledged (XACK, then XDEL) only after their rows committed; a database error leaves them
    pending for this consumer's next run, and a dead consumer's are taken over after `claim_idle_ms`.
    """
    stored = 0

    def store(entries: list[tuple[bytes, dict[bytes, bytes]]]) -> list[DeadLetter]:
        nonlocal stored
        events, refused = _decode_entries(entries)
        with transaction.atomic():
            stored += circuit_events_store(_from_engine(events))
        return refused

    global _forgotten_at
    client = redis.Redis.from_url(redis_url, socket_timeout=5)
    consumer = stream_consumer_name()
    try:
        result = stream_drain(
            client, stream=stream, group=GROUP, store=store, consumer=consumer, claim_idle_ms=claim_idle_ms
        )
        if time.monotonic() - _forgotten_at >= _FORGET_EVERY_SECONDS:
            _forgotten_at = time.monotonic()
            stream_consumers_forget(client, stream, GROUP, keep=consumer, idle_ms=claim_idle_ms)
    finally:
        client.close()
    if result.dead_lettered:
        log.error("circuit history: %d undecodable stream entries moved to dead letters", result.dead_lettered)
    return stored
