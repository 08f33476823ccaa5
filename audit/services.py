"""Writing audit events. Call inside the transaction of the change being audited."""

import json
import math
from decimal import Decimal
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from audit.hashing import GENESIS_HASH, event_hash, hashed_fields
from audit.models import AuditEvent
from core.types import Actor

# Any constant works: it serialises writers of the hash chain on PostgreSQL.
_AUDIT_LOCK_ID = 0x617564697400


def _jsonb_stable(value: Any) -> Any:
    """Floats as PostgreSQL's jsonb gives them back, so the hash covers what is read back on both databases.

    jsonb keeps a number's decimal digits but not Python's float spelling: 1e+16 comes back as the integer
    10000000000000000, and -0.0 as 0.0. Any other float reads back as it was written.
    """
    if isinstance(value, float):
        if value == 0:
            return 0.0
        if math.isfinite(value) and "e+" in repr(value):
            return int(Decimal(repr(value)))
        return value
    if isinstance(value, dict):
        return {k: _jsonb_stable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonb_stable(v) for v in value]
    return value


def _json_safe(value: Any) -> Any:
    """Round-trip through the JSON encoder used by the hash so stored and hashed values agree."""
    return _jsonb_stable(json.loads(json.dumps(value, default=str))) if value is not None else None


def audit_record(
    *,
    actor: Actor,
    action: str,
    object_type: str,
    object_id: Any,
    object_repr: str = "",
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
) -> AuditEvent:
    """Append one event to the hash chain. Must run inside the caller's transaction."""
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("audit_record must run inside the transaction of the audited change")
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_AUDIT_LOCK_ID])
    # SQLite: transactions are IMMEDIATE, so writers are already serialised.
    last = AuditEvent.objects.order_by("-id").values_list("hash", flat=True).first()
    actor_obj = actor if getattr(actor, "is_authenticated", False) else None
    event = AuditEvent(
        created_at=timezone.now(),
        actor_id=actor_obj.pk if actor_obj else None,
        actor_name=actor_obj.get_username() if actor_obj else "system",
        action=action,
        object_type=object_type,
        object_id=str(object_id),
        object_repr=object_repr[:200],
        before=_json_safe(before),
        after=_json_safe(after),
        prev_hash=last or GENESIS_HASH,
    )
    event.hash = event_hash(prev_hash=event.prev_hash, fields=hashed_fields(event))
    event.save(force_insert=True)
    return event


def diff_fields(before: dict[str, Any], after: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Keep only the fields whose value changed, for an edit event."""
    changed = [k for k in after if before.get(k) != after.get(k)]
    return {k: before.get(k) for k in changed}, {k: after[k] for k in changed}


def audit_changes(
    *,
    actor: Actor,
    action: str,
    object_type: str,
    object_id: Any,
    object_repr: str,
    before: dict[str, Any],
    after: dict[str, Any],
) -> AuditEvent | None:
    """Record an edit with only the fields that changed; record nothing when none did."""
    changed_before, changed_after = diff_fields(before, after)
    if not changed_after:
        return None
    return audit_record(
        actor=actor,
        action=action,
        object_type=object_type,
        object_id=object_id,
        object_repr=object_repr,
        before=changed_before,
        after=changed_after,
    )
