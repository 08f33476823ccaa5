"""What the Dashboard shows, read from the request aggregates, the circuit history and the breaker engine.

Never from the raw request logs: a page costs a handful of index range scans over aggregate rows and the
circuit events of the range, whatever the log volume (docs/dashboard.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from health.breaker import State
from health.history import Segment, circuit_segments
from health.selectors import circuit_holds_in_force, circuit_list
from requestlogs.aggregates import Series, Span, dashboard_series, floor_minute, requests_count
from requestlogs.models import FALLBACK_TIERS


@dataclass(frozen=True)
class Counters:
    circuits_open: int  # tripped now (open or half-open) in this process's engine
    circuits_half_open: int  # of those, half-open (a probe may test the provider)
    circuits_held: int  # operator holds in force (forced open, drained providers)
    fallbacks_last_hour: int  # served by a chain entry in the last 60 minutes
    fallbacks_today: int  # since 00:00 UTC
    hour_since: datetime  # the last hour is the 60 whole minutes [hour_since, until), the one under way last
    until: datetime


@dataclass(frozen=True)
class Dashboard:
    span: Span
    now: datetime
    since: datetime
    until: datetime
    series: Series
    segments: list[Segment]
    counters: Counters


def dashboard_counters(*, now: datetime) -> Counters:
    """The counters above the charts: the engine's circuits (no query), holds and two aggregate sums."""
    states = [row.state for row in circuit_list()]
    tripped = sum(1 for state in states if state != State.CLOSED)
    minute = floor_minute(now)
    midnight = minute.replace(hour=0, minute=0)
    fallback = [str(t) for t in FALLBACK_TIERS]
    until = minute + timedelta(minutes=1)
    hour_since = until - timedelta(hours=1)
    return Counters(
        circuits_open=tripped,
        circuits_half_open=states.count(State.HALF_OPEN),
        circuits_held=len(circuit_holds_in_force(now=now)),
        fallbacks_last_hour=requests_count(since=hour_since, until=until, tiers=fallback),
        fallbacks_today=requests_count(since=midnight, until=until, tiers=fallback, hourly=True),
        hour_since=hour_since,
        until=until,
    )


def dashboard_get(*, span: Span, now: datetime | None = None) -> Dashboard:
    """Every series, segment and counter of one range, ending now."""
    now = now or datetime.now(UTC)
    series = dashboard_series(span=span, now=now)
    since, until = series.buckets[0], series.buckets[-1] + series.step
    return Dashboard(
        span=span,
        now=now,
        since=since,
        until=until,
        series=series,
        segments=circuit_segments(since=since, until=min(until, now)),
        counters=dashboard_counters(now=now),
    )
