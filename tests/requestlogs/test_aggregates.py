"""The request aggregates equal a direct count over the raw rows, however the rows arrived."""

import importlib
import random
import threading
from bisect import bisect_right
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest
from django.apps import apps as django_apps
from django.db import connection, connections
from django.db.models import Case, CharField, Count, F, FloatField, Max, Q, Sum, Value, When
from django.db.models.functions import Coalesce, TruncHour, TruncMinute
from django.test.utils import override_settings

from health.stats import circuit_stats
from requestlogs.aggregates import SPANS, attempt_stats, dashboard_series, percentile, traffic_by_source
from requestlogs.models import (
    BUCKET_EDGES_MS,
    BUCKETS,
    AttemptMinute,
    RequestHour,
    RequestLog,
    RequestMinute,
    RequestQuarter,
)
from requestlogs.services import request_aggregates_rebuild, request_logs_insert
from requestlogs.tasks import retention_task
from tests.factories.requestlogs import fallback, log_record

BASE = datetime(2026, 11, 30, 9, 58, 30, tzinfo=UTC).timestamp()  # crosses a minute and an hour boundary


def _attempt(provider="openai", model="gpt-4o", status=200, error=None, duration=100.0):
    return {"provider": provider, "model": model, "status": status, "error": error, "duration_ms": duration}


def _mixed(rng: random.Random, n: int, *, at: float = BASE, spread: float = 300.0) -> list[dict]:
    """Every tier, status class and attempt outcome, over a few minutes."""
    out = []
    for _ in range(n):
        kind = rng.randrange(12)
        t = at + rng.random() * spread
        latency = rng.choice([rng.uniform(0, 3000), rng.choice(BUCKET_EDGES_MS), rng.uniform(50_000, 200_000)])
        ttfb = None if rng.random() < 0.2 else latency * rng.random()
        fields: dict = {"latency_ms": latency, "ttfb_ms": ttfb}
        model = rng.choice(["gpt-4o", "claude", "mistral"])
        fields.update(requested_model=model, routed_model=model)
        if rng.random() < 0.2:
            fields.update(requested_model="fast", routed_model="gpt-4o")  # an alias: the source is the target
        if rng.random() < 0.1:
            fields.update(routed_model="")  # no route: the source is what was asked for
        if kind == 0:
            fields.update(fallback(step=rng.choice([1, 2, 3, 4])))
            fields["attempts"] = [_attempt("backup", "claude", duration=latency)]
        elif kind == 1:
            fields.update(optimistic_primary=True, status=rng.choice([200, 503]))
            fields["attempts"] = [_attempt(status=fields["status"], duration=latency)]
        elif kind == 2:
            fields.update(status=rng.choice([500, 502, 503, 504]))
            fields["attempts"] = [_attempt(status=fields["status"], duration=latency)]
        elif kind == 3:
            fields.update(status=504, error_kind="timeout")
            fields["attempts"] = [_attempt(status=None, error="timeout", duration=latency)]
        elif kind == 4:  # rejected by the gateway itself
            fields.update(status=rng.choice([400, 401, 404, 413]), served_provider="", served_model="", attempts=[])
        elif kind == 5:  # no upstream and a 5xx of the gateway's own
            fields.update(status=502, served_provider="", served_model="", attempts=[], error_kind="no_route")
        elif kind == 6:
            fields.update(status=499, error_kind="client_disconnected")
            fields["attempts"] = [_attempt(status=None, error="cancelled", duration=latency)]
        elif kind == 7:
            fields.update(status=429)
            fields["attempts"] = [_attempt(status=429, duration=latency)]
        elif kind == 8:
            fields.update(status=rng.choice([301, 418, 600]))
        elif kind == 9:
            fields["attempts"] = [_attempt(status=200, error="connection_error"), "not an attempt", {"model": 1}]
        elif kind == 10:
            fields["attempts"] = [_attempt(model="gpt-4o\x00x", duration=None)]
        out.append(log_record(at=t, **fields))
    return out


# ---------- The direct count ----------

_SOURCE = Case(When(~Q(routed_model=""), then=F("routed_model")), default=F("requested_model"))
_TIER = Case(
    When(~Q(served_provider=""), optimistic_primary=True, then=Value("optimistic")),
    When(status__gte=500, then=Value("failed")),
    When(served_provider="", status__gte=400, then=Value("rejected")),
    When(served_provider="", then=Value("failed")),
    When(chain_step=0, then=Value("primary")),
    When(chain_step=1, then=Value("step1")),
    When(chain_step=2, then=Value("step2")),
    default=Value("step3plus"),
    output_field=CharField(),
)
_GROUP = Case(
    When(status=499, then=Value("client_gone")),
    When(status__gte=200, status__lt=300, then=Value("2xx")),
    When(status__gte=300, status__lt=400, then=Value("3xx")),
    When(status__gte=400, status__lt=500, then=Value("4xx")),
    When(status__gte=500, status__lt=600, then=Value("5xx")),
    default=Value("other"),
    output_field=CharField(),
)


def _in_bucket(field: str, i: int) -> Q:
    q = Q()
    if i > 0:
        q &= Q(**{f"{field}__gte": BUCKET_EDGES_MS[i - 1]})
    if i < len(BUCKET_EDGES_MS):
        q &= Q(**{f"{field}__lt": BUCKET_EDGES_MS[i]})
    return q


def expected_requests(trunc) -> dict:
    """GROUP BY period, source, tier, status class over RequestLog, with every sum and bucket count."""
    counts = {f"lat_{i:02d}": Count("id", filter=_in_bucket("latency_ms", i)) for i in range(BUCKETS)}
    counts |= {f"ttfb_{i:02d}": Count("id", filter=_in_bucket("ttfb_ms", i)) for i in range(BUCKETS)}
    rows = (
        RequestLog.objects.annotate(start=trunc("created_at"), source=_SOURCE, tier=_TIER, group=_GROUP)
        .values("start", "source", "tier", "group")
        .annotate(
            requests=Count("id"),
            ttfb_count=Count("ttfb_ms"),
            latency_sum_ms=Coalesce(Sum("latency_ms"), Value(0.0), output_field=FloatField()),
            ttfb_sum_ms=Coalesce(Sum("ttfb_ms"), Value(0.0), output_field=FloatField()),
            latency_max_ms=Coalesce(Max("latency_ms"), Value(0.0), output_field=FloatField()),
            ttfb_max_ms=Coalesce(Max("ttfb_ms"), Value(0.0), output_field=FloatField()),
            **counts,
        )
        .order_by()
    )
    return {(r.pop("start"), r.pop("source"), r.pop("tier"), r.pop("group")): r for r in rows}


def stored_requests(model) -> dict:
    names = ["requests", "ttfb_count", "latency_sum_ms", "ttfb_sum_ms", "latency_max_ms", "ttfb_max_ms"]
    names += [f"{p}_{i:02d}" for p in ("lat", "ttfb") for i in range(BUCKETS)]
    out = {}
    for row in model.objects.all():
        out[(row.start, row.source_model, row.tier, row.status_class)] = {n: getattr(row, n) for n in names}
    return out


def expected_attempts() -> dict:
    """The attempts of every row, counted one by one in Python."""
    out: dict = {}
    for row in RequestLog.objects.annotate(start=TruncMinute("created_at")):
        for a in row.attempts if isinstance(row.attempts, list) else []:
            if not isinstance(a, dict) or not isinstance(a.get("provider"), str) or not isinstance(a.get("model"), str):
                continue
            d = a.get("duration_ms")
            d = float(d) if isinstance(d, int | float) and not isinstance(d, bool) else 0.0
            status, error = a.get("status"), a.get("error")
            failed = status in (429, 500, 502, 503, 504) or (isinstance(error, str) and error not in ("", "cancelled"))
            slot = out.setdefault(
                (row.start, a["provider"][:64], a["model"][:128]),
                {"attempts": 0, "errors": 0, "duration_sum_ms": 0.0, "duration_max_ms": 0.0}
                | {f"dur_{i:02d}": 0 for i in range(BUCKETS)},
            )
            slot["attempts"] += 1
            slot["errors"] += int(failed)
            slot["duration_sum_ms"] += d
            slot["duration_max_ms"] = max(slot["duration_max_ms"], d)
            slot[f"dur_{bisect_right(BUCKET_EDGES_MS, d):02d}"] += 1
    return out


def stored_attempts() -> dict:
    names = ["attempts", "errors", "duration_sum_ms", "duration_max_ms", *(f"dur_{i:02d}" for i in range(BUCKETS))]
    return {(r.start, r.provider, r.model): {n: getattr(r, n) for n in names} for r in AttemptMinute.objects.all()}


def assert_same(stored: dict, expected: dict) -> None:
    assert sorted(stored, key=repr) == sorted(expected, key=repr)
    for key, values in expected.items():
        got = stored[key]
        for name, value in values.items():
            assert got[name] == pytest.approx(value, rel=1e-9, abs=1e-6), (key, name)


def quarters(by_minute: dict) -> dict:
    """Minute groups summed into quarter hours, in Python."""
    out: dict = {}
    for (start, *rest), values in by_minute.items():
        key = (start.replace(minute=start.minute // 15 * 15), *rest)
        if key not in out:
            out[key] = dict(values)
            continue
        for name, value in values.items():
            out[key][name] = max(out[key][name], value) if name.endswith("_max_ms") else out[key][name] + value
    return out


def assert_exact() -> None:
    by_minute = expected_requests(TruncMinute)
    assert_same(stored_requests(RequestMinute), by_minute)
    assert_same(stored_requests(RequestQuarter), quarters(by_minute))
    assert_same(stored_requests(RequestHour), expected_requests(TruncHour))
    assert_same(stored_attempts(), expected_attempts())


# ---------- Ingest ----------


def test_aggregates_equal_direct_count_after_batches_and_redelivery(db):
    rng = random.Random(7)
    first, second = _mixed(rng, 150), _mixed(rng, 150, at=BASE + 3500)

    request_logs_insert(records=first)
    request_logs_insert(records=second + second[:10])  # a record repeated within its batch counts once
    redelivered = request_logs_insert(records=first[:40])  # every row already stored
    mixed = request_logs_insert(records=first[40:80] + _mixed(rng, 30))  # old and new: the careful path

    assert redelivered == 0
    assert mixed == 30
    assert RequestLog.objects.count() == 330
    assert RequestMinute.objects.aggregate(n=Sum("requests"))["n"] == 330
    assert RequestHour.objects.aggregate(n=Sum("requests"))["n"] == 330
    assert RequestHour.objects.values("start").distinct().count() == 3  # 09:00, 10:00 and 11:00
    assert_exact()


def test_tiers_and_status_classes_of_each_kind_of_request(db):
    at = BASE
    records = [
        log_record(at=at),
        log_record(at=at, **fallback(step=1)),
        log_record(at=at, **fallback(step=3)),
        log_record(at=at, optimistic_primary=True),
        log_record(at=at, optimistic_primary=True, status=503),
        log_record(at=at, status=401, served_provider="", served_model="", attempts=[]),
        log_record(at=at, status=502, served_provider="", served_model="", attempts=[]),
        log_record(at=at, status=400),
        log_record(at=at, status=499),
    ]

    request_logs_insert(records=records)

    got = sorted(RequestMinute.objects.values_list("tier", "status_class", "requests"))
    assert got == [
        ("failed", "5xx", 1),
        ("optimistic", "2xx", 1),
        ("optimistic", "5xx", 1),
        ("primary", "2xx", 1),
        ("primary", "4xx", 1),
        ("primary", "client_gone", 1),
        ("rejected", "4xx", 1),
        ("step1", "2xx", 1),
        ("step3plus", "2xx", 1),
    ]


def test_traffic_by_source_counts_fallback_optimistic_failed_and_rejected(db):
    at = BASE
    request_logs_insert(
        records=[
            *(log_record(at=at) for _ in range(6)),
            *(log_record(at=at + 60, **fallback(step=s)) for s in (1, 2, 3)),
            log_record(at=at + 60, optimistic_primary=True),
            log_record(at=at + 60, status=503),
            log_record(at=at + 60, status=401, served_provider="", served_model="", attempts=[]),
            log_record(at=at, requested_model="fast", routed_model="claude"),
            log_record(at=at + 600, **fallback()),  # outside the range
        ]
    )
    start = datetime.fromtimestamp(at, tz=UTC)

    traffic = traffic_by_source(since=start, until=start + timedelta(minutes=5))

    gpt = traffic["gpt-4o"]
    assert (gpt.requests, gpt.fallback, gpt.optimistic, gpt.failed, gpt.rejected) == (11, 3, 1, 1, 1)
    assert gpt.fallback_share == pytest.approx(3 / 11)
    assert sorted(traffic) == ["claude", "gpt-4o"]
    assert traffic["claude"].requests == 1


def test_attempt_stats_is_what_provider_health_reads(db):
    now = datetime.now(UTC)
    request_logs_insert(
        records=[
            *(log_record(at=now.timestamp() - 30, attempts=[_attempt(duration=d)]) for d in (90, 110, 130, 700)),
            log_record(at=now.timestamp() - 20, status=503, attempts=[_attempt(status=503, duration=40)]),
            log_record(at=now.timestamp() - 20, attempts=[_attempt(error="cancelled", status=None)]),
            log_record(at=now.timestamp() - 7200, attempts=[_attempt(status=503)]),  # before `since`
        ]
    )

    stats = circuit_stats(now - timedelta(hours=1))

    assert stats == attempt_stats(now - timedelta(hours=1))
    figures = stats[("openai", "gpt-4o")]
    assert (figures.attempts, figures.errors) == (6, 1)
    assert 100 <= figures.p50_ms < 150  # the exact median (100, 110) lies in [100, 150)


@pytest.mark.production  # concurrent writers: PostgreSQL (SQLite has one writer)
@pytest.mark.django_db(transaction=True)
def test_concurrent_inserts_stay_exact():
    rng = random.Random(11)
    batches = [_mixed(rng, 120, spread=120) for _ in range(8)]
    shared = batches[0][:30]
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def work(mine: list[list[dict]]) -> None:
        try:
            barrier.wait()
            for batch in mine:
                request_logs_insert(records=batch + shared)  # every worker also redelivers the same 30 rows
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=work, args=(batches[i::4],)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert errors == []
    assert RequestLog.objects.count() == 8 * 120
    assert_exact()


# ---------- The data migration, rebuild and retention ----------


def test_data_migration_builds_the_same_aggregates_as_ingest(db):
    rng = random.Random(3)
    request_logs_insert(records=_mixed(rng, 200))
    request_logs_insert(records=_mixed(rng, 100, at=BASE + 7000))
    by_ingest = (
        stored_requests(RequestMinute),
        stored_requests(RequestHour),
        stored_attempts(),
        stored_requests(RequestQuarter),
    )
    migration = importlib.import_module("requestlogs.migrations.0005_build_request_aggregates")
    RequestMinute.objects.all().delete()
    RequestQuarter.objects.all().delete()
    RequestHour.objects.all().delete()
    AttemptMinute.objects.all().delete()

    migration.build(django_apps, SimpleNamespace(connection=connection))

    assert RequestMinute.objects.exists()
    assert_same(stored_requests(RequestMinute), by_ingest[0])
    assert_same(stored_requests(RequestHour), by_ingest[1])
    assert_same(stored_attempts(), by_ingest[2])
    assert_same(stored_requests(RequestQuarter), by_ingest[3])
    assert_exact()


def test_rebuild_replaces_what_was_there(db):
    request_logs_insert(records=_mixed(random.Random(5), 50))
    RequestMinute.objects.update(requests=999)

    request_aggregates_rebuild()

    assert_exact()


@override_settings(REQUEST_LOG_RETENTION_DAYS=30, REQUEST_AGGREGATE_MINUTE_DAYS=8, REQUEST_AGGREGATE_HOUR_DAYS=90)
def test_retention_deletes_aggregates_past_their_days(db):
    now = datetime.now(UTC).timestamp()
    day = 86400
    request_logs_insert(records=[log_record(at=now - d * day) for d in (0, 7, 9, 31, 91)])

    retention_task()

    assert RequestLog.objects.count() == 3  # 0, 7 and 9 days old
    minutes = sorted(round((now - r.start.timestamp()) / day) for r in RequestMinute.objects.all())
    assert minutes == [0, 7]
    assert sorted(round((now - r.start.timestamp()) / day) for r in AttemptMinute.objects.all()) == [0, 7]
    assert sorted(round((now - r.start.timestamp()) / day) for r in RequestQuarter.objects.all()) == [0, 7]
    hours = sorted(round((now - r.start.timestamp()) / day) for r in RequestHour.objects.all())
    assert hours == [0, 7, 9, 31]


# ---------- Percentiles ----------


def _bucket(value: float) -> int:
    return bisect_right(BUCKET_EDGES_MS, value)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_percentiles_from_buckets_are_within_one_bucket_of_the_exact_value(db, seed):
    rng = random.Random(seed)
    now = datetime.now(UTC).replace(second=30, microsecond=0)
    latencies = [rng.lognormvariate(6.0, 1.2) for _ in range(400)]
    request_logs_insert(records=[log_record(at=now.timestamp(), latency_ms=v, ttfb_ms=v / 3) for v in latencies])

    series = dashboard_series(span=SPANS["1h"], now=now)

    ordered = sorted(latencies)
    for q, got in ((0.5, series.latency_p50[-1]), (0.95, series.latency_p95[-1])):
        exact = ordered[int(q * len(ordered)) - 1]
        assert abs(_bucket(got) - _bucket(exact)) <= 1, (q, got, exact)
    exact_ttfb = sorted(v / 3 for v in latencies)[int(0.95 * 400) - 1]
    assert abs(_bucket(series.ttfb_p95[-1]) - _bucket(exact_ttfb)) <= 1


def test_percentile_interpolates_inside_the_bucket():
    counts = [0] * BUCKETS
    counts[4] = 10  # [100, 150)

    assert percentile(counts, 0.5) == pytest.approx(125.0)
    assert percentile(counts, 1.0, maximum=140.0) == pytest.approx(140.0)
    assert percentile([0] * BUCKETS, 0.5) is None


# ---------- The Dashboard's series ----------


def test_dashboard_series_puts_each_request_in_its_bucket(db):
    now = datetime(2026, 12, 1, 12, 7, 10, tzinfo=UTC)
    request_logs_insert(
        records=[
            log_record(at=(now - timedelta(minutes=3)).timestamp()),
            log_record(at=(now - timedelta(minutes=3)).timestamp(), **fallback()),
            log_record(at=now.timestamp(), status=503),
            log_record(at=(now - timedelta(hours=2)).timestamp()),  # outside 1 h, inside 24 h
        ]
    )

    hour = dashboard_series(span=SPANS["1h"], now=now)
    day = dashboard_series(span=SPANS["24h"], now=now)
    week = dashboard_series(span=SPANS["7d"], now=now)

    assert len(hour.buckets) == 60 and hour.buckets[-1] == datetime(2026, 12, 1, 12, 7, tzinfo=UTC)
    assert hour.by_tier["primary"][-4] == 1 and hour.by_tier["step1"][-4] == 1
    assert hour.by_tier["failed"][-1] == 1
    assert hour.total == 3
    assert hour.source_fallback["gpt-4o"][-4] == 1 and hour.source_requests["gpt-4o"][-4] == 2
    assert hour.by_group["5xx"][-1] == 1
    assert len(day.buckets) == 96 and day.buckets[-1] == datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    assert day.total == 4 and day.by_tier["primary"][-9] == 1  # 10:04 is in the 10:00 bucket, 8 before 12:00
    assert len(week.buckets) == 168 and week.total == 4 and week.by_tier["primary"][-3] == 1


@pytest.mark.parametrize("span", ["1h", "24h", "7d"])
def test_dashboard_series_counts_its_first_bucket_and_nothing_outside_its_range(db, span):
    # SQLite compares `start` as text: the range's bounds must be written as the ORM writes them, or the
    # first bucket ("... 11:15:00" < "... 11:15:00+00:00") was left out.
    now = datetime(2026, 12, 1, 12, 7, 10, tzinfo=UTC)
    s = SPANS[span]
    end = {"1h": datetime(2026, 12, 1, 12, 8), "24h": datetime(2026, 12, 1, 12, 15), "7d": datetime(2026, 12, 1, 13)}
    end = end[span].replace(tzinfo=UTC)  # the end of the bucket under way
    origin = end - s.length
    tiny = timedelta(microseconds=1)
    request_logs_insert(
        records=[
            log_record(at=(origin - tiny).timestamp(), status=503),  # the bucket before the first: left out
            log_record(at=origin.timestamp()),  # the first bucket's first moment
            log_record(at=(end - tiny).timestamp(), **fallback()),  # the last bucket's last moment
            log_record(at=end.timestamp(), status=503),  # the next bucket: left out
        ]
    )

    series = dashboard_series(span=s, now=now)

    assert (series.buckets[0], series.buckets[-1] + series.step) == (origin, end)
    assert series.by_tier["primary"][0] == 1 and series.by_tier["step1"][-1] == 1
    assert series.total == 2 and "failed" not in series.by_tier
    assert series.by_group["2xx"][0] == 1
    assert series.source_requests["gpt-4o"][0] == 1 and series.source_fallback["gpt-4o"][-1] == 1
    assert series.latency_p50[0] is not None
