"""The Dashboard (`/`): traffic by who served it, fallback shares, circuits open, latency and errors.

Admin and bi_read_only see it; anyone else goes where `core.views.home` sends them (a user to Request Logs).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache
from typing import Any
from urllib.parse import urlencode

from django.http import HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils.safestring import SafeString
from django.views.decorators.http import require_GET
from django.views.decorators.vary import vary_on_headers

from core.htmx import HtmxRequest, wants_partial
from core.roles import Role, has_role
from core.views import home
from dashboards import charts
from dashboards.charts import Lane, Series
from dashboards.selectors import Dashboard, dashboard_get
from requestlogs.aggregates import SPANS, Span
from requestlogs.models import FALLBACK_TIERS, StatusGroup, Tier

DEFAULT_RANGE = "24h"
RANGE_TABS = {"1h": "Last hour", "24h": "Last 24 hours", "7d": "Last 7 days"}
POLL_SECONDS = 30
# Drawn bottom to top; the legend lists them in this order.
TIERS = (Tier.PRIMARY, Tier.STEP1, Tier.STEP2, Tier.STEP3PLUS, Tier.OPTIMISTIC, Tier.FAILED, Tier.REJECTED)
TIER_LABELS = {
    Tier.PRIMARY: "Primary",
    Tier.STEP1: "Chain step 1",
    Tier.STEP2: "Chain step 2",
    Tier.STEP3PLUS: "Chain step 3+",
    Tier.OPTIMISTIC: "Optimistic primary",
    Tier.FAILED: "Failed",
    Tier.REJECTED: "Rejected (4xx by the gateway)",
}
ERROR_GROUPS = (StatusGroup.SERVER_ERROR, StatusGroup.CLIENT_ERROR, StatusGroup.CLIENT_GONE, StatusGroup.OTHER)
# Request Logs filters per status class (3xx and "other" have none).
STATUS_FILTER = {
    StatusGroup.SERVER_ERROR: "5xx",
    StatusGroup.CLIENT_ERROR: "4xx",
    StatusGroup.CLIENT_GONE: "client_gone",
}
SEGMENT_STATES = {
    "open": "Open",
    "half_open": "Half-open",
    "forced_open": "Forced open",
    "drained": "Drained",
}
MOST_SOURCES = 6  # fallback share lines: the sources with the most fallbacks
MOST_LANES = 12  # circuits lanes: the ones open longest


@dataclass(frozen=True)
class LegendItem:
    key: str
    label: str
    href: str = ""
    dashed: bool = False


@dataclass(frozen=True)
class Panel:
    id: str
    title: str
    note: str
    svg: SafeString | None
    legend: list[LegendItem]
    href: str  # the Request Logs (or Provider Health) view behind it; "" when the viewer may not open it
    link_text: str
    empty: str = ""  # shown instead of the chart


@cache
def _logs_base() -> str:
    return reverse("requestlogs:list")


def _logs_url(**query: Any) -> str:
    return _logs_base() + "?" + urlencode({k: v for k, v in query.items() if v not in (None, "")})


def _minute(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M")


def _exact_logs(since: datetime, until: datetime, **query: Any) -> str:
    """Request Logs for exactly [since, until), whole minutes as the aggregates count them: a rolling range
    (`range=24h`) starts up to a bucket earlier than the Dashboard's first bucket and has no end, so its
    count differed from the figure that links to it."""
    return _logs_url(range="custom", **{"from": _minute(since), "to": _minute(until)}, **query)


def _range_logs(data: Dashboard, **query: Any) -> str:
    """Request Logs for the Dashboard's range: its buckets, the one under way included."""
    return _exact_logs(data.since, data.until, **query)


def _bucket_logs(data: Dashboard, i: int, extra: str = "") -> str:
    """Request Logs for exactly bucket i (a custom range), plus `extra` (an encoded query tail).

    Built by hand: a page has up to 700 of these links, and reverse() plus urlencode() each time cost
    more than every query of the page.
    """
    start = data.series.buckets[i]
    return f"{_logs_base()}?range=custom&from={_minute(start)}&to={_minute(start + data.series.step)}{extra}"


def _when(data: Dashboard, i: int) -> str:
    start = data.series.buckets[i]
    end = start + data.series.step
    fmt = "%H:%M" if data.span.step < timedelta(hours=1) else "%a %d %b %H:%M"
    return f"{start.strftime(fmt)}–{end.strftime('%H:%M')} UTC"


def _pct(part: int, whole: int) -> float | None:
    return part / whole if whole else None


def _tier_panel(data: Dashboard) -> Panel:
    s = data.series
    present = [t for t in TIERS if any(s.by_tier.get(t, ()))]
    series = [Series(str(t), TIER_LABELS[t], s.by_tier[t]) for t in present]
    totals = s.totals()

    def title(i: int) -> str:
        parts = [f"{TIER_LABELS[t]} {s.by_tier[t][i]:,}" for t in present if s.by_tier[t][i]]
        return f"{_when(data, i)}: {totals[i]:,} requests" + (" · " + ", ".join(parts) if parts else "")

    step = _step_words(data.span)
    return Panel(
        id="dash-requests",
        title=f"Requests per {step} by who served them",
        note="Stacked: the primary, each chain step, the optimistic primary, failures and the gateway's own 4xx.",
        svg=charts.time_chart(
            title=f"Requests per {step} by who served them",
            desc=f"{s.total:,} requests in the last {data.span.label}, stacked by tier.",
            buckets=s.buckets,
            step=s.step,
            series=series,
            stacked=True,
            bucket_title=title,
            bucket_href=lambda i: _bucket_logs(data, i),
            wide=charts.FULL,
        ),
        legend=[LegendItem(str(t), TIER_LABELS[t]) for t in present],
        href=_range_logs(data),
        link_text="Request Logs for this range",
    )


def _fallback_panel(data: Dashboard) -> Panel:
    s = data.series
    ranked = sorted(
        (src for src, values in s.source_fallback.items() if sum(values)),
        key=lambda src: (-sum(s.source_fallback[src]), src),
    )[:MOST_SOURCES]
    series = [
        Series(
            f"s{n}",
            src or "(no model)",
            [_pct(f, r) for f, r in zip(s.source_fallback[src], s.source_requests[src], strict=True)],
        )
        for n, src in enumerate(ranked)
    ]
    legend = []
    for n, src in enumerate(ranked):
        share = _pct(sum(s.source_fallback[src]), sum(s.source_requests[src])) or 0
        legend.append(LegendItem(f"s{n}", f"{src or '(no model)'} · {charts.percent_label(share)} over the range"))
    empty = "" if ranked else f"No request was served by a fallback in the last {data.span.label}."
    return Panel(
        id="dash-fallback",
        title="Fallback share per source model",
        note="Share of each source model's requests served by a chain entry (the sources with the most fallbacks).",
        svg=charts.time_chart(
            title="Fallback share per source model",
            desc="Percentage of requests served by a fallback, per source model and bucket.",
            buckets=s.buckets,
            step=s.step,
            series=series,
            stacked=False,
            value_format=charts.percent_label,
            top=1.0,
            bucket_href=lambda i: _bucket_logs(data, i, "&fallback=served"),
            bucket_title=lambda i: f"{_when(data, i)}: fallback requests",
        )
        if ranked
        else None,
        legend=legend,
        href=_range_logs(data, fallback="served"),
        link_text="Fallback requests in Request Logs",
        empty=empty,
    )


def _circuit_panel(data: Dashboard, health_url: str) -> Panel:
    by_circuit: dict[tuple[str, str], list[charts.Segment]] = {}
    for seg in data.segments:
        label = SEGMENT_STATES.get(seg.state, seg.state)
        end = min(seg.end, data.now)
        words = f"{label} {seg.start:%H:%M}–{end:%H:%M} UTC"
        if end - seg.start >= timedelta(days=1):
            words = f"{label} {seg.start:%d %b %H:%M}–{end:%d %b %H:%M} UTC"
        by_circuit.setdefault((seg.provider, seg.model), []).append(
            charts.Segment(seg.start, end, seg.state, f"{seg.provider} / {seg.model or 'every model'}: {words}")
        )

    def open_time(item: tuple[tuple[str, str], list[charts.Segment]]) -> float:
        return sum((s.end - s.start).total_seconds() for s in item[1])

    ranked = sorted(by_circuit.items(), key=lambda item: (-open_time(item), item[0]))[:MOST_LANES]
    lanes = [
        Lane(f"{provider} / {model}" if model else f"{provider} (drained)", segs) for (provider, model), segs in ranked
    ]
    states = sorted({seg.key for _, segs in ranked for seg in segs}, key=list(SEGMENT_STATES).index)
    hidden = len(by_circuit) - len(ranked)
    return Panel(
        id="dash-circuits",
        title="Circuits open over time",
        note="Each lane is a circuit; coloured stretches are the periods it was not closed."
        + (f" {hidden} more circuit{'s' if hidden != 1 else ''} not shown." if hidden > 0 else ""),
        svg=charts.lane_chart(
            title="Circuits open over time",
            desc=f"{len(by_circuit)} circuits were open at some point in the last {data.span.label}.",
            since=data.since,
            until=data.until,
            lanes=lanes,
        )
        if lanes
        else None,
        legend=[LegendItem(key, SEGMENT_STATES[key]) for key in states],
        href=health_url,
        link_text="Provider Health",
        empty="" if lanes else f"No circuit opened in the last {data.span.label}.",
    )


def _latency_panel(data: Dashboard) -> Panel:
    s = data.series
    series = [
        Series("lat", "Latency p50", s.latency_p50),
        Series("lat", "Latency p95", s.latency_p95, dashed=True),
        Series("ttfb", "Time to first byte p50", s.ttfb_p50),
        Series("ttfb", "Time to first byte p95", s.ttfb_p95, dashed=True),
    ]
    return Panel(
        id="dash-latency",
        title="Latency and time to first byte",
        note="p50 (solid) and p95 (dashed), from histogram buckets; the gateway's own rejections left out.",
        svg=charts.time_chart(
            title="Latency and time to first byte, p50 and p95",
            desc="Request latency and time to first byte percentiles per bucket.",
            buckets=s.buckets,
            step=s.step,
            series=series,
            stacked=False,
            value_format=charts.ms_label,
            bucket_href=lambda i: _bucket_logs(data, i),
            bucket_title=lambda i: (
                f"{_when(data, i)}: latency p50 {_ms(s.latency_p50[i])}, p95 {_ms(s.latency_p95[i])}; "
                f"TTFB p50 {_ms(s.ttfb_p50[i])}, p95 {_ms(s.ttfb_p95[i])}"
            ),
        ),
        legend=[LegendItem(x.key, x.label, dashed=x.dashed) for x in series],
        href=_range_logs(data),
        link_text="Request Logs for this range",
    )


def _ms(value: float | None) -> str:
    return charts.ms_label(value) if value is not None else "—"


def _error_panel(data: Dashboard) -> Panel:
    s = data.series
    totals = s.totals()
    present = [g for g in ERROR_GROUPS if any(s.by_group.get(g, ()))]
    series = [
        Series(f"g-{g}", g.label, [_pct(n, t) for n, t in zip(s.by_group[g], totals, strict=True)]) for g in present
    ]
    peak = max((v for x in series for v in x.values if v is not None), default=0)
    return Panel(
        id="dash-errors",
        title="Error rate by status class",
        note="Share of all requests per bucket answered with each status class.",
        svg=charts.time_chart(
            title="Error rate by status class",
            desc="Percentage of requests per status class and bucket.",
            buckets=s.buckets,
            step=s.step,
            series=series,
            stacked=False,
            value_format=charts.percent_label,
            top=min(charts.nice_max(peak), 1.0) if peak else 0.04,
            bucket_href=lambda i: _bucket_logs(data, i, "&status=errors"),
            bucket_title=lambda i: (
                f"{_when(data, i)}: "
                + ", ".join(f"{g.label} {s.by_group[g][i]:,}" for g in present)
                + f" of {totals[i]:,}"
            ),
        )
        if present
        else None,
        legend=[
            LegendItem(f"g-{g}", g.label, _range_logs(data, status=STATUS_FILTER[g]))
            if g in STATUS_FILTER
            else LegendItem(f"g-{g}", g.label)
            for g in present
        ],
        href=_range_logs(data, status="5xx"),
        link_text="5xx in Request Logs",
        empty="" if present else f"No errors in the last {data.span.label}.",
    )


def _step_words(span: Span) -> str:
    minutes = int(span.step.total_seconds() // 60)
    if minutes == 1:
        return "minute"
    return f"{minutes} minutes" if minutes < 60 else "hour"


def _context(data: Dashboard, range_error: str, *, is_admin: bool) -> dict[str, Any]:
    traffic = data.series.total > 0
    # Provider Health is admin-only: a bi_read_only viewer gets the same counter and panel without the link.
    health_url = reverse("health:index") if is_admin else ""
    panels = [
        _tier_panel(data),
        _fallback_panel(data),
        _circuit_panel(data, health_url),
        _latency_panel(data),
        _error_panel(data),
    ]
    if not traffic:
        panels = [p for p in panels if p.id == "dash-circuits"]
    midnight = data.now.replace(hour=0, minute=0, second=0, microsecond=0)
    return {
        "section": "dashboard",
        "data": data,
        "counters": data.counters,
        "panels": panels,
        "traffic": traffic,
        "ranges": [(span, span.key == data.span.key, RANGE_TABS[span.key]) for span in SPANS.values()],
        "range_error": range_error,
        "poll_seconds": POLL_SECONDS,
        "self_url": reverse("dashboard") + ("" if data.span.key == DEFAULT_RANGE else f"?range={data.span.key}"),
        # "served": a chain entry's 5xx is a failed request in the counters, and not listed behind them either.
        "fallbacks_hour_url": _exact_logs(data.counters.hour_since, data.counters.until, fallback="served"),
        "fallbacks_today_url": _logs_url(range="custom", **{"from": _minute(midnight)}, fallback="served"),
        "health_url": health_url,
        "logs_url": _range_logs(data),
        "fallback_tiers": [TIER_LABELS[t] for t in FALLBACK_TIERS],
    }


@require_GET
@vary_on_headers("HX-Request")
def dashboard(request: HtmxRequest) -> HttpResponse:
    """The Dashboard for admin and bi_read_only; everyone else gets their start page."""
    if not has_role(request.user, Role.ADMIN, Role.BI_READ_ONLY):
        return home(request)
    key = request.GET.get("range") or DEFAULT_RANGE
    range_error = ""
    if key not in SPANS:
        range_error = f"Unknown range “{key[:20]}”: showing the last 24 hours. Use 1h, 24h or 7d."
        key = DEFAULT_RANGE
    context = _context(dashboard_get(span=SPANS[key]), range_error, is_admin=has_role(request.user, Role.ADMIN))
    template = "dashboards/index.html"
    if wants_partial(request):
        template += "#dashboard-body"
    return render(request, template, context)
