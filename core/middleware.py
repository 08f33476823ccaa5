"""HTMX glue: Django messages travel in HX-Trigger; login redirects become HX-Redirect."""

import json
from collections.abc import Callable

from django.conf import settings
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import resolve_url


class HtmxMessagesMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if not getattr(request, "htmx", False):
            return response
        # A session that expired mid-page: send the whole window to the login page.
        if response.status_code == 302 and response["Location"].startswith(resolve_url(settings.LOGIN_URL)):
            redirect = HttpResponse(status=204)
            redirect["HX-Redirect"] = response["Location"]
            return redirect
        if response.status_code in (301, 302) or "HX-Redirect" in response or "HX-Refresh" in response:
            return response
        pending = [{"message": str(m), "level": m.level_tag} for m in messages.get_messages(request)]
        if pending:
            triggers = json.loads(response.get("HX-Trigger", "{}") or "{}")
            if not isinstance(triggers, dict):
                triggers = {str(triggers): None}
            triggers["messages"] = pending
            response["HX-Trigger"] = json.dumps(triggers)
        return response


class ConcurrentAbortMiddleware:
    """A console request whose transaction the database aborted for a concurrent one (two writers that locked the
    same rows in opposite orders): a 409 with a message, not a 500. Nothing of it was saved. htmx shows a 409 as
    a toast; a form posted without JavaScript gets the message on a plain page."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        from core.errors import CONCURRENT_ABORT_MESSAGE, concurrent_abort

        if not concurrent_abort(exception):
            return None
        return HttpResponse(CONCURRENT_ABORT_MESSAGE, status=409, content_type="text/plain; charset=utf-8")
