"""Audit Log page: who did what, when, with before/after of every changed field."""

import json
from dataclasses import dataclass
from typing import Any

from django.core.paginator import Paginator
from django.http import HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET
from django.views.decorators.vary import vary_on_headers

from audit.forms import PAGE_SIZES, AuditFilterForm
from audit.models import AuditEvent
from audit.selectors import audit_event_list, audit_filter_options
from core.htmx import HtmxRequest, wants_partial
from core.permissions import role_required
from core.roles import Role
from core.templatetags.console_tags import query

MISSING = object()


@dataclass(frozen=True)
class Change:
    field: str
    before: str | None  # None: the field is absent on that side
    after: str | None


@dataclass(frozen=True)
class AuditRow:
    event: AuditEvent
    changes: list[Change]


def _show(value: Any) -> str:
    """A recorded value as text: chain entries one per line, scopes as "team #3", the rest as JSON."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(v, dict) and "model" in v for v in value):
        return (
            "\n".join(
                f"{i}. {v['model']}{' via ' + str(v['provider']) if v.get('provider') else ''}"
                for i, v in enumerate(value, start=1)
            )
            or "(none)"
        )
    if isinstance(value, dict) and set(value) == {"type", "id"}:
        return str(value["type"]) if value["id"] is None else f"{value['type']} #{value['id']}"
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def _changes(event: AuditEvent) -> list[Change]:
    before = event.before if isinstance(event.before, dict) else {}
    after = event.after if isinstance(event.after, dict) else {}
    fields = list(before) + [k for k in after if k not in before]
    out = []
    for name in fields:
        b = before.get(name, MISSING)
        a = after.get(name, MISSING)
        out.append(Change(name, None if b is MISSING else _show(b), None if a is MISSING else _show(a)))
    return out


@require_GET
@role_required(Role.ADMIN, Role.BI_READ_ONLY)
@vary_on_headers("HX-Request", "HX-Target")
def audit_list_view(request: HtmxRequest) -> HttpResponse:
    params = AuditFilterForm(request.GET).params()
    events = audit_event_list(
        actor=params.actor, action=params.action, object_type=params.object_type, object_id=params.object_id
    )
    paginator = Paginator(events, params.page_size)
    page = paginator.get_page(params.page)
    params = type(params)(**{**params.__dict__, "page": page.number})
    list_url = reverse("audit:list")
    context: dict[str, Any] = {
        "section": "audit",
        "params": params,
        "query": params.as_query(),
        "page_obj": page,
        "page_range": list(paginator.get_elided_page_range(page.number, on_each_side=2, on_ends=1)),
        "rows": [AuditRow(event, _changes(event)) for event in page.object_list],
        "options": audit_filter_options(),
        "page_sizes": PAGE_SIZES,
        "list_url": list_url,
    }
    template = "audit/list.html"
    partial = wants_partial(request)
    if partial:
        template += "#audit-table"
    response = render(request, template, context)
    if partial:
        response["HX-Push-Url"] = list_url + query(context["query"])
    return response
