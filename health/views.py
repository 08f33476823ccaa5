"""Provider Health tab of the Fallback page: circuits, Reset, and the threshold editor.

One URL, two renderings: the full page normally, a named partial for HTMX (branching on HX-Target).
"""

import json
import math
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.contrib import messages
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django.views.decorators.vary import vary_on_headers

from catalog.selectors import llm_model_list, provider_list
from core.errors import ApplicationError, ValidationFailed
from core.htmx import HtmxRequest, wants_partial
from core.permissions import role_required
from core.roles import Role
from core.templatetags.console_tags import ago
from health.breaker import State
from health.forms import FIELD_HELP, FIELD_LABELS, BreakerConfigForm, BreakerOverrideForm, CircuitForm
from health.selectors import (
    CONFIG_FIELDS,
    BreakerConfigValues,
    BreakerOverrideValues,
    CircuitRow,
    breaker_config_get,
    breaker_override_get,
    breaker_override_list,
    circuit_anchor,
    circuit_list,
    circuits_local_only,
)
from health.services import breaker_config_update, breaker_override_delete, breaker_override_set, circuit_reset

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


def _circuit_view(row: CircuitRow, now: datetime) -> CircuitView:
    cooldown_text = cooldown_title = ""
    if row.state is State.OPEN and row.cooldown_until is not None:
        cooldown_text = _until(row.cooldown_until, now)
        cooldown_title = f"Half-open at {_utc(row.cooldown_until)}"
    code = row.last_failure_status
    code_text = "" if code is None else ERROR_LABELS.get(str(code), str(code))
    last_text = last_title = ""
    if row.last_failure_at is not None:
        last_text = ago(row.last_failure_at)
        last_title = _utc(row.last_failure_at)
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
    )


def _table_context() -> dict[str, Any]:
    """The circuit table; reads only the engine (no database query)."""
    now = timezone.now()
    circuits = [_circuit_view(row, now) for row in circuit_list()]
    return {
        "circuits": circuits,
        # Read after the listing, which may be what found Redis unreachable.
        "degraded": circuits_local_only(),
        "open_count": sum(1 for c in circuits if c.row.state is State.OPEN),
        "half_open_count": sum(1 for c in circuits if c.row.state is State.HALF_OPEN),
        "updated_at": now,
        "updated_title": _utc(now),
        "poll_seconds": POLL_SECONDS,
        "index_url": reverse("health:index"),
    }


# ---------- Threshold editor ----------


@dataclass(frozen=True)
class FieldView:
    name: str
    label: str
    help: str
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


def _configure_context(
    *,
    config_form: BreakerConfigForm | None = None,
    override_form: BreakerOverrideForm | None = None,
    config: BreakerConfigValues | None = None,
) -> dict[str, Any]:
    config = config or breaker_config_get()
    current = config.as_dict()
    config_form = config_form or BreakerConfigForm.for_values(config)
    override_form = override_form or BreakerOverrideForm()
    overrides = breaker_override_list()
    chosen = override_form["provider"].value() or "", override_form["model"].value() or ""
    fields = [
        FieldView(name=f, label=FIELD_LABELS[f], help=FIELD_HELP[f], inherited=_show(f, current[f]))
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
    }


def _configure_response(request: HtmxRequest, context: dict[str, Any], *, close_dialog: bool = False) -> HttpResponse:
    template = "health/configure.html"
    if wants_partial(request):
        template += "#configure-body"
    response = render(request, template, {"section": "fallback", "tab": "health", **context})
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
    if wants_partial(request) and request.htmx.target == "circuit-table":
        # The table polls itself: engine only, no configuration or catalog queries.
        return render(request, template + "#circuit-table", _table_context())
    context = {"section": "fallback", "tab": "health", **_table_context(), **_configure_context()}
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
        return render(request, "health/index.html#circuit-table", _table_context())
    return redirect("health:index")


@require_http_methods(["GET", "POST"])
@role_required(Role.ADMIN)
@vary_on_headers("HX-Request")
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
    try:
        after = breaker_config_update(actor=request.user, data=form.config_input())
    except ValidationFailed as exc:
        form.add_service_errors(exc)
        return _configure_response(request, _configure_context(config_form=form, config=before))
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
    try:
        breaker_override_set(actor=request.user, provider=provider, model=model, data=form.override_input())
    except ValidationFailed as exc:
        form.add_service_errors(exc)
        return _configure_response(request, _configure_context(override_form=form))
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
    except ValidationFailed as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"Override for {provider} / {model} removed; the global thresholds apply.")
    if not request.htmx:
        return redirect("health:configure")
    return _configure_response(request, _configure_context())
