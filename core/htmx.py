"""HTMX requests of the console: which region a request asks for, shared by every app's views.

One URL renders the full page normally and a named partial for an HTMX request; a history restore
after a cache miss (HX-History-Restore-Request) needs the whole page, HX-Request or not.
"""

from django.http import HttpRequest
from django_htmx.middleware import HtmxDetails


class HtmxRequest(HttpRequest):
    """A request that went through django-htmx's middleware (for type hints)."""

    htmx: HtmxDetails


def wants_partial(request: HtmxRequest) -> bool:
    """True when the response may be a partial: an HTMX request that is not a history restore."""
    return bool(request.htmx) and not request.htmx.history_restore_request


def htmx_target(request: HtmxRequest) -> str:
    """The HTMX region asked for (HX-Target), or "" for a full page."""
    if not wants_partial(request):
        return ""
    return request.htmx.target or ""
