"""The Alerts page (admin only): firing alerts, rules (create, edit, enable, delete) and history; an alert's
detail with its figures and delivery log. Full pages normally, named partials for HTMX."""

from typing import Any

from django.contrib import messages
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django.views.decorators.vary import vary_on_headers

from alerts.forms import RuleForm
from alerts.models import Alert, AlertRule, AlertState, RuleKind
from alerts.selectors import alert_get, alert_list, alert_rule_get, alert_rule_list
from alerts.services import alert_rule_create, alert_rule_delete, alert_rule_set_enabled, alert_rule_update
from core.errors import ConflictError, ValidationFailed
from core.htmx import HtmxRequest, wants_partial
from core.permissions import role_required
from core.roles import Role

HISTORY_ROWS = 50
# The evaluator's figure names, in words (unknown ones are shown as they are).
FIGURE_LABELS = {
    "provider": "Provider",
    "model": "Model",
    "state": "Circuit state",
    "open_since": "Open since",
    "open_minutes": "Open for (min)",
    "consecutive_opens": "Consecutive opens",
    "last_failure_status": "Last failure",
    "threshold_minutes": "Rule: open longer than (min)",
    "source_model": "Source model",
    "requests": "Requests in the window",
    "fallback": "Served by a fallback",
    "fallback_percent": "Fallback share (%)",
    "optimistic": "Every chain entry open",
    "failed": "Failed after the chain",
    "exhausted": "Exhausted requests",
    "window_minutes": "Window (min)",
    "threshold_percent": "Rule: share above (%)",
    "min_requests": "Rule: at least requests",
    "min_count": "Rule: at least exhausted",
}
# What each kind's parameters mean, for the rules table.
KIND_SHORT = {RuleKind.CIRCUIT_OPEN: "Circuit open", RuleKind.DEGRADED: "Degraded", RuleKind.EXHAUSTED: "Exhausted"}


def _get_rule(rule_id: int) -> AlertRule:
    try:
        return alert_rule_get(rule_id=rule_id)
    except AlertRule.DoesNotExist:
        raise Http404("No such alert rule.") from None


def rule_condition(rule: AlertRule) -> str:
    """The rule's condition in words."""
    if rule.kind == RuleKind.CIRCUIT_OPEN:
        target = "/".join(p for p in (rule.provider or "any provider", rule.model or "any model"))
        return f"{target} open longer than {rule.minutes} min"
    source = rule.model or "any source model"
    if rule.kind == RuleKind.DEGRADED:
        return (
            f"{source}: fallback share above {rule.threshold_percent:g}% of at least {rule.min_requests} "
            f"requests over {rule.minutes} min"
        )
    return f"{source}: at least {rule.min_count} exhausted requests over {rule.minutes} min"


def _rule_rows(rules: list[AlertRule]) -> list[dict[str, Any]]:
    return [
        {"rule": r, "condition": rule_condition(r), "kind": KIND_SHORT.get(RuleKind(r.kind), r.kind)} for r in rules
    ]


def _page_context() -> dict[str, Any]:
    firing = list(alert_list(state=AlertState.FIRING)[:200])
    return {
        "section": "alerts",
        "firing": firing,
        "rules": _rule_rows(list(alert_rule_list())),
        "history": list(alert_list(state=AlertState.RESOLVED)[:HISTORY_ROWS]),
        "kind_short": KIND_SHORT,
    }


@require_GET
@role_required(Role.ADMIN)
@vary_on_headers("HX-Request", "HX-Target")
def alert_list_view(request: HtmxRequest) -> HttpResponse:
    template = "alerts/list.html"
    if wants_partial(request) and request.htmx.target in ("alerts-firing", "alert-rules", "alerts-history"):
        template += "#" + request.htmx.target
    return render(request, template, _page_context())


def _rules_response(request: HtmxRequest) -> HttpResponse:
    return render(request, "alerts/list.html#alert-rules", _page_context())


@require_POST
@role_required(Role.ADMIN)
def rule_toggle_view(request: HtmxRequest, rule_id: int) -> HttpResponse:
    rule = _get_rule(rule_id)
    enabled = request.POST.get("enabled") == "1"
    try:
        rule = alert_rule_set_enabled(actor=request.user, rule_id=rule.pk, enabled=enabled)
    except ConflictError as exc:
        messages.error(request, exc.message)
    else:
        verb = "enabled" if rule.enabled else "disabled (its firing alerts resolved)"
        messages.success(request, f"Rule “{rule.name}” {verb}.")
    if request.htmx:
        return _rules_response(request)
    return redirect("alerts:list")


@require_http_methods(["GET", "POST"])
@role_required(Role.ADMIN)
def rule_delete_view(request: HtmxRequest, rule_id: int) -> HttpResponse:
    """GET: the confirm page (without JavaScript; with it, a <dialog> asks). POST: delete."""
    rule = _get_rule(rule_id)
    if request.method == "GET":
        return render(request, "alerts/delete.html", {"section": "alerts", "rule": rule})
    try:
        alert_rule_delete(actor=request.user, rule_id=rule.pk)
    except ConflictError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"Rule “{rule.name}” deleted.")
    if request.htmx:
        return _rules_response(request)
    return redirect("alerts:list")


def _editor(request: HtmxRequest, rule: AlertRule | None) -> HttpResponse:
    template = "alerts/form.html"
    if request.method == "GET":
        form = RuleForm.for_rule(rule) if rule is not None else RuleForm.blank()
    else:
        form = RuleForm(request.POST)
        if form.is_valid():
            try:
                if rule is None:
                    saved = alert_rule_create(actor=request.user, data=form.rule_input())
                else:
                    saved = alert_rule_update(actor=request.user, rule_id=rule.pk, data=form.rule_input())
            except ConflictError as exc:
                form.add_error(None, exc.message)
            except ValidationFailed as exc:
                form.add_service_errors(exc)
            else:
                messages.success(request, f"Rule “{saved.name}” {'created' if rule is None else 'saved'}.")
                if request.htmx:
                    response = HttpResponse(status=204)
                    response["HX-Redirect"] = reverse("alerts:list")
                    return response
                return redirect("alerts:list")
        if wants_partial(request):
            template += "#rule-form"
    context = {
        "section": "alerts",
        "form": form,
        "rule": rule,
        "action": request.path,
        "summary": form.error_summary() if form.is_bound else [],
        "kinds": RuleKind.choices,
    }
    return render(request, template, context)


@require_http_methods(["GET", "POST"])
@role_required(Role.ADMIN)
def rule_create_view(request: HtmxRequest) -> HttpResponse:
    return _editor(request, None)


@require_http_methods(["GET", "POST"])
@role_required(Role.ADMIN)
def rule_edit_view(request: HtmxRequest, rule_id: int) -> HttpResponse:
    return _editor(request, _get_rule(rule_id))


@require_GET
@role_required(Role.ADMIN)
def alert_detail_view(request: HtmxRequest, alert_id: int) -> HttpResponse:
    try:
        alert = alert_get(alert_id=alert_id)
    except Alert.DoesNotExist:
        raise Http404("No such alert.") from None
    figures = [(FIGURE_LABELS.get(str(k), str(k)), v) for k, v in (alert.figures or {}).items()]
    return render(
        request,
        "alerts/detail.html",
        {"section": "alerts", "alert": alert, "figures": figures, "deliveries": list(alert.deliveries.all())},
    )
