"""Writes of request logs (from the embedded gateway or the ingestion task).

Batches arrive as plain dicts from the gateway. They are written without building
model instances (that would cost more than serving the request): executemany on
SQLite, COPY on PostgreSQL. Both skip a request_id already stored, so a retried
batch is harmless.
"""

import operator
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any, cast

import orjson
from django.db import DataError, IntegrityError, connection, transaction

from requestlogs.models import RequestLog

_FIELDS = [f for f in RequestLog._meta.concrete_fields if f.name != "id"]
_COLUMNS = [cast(str, f.column) for f in _FIELDS]  # a concrete field always has a column
_DEFAULTS = {f.name: f.get_default() for f in _FIELDS}
_REQUEST_ID = _COLUMNS.index("request_id")


_TEXT_COLUMNS = [i for i, f in enumerate(_FIELDS) if f.get_internal_type() in ("CharField", "TextField")]
_GET_ALL = operator.itemgetter(*(f.name for f in _FIELDS))
_CREATED_AT = _COLUMNS.index("created_at")
_ATTEMPTS = _COLUMNS.index("attempts")
_COST = _COLUMNS.index("cost_usd")


def _moment(value: Any) -> datetime:
    return datetime.fromtimestamp(value, tz=UTC) if isinstance(value, int | float) else value


def _without_nul(value: Any) -> Any:
    if isinstance(value, str):
        return value.replace("\x00", "")
    if isinstance(value, list):
        return [_without_nul(v) for v in value]
    if isinstance(value, dict):
        return {_without_nul(k): _without_nul(v) for k, v in value.items()}
    return value


def _attempts(value: Any) -> str:
    text = orjson.dumps(value or []).decode()
    # PostgreSQL's jsonb cannot hold \u0000 either; only a record that has one pays for the cleaning.
    return orjson.dumps(_without_nul(value)).decode() if "\\u0000" in text else text


def _row(record: dict[str, Any], *, sqlite: bool) -> tuple[Any, ...]:
    try:
        values = list(_GET_ALL(record))  # one C call when the record has every field, as the gateway's do
    except KeyError:
        values = [record.get(f.name, _DEFAULTS[f.name]) for f in _FIELDS]
    for i in _TEXT_COLUMNS:
        value = values[i]
        if type(value) is str and "\x00" in value:
            values[i] = value.replace("\x00", "")  # PostgreSQL text cannot hold NUL
    moment = _moment(values[_CREATED_AT])
    values[_CREATED_AT] = moment.replace(tzinfo=None).isoformat(" ") if sqlite else moment
    values[_ATTEMPTS] = _attempts(values[_ATTEMPTS])
    if values[_COST] is not None:
        values[_COST] = f"{values[_COST]:.8f}"
    return tuple(values)


def _rows(records: Iterable[dict[str, Any]], *, sqlite: bool) -> list[tuple[Any, ...]]:
    """Column values in _COLUMNS order. A value that cannot even be converted makes the record refused (DataError),
    like one the database refuses, so it is set aside instead of failing its batch forever."""
    rows = []
    for record in records:
        try:
            rows.append(_row(record, sqlite=sqlite))
        except (TypeError, ValueError, OverflowError, OSError, AttributeError) as exc:
            raise DataError(f"request log {record.get('request_id')!r}: {type(exc).__name__}: {exc}") from exc
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
    """COPY the batch straight into the table; if that is refused, merge it idempotently instead.

    A request_id already stored is rare (a batch redelivered after a worker died between commit and
    acknowledgement, or stored by a concurrent writer), so the fast path does not look for one first.
    When a constraint refuses the COPY (the unique index, or a CHECK), the batch goes the careful way:
    COPY into a temporary table, then INSERT what is new with ON CONFLICT DO NOTHING, which raises only
    for rows that are bad in themselves. A value PostgreSQL cannot even read (DataError) would fail the
    same way twice, so it goes straight back to the caller, which sets the bad row apart.
    """
    fresh: dict[Any, tuple[Any, ...]] = {}
    for row in rows:
        fresh.setdefault(row[_REQUEST_ID], row)  # a record repeated within the batch counts once
    try:
        with transaction.atomic(), connection.cursor() as cursor, connection.wrap_database_errors:
            # psycopg formats each row in C while the previous ones are already on their way.
            with cursor.cursor.copy(f"COPY requestlogs_requestlog ({cols}) FROM STDIN") as copy:
                for row in fresh.values():
                    copy.write_row(row)
        return len(fresh)
    except IntegrityError:
        return _merge_postgres(list(fresh.values()), cols)


def _merge_postgres(rows: list[tuple[Any, ...]], cols: str) -> int:
    with connection.cursor() as cursor, connection.wrap_database_errors:
        # Same column types, no constraints; dropped at the end (and at commit, should this fail).
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
        inserted: int = cursor.rowcount
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
