"""Writes of request logs (from the embedded gateway or the ingestion task)."""

from collections.abc import Iterable
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from django.db import connection, transaction

from requestlogs.models import RequestLog

_FIELDS = [f.name for f in RequestLog._meta.concrete_fields if f.name != "id"]


def _row(record: dict[str, Any]) -> RequestLog:
    data = {k: record.get(k) for k in _FIELDS if k in record}
    if isinstance(data.get("created_at"), int | float):
        data["created_at"] = datetime.fromtimestamp(data["created_at"], tz=UTC)
    if data.get("cost_usd") is not None:
        data["cost_usd"] = Decimal(str(round(data["cost_usd"], 8)))
    return RequestLog(**data)


@transaction.atomic
def request_logs_insert(*, records: Iterable[dict[str, Any]]) -> int:
    """Insert records; a record whose request_id is already stored is skipped (idempotent retries)."""
    rows = [_row(r) for r in records]
    if not rows:
        return 0
    if connection.vendor == "postgresql":
        return _copy_postgres(rows)
    RequestLog.objects.bulk_create(rows, ignore_conflicts=True, batch_size=500)
    return len(rows)


def _copy_postgres(rows: list[RequestLog]) -> int:
    """COPY into a temporary table, then insert what is new: fast and idempotent."""
    import json

    columns = _FIELDS
    with connection.cursor() as cursor:
        cols = ", ".join(columns)
        # Same column types, no constraints; dropped at commit.
        cursor.execute(
            f"CREATE TEMP TABLE requestlog_incoming ON COMMIT DROP AS SELECT {cols} FROM requestlogs_requestlog "  # noqa: S608 - model column names
            "WITH NO DATA"
        )
        raw = cursor.cursor  # the psycopg cursor, for COPY
        with raw.copy(f"COPY requestlog_incoming ({cols}) FROM STDIN") as copy:
            for row in rows:
                values = []
                for name in columns:
                    value = getattr(row, name)
                    if name == "attempts":
                        value = json.dumps(value)
                    values.append(value)
                copy.write_row(values)
        cursor.execute(
            f"INSERT INTO requestlogs_requestlog ({cols}) SELECT {cols} FROM requestlog_incoming "  # noqa: S608 - model column names
            "ON CONFLICT (request_id) DO NOTHING"
        )
        return cursor.rowcount
