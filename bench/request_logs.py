"""Request Logs benchmark: the page, the drawer, the API and the CSV on 2,000,000 rows in PostgreSQL.

Loads realistic rows with COPY into a database of its own (30 days, 50 keys, 20 models, about 5 %
fallbacks and 3 % errors; reused by later runs unless --reload), then measures the server time of
requests handled in-process by Django (middleware, view, queries, template; no network): the first
page and page 20 (reached by following "Older" 19 times) for each single filter and a few
combinations, at the default range (24 h) and at 7 days, plus the drawer, the API list and the CSV's
first byte. Prints the slowest query with EXPLAIN (ANALYZE, BUFFERS), then the ingest rate of the
Celery path (`requestlogs.ingest` draining a Redis stream into the indexed table).

    .venv/bin/python bench/request_logs.py [--rows 2000000] [--reload] [--runs 7] [--ingest 200000]

Needs PostgreSQL (BENCH_DATABASE_URL, default postgres://root@127.0.0.1:5432/controlplane_bench)
and Redis (BENCH_REDIS_URL, default redis://127.0.0.1:6379/0). Figures go in the README.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import re
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from multiprocessing.queues import Queue

    from django.test import Client

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DATABASE_URL = os.environ.get("BENCH_DATABASE_URL", "postgres://root@127.0.0.1:5432/controlplane_bench")
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
os.environ["DATABASE_URL"] = DATABASE_URL
os.environ.pop("REDIS_URL", None)  # the console in-process; the ingest path gets its Redis URL directly
os.environ.setdefault("CONTROLPLANE_VAR_DIR", "/tmp/controlplane-bench-var")
os.environ["ALLOWED_HOSTS"] = "testserver"
os.environ["DJANGO_SETTINGS_MODULE"] = "controlplane.settings"

DAYS = 30
SEED = 20261201

PROVIDERS = ["openai", "anthropic", "azure-openai", "mistral", "google"]
# (model, provider, $/Mtok in, $/Mtok out, weight)
MODELS = [
    ("gpt-4o", "openai", "2.50", "10.00", 30),
    ("gpt-4o-mini", "openai", "0.15", "0.60", 25),
    ("o3-mini", "openai", "1.10", "4.40", 4),
    ("gpt-4.1", "openai", "2.00", "8.00", 5),
    ("gpt-4.1-mini", "openai", "0.40", "1.60", 4),
    ("claude-sonnet-4", "anthropic", "3.00", "15.00", 10),
    ("claude-haiku-3.5", "anthropic", "0.80", "4.00", 6),
    ("claude-opus-4", "anthropic", "15.00", "75.00", 1),
    ("gpt-4o-azure", "azure-openai", "2.50", "10.00", 2),
    ("gpt-4o-mini-azure", "azure-openai", "0.15", "0.60", 2),
    ("mistral-large", "mistral", "2.00", "6.00", 2),
    ("mistral-small", "mistral", "0.20", "0.60", 2),
    ("codestral", "mistral", "0.30", "0.90", 1),
    ("gemini-2.0-flash", "google", "0.10", "0.40", 3),
    ("gemini-2.5-pro", "google", "1.25", "10.00", 1),
    ("gemini-1.5-flash", "google", "0.08", "0.30", 1),
    ("text-embed-3", "openai", "0.02", "0.00", 1),
    ("claude-instant", "anthropic", "0.80", "2.40", 0.3),
    ("mixtral-8x7b", "mistral", "0.70", "0.70", 0.3),
    ("gemma-2", "google", "0.05", "0.10", 0.2),
]
FALLBACK_OF = {  # source model → chain entries (models)
    "gpt-4o": ["gpt-4o-azure", "claude-sonnet-4"],
    "gpt-4o-mini": ["gpt-4o-mini-azure", "claude-haiku-3.5"],
    "claude-sonnet-4": ["gpt-4o", "gemini-2.5-pro"],
}
ALIASES = {"default": "gpt-4o", "fast": "gpt-4o-mini"}
STATUS_ERRORS = [(429, 30), (500, 10), (502, 15), (503, 25), (504, 10), (400, 12), (404, 5), (499, 10)]


# ---------- Setup ----------


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


def build_catalog() -> dict:
    """Providers, models, aliases, chains, 6 teams, 10 applications, 20 users (role user), 50 keys."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group

    from catalog.models import ApiKey, Application, LlmModel, Provider, Team
    from catalog.services import api_key_create
    from chains.services import ChainInput, EntryInput, chain_create
    from routing.models import Alias

    if ApiKey.objects.count() >= 50:
        keys = list(ApiKey.objects.order_by("id")[:50])
        return {"keys": keys}
    for name in PROVIDERS:
        Provider.objects.get_or_create(name=name, defaults={"base_url": f"http://127.0.0.1:9/{name}", "api_key": "sk"})
    for name, provider, price_in, price_out, _ in MODELS:
        LlmModel.objects.get_or_create(
            name=name,
            defaults={
                "provider": Provider.objects.get(name=provider),
                "capabilities": ["text"],
                "input_price_per_mtok": Decimal(price_in),
                "output_price_per_mtok": Decimal(price_out),
            },
        )
    for alias, model in ALIASES.items():
        Alias.objects.get_or_create(name=alias, defaults={"model": LlmModel.objects.get(name=model)})
    for source, entries in FALLBACK_OF.items():
        chain_create(
            actor=None,
            data=ChainInput(name=f"{source} chain", source_model=source, entries=[EntryInput(e) for e in entries]),
        )
    teams = [Team.objects.create(name=f"team-{i}") for i in range(6)]
    apps = [Application.objects.create(name=f"app-{i}", team=teams[i % 6]) for i in range(10)]
    user_group, _ = Group.objects.get_or_create(name="user")
    users = []
    for i in range(20):
        user = get_user_model().objects.create_user(username=f"dev{i}", password="bench-password")
        user.groups.add(user_group)
        users.append(user)
    admin = get_user_model().objects.create_superuser(username="bench-admin", password="bench-password")
    keys = [
        api_key_create(
            actor=admin, name=f"key-{i}", user=users[i % 20], team=teams[i % 6], application=apps[i % 10]
        ).key
        for i in range(50)
    ]
    return {"keys": keys}


def _weights(items: list, weight_of: Callable[[Any], float]) -> tuple[list, list[float]]:
    return items, [weight_of(i) for i in items]


def _request_id(moment: float, rng: random.Random) -> str:
    """A UUIDv7 for `moment`, as the gateway makes them (time-ordered ids)."""
    rand = rng.getrandbits(74)
    return f"{int(moment * 1000) << 80 | 0x7 << 76 | (rand >> 62) << 64 | 0b10 << 62 | rand & (2**62 - 1):032x}"


def generate(n: int, keys: list, *, end: float, days: float = DAYS) -> list[tuple]:
    """n rows in time order over `days` days ending at `end`; columns as COPY_COLUMNS."""
    rng = random.Random(SEED)
    start = end - days * 86400
    prices = {m: (Decimal(pi), Decimal(po)) for m, _, pi, po, _ in MODELS}
    provider_of = {m: p for m, p, *_ in MODELS}
    model_names = [m for m, *_ in MODELS]
    model_weights = [w for *_, w in MODELS]
    key_weights = [1 / (i + 1) ** 0.8 for i in range(len(keys))]  # a few busy keys, a long tail
    err_statuses = [s for s, _ in STATUS_ERRORS]
    err_weights = [w for _, w in STATUS_ERRORS]
    moments = sorted(start + rng.random() * (end - start) for _ in range(n))
    chosen_keys = rng.choices(keys, weights=key_weights, k=n)
    chosen_models = rng.choices(model_names, weights=model_weights, k=n)
    rows = []
    for i in range(n):
        key = chosen_keys[i]
        model = chosen_models[i]
        requested = model
        if model in ("gpt-4o", "gpt-4o-mini") and rng.random() < 0.15:
            requested = "default" if model == "gpt-4o" else "fast"
        served, provider, step, chain_from, original = model, provider_of[model], 0, "", ""
        r = rng.random()
        if model in FALLBACK_OF and r < 0.05 / 0.68:  # ~5 % of all rows (the sources are ~68 % of traffic)
            entries = FALLBACK_OF[model]
            step = 1 if rng.random() < 0.8 else 2
            served = entries[step - 1]
            provider, chain_from, original = provider_of[served], provider_of[model], model
        status = 200
        error_kind = ""
        if rng.random() < 0.03:
            status = rng.choices(err_statuses, weights=err_weights)[0]
            error_kind = {499: "client_disconnected", 504: "timeout"}.get(
                status, "upstream_error" if status >= 500 else ""
            )
        stream = rng.random() < 0.3
        latency = rng.lognormvariate(math.log(600), 0.8)
        ttfb = latency * (0.15 if stream else 0.95)
        tokens_in = int(rng.lognormvariate(math.log(400), 1.0)) if status == 200 else None
        tokens_out = int(rng.lognormvariate(math.log(150), 1.0)) if status == 200 else None
        cost = None
        if tokens_in is not None and tokens_out is not None:
            pin, pout = prices[served]
            cost = (pin * tokens_in + pout * tokens_out) / Decimal(1_000_000)
        attempts = [
            {"provider": provider, "model": served, "status": status, "error": None, "duration_ms": round(latency, 1)}
        ]
        rows.append(
            (
                _request_id(moments[i], rng),
                datetime.fromtimestamp(moments[i], tz=UTC),
                key.pk,
                key.user_id,
                key.team_id,
                key.application_id,
                None,
                requested,
                model,
                provider,
                served,
                step,
                None,
                step > 0,
                False,
                chain_from,
                original,
                status,
                stream,
                round(latency, 3),
                round(ttfb, 3),
                tokens_in,
                tokens_out,
                cost,
                error_kind,
                attempts,
            )
        )
    return rows


COPY_COLUMNS = (
    "request_id, created_at, key_id, user_id, team_id, application_id, agent_id, requested_model, routed_model, "
    "served_provider, served_model, chain_step, chain_id, fallback_triggered, optimistic_primary, "
    "fallback_from_provider, "
    "fallback_original_model, status, stream, latency_ms, ttfb_ms, tokens_in, tokens_out, cost_usd, error_kind, "
    "attempts"
)


def load(n: int, keys: list, *, reload: bool) -> tuple[int, datetime]:
    """Make the table hold `n` bench rows (indexes dropped during COPY, then rebuilt); returns (count, newest)."""
    from django.db import connection
    from psycopg.types.json import Jsonb

    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*), max(created_at) FROM requestlogs_requestlog")
        count, newest = cursor.fetchone()
    fresh = newest is not None and (datetime.now(UTC) - newest) < timedelta(hours=2)
    if count == n and fresh and not reload:
        print(f"Reusing {count:,} rows (newest {newest:%Y-%m-%d %H:%M} UTC); --reload to regenerate.")
        return count, newest
    t0 = time.perf_counter()
    rows = generate(n, keys, end=time.time())
    print(f"Generated {n:,} rows in {time.perf_counter() - t0:.1f} s")
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
        with cursor.cursor.copy(f"COPY requestlogs_requestlog ({COPY_COLUMNS}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row((*row[:-1], Jsonb(row[-1])))
        print(f"COPY {n:,} rows in {time.perf_counter() - t0:.1f} s")
        t0 = time.perf_counter()
        for _, definition in indexes:
            cursor.execute(definition)
        cursor.execute("VACUUM (ANALYZE) requestlogs_requestlog")
        print(f"Rebuilt {len(indexes)} indexes and analysed in {time.perf_counter() - t0:.1f} s")
        cursor.execute("SELECT pg_size_pretty(pg_total_relation_size('requestlogs_requestlog'))")
        print(f"Table with indexes: {cursor.fetchone()[0]}")
    return n, rows[-1][1]


# ---------- Measuring ----------


def median_ms(fn: Callable[[], object], runs: int) -> float:
    fn()  # warm: plans cached by PostgreSQL's buffers, Python imports, templates compiled
    samples = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1000)
    return statistics.median(samples)


NEXT_LINK = re.compile(r'id="log-next" href="([^"]+)"')


def page_url(client: Client, query: str, page: int) -> str | None:
    """The URL of page `page` of /logs/?query, reached by following "Older"; None if there are fewer pages."""
    url = "/logs/" + (f"?{query}" if query else "")
    for _ in range(page - 1):
        found = NEXT_LINK.search(client.get(url).content.decode())
        if not found:
            return None
        url = found.group(1).replace("&amp;", "&")
    return url


class Slowest:
    def __init__(self) -> None:
        self.ms = 0.0
        self.label = ""
        self.sql = ""

    def watch(self, label: str, client: Client, url: str) -> None:
        from django.db import connection
        from django.test.utils import CaptureQueriesContext

        with CaptureQueriesContext(connection) as ctx:
            client.get(url)
        query = max(ctx.captured_queries, key=lambda q: float(q["time"]))
        if float(query["time"]) * 1000 > self.ms:
            self.ms, self.label, self.sql = float(query["time"]) * 1000, label, query["sql"]


def scenarios(catalog: dict, newest: datetime) -> list[tuple[str, str]]:
    from catalog.models import Application, Team

    keys = catalog["keys"]
    team = Team.objects.order_by("id").first()
    app = Application.objects.order_by("id").first()
    assert team is not None and app is not None  # seeded by build_catalog
    frm = (newest - timedelta(days=30)).strftime("%Y-%m-%dT%H:%M")
    return [
        ("no filter", ""),
        ("range 15 min", "range=15m"),
        ("range 1 h", "range=1h"),
        ("custom 30 days", f"from={frm}"),
        ("requested model (common)", "requested_model=gpt-4o"),
        ("requested model (alias)", "requested_model=default"),
        ("requested model (rare)", "requested_model=gemma-2"),
        ("served model", "served_model=claude-sonnet-4"),
        ("provider", "provider=mistral"),
        ("status 2xx", "status=2xx"),
        ("status 4xx", "status=4xx"),
        ("status 5xx", "status=5xx"),
        ("status client gone", "status=client_gone"),
        ("fallback yes", "fallback=yes"),
        ("fallback no", "fallback=no"),
        ("chain step 0", "chain_step=0"),
        ("chain step 2", "chain_step=2"),
        ("key (busiest)", f"key={keys[0].pk}"),
        ("key (quiet)", f"key={keys[-1].pk}"),
        ("team", f"team={team.pk}"),
        ("application", f"application={app.pk}"),
        ("stream yes", "stream=yes"),
        ("stream no", "stream=no"),
        ("oldest first", "order=oldest"),
        ("100 rows per page", "page_size=100"),
        ("circuit link: provider + model, 1 h", "provider=azure-openai&served_model=gpt-4o-azure&range=1h"),
        ("fallback + provider", "fallback=yes&provider=azure-openai"),
        ("5xx + busiest key", f"status=5xx&key={keys[0].pk}"),
        ("stream + 4xx", "stream=yes&status=4xx"),
        ("team + fallback + chain step 1", f"team={team.pk}&fallback=yes&chain_step=1"),
        ("rare model + 5xx + quiet key", f"requested_model=gemma-2&status=5xx&key={keys[-1].pk}"),
    ]


def measure_pages(catalog: dict, newest: datetime, runs: int) -> Slowest:
    from django.contrib.auth import get_user_model
    from django.test import Client

    admin = Client()
    admin.force_login(get_user_model().objects.get(username="bench-admin"))
    dev = Client()
    dev.force_login(get_user_model().objects.get(username="dev0"))
    slowest = Slowest()
    cases = [(label, admin, q) for label, q in scenarios(catalog, newest)]
    cases += [("user role (own keys)", dev, ""), ("user role + fallback", dev, "fallback=yes")]
    print()
    print("| filter | first page, 24 h | page 20, 24 h | first page, 7 d | page 20, 7 d |")
    print("|---|---:|---:|---:|---:|")
    for label, client, query in cases:
        own_range = "range=" in query or "from=" in query
        cells = []
        for range_ in ("24h",) if own_range else ("24h", "7d"):
            q = query if range_ == "24h" else "&".join(p for p in (query, "range=7d") if p)
            first = "/logs/" + (f"?{q}" if q else "")
            cells.append(f"{median_ms(partial(client.get, first), runs):.1f}")
            slowest.watch(f"{label}, first page, {range_}", client, first)
            deep = page_url(client, q, 20)
            if deep is None:
                cells.append("— (fewer pages)")
            else:
                cells.append(f"{median_ms(partial(client.get, deep), runs):.1f}")
                slowest.watch(f"{label}, page 20, {range_}", client, deep)
        if own_range:
            cells += ["(its own range)", ""]
        print(f"| {label} | {' | '.join(cells)} |")
    return slowest


def measure_other(catalog: dict, runs: int) -> None:
    from django.contrib.auth import get_user_model
    from django.test import Client

    from requestlogs.models import RequestLog

    admin = Client()
    admin.force_login(get_user_model().objects.get(username="bench-admin"))
    rid = RequestLog.objects.order_by("-created_at").values_list("request_id", flat=True)[5000]
    fallback_rid = (
        RequestLog.objects.filter(fallback_triggered=True)
        .order_by("-created_at")
        .values_list("request_id", flat=True)[100]
    )
    drawer = {"HX-Request": "true", "HX-Target": "log-drawer-body"}

    def csv_first_byte(url: str) -> None:
        response = admin.get(url)
        next(iter(response))  # a streamed response iterates its streaming_content
        response.close()

    rows = [
        ("drawer (HTMX)", lambda: admin.get(f"/logs/{fallback_rid}/", headers=drawer)),
        ("detail page (direct URL)", lambda: admin.get(f"/logs/{rid}/")),
        ("request id jump (redirect)", lambda: admin.get(f"/logs/?request_id={rid}")),
        (
            "filter change over HTMX (log-page)",
            lambda: admin.get("/logs/?fallback=yes", headers={"HX-Request": "true", "HX-Target": "log-page"}),
        ),
        (
            "follow poll (log-table)",
            lambda: admin.get(
                "/logs/?follow=1&since=1",
                headers={"HX-Request": "true", "HX-Target": "log-table", "HX-Trigger": "log-table"},
            ),
        ),
        ("API list, 25 rows", lambda: admin.get("/api/request-logs/")),
        (
            "API list, 100 rows, fallback = yes, 7 d",
            lambda: admin.get("/api/request-logs/?page_size=100&fallback=yes&range=7d"),
        ),
        ("API detail", lambda: admin.get(f"/api/request-logs/{rid}/")),
        ("CSV first byte, no filter", lambda: csv_first_byte("/logs/export.csv")),
        ("CSV first byte, status 5xx, 7 d", lambda: csv_first_byte("/logs/export.csv?status=5xx&range=7d")),
    ]
    print()
    print("| request | server time (ms) |")
    print("|---|---:|")
    for label, fn in rows:
        print(f"| {label} | {median_ms(fn, runs):.1f} |")


def csv_full(runs: int) -> None:
    from django.contrib.auth import get_user_model
    from django.test import Client

    admin = Client()
    admin.force_login(get_user_model().objects.get(username="bench-admin"))
    t0 = time.perf_counter()
    response = admin.get("/logs/export.csv?range=7d")
    size = lines = 0
    for chunk in response:  # its streaming_content
        size += len(chunk)
        lines += chunk.count(b"\n")
    elapsed = time.perf_counter() - t0
    print(
        f"\nCSV of 7 days, capped: {lines - 1:,} rows, {size / 1e6:.1f} MB in {elapsed:.1f} s "
        f"({(lines - 1) / elapsed:,.0f} rows/s)"
    )


def explain(slowest: Slowest) -> None:
    from django.db import connection

    print(f"\nSlowest query ({slowest.ms:.1f} ms, {slowest.label}):\n")
    print(slowest.sql)
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + slowest.sql)
        print("\n" + "\n".join(line for (line,) in cursor.fetchall()))


def _fill_stream(stream: str, n: int, keys: list) -> None:
    """Append n records as a busy gateway does (its log sink, full batches): requests of the last few seconds
    (20,000 a second), in time order."""
    from gateway.logsink import LogSink

    now = time.time()
    rows = generate(n, keys, end=now + n / 20_000, days=n / 20_000 / 86400)
    names = [c.strip() for c in COPY_COLUMNS.split(",")]
    sink = LogSink(redis_url=REDIS_URL, stream_key=stream, maxlen=0, flush_seconds=60, max_buffer=n)
    for row in rows:
        record = dict(zip(names, row, strict=True))
        record["created_at"] = record["created_at"].timestamp()
        record["cost_usd"] = float(record["cost_usd"]) if record["cost_usd"] is not None else None
        record["requested_model"] = "bench-ingest"
        sink.add(record)
    sink.start()
    if not sink.flush(timeout=120):
        raise SystemExit("the backlog could not be written to Redis")
    sink.stop()


def _drain(stream: str, results: Queue[int]) -> None:
    """One ingest task run after run until the stream is empty (a Celery pool slot under a backlog)."""
    from django.db import connections

    from requestlogs.ingest import request_logs_ingest

    inserted = 0
    try:
        while True:
            result = request_logs_ingest(redis_url=REDIS_URL, stream=stream)
            inserted += result.inserted
            if result.read == 0:
                break
    finally:
        connections.close_all()
    results.put(inserted)


def measure_ingest(n: int, keys: list) -> None:
    """Time requestlogs.ingest draining n records from a Redis stream into the indexed table: one task at a time,
    then two at once in two processes (a prefork worker's two pool slots when a backlog makes runs overlap)."""
    import multiprocessing

    import redis
    from django.db import connections

    from requestlogs.models import RequestLog
    from requestlogs.stream import StreamKeys

    client = redis.Redis.from_url(REDIS_URL)
    fork = multiprocessing.get_context("fork")
    print()
    for tasks in (1, 2):
        stream = f"bench:requestlogs:{uuid.uuid4().hex}"
        _fill_stream(stream, n, keys)
        connections.close_all()  # each process opens its own
        results = fork.Queue()
        try:
            t0 = time.perf_counter()
            procs = [fork.Process(target=_drain, args=(stream, results)) for _ in range(tasks)]
            for proc in procs:
                proc.start()
            total = sum(results.get() for _ in procs)
            for proc in procs:
                proc.join()
            elapsed = time.perf_counter() - t0
            print(
                f"Ingest, {tasks} task{'s' if tasks > 1 else ''} at once (Redis stream → COPY, indexes in place): "
                f"{total:,} rows in {elapsed:.1f} s = {total / elapsed:,.0f} rows/s"
            )
        finally:
            client.delete(stream, StreamKeys(stream).records)
            RequestLog.objects.filter(requested_model="bench-ingest").delete()
    measure_celery_worker(n, keys)


def measure_celery_worker(n: int, keys: list) -> None:
    """A real `celery worker --beat` (prefork, 2 processes; beat sends requestlogs.ingest every second) draining a
    backlog of n records: rows per second from the first row committed to the last."""
    import subprocess
    import tempfile

    import redis
    from django.conf import settings

    from requestlogs.models import RequestLog
    from requestlogs.stream import StreamKeys

    client = redis.Redis.from_url(REDIS_URL)
    namespace = f"bench:celery:{uuid.uuid4().hex}"
    stream = f"{namespace}:requestlogs"
    _fill_stream(stream, n, keys)
    env = {
        **os.environ,
        "DATABASE_URL": DATABASE_URL,
        "REDIS_URL": REDIS_URL,
        "SECRET_KEY": settings.SECRET_KEY,  # the catalog's provider keys are encrypted under it
        "REQUEST_LOG_STREAM": stream,
        "CELERY_QUEUE": f"{namespace}:celery",
        "BREAKER_REDIS_NAMESPACE": namespace,
    }
    with tempfile.TemporaryDirectory() as tmp:
        worker = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "controlplane", "worker", "--beat", "--schedule", f"{tmp}/beat",
             "--concurrency=2", "--loglevel=WARNING"],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            # Progress from Redis (what is still in the stream), so watching does not load PostgreSQL.
            first = last = None
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline:
                left = int(client.get(StreamKeys(stream).records) or 0)
                now = time.perf_counter()
                if left < n and first is None:
                    first = (now, n - left)
                if left == 0:
                    last = (now, n)
                    break
                time.sleep(0.02)
            if first is None or last is None:
                raise SystemExit("the Celery worker did not ingest the backlog within 600 s")
            stored = RequestLog.objects.filter(requested_model="bench-ingest").count()
            if stored != n:
                raise SystemExit(f"the worker stored {stored:,} rows of {n:,}")
            rate = (last[1] - first[1]) / (last[0] - first[0])
            print(
                f"Ingest by a Celery worker (prefork, 2 processes, beat every second), backlog of {n:,}: "
                f"{rate:,.0f} rows/s from the first committed row to the last"
            )
        finally:
            worker.terminate()
            worker.wait(timeout=30)
            # The namespace's own keys, and the queue bindings kombu keeps under its own prefix.
            keys_left = [*client.scan_iter(f"{namespace}*"), *client.scan_iter(f"_kombu.binding*{namespace}*")]
            if keys_left:
                client.delete(*keys_left)
            RequestLog.objects.filter(requested_model="bench-ingest").delete()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--reload", action="store_true", help="regenerate the rows even if the table holds them")
    parser.add_argument("--runs", type=int, default=7, help="timed runs per figure (median)")
    parser.add_argument("--ingest", type=int, default=200_000, help="records for the ingest measurement (0: skip)")
    parser.add_argument("--skip-pages", action="store_true")
    args = parser.parse_args()

    ensure_database()
    setup_django()
    catalog = build_catalog()
    _, newest = load(args.rows, catalog["keys"], reload=args.reload)
    if not args.skip_pages:
        slowest = measure_pages(catalog, newest, args.runs)
        measure_other(catalog, args.runs)
        csv_full(args.runs)
        explain(slowest)
    if args.ingest:
        measure_ingest(args.ingest, catalog["keys"])


if __name__ == "__main__":
    main()
