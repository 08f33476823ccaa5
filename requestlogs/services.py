"""Writes of request logs (from the embedded gateway or the ingestion task).

Batches arrive as plain dicts from the gateway. They are written without building
model instances (that would cost more than serving the request): executemany on
SQLite, COPY on PostgreSQL. Both skip a request_id already stored, so a retried
batch is harmless.
"""

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

import orjson
from django.db import connection, transaction

from requestlogs.models import RequestLog

_FIELDS = [f for f in RequestLog._meta.concrete_fields if f.name != "id"]
_COLUMNS = [f.column for f in _FIELDS]
_DEFAULTS = {f.name: f.get_default() for f in _FIELDS}


def _rows(records: Iterable[dict[str, Any]], *, sqlite: bool) -> list[tuple[Any, ...]]:
    rows = []
    for record in records:
        values = []
        for field in _FIELDS:
            name = field.name
            value = record.get(name, _DEFAULTS[name])
            if name == "created_at":
                moment = datetime.fromtimestamp(value, tz=UTC) if isinstance(value, int | float) else value
                value = moment.replace(tzinfo=None).isoformat(" ") if sqlite else moment
            elif name == "attempts":
                value = orjson.dumps(value or []).decode()
            elif name == "cost_usd" and value is not None:
                value = f"{value:.8f}"
            values.append(value)
        rows.append(tuple(values))
    return rows


@transaction.atomic
def request_logs_insert(*, records: Iterable[dict[str, Any]]) -> int:
    """Insert records, skipping request_ids already stored; returns how many rows were new."""
    records = list(records)
    if not records:
        return 0
    cols = ", ".join(_COLUMNS)
    if connection.vendor == "postgresql":
        return _copy_postgres(_rows(records, sqlite=False), cols)
    placeholders = ", ".join(["%s"] * len(_COLUMNS))
    with connection.cursor() as cursor:
        cursor.executemany(
            f"INSERT OR IGNORE INTO requestlogs_requestlog ({cols}) VALUES ({placeholders})",  # noqa: S608 - model columns
            _rows(records, sqlite=True),
        )
        return cursor.rowcount if cursor.rowcount >= 0 else len(records)


def _copy_postgres(rows: list[tuple[Any, ...]], cols: str) -> int:
    """COPY into a temporary table, then insert what is new: fast and idempotent."""
    with connection.cursor() as cursor:
        # Same column types, no constraints; dropped at commit.
        cursor.execute(
            f"CREATE TEMP TABLE requestlog_incoming ON COMMIT DROP AS SELECT {cols} FROM requestlogs_requestlog "  # noqa: S608 - model columns
            "WITH NO DATA"
        )
        with cursor.cursor.copy(f"COPY requestlog_incoming ({cols}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
        cursor.execute(
            f"INSERT INTO requestlogs_requestlog ({cols}) SELECT {cols} FROM requestlog_incoming "  # noqa: S608 - model columns
            "ON CONFLICT (request_id) DO NOTHING"
        )
        return cursor.rowcount
