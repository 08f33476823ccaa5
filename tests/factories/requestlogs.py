"""Request-log rows written through the real batch writer (the path the gateway's sink uses)."""

import time
import uuid
from typing import Any

from requestlogs.models import RequestLog
from requestlogs.services import request_logs_insert


def log_record(*, key: Any = None, at: float | None = None, **fields: Any) -> dict[str, Any]:
    """A successful, non-fallback request by `key` (an ApiKey) at `at` (epoch seconds); `fields` override."""
    record: dict[str, Any] = {
        "request_id": uuid.uuid4().hex,
        "created_at": time.time() if at is None else at,
        "key_id": key.pk if key else None,
        "user_id": key.user_id if key else None,
        "team_id": key.team_id if key else None,
        "application_id": key.application_id if key else None,
        "agent_id": key.agent_id if key else None,
        "requested_model": "gpt-4o",
        "routed_model": "gpt-4o",
        "served_provider": "openai",
        "served_model": "gpt-4o",
        "status": 200,
        "stream": False,
        "latency_ms": 120.5,
        "ttfb_ms": 40.25,
        "tokens_in": 10,
        "tokens_out": 20,
        "cost_usd": 0.000075,
        "attempts": [{"provider": "openai", "model": "gpt-4o", "status": 200, "error": None, "duration_ms": 118.0}],
    }
    record.update(fields)
    return record


def insert_logs(*records: dict[str, Any]) -> list[RequestLog]:
    """Insert `records`; returns their rows in the given order."""
    request_logs_insert(records=list(records))
    rows = {r.request_id: r for r in RequestLog.objects.filter(request_id__in=[r["request_id"] for r in records])}
    return [rows[r["request_id"]] for r in records]


def fallback(
    *,
    step: int = 1,
    served_provider: str = "backup",
    served_model: str = "claude",
    from_provider: str = "openai",
    original_model: str = "gpt-4o",
) -> dict[str, Any]:
    """The fields of a request the chain's `step`-th entry served after the primary's circuit opened."""
    return {
        "served_provider": served_provider,
        "served_model": served_model,
        "fallback_triggered": True,
        "chain_step": step,
        "fallback_from_provider": from_provider,
        "fallback_original_model": original_model,
    }
