"""Provider Health tab of the Fallback page (the breaker fills it in later)."""

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET
from django.views.decorators.vary import vary_on_headers
from django_htmx.middleware import HtmxDetails

from controlplane.permissions import role_required
from controlplane.roles import Role


class HtmxRequest(HttpRequest):
    htmx: HtmxDetails


@require_GET
@role_required(Role.ADMIN)
@vary_on_headers("HX-Request", "HX-Target")
def index(request: HtmxRequest) -> HttpResponse:
    template = "health/index.html"
    if request.htmx and not request.htmx.history_restore_request:
        template += "#fallback-page"
    return render(request, template, {"section": "fallback", "tab": "health"})
