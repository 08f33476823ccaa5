"""The hash chain over audit events."""

import datetime as dt
import hashlib
import json
from typing import Any

GENESIS_HASH = "0" * 64


def event_hash(*, prev_hash: str, fields: dict[str, Any]) -> str:
    """SHA-256 over the previous hash and a canonical JSON of the event's fields."""
    payload = json.dumps(fields, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(f"{prev_hash}\n{payload}".encode()).hexdigest()


def hashed_fields(event: Any) -> dict[str, Any]:
    return {
        # In UTC whatever time zone the database connection reads it in (events are written in UTC).
        "created_at": event.created_at.astimezone(dt.UTC).isoformat(),
        "actor_id": event.actor_id,
        "actor_name": event.actor_name,
        "action": event.action,
        "object_type": event.object_type,
        "object_id": str(event.object_id),
        "object_repr": event.object_repr,
        "before": event.before,
        "after": event.after,
    }
