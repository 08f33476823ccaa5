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
from django.db import DataError, IntegrityError, connection, transaction

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
            elif type(value) is str and "\x00" in value:
                value = value.replace("\x00", "")  # PostgreSQL text cannot hold NUL
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
            # ON CONFLICT skips only a repeated request_id; any other refused row raises, as on PostgreSQL.
            f"INSERT INTO requestlogs_requestlog ({cols}) VALUES ({placeholders}) "  # noqa: S608 - model columns
            "ON CONFLICT (request_id) DO NOTHING",
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
        inserted = cursor.rowcount
        # Dropped now, not only at commit: inside an outer transaction a second batch creates it again.
        cursor.execute("DROP TABLE requestlog_incoming")
        return inserted


def request_logs_insert_isolating(*, records: list[dict[str, Any]]) -> tuple[int, list[tuple[dict[str, Any], str]]]:
    """Insert a batch; if the database refuses a row, insert one by one and return the refused ones.

    A refused row (bad data) must not block the rows around it forever. Connection failures still raise.
    """
    try:
        return request_logs_insert(records=records), []
    except (DataError, IntegrityError):
        pass
    inserted = 0
    refused: list[tuple[dict[str, Any], str]] = []
    for record in records:
        try:
            inserted += request_logs_insert(records=[record])
        except (DataError, IntegrityError) as exc:
            refused.append((record, str(exc)[:500]))
    return inserted, refused
