"""Provider Health tab of the Fallback page: circuits with their history and holds, Reset, the kill switch
(force open, drain, release), a circuit's events, and the threshold editor.

One URL, two renderings: the full page normally, a named partial for HTMX (branching on HX-Target).
"""

import itertools
import json
import math
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django.views.decorators.vary import vary_on_headers
from django_htmx.http import reswap, retarget

from catalog.selectors import llm_model_list, provider_list
from chains.selectors import ChainLink, chains_for_circuits
from core.errors import ApplicationError, ValidationFailed
from core.htmx import HtmxRequest, current_url_query, htmx_target, wants_partial
from core.permissions import role_required
from core.roles import Role
from core.templatetags.console_tags import ago
from health.breaker import State
from health.forms import (
    CIRCUIT_SORTS,
    DEFAULT_CIRCUIT_SORT,
    EXPIRY_PRESETS,
    FIELD_HELP,
    FIELD_LABELS,
    FIELD_TRADEOFFS,
    BreakerConfigForm,
    BreakerOverrideForm,
    CircuitForm,
    HoldForm,
    TuningWarning,
    circuit_sort,
    confirmed,
    tuning_warnings,
    warnings_signature,
)
from health.history import CLOSED, DRAINED, FORCED_OPEN, HALF_OPEN, OPEN, Segment, circuit_event_list, circuit_segments
from health.models import CircuitControl, CircuitEvent
from health.reasons import failure_reason
from health.selectors import (
    CONFIG_FIELDS,
    BreakerConfigValues,
    BreakerOverrideValues,
    CircuitRow,
    breaker_config_get,
    breaker_override_get,
    breaker_override_list,
    circuit_anchor,
    circuit_default_window,
    circuit_get,
    circuit_holds_in_force,
    circuit_list,
    circuits_local_only,
)
from health.services import (
    RESET_UNAVAILABLE,
    breaker_config_update,
    breaker_override_delete,
    breaker_override_set,
    circuit_force_open,
    circuit_release,
    circuit_reset,
    provider_drain,
)
from health.stats import CircuitStats, circuit_stats

# Seconds between refreshes of the circuit table (browser tests shorten it).
POLL_SECONDS = 5

STATE_LABELS = {State.CLOSED: "Closed", State.OPEN: "Open", State.HALF_OPEN: "HalfOpen"}
ERROR_LABELS = {"timeout": "timeout", "connection_error": "connection error", "cancelled": "cancelled"}


# ---------- Circuit table ----------


def _utc(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _until(value: datetime, now: datetime) -> str:
    """A countdown: "in 42 s" (up to 90 s), "in 4 min 12 s", "in 2 h 5 min"; "now" once reached."""
    seconds = math.ceil((value - now).total_seconds())
    if seconds <= 0:
        return "now"
    if seconds < 90:
        return f"in {seconds} s"
    minutes, secs = divmod(seconds, 60)
    if minutes < 10:  # a countdown close enough to watch
        return f"in {minutes} min {secs} s" if secs else f"in {minutes} min"
    if minutes < 60:
        return f"in {minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"in {hours} h {minutes} min" if minutes else f"in {hours} h"


@dataclass(frozen=True)
class HoldView:
    """An operator's hold as a row shows it: the pill, the reason and the expiry in words."""

    kind: str  # "forced_open" | "drained"
    label: str  # "Forced open" | "Drained"
    css: str  # pill modifier
    provider: str
    model: str  # "" for a drain
    reason: str
    expires_at: datetime | None
    expiry_text: str  # "until released", "until 14:30 UTC · in 25 min"
    title: str


@dataclass(frozen=True)
class StripPart:
    css: str
    x: str  # percent of the strip's width
    width: str
    title: str


@dataclass(frozen=True)
class StripTick:
    x: str
    label: str  # "" for a tick without a label
    major: bool  # kept on a phone


@dataclass(frozen=True)
class StripView:
    parts: list[StripPart]
    ticks: list[StripTick]
    label: str  # what the strip says, for screen readers
    start_text: str
    end_text: str


@dataclass(frozen=True)
class ChainView:
    name: str
    url: str
    enabled: bool
    role: str  # "source" | "step 2"
    title: str


@dataclass(frozen=True)
class CircuitView:
    row: CircuitRow
    key: str
    state_label: str
    state_class: str
    window_title: str
    cooldown_text: str  # "" when not open
    cooldown_title: str
    last_failure_text: str  # "" when none
    last_failure_title: str
    last_failure_code: str
    reason: str = ""  # why it is open or half-open, in words
    hold: HoldView | None = None
    tracked: bool = True  # False: a held circuit the engine has not seen traffic for
    strip: StripView | None = None
    errors_text: str = "—"
    p50_text: str = ""
    stats_title: str = "No upstream attempts in the last hour"
    chains: tuple[ChainView, ...] = ()

    @property
    def show_state_pill(self) -> bool:
        """A held circuit shows its breaker state only when that is more than Closed."""
        return self.hold is None or self.row.state is not State.CLOSED


@dataclass(frozen=True)
class ProviderGroup:
    provider: str
    key: str
    drain: HoldView | None
    circuits: list[CircuitView]


def _circuit_view(row: CircuitRow, now: datetime, **extra: Any) -> CircuitView:
    cooldown_text = cooldown_title = ""
    if row.state is State.OPEN and row.cooldown_until is not None and extra.get("hold") is None:
        # (Held, it lets no probe through when its cooldown ends: its hold says so, the cell reads "—".)
        cooldown_text = _until(row.cooldown_until, now)
        cooldown_title = f"Half-open at {_utc(row.cooldown_until)}"
    elif row.state is State.HALF_OPEN and extra.get("hold") is None:
        # Probes are made by requests: a circuit no request reaches (a chain entry once the primary is back)
        # stays half-open, which reads like an outage still going on unless the row says why. (A held circuit
        # gets no request and no probe: its hold says so.)
        if row.probe_in_flight:
            cooldown_text = "probing"
            cooldown_title = "Over: one request is probing the provider, and its answer closes or reopens the circuit"
        else:
            cooldown_text = "awaiting probe"
            cooldown_title = "Over, and no probe is out: the next request to this circuit probes it"
        if row.cooldown_until is not None:
            cooldown_title += f" (cooldown ended {_utc(row.cooldown_until)})"
    code = row.last_failure_status
    code_text = "" if code is None else ERROR_LABELS.get(str(code), str(code))
    last_text = last_title = ""
    if row.last_failure_at is not None:
        last_text = ago(row.last_failure_at)
        last_title = _utc(row.last_failure_at)
    reason = failure_reason(code) if row.state in (State.OPEN, State.HALF_OPEN) else ""
    return CircuitView(
        row=row,
        key=circuit_anchor(row.provider, row.model),
        state_label=STATE_LABELS.get(row.state, str(row.state)),
        state_class=str(row.state).replace("_", "-"),
        window_title=(
            f"{row.failure_count} failed of {row.total_requests} requests in the last {row.window_seconds} s; "
            f"opens at {row.failure_threshold} failures with at least {row.minimum_requests} requests"
            + (" (override)" if row.has_override else "")
        ),
        cooldown_text=cooldown_text,
        cooldown_title=cooldown_title,
        last_failure_text=last_text,
        last_failure_title=last_title,
        last_failure_code=code_text,
        reason=reason,
        **extra,
    )


# ---------- Words for times, holds, strips and figures ----------


def _hm(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%H:%M")


def _duration(seconds: float) -> str:
    """ "40 s", "6 min", "1 h 2 min", "2 days 3 h"."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes = seconds // 60
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} days {hours} h" if hours else f"{days} days"


HOLD_LABELS = {CircuitControl.Kind.FORCED_OPEN: "Forced open", CircuitControl.Kind.DRAINED: "Drained"}


def _hold_view(control: CircuitControl, now: datetime) -> HoldView:
    label = HOLD_LABELS.get(CircuitControl.Kind(control.kind), control.kind)
    target = f"{control.provider} / {control.model}" if control.model else f"every circuit of {control.provider}"
    if control.expires_at is None:
        expiry_text, expiry_title = "until released", "no expiry: held until released"
    else:
        expiry_text = f"until {_hm(control.expires_at)} UTC · {_until(control.expires_at, now)}"
        expiry_title = f"expires {_utc(control.expires_at)}"
    title = (
        f"{label}: {target}, by {control.created_by} at {_utc(control.created_at)}; {expiry_title}. "
        f"Reason: {control.reason}"
    )
    return HoldView(
        kind=control.kind,
        label=label,
        css="forced" if control.kind == CircuitControl.Kind.FORCED_OPEN else "drained",
        provider=control.provider,
        model=control.model,
        reason=control.reason,
        expires_at=control.expires_at,
        expiry_text=expiry_text,
        title=title,
    )


STRIP_HOURS = 24
STRIP_WORDS = {CLOSED: "closed", OPEN: "open", HALF_OPEN: "half-open", FORCED_OPEN: "forced open", DRAINED: "drained"}
# Which state a strip shows where several overlap: a forced hold, then a drain, then the breaker's own.
STRIP_RANK = {CLOSED: 0, HALF_OPEN: 1, OPEN: 1, DRAINED: 2, FORCED_OPEN: 3}
STRIP_MIN_WIDTH = 0.3  # percent: a one-minute open still shows


def _pct(value: float) -> str:
    return f"{value:.3f}%"


def _strip(segments: list[Segment], since: datetime, until: datetime) -> StripView:
    """The strip of one circuit from its non-closed segments (its own and its provider's drains)."""
    total = (until - since).total_seconds()
    bounds = sorted({since, until, *(s.start for s in segments), *(s.end for s in segments)})
    merged: list[tuple[str, datetime, datetime]] = []
    for a, b in itertools.pairwise(bounds):
        if not since <= a < b <= until:
            continue
        covering = [s.state for s in segments if s.start <= a and b <= s.end]
        state = max(covering, key=STRIP_RANK.__getitem__, default=CLOSED)
        if merged and merged[-1][0] == state and merged[-1][2] == a:
            merged[-1] = (state, merged[-1][1], b)
        else:
            merged.append((state, a, b))
    parts: list[StripPart] = []
    spent: dict[str, tuple[int, float]] = {}
    for state, a, b in merged:
        seconds = (b - a).total_seconds()
        x = (a - since).total_seconds() / total * 100
        width = seconds / total * 100
        if state != CLOSED:
            width = max(width, STRIP_MIN_WIDTH)
            times, length = spent.get(state, (0, 0.0))
            spent[state] = (times + 1, length + seconds)
        word = STRIP_WORDS.get(state, state)
        end = "now" if b >= until else _hm(b)
        title = f"{word} {_hm(a)}–{end} UTC ({_duration(seconds)})"
        parts.append(StripPart(css=state.replace("_", "-"), x=_pct(x), width=_pct(width), title=title))
    ticks: list[StripTick] = []
    hour = since.astimezone(UTC).replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    while hour < until:
        x = (hour - since).total_seconds() / total * 100
        labelled = hour.hour % 3 == 0 and 3 <= x <= 97
        ticks.append(StripTick(x=_pct(x), label=f"{hour:%H}:00" if labelled else "", major=hour.hour % 6 == 0))
        hour += timedelta(hours=1)
    if spent:
        words = [
            f"{STRIP_WORDS[s]} {n} time{'s' if n != 1 else ''} ({_duration(t)})"
            for s, (n, t) in sorted(spent.items(), key=lambda item: -STRIP_RANK[item[0]])
        ]
        label = f"Last {STRIP_HOURS} hours: " + ", ".join(words)
    else:
        label = f"Last {STRIP_HOURS} hours: closed throughout"
    return StripView(parts=parts, ticks=ticks, label=label, start_text=_hm(since), end_text="now")


def _stats_words(stats: CircuitStats | None) -> dict[str, str]:
    if stats is None or not stats.attempts:
        return {}
    share = stats.error_share or 0.0
    # Never "0%" while some failed, nor "100%" while some succeeded.
    percent = "0%" if share == 0 else "<1%" if share < 0.01 else ">99%" if 0.99 < share < 1 else f"{share * 100:.0f}%"
    p50 = ""
    if stats.p50_ms is not None:
        p50 = f"p50 {stats.p50_ms:.0f} ms" if stats.p50_ms < 1000 else f"p50 {stats.p50_ms / 1000:.1f} s"
    title = f"{stats.errors} of {stats.attempts} upstream attempts failed in the last hour"
    if stats.p50_ms is not None:
        title += f"; median attempt {stats.p50_ms:.0f} ms"
    return {"errors_text": f"{percent} errors", "p50_text": p50, "stats_title": title}


def _chain_views(links: list[ChainLink]) -> tuple[ChainView, ...]:
    out = []
    for link in links:
        role = "source" if link.position is None else f"step {link.position}"
        what = "Source model of" if link.position is None else f"Entry {link.position} of"
        title = f"{what} chain {link.name}" + ("" if link.enabled else " (disabled)") + ": edit the chain"
        url = reverse("chains:edit", args=[link.chain_id])
        out.append(ChainView(name=link.name, url=url, enabled=link.enabled, role=role, title=title))
    return tuple(out)


@dataclass(frozen=True)
class SortHeader:
    """A sortable column header: where a click goes and what the current order is."""

    url: str
    aria_sort: str  # "ascending" | "descending" | "" (not the active column)
    arrow: str


def _sort_key(sort: str) -> Any:
    column = sort.lstrip("-")
    if column == "failures":
        return lambda c: (c.row.failure_count, c.row.total_requests)
    if column == "requests":
        return lambda c: (c.row.total_requests, c.row.failure_count)
    return lambda c: (c.row.provider, c.row.model)


def _sorted(circuits: list[CircuitView], sort: str) -> list[CircuitView]:
    """Circuits in the table's order; ties keep provider then model order (a stable sort over that order)."""
    by_name = sorted(circuits, key=lambda c: (c.row.provider, c.row.model))
    return sorted(by_name, key=_sort_key(sort), reverse=sort.startswith("-"))


def _sort_url(sort: str) -> str:
    base = reverse("health:index")
    return base if sort == DEFAULT_CIRCUIT_SORT else f"{base}?{urlencode({'sort': sort})}"


def _sort_headers(sort: str) -> dict[str, SortHeader]:
    """One header per sortable column. Counts sort most-first on the first click, names A–Z; clicking the
    active column flips it."""
    column, descending = sort.lstrip("-"), sort.startswith("-")
    headers = {}
    for key, first_descending in CIRCUIT_SORTS.items():
        active = key == column
        flip = descending if active else not first_descending
        target = key if flip else f"-{key}"
        headers[key] = SortHeader(
            url=_sort_url(target),
            aria_sort=("descending" if descending else "ascending") if active else "",
            arrow=("▼" if descending else "▲") if active else "",
        )
    return headers


def _window_help(circuits: list[CircuitView]) -> str:
    """The header's help: the failure window the counts are over, and whether some circuits use another."""
    window = circuit_default_window()
    text = f"Failure count and Total requests: the last {window} s"
    others = sorted({c.row.window_seconds for c in circuits} - {window})
    if others:
        text += f" ({', '.join(f'{w} s' for w in others)} for circuits with an override; see each cell)"
    return text + "."


def _table_context(sort: str = DEFAULT_CIRCUIT_SORT) -> dict[str, Any]:
    """The circuit table: the engine's circuits plus the held ones it has not tracked, grouped by provider,
    with their holds, 24-hour strips, last-hour figures and chains, in the order of `sort` (within a
    provider; providers in the order of their first circuit). A fixed number of queries."""
    now = timezone.now()
    rows = circuit_list()
    # Read after the listing, which may be what found Redis unreachable.
    degraded = circuits_local_only()
    holds = circuit_holds_in_force(now=now)
    forced = {(h.provider, h.model): _hold_view(h, now) for h in holds if h.model}
    drains = {h.provider: _hold_view(h, now) for h in holds if not h.model}
    tracked = {(r.provider, r.model) for r in rows}
    rows += [circuit_get(provider=p, model=m) for p, m in forced if (p, m) not in tracked]
    rows.sort(key=lambda r: (r.provider, r.model))

    since = now - timedelta(hours=STRIP_HOURS)
    segments: dict[tuple[str, str], list[Segment]] = defaultdict(list)
    for segment in circuit_segments(since=since, until=now):
        segments[(segment.provider, segment.model)].append(segment)
    stats = circuit_stats(now - timedelta(hours=1))
    chains = chains_for_circuits(circuits=[(r.provider, r.model) for r in rows])

    circuits = [
        _circuit_view(
            row,
            now,
            hold=forced.get((row.provider, row.model)) or drains.get(row.provider),
            tracked=(row.provider, row.model) in tracked,
            strip=_strip(segments[(row.provider, row.model)] + segments[(row.provider, "")], since, now),
            chains=_chain_views(chains.get((row.provider, row.model), [])),
            **_stats_words(stats.get((row.provider, row.model))),
        )
        for row in rows
    ]
    circuits = _sorted(circuits, sort)
    providers = list(dict.fromkeys(c.row.provider for c in circuits))
    providers += sorted(set(drains) - set(providers))  # drained providers without a tracked circuit
    groups: list[ProviderGroup] = []
    for provider in providers:
        members = [c for c in circuits if c.row.provider == provider]
        groups.append(ProviderGroup(provider, provider_anchor(provider), drains.get(provider), members))
    return {
        "circuits": circuits,
        "groups": groups,
        "degraded": degraded,
        "open_count": sum(1 for c in circuits if c.row.state is State.OPEN),
        "half_open_count": sum(1 for c in circuits if c.row.state is State.HALF_OPEN),
        "held_count": sum(1 for c in circuits if c.hold is not None),
        "drained_count": len(drains),
        "updated_at": now,
        "updated_title": _utc(now),
        "poll_seconds": POLL_SECONDS,
        # The poll keeps the order the user chose.
        "index_url": _sort_url(sort),
        "sort": sort,
        "sort_headers": _sort_headers(sort),
        "window_help": _window_help(circuits),
    }


def _request_sort(request: HtmxRequest) -> str:
    """The table's sort: from the query string, or (for a POST answered with the table) from the page's URL.

    A GET carries its own sort in its URL, none meaning the default: a sort header's link back to the default
    order (no `?sort=`) was read from the page it left (HX-Current-URL), and the table stayed in the old order.
    """
    if request.method == "GET" or "sort" in request.GET or not request.htmx or not request.htmx.current_url:
        return circuit_sort(request.GET)
    return circuit_sort(current_url_query(request))


def provider_anchor(provider: str) -> str:
    return circuit_anchor(provider, "")


# ---------- Threshold editor ----------


@dataclass(frozen=True)
class FieldView:
    name: str
    label: str
    help: str
    tradeoff: str  # what moving it up or down costs, in plain words
    inherited: str  # the global value an override field falls back to


@dataclass(frozen=True)
class OverrideView:
    values: BreakerOverrideValues
    key: str
    summary: list[tuple[str, str]]  # (label, value) of the fields it sets


def _show(field: str, value: Any) -> str:
    if field == "failure_status_codes":
        return ", ".join(str(c) for c in value) or "none"
    return f"{value} s" if field.endswith("_seconds") else str(value)


def _override_view(values: BreakerOverrideValues) -> OverrideView:
    data = values.as_dict()
    summary = [(FIELD_LABELS[f].split(" (")[0], _show(f, data[f])) for f in CONFIG_FIELDS if data[f] is not None]
    return OverrideView(values=values, key=circuit_anchor(values.provider, values.model), summary=summary)


def _warnings_context(prefix: str, form: Any, warnings: list[TuningWarning]) -> dict[str, Any]:
    """The warning block of one form: the warnings linked to their fields, and the value "Save anyway" sends."""
    return {
        f"{prefix}_warnings": [(form[w.field].id_for_label, w.message) for w in warnings],
        f"{prefix}_signature": warnings_signature(warnings) if warnings else "",
    }


def _configure_context(
    *,
    config_form: BreakerConfigForm | None = None,
    override_form: BreakerOverrideForm | None = None,
    config: BreakerConfigValues | None = None,
    config_warnings: list[TuningWarning] | None = None,
    override_warnings: list[TuningWarning] | None = None,
) -> dict[str, Any]:
    config = config or breaker_config_get()
    current = config.as_dict()
    config_form = config_form or BreakerConfigForm.for_values(config)
    override_form = override_form or BreakerOverrideForm()
    overrides = breaker_override_list()
    chosen = override_form["provider"].value() or "", override_form["model"].value() or ""
    fields = [
        FieldView(
            name=f,
            label=FIELD_LABELS[f],
            help=FIELD_HELP[f],
            tradeoff=FIELD_TRADEOFFS[f],
            inherited=_show(f, current[f]),
        )
        for f in CONFIG_FIELDS
    ]
    return {
        "config": config,
        "config_form": config_form,
        "override_form": override_form,
        "config_summary": config_form.error_summary() if config_form.is_bound else [],
        "override_summary": override_form.error_summary() if override_form.is_bound else [],
        "config_fields": [(field, config_form[field.name]) for field in fields],
        "override_fields": [(field, override_form[field.name]) for field in fields],
        "overrides": [_override_view(o) for o in overrides],
        "providers": list(provider_list().values_list("name", flat=True)),
        "models": list(llm_model_list().values_list("name", "provider__name")),
        # The pair in the override form when it already has an override (saving replaces it).
        "editing": chosen if any((o.provider, o.model) == chosen for o in overrides) else None,
        **_warnings_context("config", config_form, config_warnings or []),
        **_warnings_context("override", override_form, override_warnings or []),
    }


# The editor's parts an HTMX request may ask for by its target; anything else gets the whole body.
CONFIGURE_PARTS = frozenset({"config-form", "overrides"})


def _configure_response(request: HtmxRequest, context: dict[str, Any], *, close_dialog: bool = False) -> HttpResponse:
    """The editor, or the part the HTMX request targets: the global form and the overrides swap only
    themselves, so an error in one keeps what is typed in the other. A saved global form closes the dialog
    and answers with the whole body, whose overrides show the new inherited values."""
    template = "health/configure.html"
    part = htmx_target(request)
    if close_dialog or part not in CONFIGURE_PARTS:
        part = "configure-body"
    if wants_partial(request):
        template += f"#{part}"
    response = render(request, template, {"section": "fallback", "tab": "health", **context})
    if htmx_target(request) not in ("", part):
        response = retarget(response, f"#{part}")
    if close_dialog and request.htmx:
        # app.js closes the dialog; the middleware adds the toast messages to the same header.
        response["HX-Trigger"] = json.dumps({"closeDialog": "configure-dialog"})
    return response


# ---------- Views ----------


@require_GET
@role_required(Role.ADMIN)
@vary_on_headers("HX-Request", "HX-Target")
def index(request: HtmxRequest) -> HttpResponse:
    template = "health/index.html"
    sort = _request_sort(request)
    if wants_partial(request) and request.htmx.target == "circuit-table":
        # The table polls itself (and a sort header swaps it): engine only, no configuration or catalog queries.
        return render(request, template + "#circuit-table", _table_context(sort))
    context = {"section": "fallback", "tab": "health", **_table_context(sort), **_configure_context()}
    if wants_partial(request):
        template += "#fallback-page"
    return render(request, template, context)


@require_http_methods(["GET", "POST"])
@role_required(Role.ADMIN)
def reset(request: HtmxRequest) -> HttpResponse:
    """GET: the confirm page (used without JavaScript; with it, a <dialog> asks). POST: reset the circuit."""
    if request.method == "GET":
        provider, model = CircuitForm(request.GET).target()
        row = next((r for r in circuit_list() if (r.provider, r.model) == (provider, model)), None)
        if circuits_local_only():  # this process's own view: the circuit may be open on every gateway
            messages.error(request, RESET_UNAVAILABLE)
            return redirect("health:index")
        if row is None:
            raise Http404("No circuit is tracked for this provider and model.")
        return render(
            request, "health/reset.html", {"section": "fallback", "circuit": _circuit_view(row, timezone.now())}
        )

    provider, model = CircuitForm(request.POST).target()
    try:
        before = circuit_reset(actor=request.user, provider=provider, model=model)
    except ApplicationError as exc:  # invalid target, or the breaker's Redis unreachable
        messages.error(request, exc.message)
    else:
        was = STATE_LABELS.get(before.state, str(before.state))
        messages.success(request, f"Circuit {provider} / {model} reset: {was} → Closed.")
    if request.htmx:
        return render(request, "health/index.html#circuit-table", _table_context(_request_sort(request)))
    return redirect("health:index")


@require_http_methods(["GET", "POST"])
@role_required(Role.ADMIN)
@vary_on_headers("HX-Request", "HX-Target")
def configure(request: HtmxRequest) -> HttpResponse:
    """The threshold editor: the global settings and the per-circuit overrides. POST saves the global ones."""
    if request.method == "GET":
        # ?provider=&model= loads that override (or that pair) into the override form.
        provider, model = CircuitForm(request.GET).target()
        override_form = None
        if provider and model:
            existing = breaker_override_get(provider=provider, model=model)
            if existing is not None:
                override_form = BreakerOverrideForm.for_override(existing)
            else:
                override_form = BreakerOverrideForm(initial={"provider": provider, "model": model})
        return _configure_response(request, _configure_context(override_form=override_form))

    form = BreakerConfigForm(request.POST)
    form.is_valid()
    before = breaker_config_get()
    # Risky but valid values: say why and save only once "Save anyway" is ticked for these very warnings.
    warnings = tuning_warnings(form.config_input())
    if not confirmed(form, warnings):
        return _configure_response(
            request, _configure_context(config_form=form, config=before, config_warnings=warnings)
        )
    try:
        after = breaker_config_update(actor=request.user, data=form.config_input())
    except ValidationFailed as exc:
        form.add_service_errors(exc)
        context = _configure_context(config_form=form, config=before, config_warnings=warnings)
        return _configure_response(request, context)
    if after.as_dict() == before.as_dict():
        messages.info(request, "Breaker thresholds unchanged.")
    else:
        messages.success(request, "Breaker thresholds saved; every circuit uses them now.")
    if not request.htmx:
        return redirect("health:index")
    return _configure_response(request, _configure_context(config=after), close_dialog=True)


@require_POST
@role_required(Role.ADMIN)
def override_set(request: HtmxRequest) -> HttpResponse:
    form = BreakerOverrideForm(request.POST)
    form.is_valid()
    provider, model = form.target()
    # The warnings are about what the circuit would run with: the override over the global values.
    typed = any(str(v).strip() for v in form.override_input().values())
    warnings = tuning_warnings(form.effective_input(breaker_config_get())) if typed else []
    if not confirmed(form, warnings):
        return _configure_response(request, _configure_context(override_form=form, override_warnings=warnings))
    try:
        breaker_override_set(actor=request.user, provider=provider, model=model, data=form.override_input())
    except ApplicationError as exc:  # invalid, or the same override saved concurrently (409)
        form.add_service_errors(exc)
        return _configure_response(request, _configure_context(override_form=form, override_warnings=warnings))
    messages.success(request, f"Override for {provider} / {model} saved.")
    if not request.htmx:
        return redirect("health:configure")
    return _configure_response(request, _configure_context())


@require_POST
@role_required(Role.ADMIN)
def override_delete(request: HtmxRequest) -> HttpResponse:
    provider, model = CircuitForm(request.POST).target()
    try:
        breaker_override_delete(actor=request.user, provider=provider, model=model)
    except ApplicationError as exc:  # no such override (NotFound)
        messages.error(request, exc.message)
    else:
        messages.success(request, f"Override for {provider} / {model} removed; the global thresholds apply.")
    if not request.htmx:
        return redirect("health:configure")
    return _configure_response(request, _configure_context())


# ---------- A circuit's events ----------

EVENTS_LIMIT = 50
EVENT_WORDS = {
    CircuitEvent.Kind.OPENED: "Opened",
    CircuitEvent.Kind.HALF_OPEN: "Half-open: probe granted",
    CircuitEvent.Kind.CLOSED: "Closed: probe succeeded",
    CircuitEvent.Kind.REOPENED: "Re-opened: probe failed",
    CircuitEvent.Kind.RESET: "Reset",
    CircuitEvent.Kind.FORCED_OPEN: "Forced open",
    CircuitEvent.Kind.DRAINED: "Provider drained",
    CircuitEvent.Kind.RELEASED: "Released",
}
EVENT_CSS = {
    CircuitEvent.Kind.OPENED: "open",
    CircuitEvent.Kind.REOPENED: "open",
    CircuitEvent.Kind.HALF_OPEN: "half-open",
    CircuitEvent.Kind.CLOSED: "closed",
    CircuitEvent.Kind.RESET: "closed",
    CircuitEvent.Kind.FORCED_OPEN: "held",
    CircuitEvent.Kind.DRAINED: "held",
    CircuitEvent.Kind.RELEASED: "released",
}


@dataclass(frozen=True)
class EventView:
    at: datetime
    time_text: str
    time_title: str
    kind: str
    css: str
    details: list[str]  # figures, status, cooldown, actor, expiry, each already in words
    reason: str  # an operator's reason, "" when none


def _event_view(event: CircuitEvent, now: datetime) -> EventView:
    kind = CircuitEvent.Kind(event.kind)
    words = EVENT_WORDS.get(kind, event.kind)
    if kind is CircuitEvent.Kind.RELEASED and not event.model:
        words = "Drain released"
    details: list[str] = []
    if event.failures is not None and event.total is not None:
        details.append(
            f"{event.failures} failure{'s' if event.failures != 1 else ''} / "
            f"{event.total} request{'s' if event.total != 1 else ''}"
        )
    if event.last_status:
        details.append(failure_reason(event.last_status))
    if event.cooldown_seconds is not None:
        details.append(f"cooldown {_duration(event.cooldown_seconds)}")
    if event.until is not None:
        details.append(f"until {_utc(event.until)}")
    elif kind in (CircuitEvent.Kind.FORCED_OPEN, CircuitEvent.Kind.DRAINED):
        details.append("until released")
    if event.actor:
        details.append(f"by {event.actor}")
    if event.local:
        details.append("seen by one process only (Redis unreachable)")
    same_day = event.at.astimezone(UTC).date() == now.astimezone(UTC).date()
    time_text = event.at.astimezone(UTC).strftime("%H:%M:%S" if same_day else "%b %d %H:%M:%S") + " UTC"
    return EventView(
        at=event.at,
        time_text=time_text,
        time_title=f"{_utc(event.at)} ({ago(event.at)})",
        kind=words,
        css=EVENT_CSS.get(kind, "closed"),
        details=details,
        reason=event.reason,
    )


@require_GET
@role_required(Role.ADMIN)
@vary_on_headers("HX-Request")
def events(request: HtmxRequest) -> HttpResponse:
    """A circuit's last 50 events, newest first (with its provider's drains): the row's expander loads the
    list; without JavaScript it is a page of its own."""
    provider, model = CircuitForm(request.GET).target()
    if not provider or not model:
        raise Http404("Name a provider and a model.")
    now = timezone.now()
    context = {
        "section": "fallback",
        "provider": provider,
        "model": model,
        "key": circuit_anchor(provider, model),
        "events": [_event_view(e, now) for e in circuit_event_list(provider=provider, model=model, limit=EVENTS_LIMIT)],
        "limit": EVENTS_LIMIT,
        "as_of": now,
        "as_of_title": _utc(now),
    }
    template = "health/events.html"
    if wants_partial(request):
        template += "#event-list"
    return render(request, template, context)


# ---------- The kill switch: force open, drain, release ----------

HOLD_DIALOG = "hold-dialog"


def _hold_body(request: HtmxRequest, *, action: str, form: HoldForm, provider: str, model: str) -> HttpResponse:
    """The kill-switch form for one target: the body of the dialog over HTMX, a page of its own without."""
    target = f"{provider} / {model}" if model else provider
    titles = {
        "force-open": f"Force open {target}",
        "drain": f"Drain {provider}",
        "release": f"Release {target}" if model else f"Release the drain of {provider}",
    }
    buttons = {"force-open": f"Force open {target}", "drain": f"Drain {provider}", "release": f"Release {target}"}
    context = {
        "section": "fallback",
        "action": action,
        "action_url": reverse(f"health:{action}"),
        "form": form,
        "provider": provider,
        "model": model,
        "target": target,
        "title": titles[action],
        "button": buttons[action],
        "presets": EXPIRY_PRESETS,
        "expiry": form.expiry_choice(),
        "summary": form.error_summary() if form.is_bound else [],
    }
    template = "health/hold.html"
    if wants_partial(request):
        template += "#hold-body"
    return render(request, template, context)


def _held(request: HtmxRequest, message: str) -> HttpResponse:
    """After a hold changed: over HTMX the refreshed table (and the dialog closes), else back to the page."""
    messages.success(request, message)
    if not request.htmx:
        return redirect("health:index")
    response = render(request, "health/index.html#circuit-table", _table_context(_request_sort(request)))
    retarget(response, "#circuit-table")
    reswap(response, "outerHTML")
    # After the swap settles, so app.js has found the new opener to give the keyboard back to.
    response["HX-Trigger-After-Settle"] = json.dumps({"closeDialog": HOLD_DIALOG})
    return response


@require_http_methods(["GET", "POST"])
@role_required(Role.ADMIN)
@vary_on_headers("HX-Request")
def force_open(request: HtmxRequest) -> HttpResponse:
    """GET: the form (dialog body, or a page without JavaScript). POST: hold the circuit open."""
    if request.method == "GET":
        provider, model = CircuitForm(request.GET).target()
        if not provider or not model:
            raise Http404("Name a provider and a model.")
        form = HoldForm(initial={"provider": provider, "model": model})
        return _hold_body(request, action="force-open", form=form, provider=provider, model=model)
    form = HoldForm(request.POST)
    form.is_valid()
    provider, model = form.target()
    minutes = form.minutes_input()
    if minutes is not None:
        try:
            circuit_force_open(
                actor=request.user, provider=provider, model=model, reason=form.reason_input(), minutes=minutes
            )
        except ApplicationError as exc:
            form.add_service_errors(exc)
        else:
            return _held(request, f"{provider} / {model} forced open: its traffic goes to its fallback chains.")
    return _hold_body(request, action="force-open", form=form, provider=provider, model=model)


@require_http_methods(["GET", "POST"])
@role_required(Role.ADMIN)
@vary_on_headers("HX-Request")
def drain(request: HtmxRequest) -> HttpResponse:
    """GET: the form. POST: hold every circuit of the provider open."""
    if request.method == "GET":
        provider, _ = CircuitForm(request.GET).target()
        if not provider:
            raise Http404("Name a provider.")
        form = HoldForm(initial={"provider": provider})
        return _hold_body(request, action="drain", form=form, provider=provider, model="")
    form = HoldForm(request.POST)
    form.is_valid()
    provider, _ = form.target()
    minutes = form.minutes_input()
    if minutes is not None:
        try:
            provider_drain(actor=request.user, provider=provider, reason=form.reason_input(), minutes=minutes)
        except ApplicationError as exc:
            form.add_service_errors(exc)
        else:
            return _held(request, f"{provider} drained: traffic to every model it serves goes to fallback chains.")
    return _hold_body(request, action="drain", form=form, provider=provider, model="")


@require_http_methods(["GET", "POST"])
@role_required(Role.ADMIN)
@vary_on_headers("HX-Request")
def release(request: HtmxRequest) -> HttpResponse:
    """GET: the confirm step. POST: lift the hold on a circuit (`model`) or a provider's drain (no model)."""
    if request.method == "GET":
        provider, model = CircuitForm(request.GET).target()
        if not provider:
            raise Http404("Name a provider.")
        form = HoldForm(initial={"provider": provider, "model": model})
        return _hold_body(request, action="release", form=form, provider=provider, model=model)
    form = HoldForm(request.POST)
    form.is_valid()
    provider, model = form.target()
    try:
        circuit_release(actor=request.user, provider=provider, model=model)
    except ApplicationError as exc:
        form.add_service_errors(exc)
        return _hold_body(request, action="release", form=form, provider=provider, model=model)
    target = f"{provider} / {model}" if model else f"the drain of {provider}"
    return _held(request, f"Released {target}: traffic goes back through its breaker.")
