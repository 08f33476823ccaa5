"""Dashboard benchmark: GET / for each range with 2,000,000 request-log rows over 7 days (PostgreSQL).

Generates the rows with one INSERT ... SELECT over generate_series (8 source models, ~5 % fallbacks with a
two-hour outage of gpt-4o served by its chain, ~3 % errors, lognormal latencies), builds their aggregates
with `request_aggregates_rebuild` (one INSERT ... SELECT per table) and writes the outage's circuit events;
later runs reuse them unless --reload. Then times GET / (the Django test client, in-process: middleware,
view, queries, template and SVG; no network) for 1 h, 24 h and 7 d, median of --runs, and the ingest rate of
`request_logs_insert` (batches of 500) with the aggregates maintained and, interleaved, with them skipped.

    .venv/bin/python bench/dashboard.py [--rows 2000000] [--reload] [--runs 9] [--ingest 100000]

Needs PostgreSQL (BENCH_DATABASE_URL, default postgres://root@127.0.0.1:5432/controlplane_bench_dashboard).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DATABASE_URL = os.environ.get("BENCH_DATABASE_URL", "postgres://root@127.0.0.1:5432/controlplane_bench_dashboard")
os.environ["DATABASE_URL"] = DATABASE_URL
os.environ.pop("REDIS_URL", None)  # the console in-process, memory breaker
os.environ.setdefault("CONTROLPLANE_VAR_DIR", "/tmp/controlplane-bench-var")
os.environ["ALLOWED_HOSTS"] = "testserver"
os.environ["DJANGO_SETTINGS_MODULE"] = "controlplane.settings"

MODELS = ["gpt-4o", "gpt-4o-mini", "claude-sonnet", "claude-haiku", "mistral-large", "gemini-pro", "llama-70b", "o3"]
PROVIDER = {
    "gpt-4o": "openai",
    "gpt-4o-mini": "openai",
    "claude-sonnet": "anthropic",
    "claude-haiku": "anthropic",
    "mistral-large": "mistral",
    "gemini-pro": "google",
    "llama-70b": "groq",
    "o3": "openai",
}
OUTAGE_HOURS = (30, 32)  # gpt-4o's circuit is open from 32 h ago until 30 h ago


def ensure_database() -> None:
    import psycopg

    name = urlsplit(DATABASE_URL).path.lstrip("/")
    admin = DATABASE_URL.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin.replace("postgres://", "postgresql://"), autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')


def setup_django() -> None:
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", "--noinput", verbosity=0)


_GENERATE = """
INSERT INTO requestlogs_requestlog (
    request_id, created_at, key_id, user_id, requested_model, routed_model, served_provider, served_model,
    chain_step, fallback_triggered, optimistic_primary, fallback_from_provider, fallback_original_model, status,
    stream, latency_ms, ttfb_ms, tokens_in, tokens_out, error_kind, attempts)
SELECT
    md5(g::text || %(seed)s), t, 1 + g %% 50, 1 + g %% 7, model, model,
    CASE WHEN step > 0 THEN 'backup' ELSE provider END, CASE WHEN step > 0 THEN 'claude-haiku' ELSE model END,
    step, step > 0, false, CASE WHEN step > 0 THEN provider ELSE '' END, CASE WHEN step > 0 THEN model ELSE '' END,
    status, g %% 3 = 0, latency, latency * (CASE WHEN g %% 3 = 0 THEN 0.15 ELSE 0.95 END), 400, 150,
    CASE WHEN status >= 500 THEN 'upstream_error' ELSE '' END,
    jsonb_build_array(jsonb_build_object(
        'provider', CASE WHEN step > 0 THEN 'backup' ELSE provider END,
        'model', CASE WHEN step > 0 THEN 'claude-haiku' ELSE model END,
        'status', status, 'error', NULL, 'duration_ms', round(latency::numeric, 1)))
FROM (
    SELECT g, t, model, provider,
        CASE WHEN model = 'gpt-4o' AND t BETWEEN %(outage_from)s AND %(outage_to)s THEN 1
             WHEN r1 < 0.05 THEN CASE WHEN r2 < 0.8 THEN 1 ELSE 2 END ELSE 0 END AS step,
        CASE WHEN r3 < 0.02 THEN 503 WHEN r3 < 0.03 THEN 400 ELSE 200 END AS status,
        exp(ln(600) + 0.8 * sqrt(-2 * ln(1 - r4)) * cos(2 * pi() * r5)) AS latency
    FROM (
        SELECT g, %(end)s - random() * interval '7 days' AS t,
            (%(models)s::text[])[1 + floor(random() * %(n_models)s)::int] AS model,
            random() AS r1, random() AS r2, random() AS r3, random() AS r4, random() AS r5
        FROM generate_series(1, %(rows)s) AS g
    ) AS a
    CROSS JOIN LATERAL (SELECT (%(providers)s::jsonb)->>a.model AS provider) AS p
) AS b
"""


def load(n: int, *, reload: bool) -> None:
    """Make the table hold n bench rows over the last 7 days and their aggregates; reuse them when fresh."""
    import json
    from datetime import UTC, datetime, timedelta

    from django.db import connection

    from health.models import CircuitEvent
    from requestlogs.models import RequestMinute
    from requestlogs.services import request_aggregates_rebuild

    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*), max(created_at) FROM requestlogs_requestlog")
        count, newest = cursor.fetchone()
    fresh = newest is not None and datetime.now(UTC) - newest < timedelta(hours=1)
    if count == n and fresh and not reload and RequestMinute.objects.exists():
        print(f"Reusing {count:,} rows (newest {newest:%Y-%m-%d %H:%M} UTC) and their aggregates; --reload to redo.")
        return
    end = datetime.now(UTC)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'requestlogs_requestlog' "
            "AND indexname NOT LIKE '%%pkey' AND indexname NOT LIKE '%%request_id%%'"
        )
        indexes = cursor.fetchall()
        cursor.execute("TRUNCATE requestlogs_requestlog RESTART IDENTITY")
        for name, _ in indexes:
            cursor.execute(f'DROP INDEX "{name}"')
        t0 = time.perf_counter()
        cursor.execute(
            _GENERATE,
            {
                "seed": str(random.random()),
                "end": end,
                "rows": n,
                "models": MODELS,
                "n_models": len(MODELS),
                "providers": json.dumps(PROVIDER),
                "outage_from": end - timedelta(hours=OUTAGE_HOURS[1]),
                "outage_to": end - timedelta(hours=OUTAGE_HOURS[0]),
            },
        )
        print(f"Generated {n:,} rows with one INSERT ... SELECT in {time.perf_counter() - t0:.1f} s")
        t0 = time.perf_counter()
        for _, definition in indexes:
            cursor.execute(definition)
        cursor.execute("VACUUM (ANALYZE) requestlogs_requestlog")
        print(f"Rebuilt {len(indexes)} indexes and analysed in {time.perf_counter() - t0:.1f} s")
    t0 = time.perf_counter()
    request_aggregates_rebuild()
    with connection.cursor() as cursor:
        cursor.execute("VACUUM (ANALYZE) requestlogs_requestminute")
        cursor.execute("VACUUM (ANALYZE) requestlogs_requesthour")
        cursor.execute("VACUUM (ANALYZE) requestlogs_attemptminute")
        cursor.execute(
            "SELECT (SELECT count(*) FROM requestlogs_requestminute), (SELECT count(*) FROM requestlogs_requesthour), "
            "(SELECT count(*) FROM requestlogs_attemptminute)"
        )
        minutes, hours, attempts = cursor.fetchone()
    print(
        f"Built the aggregates in {time.perf_counter() - t0:.1f} s: {minutes:,} minute rows, {hours:,} hour rows, "
        f"{attempts:,} attempt rows"
    )
    CircuitEvent.objects.all().delete()
    opened = end - timedelta(hours=OUTAGE_HOURS[1])
    CircuitEvent.objects.create(provider="openai", model="gpt-4o", kind="opened", at=opened, failures=10, total=12)
    CircuitEvent.objects.create(
        provider="openai", model="gpt-4o", kind="closed", at=end - timedelta(hours=OUTAGE_HOURS[0])
    )


def median_ms(fn: Callable[[], object], runs: int) -> float:
    fn()  # warm: templates, the connection, the planner's statistics
    samples = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1000)
    return statistics.median(samples)


def measure_pages(runs: int) -> None:
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group
    from django.db import connection
    from django.test import Client

    user, _ = get_user_model().objects.get_or_create(username="bench-admin")
    group, _ = Group.objects.get_or_create(name="admin")
    user.groups.add(group)
    client = Client()
    client.force_login(user)
    print()
    for key in ("1h", "24h", "7d"):
        url = f"/?range={key}"

        def get(url: str = url) -> None:
            response = client.get(url)
            assert response.status_code == 200, response.status_code

        queries: list[str] = []

        def count(execute: Any, sql: str, params: Any, many: bool, context: Any, queries: list[str] = queries) -> Any:
            queries.append(sql)
            return execute(sql, params, many, context)

        with connection.execute_wrapper(count):  # reset_queries() on request_started empties queries_log
            get()
        size = len(client.get(url).content)
        ms = median_ms(get, runs)
        print(f"GET {url:<12} median {ms:6.1f} ms over {runs} runs ({len(queries)} queries, {size / 1024:.0f} KiB)")


def _records(n: int, rng: random.Random) -> list[dict[str, Any]]:
    now = time.time()
    out = []
    for i in range(n):
        step = 1 if rng.random() < 0.05 else 0
        model = rng.choice(MODELS)
        served = "claude-haiku" if step else model
        provider = "backup" if step else PROVIDER[model]
        status = 503 if rng.random() < 0.02 else 200
        latency = rng.lognormvariate(6.4, 0.8)
        out.append(
            {
                "request_id": uuid.uuid4().hex,
                "created_at": now - 600 + i * 0.005,
                "key_id": 1,
                "user_id": 1,
                "team_id": None,
                "application_id": None,
                "agent_id": None,
                "requested_model": "bench-ingest",  # the source model of these rows: their aggregates go after
                "routed_model": "",
                "served_provider": provider,
                "served_model": served,
                "chain_step": step,
                "chain_id": None,
                "fallback_triggered": step > 0,
                "optimistic_primary": False,
                "fallback_from_provider": PROVIDER[model] if step else "",
                "fallback_original_model": model if step else "",
                "status": status,
                "stream": False,
                "latency_ms": latency,
                "ttfb_ms": latency * 0.9,
                "tokens_in": 400,
                "tokens_out": 150,
                "cost_usd": 0.001,
                "error_kind": "upstream_error" if status >= 500 else "",
                "attempts": [
                    {
                        "provider": "bench-ingest",
                        "model": served,
                        "status": status,
                        "error": None,
                        "duration_ms": latency,
                    }
                ],
            }
        )
    return out


def measure_ingest(n: int) -> None:
    """request_logs_insert in batches of 500 (the ingest task's unit), with and without the aggregates,
    interleaved three times each; the rows and their aggregates are deleted afterwards."""
    from django.db import connection

    import requestlogs.services as services
    from requestlogs.models import AttemptMinute, RequestHour, RequestLog, RequestMinute
    from requestlogs.services import request_logs_insert

    keep = services.aggregates_add
    rng = random.Random(1)
    rates: dict[bool, list[float]] = {True: [], False: []}
    print()
    for _ in range(3):
        for with_aggregates in (False, True):
            records = _records(n, rng)
            services.aggregates_add = keep if with_aggregates else (lambda **_: None)
            try:
                t0 = time.perf_counter()
                for i in range(0, n, 500):
                    request_logs_insert(records=records[i : i + 500])
                rates[with_aggregates].append(n / (time.perf_counter() - t0))
            finally:
                services.aggregates_add = keep
            RequestLog.objects.filter(requested_model="bench-ingest").delete()
            RequestMinute.objects.filter(source_model="bench-ingest").delete()
            RequestHour.objects.filter(source_model="bench-ingest").delete()
            AttemptMinute.objects.filter(provider="bench-ingest").delete()
            with connection.cursor() as cursor:
                cursor.execute("VACUUM requestlogs_requestlog")
    for with_aggregates in (False, True):
        label = "with the aggregates" if with_aggregates else "without aggregates "
        print(
            f"Ingest {label}: median {statistics.median(rates[with_aggregates]):,.0f} rows/s "
            f"(batches of 500, {n:,} rows, 3 runs: {', '.join(f'{r:,.0f}' for r in rates[with_aggregates])})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--reload", action="store_true", help="regenerate the rows even if the table holds them")
    parser.add_argument("--runs", type=int, default=9, help="timed runs per range (median)")
    parser.add_argument("--ingest", type=int, default=100_000, help="records per ingest run (0: skip)")
    args = parser.parse_args()

    ensure_database()
    setup_django()
    load(args.rows, reload=args.reload)
    measure_pages(args.runs)
    if args.ingest:
        measure_ingest(args.ingest)


if __name__ == "__main__":
    main()
