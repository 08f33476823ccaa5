"""Reads of the request aggregates (per minute and per hour, kept exact on ingest by `requestlogs.services`).

The Dashboard, the alerts and Provider Health read traffic here, never by scanning request logs: a read
costs one index range scan over at most a few tens of thousands of aggregate rows, whatever the log volume.

Periods are whole minutes (or hours): a range [since, until) covers every period that starts before `until`
and ends after `since`, so "the last 5 minutes" includes the minute under way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connection
from django.db.models import Max, Q, Sum

from health.stats import CircuitStats
from requestlogs.models import (
    BUCKET_EDGES_MS,
    BUCKETS,
    FALLBACK_TIERS,
    AttemptMinute,
    RequestHour,
    RequestMinute,
    RequestQuarter,
    Tier,
)

MINUTE = timedelta(minutes=1)
QUARTER = timedelta(minutes=15)
HOUR = timedelta(hours=1)
_FALLBACK = {str(t) for t in FALLBACK_TIERS}


@dataclass(frozen=True)
class SourceTraffic:
    """Requests for one source model (the requested model after routing) over a range.

    `requests` counts every request except those the gateway rejected itself before calling any upstream
    (4xx such as a bad key or an invalid body: `rejected`), so a client's mistakes do not dilute the shares.
    The other figures are exclusive parts of `requests`: `fallback` = served by chain step >= 1 (with a
    status below 500), `optimistic` = every chain entry was unavailable and the primary was tried anyway
    (whatever its status), `failed` = any other request with status >= 500, or nothing served it.
    """

    requests: int
    fallback: int
    optimistic: int
    failed: int
    rejected: int = 0

    @property
    def fallback_share(self) -> float | None:
        return self.fallback / self.requests if self.requests else None


def floor_minute(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(second=0, microsecond=0)


def _overlapping(since: datetime, until: datetime, period: timedelta) -> Q:
    return Q(start__gt=since - period, start__lt=until)


def traffic_by_source(*, since: datetime, until: datetime) -> dict[str, SourceTraffic]:
    """Requests per source model over the minutes overlapping [since, until); one query."""
    counts: dict[str, dict[str, int]] = {}
    rows = (
        RequestMinute.objects.filter(_overlapping(since, until, MINUTE))
        .values_list("source_model", "tier")
        .annotate(n=Sum("requests"))
        .order_by()
    )
    for source, tier, n in rows:
        by_tier = counts.setdefault(source, {})
        by_tier[tier] = by_tier.get(tier, 0) + int(n)
    out = {}
    for source, by_tier in counts.items():
        rejected = by_tier.get(Tier.REJECTED, 0)
        out[source] = SourceTraffic(
            requests=sum(by_tier.values()) - rejected,
            fallback=sum(n for t, n in by_tier.items() if t in _FALLBACK),
            optimistic=by_tier.get(Tier.OPTIMISTIC, 0),
            failed=by_tier.get(Tier.FAILED, 0),
            rejected=rejected,
        )
    return out


def requests_count(*, since: datetime, until: datetime, tiers: Sequence[str] = (), hourly: bool = False) -> int:
    """Requests in the minutes (or, `hourly`, the hours) overlapping [since, until), only those tiers when given.

    One query; hourly reads at most 24 periods a day instead of 1,440 (for "today").
    """
    table, period = (RequestHour, HOUR) if hourly else (RequestMinute, MINUTE)
    qs = table.objects.filter(_overlapping(since, until, period))
    if tiers:
        qs = qs.filter(tier__in=list(tiers))
    return int(qs.aggregate(n=Sum("requests"))["n"] or 0)


def percentile(counts: Sequence[float], q: float, *, maximum: float | None = None) -> float | None:
    """The q-quantile (0..1) of a histogram over BUCKET_EDGES_MS, interpolated linearly inside its bucket.

    The result lies in the bucket that holds the exact value. The last bucket is open-ended: its upper bound
    is the largest value seen (`maximum`), or twice its lower edge when that is unknown.
    """
    total = sum(counts)
    if total <= 0:
        return None
    rank = q * total
    seen = 0.0
    for i, n in enumerate(counts):
        if n <= 0:
            continue
        if seen + n >= rank:
            lower = BUCKET_EDGES_MS[i - 1] if i > 0 else 0.0
            upper = BUCKET_EDGES_MS[i] if i < len(BUCKET_EDGES_MS) else (maximum or lower * 2)
            if maximum is not None and lower <= maximum < upper:
                upper = maximum  # no value above the largest one seen
            return float(lower + (upper - lower) * max(rank - seen, 0.0) / n)
        seen += n
    return None


def attempt_stats(since: datetime) -> dict[tuple[str, str], CircuitStats]:
    """Upstream attempts, errors and median duration per (provider, model) since `since` (Provider Health)."""
    buckets = [f"dur_{i:02d}" for i in range(BUCKETS)]
    rows = (
        AttemptMinute.objects.filter(start__gt=since - MINUTE)
        .values_list("provider", "model")
        .annotate(Sum("attempts"), Sum("errors"), Max("duration_max_ms"), *(Sum(b) for b in buckets))
        .order_by()
    )
    return {
        (provider, model): CircuitStats(
            attempts=int(attempts),
            errors=int(errors),
            p50_ms=percentile([float(n) for n in hist], 0.5, maximum=maximum),
        )
        for provider, model, attempts, errors, maximum, *hist in rows
    }


# ---------- The Dashboard's series ----------


@dataclass(frozen=True)
class Span:
    """A Dashboard range: its length and the width of one chart bucket."""

    key: str
    label: str
    length: timedelta
    step: timedelta

    @property
    def table(self) -> type[RequestMinute] | type[RequestQuarter] | type[RequestHour]:
        """The coarsest aggregate whose period divides the step: the fewest rows to read."""
        if self.step >= HOUR:
            return RequestHour
        return RequestQuarter if self.step >= QUARTER else RequestMinute


SPANS: dict[str, Span] = {
    "1h": Span("1h", "1 hour", timedelta(hours=1), timedelta(minutes=1)),
    "24h": Span("24h", "24 hours", timedelta(hours=24), timedelta(minutes=15)),
    "7d": Span("7d", "7 days", timedelta(days=7), timedelta(hours=1)),
}


@dataclass
class Series:
    """Everything the Dashboard draws for one range: one value per bucket (index i = buckets[i])."""

    buckets: list[datetime]
    step: timedelta
    by_tier: dict[str, list[int]] = field(default_factory=dict)
    by_group: dict[str, list[int]] = field(default_factory=dict)
    source_requests: dict[str, list[int]] = field(default_factory=dict)  # requests as SourceTraffic counts them
    source_fallback: dict[str, list[int]] = field(default_factory=dict)
    latency_p50: list[float | None] = field(default_factory=list)
    latency_p95: list[float | None] = field(default_factory=list)
    ttfb_p50: list[float | None] = field(default_factory=list)
    ttfb_p95: list[float | None] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(sum(v) for v in self.by_tier.values())

    def totals(self) -> list[int]:
        """Requests per bucket, every tier."""
        out = [0] * len(self.buckets)
        for values in self.by_tier.values():
            for i, v in enumerate(values):
                out[i] += v
        return out


def _bucket_expr(step: timedelta, origin: datetime) -> tuple[str, list[Any]]:
    """SQL for the bucket index of a row's `start`, counted in steps from `origin`."""
    seconds = int(step.total_seconds())
    if connection.vendor == "postgresql":
        return "floor(extract(epoch FROM start - %s) / %s)::int", [origin, seconds]
    # SQLite keeps Django's "YYYY-MM-DD HH:MM:SS" text; unixepoch() (SQLite 3.38+) reads it as UTC.
    return "((unixepoch(start) - %s) / %s)", [int(origin.timestamp()), seconds]


def dashboard_series(*, span: Span, now: datetime) -> Series:
    """Requests by tier, status class and source model, and latency / TTFB percentiles, per bucket of `span`
    ending with the bucket that holds `now`. Four queries over one index range of the aggregate table."""
    step_s = int(span.step.total_seconds())
    end = datetime.fromtimestamp((int(now.timestamp()) // step_s + 1) * step_s, tz=UTC)  # the current bucket's end
    n = int(span.length.total_seconds()) // step_s
    origin = end - n * span.step
    buckets = [origin + i * span.step for i in range(n)]
    series = Series(buckets=buckets, step=span.step)
    table = span.table._meta.db_table
    bucket, bucket_params = _bucket_expr(span.step, origin)
    where = "start >= %s AND start < %s"
    # As the ORM writes them: SQLite compares `start` as text, and sqlite3's own adapter would write the
    # bounds with "+00:00", which sorts after the first bucket's "YYYY-MM-DD HH:MM:SS" and left it out.
    since_until = [connection.ops.adapt_datetimefield_value(origin), connection.ops.adapt_datetimefield_value(end)]
    params = [*bucket_params, *since_until]
    with connection.cursor() as cursor:
        # Three small GROUP BYs instead of one by every dimension: the database folds the rows, Python
        # gets at most a few thousand.
        cursor.execute(
            f"SELECT {bucket} AS b, tier, SUM(requests) FROM {table} WHERE {where} GROUP BY 1, 2",  # noqa: S608
            params,
        )
        for b, tier, count in cursor.fetchall():
            if 0 <= int(b) < n:
                series.by_tier.setdefault(tier, [0] * n)[int(b)] += int(count)
        cursor.execute(
            f"SELECT {bucket} AS b, status_class, SUM(requests) FROM {table} WHERE {where} GROUP BY 1, 2",  # noqa: S608
            params,
        )
        for b, group, count in cursor.fetchall():
            if 0 <= int(b) < n:
                series.by_group.setdefault(group, [0] * n)[int(b)] += int(count)
        fallback_tiers = ", ".join(["%s"] * len(_FALLBACK))
        cursor.execute(
            f"SELECT {bucket} AS b, source_model, SUM(requests), "  # noqa: S608 - model columns
            f"SUM(CASE WHEN tier IN ({fallback_tiers}) THEN requests ELSE 0 END) FROM {table} "
            f"WHERE {where} AND tier <> %s GROUP BY 1, 2",
            [*bucket_params, *sorted(_FALLBACK), *since_until, str(Tier.REJECTED)],
        )
        for b, source, count, fallback in cursor.fetchall():
            i = int(b)
            if 0 <= i < n:
                series.source_requests.setdefault(source, [0] * n)[i] += int(count)
                series.source_fallback.setdefault(source, [0] * n)[i] += int(fallback)
        lat = ", ".join(f"SUM(lat_{i:02d})" for i in range(BUCKETS))
        ttfb = ", ".join(f"SUM(ttfb_{i:02d})" for i in range(BUCKETS))
        cursor.execute(
            f"SELECT {bucket} AS b, MAX(latency_max_ms), MAX(ttfb_max_ms), {lat}, {ttfb} FROM {table} "  # noqa: S608
            f"WHERE {where} AND tier <> %s GROUP BY 1",
            [*params, str(Tier.REJECTED)],
        )
        percentiles: dict[int, tuple[float | None, ...]] = {}
        for b, lat_max, ttfb_max, *hist in cursor.fetchall():
            lat_counts, ttfb_counts = [float(x or 0) for x in hist[:BUCKETS]], [float(x or 0) for x in hist[BUCKETS:]]
            percentiles[int(b)] = (
                percentile(lat_counts, 0.5, maximum=lat_max),
                percentile(lat_counts, 0.95, maximum=lat_max),
                percentile(ttfb_counts, 0.5, maximum=ttfb_max),
                percentile(ttfb_counts, 0.95, maximum=ttfb_max),
            )
    empty: tuple[None, ...] = (None, None, None, None)
    for i in range(n):
        p = percentiles.get(i, empty)
        series.latency_p50.append(p[0])
        series.latency_p95.append(p[1])
        series.ttfb_p50.append(p[2])
        series.ttfb_p95.append(p[3])
    return series
