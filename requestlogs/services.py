"""Writes of request logs (from the embedded gateway or the ingestion task).

Batches arrive as plain dicts from the gateway. They are written without building
model instances (that would cost more than serving the request): executemany on
SQLite, COPY on PostgreSQL. Both skip a request_id already stored, so a retried
batch is harmless.
"""

import operator
from bisect import bisect_right
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any, cast

import orjson
from django.db import DataError, IntegrityError, connection, transaction

from health.breaker.types import DEFAULT_FAILURE_STATUS_CODES, ErrorKind
from requestlogs.models import (
    BUCKET_EDGES_MS,
    BUCKETS,
    AttemptMinute,
    RequestHour,
    RequestLog,
    RequestMinute,
    RequestQuarter,
    StatusGroup,
    Tier,
)

_FIELDS = [f for f in RequestLog._meta.concrete_fields if f.name != "id"]
_COLUMNS = [cast(str, f.column) for f in _FIELDS]  # a concrete field always has a column
_DEFAULTS = {f.name: f.get_default() for f in _FIELDS}
_REQUEST_ID = _COLUMNS.index("request_id")


_TEXT_COLUMNS = [i for i, f in enumerate(_FIELDS) if f.get_internal_type() in ("CharField", "TextField")]
_BOOL_COLUMNS = [i for i, f in enumerate(_FIELDS) if f.get_internal_type() == "BooleanField"]
# Whole numbers the aggregates read: a "503" or a 2.5 would be read one way by the database, another by Python.
_INT_COLUMNS = [_COLUMNS.index("status"), _COLUMNS.index("chain_step")]
_GET_ALL = operator.itemgetter(*(f.name for f in _FIELDS))
_CREATED_AT = _COLUMNS.index("created_at")
_ATTEMPTS = _COLUMNS.index("attempts")
_COST = _COLUMNS.index("cost_usd")


def _moment(value: Any) -> datetime:
    """Epoch seconds (the gateway's) or a datetime, in UTC (a naive one is UTC); anything else is refused.

    A string is refused rather than left to the database: PostgreSQL would read an offset the aggregates do not,
    and SQLite would store it as it came.
    """
    if type(value) is float or type(value) is int:
        return datetime.fromtimestamp(value, tz=UTC)
    if isinstance(value, datetime):
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    raise TypeError(f"created_at is {type(value).__name__}, not epoch seconds")


def _wrong_type(column: int, value: Any, expected: str) -> TypeError:
    return TypeError(f"{_COLUMNS[column]} is {type(value).__name__}, not {expected}")


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
    # The aggregates key and classify rows by these values in Python: one the database would read differently
    # (a "no" PostgreSQL takes as false) or that cannot be ordered with the others (a model name that is a
    # number) is refused here, alone, instead of miscounting or failing its whole batch on every retry.
    for i in _TEXT_COLUMNS:
        value = values[i]
        if type(value) is not str:
            raise _wrong_type(i, value, "text")
        if "\x00" in value:
            values[i] = value.replace("\x00", "")  # PostgreSQL text cannot hold NUL
    for i in _BOOL_COLUMNS:
        if type(values[i]) is not bool:
            raise _wrong_type(i, values[i], "true or false")
    for i in _INT_COLUMNS:
        if type(values[i]) is not int:
            raise _wrong_type(i, values[i], "a whole number")
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
    """Insert records, skipping request_ids already stored; returns how many rows were new.

    Each new row is added to the per-minute and per-hour aggregates in the same transaction (a redelivered
    request_id is neither stored nor counted again).
    """
    records = list(records)
    if not records:
        return 0
    postgres = connection.vendor == "postgresql"
    rows = _rows(records, sqlite=not postgres)
    first: dict[Any, int] = {}
    for i, row in enumerate(rows):
        first.setdefault(row[_REQUEST_ID], i)  # a record repeated within the batch counts once
    unique = [rows[i] for i in first.values()]
    cols = ", ".join(_COLUMNS)
    new_ids = _copy_postgres(unique, cols) if postgres else _insert_sqlite(unique, cols)
    new = list(first.values()) if new_ids is None else [i for i in first.values() if rows[i][_REQUEST_ID] in new_ids]
    aggregates_add(rows=[rows[i] for i in new], attempts=[records[i].get("attempts") for i in new])
    return len(new)


def _insert_sqlite(rows: list[tuple[Any, ...]], cols: str) -> set[Any] | None:
    """executemany; returns None when every row was new, else the request_ids it stored."""
    placeholders = ", ".join(["%s"] * len(_COLUMNS))
    with connection.cursor() as cursor:
        # The write lock is already held (transaction_mode IMMEDIATE), so rows with a higher id are this batch's.
        cursor.execute("SELECT COALESCE(MAX(id), 0) FROM requestlogs_requestlog")
        (before,) = cursor.fetchone()
        cursor.executemany(
            # ON CONFLICT skips only a repeated request_id; any other refused row raises, as on PostgreSQL.
            f"INSERT INTO requestlogs_requestlog ({cols}) VALUES ({placeholders}) "  # noqa: S608 - model columns
            "ON CONFLICT (request_id) DO NOTHING",
            rows,
        )
        if cursor.rowcount == len(rows):
            return None
        cursor.execute("SELECT request_id FROM requestlogs_requestlog WHERE id > %s", [before])
        return {request_id for (request_id,) in cursor.fetchall()}


def _copy_postgres(rows: list[tuple[Any, ...]], cols: str) -> set[Any] | None:
    """COPY the batch straight into the table; if that is refused, merge it idempotently instead.

    A request_id already stored is rare (a batch redelivered after a worker died between commit and
    acknowledgement, or stored by a concurrent writer), so the fast path does not look for one first.
    When a constraint refuses the COPY (the unique index, or a CHECK), the batch goes the careful way:
    COPY into a temporary table, then INSERT what is new with ON CONFLICT DO NOTHING, which raises only
    for rows that are bad in themselves. A value PostgreSQL cannot even read (DataError) would fail the
    same way twice, so it goes straight back to the caller, which sets the bad row apart.

    Returns None when every row was new (the COPY), else the request_ids the merge stored.
    """
    try:
        with transaction.atomic(), connection.cursor() as cursor, connection.wrap_database_errors:
            # psycopg formats each row in C while the previous ones are already on their way.
            with cursor.cursor.copy(f"COPY requestlogs_requestlog ({cols}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
        return None
    except IntegrityError:
        return _merge_postgres(rows, cols)


def _merge_postgres(rows: list[tuple[Any, ...]], cols: str) -> set[Any]:
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
            "ON CONFLICT (request_id) DO NOTHING RETURNING request_id"
        )
        inserted = {request_id for (request_id,) in cursor.fetchall()}
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


# ---------- Per-minute and per-hour aggregates (the Dashboard, alerts, Provider Health) ----------

_AGG_INDEX = {name: _COLUMNS.index(name) for name in _COLUMNS}
_FAILURE_CODES = frozenset(DEFAULT_FAILURE_STATUS_CODES)
_NUMBER = (int, float)  # not bool: a JSON true is no status code
_REQUEST_KEY = ("start", "source_model", "tier", "status_class")
_REQUEST_SUMS = ("requests", "latency_sum_ms", "ttfb_count", "ttfb_sum_ms")
_REQUEST_MAXES = ("latency_max_ms", "ttfb_max_ms")
_LAT = tuple(f"lat_{i:02d}" for i in range(BUCKETS))
_TTFB = tuple(f"ttfb_{i:02d}" for i in range(BUCKETS))
_DUR = tuple(f"dur_{i:02d}" for i in range(BUCKETS))
_ATTEMPT_KEY = ("start", "provider", "model")
_ATTEMPT_SUMS = ("attempts", "errors", "duration_sum_ms")
_ATTEMPT_MAXES = ("duration_max_ms",)
# Value slots of one aggregate row, in column order after its key.
_REQUEST_VALUES = (*_REQUEST_SUMS, *_REQUEST_MAXES, *_LAT, *_TTFB)
_ATTEMPT_VALUES = (*_ATTEMPT_SUMS, *_ATTEMPT_MAXES, *_DUR)
_R_REQUESTS, _R_LAT_SUM, _R_TTFB_COUNT, _R_TTFB_SUM, _R_LAT_MAX, _R_TTFB_MAX = range(6)
_R_LAT0 = 6
_R_TTFB0 = 6 + BUCKETS
_A_ATTEMPTS, _A_ERRORS, _A_SUM, _A_MAX = range(4)
_A_DUR0 = 4


def tier_of(*, status: int, served_provider: str, optimistic: bool, chain_step: int) -> Tier:
    """Who served a request (see `Tier`)."""
    if optimistic and served_provider:
        return Tier.OPTIMISTIC
    if status >= 500:
        return Tier.FAILED
    if not served_provider:
        return Tier.REJECTED if status >= 400 else Tier.FAILED
    if chain_step <= 0:
        return Tier.PRIMARY
    return (Tier.STEP1, Tier.STEP2)[chain_step - 1] if chain_step <= 2 else Tier.STEP3PLUS


def status_group_of(status: int) -> StatusGroup:
    if status == CLIENT_GONE:
        return StatusGroup.CLIENT_GONE
    return _GROUPS.get(status // 100, StatusGroup.OTHER) if status >= 0 else StatusGroup.OTHER


CLIENT_GONE = 499
_GROUPS = {
    2: StatusGroup.OK,
    3: StatusGroup.REDIRECT,
    4: StatusGroup.CLIENT_ERROR,
    5: StatusGroup.SERVER_ERROR,
}


def _periods(value: Any) -> tuple[Any, Any, Any]:
    """(minute, quarter hour, hour) of a stored created_at: SQLite's text as Django writes it, else a datetime."""
    if isinstance(value, str):
        return value[:16] + ":00", f"{value[:14]}{int(value[14:16]) // 15 * 15:02d}:00", value[:13] + ":00:00"
    moment = (value if value.tzinfo is not None else value.replace(tzinfo=UTC)).astimezone(UTC)
    minute = moment.replace(second=0, microsecond=0)
    return minute, minute.replace(minute=minute.minute // 15 * 15), minute.replace(minute=0)


def _clean(value: str, length: int) -> str:
    return (value.replace("\x00", "") if "\x00" in value else value)[:length]


def aggregates_add(*, rows: list[tuple[Any, ...]], attempts: list[Any]) -> None:
    """Add newly stored rows (column values in _COLUMNS order, as written) and their attempts to the aggregates.

    Runs inside the insert's transaction. The upserts add to what is there, so concurrent writers stay exact;
    keys are written in sorted order so two writers lock shared rows in the same order (no deadlock).
    """
    if not rows:
        return
    ix = _AGG_INDEX
    i_created, i_status, i_provider = ix["created_at"], ix["status"], ix["served_provider"]
    i_routed, i_requested, i_step, i_optimistic = (
        ix["routed_model"],
        ix["requested_model"],
        ix["chain_step"],
        ix["optimistic_primary"],
    )
    i_latency, i_ttfb = ix["latency_ms"], ix["ttfb_ms"]
    minutes: dict[tuple[Any, ...], list[float]] = {}
    attempt_rows: dict[tuple[Any, ...], list[float]] = {}
    periods_of: dict[Any, tuple[Any, Any, Any]] = {}
    edges = BUCKET_EDGES_MS
    try:
        for row, tried in zip(rows, attempts, strict=True):
            periods = _periods(row[i_created])
            minute = periods[0]
            periods_of[minute] = periods
            status = int(row[i_status])
            tier = tier_of(
                status=status,
                served_provider=row[i_provider] or "",
                optimistic=bool(row[i_optimistic]),
                chain_step=int(row[i_step] or 0),
            )
            key = (minute, row[i_routed] or row[i_requested] or "", str(tier), str(status_group_of(status)))
            slot = minutes.get(key)
            if slot is None:
                slot = minutes[key] = [0.0] * len(_REQUEST_VALUES)
            latency = float(row[i_latency])
            slot[_R_REQUESTS] += 1
            slot[_R_LAT_SUM] += latency
            slot[_R_LAT_MAX] = max(slot[_R_LAT_MAX], latency)
            slot[_R_LAT0 + bisect_right(edges, latency)] += 1
            if row[i_ttfb] is not None:
                ttfb = float(row[i_ttfb])
                slot[_R_TTFB_COUNT] += 1
                slot[_R_TTFB_SUM] += ttfb
                slot[_R_TTFB_MAX] = max(slot[_R_TTFB_MAX], ttfb)
                slot[_R_TTFB0 + bisect_right(edges, ttfb)] += 1
            if isinstance(tried, list | tuple):
                for attempt in tried:
                    _attempt_add(attempt_rows, minute, attempt)
    except (TypeError, ValueError, OverflowError) as exc:
        raise DataError(f"request log aggregates: {type(exc).__name__}: {exc}") from exc
    with connection.cursor() as cursor:
        _upsert(cursor, RequestMinute._meta.db_table, _REQUEST_KEY, _REQUEST_MAXES, _REQUEST_VALUES, minutes)
        for level, table in ((1, RequestQuarter), (2, RequestHour)):
            rows_of = _roll_up(minutes, {m: p[level] for m, p in periods_of.items()})
            _upsert(cursor, table._meta.db_table, _REQUEST_KEY, _REQUEST_MAXES, _REQUEST_VALUES, rows_of)
        _upsert(cursor, AttemptMinute._meta.db_table, _ATTEMPT_KEY, _ATTEMPT_MAXES, _ATTEMPT_VALUES, attempt_rows)


def _roll_up(
    minutes: dict[tuple[Any, ...], list[float]], period_of: dict[Any, Any]
) -> dict[tuple[Any, ...], list[float]]:
    """Minute rows summed into longer periods (`period_of` maps each minute to its period)."""
    out: dict[tuple[Any, ...], list[float]] = {}
    for (minute, *rest), values in minutes.items():
        key = (period_of[minute], *rest)
        total = out.get(key)
        if total is None:
            out[key] = list(values)
            continue
        for i, value in enumerate(values):
            total[i] = max(total[i], value) if i in (_R_LAT_MAX, _R_TTFB_MAX) else total[i] + value
    return out


def _attempt_add(into: dict[tuple[Any, ...], list[float]], minute: Any, attempt: Any) -> None:
    if type(attempt) is not dict:
        return
    attempt = cast(dict[str, Any], attempt)
    provider, model = attempt.get("provider"), attempt.get("model")
    if type(provider) is not str or type(model) is not str:
        return  # not an attempt the gateway writes: the rebuild skips it the same way
    status, error, duration = attempt.get("status"), attempt.get("error"), attempt.get("duration_ms")
    duration = float(duration) if type(duration) in _NUMBER else 0.0
    failed = (type(status) in _NUMBER and status in _FAILURE_CODES) or (
        type(error) is str and error not in ("", ErrorKind.CANCELLED)
    )
    key = (minute, _clean(provider, 64), _clean(model, 128))
    slot = into.get(key)
    if slot is None:
        slot = into[key] = [0.0] * len(_ATTEMPT_VALUES)
    slot[_A_ATTEMPTS] += 1
    slot[_A_ERRORS] += failed
    slot[_A_SUM] += duration
    slot[_A_MAX] = max(slot[_A_MAX], duration)
    slot[_A_DUR0 + bisect_right(BUCKET_EDGES_MS, duration)] += 1


def _upsert(
    cursor: Any,
    table: str,
    key: tuple[str, ...],
    maxes: tuple[str, ...],
    values: tuple[str, ...],
    rows: dict[tuple[Any, ...], list[float]],
) -> None:
    if not rows:
        return
    columns = (*key, *values)
    updates = ", ".join(
        f"{c} = CASE WHEN excluded.{c} > {table}.{c} THEN excluded.{c} ELSE {table}.{c} END"
        if c in maxes
        else f"{c} = {table}.{c} + excluded.{c}"
        for c in values
    )
    integral = [c not in maxes and not c.endswith("_ms") for c in values]
    ordered = sorted(rows.items())
    conflict = f"ON CONFLICT ({', '.join(key)}) DO UPDATE SET {updates}"
    per_statement = max(1, (connection.features.max_query_params or 30000) // len(columns))
    for start in range(0, len(ordered), per_statement):
        chunk = ordered[start : start + per_statement]
        placeholders = ", ".join(["(" + ", ".join(["%s"] * len(columns)) + ")"] * len(chunk))
        params: list[Any] = []
        for k, v in chunk:
            params.extend(k)
            params.extend(int(x) if whole else x for x, whole in zip(v, integral, strict=True))
        cursor.execute(
            f"INSERT INTO {table} ({', '.join(columns)}) VALUES {placeholders} {conflict}",  # noqa: S608
            params,
        )


def _bucket_sums(expr: str, prefix: str) -> list[str]:
    """SUM(CASE ...) per histogram bucket of `expr`, as aggregates_add counts them (NULL counts in none)."""
    edges = BUCKET_EDGES_MS
    out = []
    for i in range(BUCKETS):
        if i == 0:
            condition = f"{expr} < {edges[0]}"
        elif i == BUCKETS - 1:
            condition = f"{expr} >= {edges[-1]}"
        else:
            condition = f"{expr} >= {edges[i - 1]} AND {expr} < {edges[i]}"
        out.append(f"SUM(CASE WHEN {condition} THEN 1 ELSE 0 END) AS {prefix}_{i:02d}")
    return out


def _positive_max(expr: str) -> str:
    return f"CASE WHEN MAX({expr}) > 0 THEN MAX({expr}) ELSE 0 END"


def _rebuild_sql(vendor: str) -> list[str]:
    """The statements that rebuild every aggregate from the stored rows, with the rules of aggregates_add."""
    postgres = vendor == "postgresql"
    log, minute_t, quarter_t, hour_t, attempt_t = (
        RequestLog._meta.db_table,
        RequestMinute._meta.db_table,
        RequestQuarter._meta.db_table,
        RequestHour._meta.db_table,
        AttemptMinute._meta.db_table,
    )
    if postgres:
        minute_of, hour_of = "date_trunc('minute', {})", "date_trunc('hour', {})"
        quarter_of = "date_trunc('hour', {0}) + floor(extract(minute FROM {0}) / 15) * interval '15 minutes'"
    else:
        minute_of, hour_of = "substr({}, 1, 16) || ':00'", "substr({}, 1, 13) || ':00:00'"
        quarter_of = "substr({0}, 1, 14) || printf('%02d', CAST(substr({0}, 15, 2) AS INTEGER) / 15 * 15) || ':00'"
    tier = (
        "CASE WHEN optimistic_primary AND served_provider <> '' THEN 'optimistic' "
        "WHEN status >= 500 THEN 'failed' "
        "WHEN served_provider = '' AND status >= 400 THEN 'rejected' "
        "WHEN served_provider = '' THEN 'failed' "
        "WHEN chain_step <= 0 THEN 'primary' WHEN chain_step = 1 THEN 'step1' WHEN chain_step = 2 THEN 'step2' "
        "ELSE 'step3plus' END"
    )
    group = (
        f"CASE WHEN status = {CLIENT_GONE} THEN 'client_gone' "
        + " ".join(f"WHEN status >= {c}00 AND status < {c + 1}00 THEN '{g}'" for c, g in _GROUPS.items())
        + " ELSE 'other' END"
    )
    request_columns = ", ".join((*_REQUEST_KEY, *_REQUEST_VALUES))
    minute_select = ", ".join(
        [
            f"{minute_of.format('created_at')} AS start",
            "CASE WHEN routed_model <> '' THEN routed_model ELSE requested_model END AS source_model",
            f"{tier} AS tier",
            f"{group} AS status_class",
            "COUNT(*)",
            "COALESCE(SUM(latency_ms), 0)",
            "COUNT(ttfb_ms)",
            "COALESCE(SUM(ttfb_ms), 0)",
            _positive_max("latency_ms"),
            _positive_max("ttfb_ms"),
            *_bucket_sums("latency_ms", "lat"),
            *_bucket_sums("ttfb_ms", "ttfb"),
        ]
    )
    sums = ", ".join(f"MAX({c})" if c in _REQUEST_MAXES else f"SUM({c})" for c in _REQUEST_VALUES)
    codes = ", ".join(str(c) for c in sorted(_FAILURE_CODES))
    if postgres:
        elements = (
            f"FROM {log} r CROSS JOIN LATERAL jsonb_array_elements("
            "CASE WHEN jsonb_typeof(r.attempts) = 'array' THEN r.attempts ELSE '[]'::jsonb END) AS a "
            "WHERE jsonb_typeof(a) = 'object' AND jsonb_typeof(a->'provider') = 'string' "
            "AND jsonb_typeof(a->'model') = 'string'"
        )
        provider, model = "left(a->>'provider', 64)", "left(a->>'model', 128)"
        duration = "CASE WHEN jsonb_typeof(a->'duration_ms') = 'number' THEN (a->>'duration_ms')::float8 ELSE 0 END"
        failed = (
            f"CASE WHEN (jsonb_typeof(a->'status') = 'number' AND (a->>'status')::numeric IN ({codes})) "
            "OR (jsonb_typeof(a->'error') = 'string' AND a->>'error' NOT IN ('', 'cancelled')) THEN 1 ELSE 0 END"
        )
    else:
        elements = (
            f"FROM {log} r, json_each(CASE WHEN json_type(r.attempts) = 'array' THEN r.attempts ELSE '[]' END) AS a "
            "WHERE a.type = 'object' AND json_type(a.value, '$.provider') = 'text' "
            "AND json_type(a.value, '$.model') = 'text'"
        )
        provider = "substr(json_extract(a.value, '$.provider'), 1, 64)"
        model = "substr(json_extract(a.value, '$.model'), 1, 128)"
        duration = (
            "CASE WHEN json_type(a.value, '$.duration_ms') IN ('integer', 'real') "
            "THEN json_extract(a.value, '$.duration_ms') ELSE 0 END"
        )
        failed = (
            "CASE WHEN (json_type(a.value, '$.status') IN ('integer', 'real') "
            f"AND json_extract(a.value, '$.status') IN ({codes})) "
            "OR (json_type(a.value, '$.error') = 'text' AND json_extract(a.value, '$.error') NOT IN ('', 'cancelled')) "
            "THEN 1 ELSE 0 END"
        )
    attempt_columns = ", ".join((*_ATTEMPT_KEY, *_ATTEMPT_VALUES))
    attempt_select = ", ".join(
        [
            "start",
            "provider",
            "model",
            "COUNT(*)",
            "SUM(failed)",
            "SUM(duration)",
            _positive_max("duration"),
            *_bucket_sums("duration", "dur"),
        ]
    )
    return [
        f"DELETE FROM {minute_t}",  # noqa: S608 - model tables
        f"DELETE FROM {quarter_t}",  # noqa: S608 - model tables
        f"DELETE FROM {hour_t}",  # noqa: S608 - model tables
        f"DELETE FROM {attempt_t}",  # noqa: S608 - model tables
        f"INSERT INTO {minute_t} ({request_columns}) SELECT {minute_select} FROM {log} GROUP BY 1, 2, 3, 4",  # noqa: S608
        *(
            f"INSERT INTO {table} ({request_columns}) "  # noqa: S608 - model columns
            f"SELECT {period.format('start')}, source_model, tier, status_class, {sums} "
            f"FROM {minute_t} GROUP BY 1, 2, 3, 4"
            for table, period in ((quarter_t, quarter_of), (hour_t, hour_of))
        ),
        f"INSERT INTO {attempt_t} ({attempt_columns}) "  # noqa: S608 - model columns
        f"SELECT {attempt_select} FROM (SELECT {minute_of.format('r.created_at')} AS start, {provider} AS provider, "
        f"{model} AS model, {duration} AS duration, {failed} AS failed {elements}) AS s GROUP BY 1, 2, 3",
    ]


def request_aggregates_rebuild(*, using: Any = None) -> None:
    """Rebuild every aggregate from the stored request logs (the data migration, the benchmark, a repair).

    One INSERT ... SELECT per table, with the same rules as `aggregates_add` on ingest. `using`: a connection
    (the migration's), else the default one. Takes one transaction; ingest meanwhile waits on PostgreSQL only
    where it adds to a row being rebuilt, so run it when ingest is stopped for an exact result.
    """
    conn = using if using is not None else connection
    with transaction.atomic(using=conn.alias), conn.cursor() as cursor:
        for statement in _rebuild_sql(conn.vendor):
            cursor.execute(statement)
