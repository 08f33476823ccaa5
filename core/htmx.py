"""HTMX requests of the console: which region a request asks for, shared by every app's views.

One URL renders the full page normally and a named partial for an HTMX request; a history restore
after a cache miss (HX-History-Restore-Request) needs the whole page, HX-Request or not.
"""

from urllib.parse import urlsplit

from django.core.exceptions import TooManyFieldsSent
from django.http import HttpRequest, QueryDict
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


def current_url_query(request: HtmxRequest) -> QueryDict:
    """The query of the page an HTMX request came from (HX-Current-URL), empty when there is none or the header
    is not a URL: the header is the client's, and a bad one must not fail a change already made."""
    try:
        return QueryDict(urlsplit(request.htmx.current_url or "").query)
    except (ValueError, TooManyFieldsSent):  # more parameters than DATA_UPLOAD_MAX_NUMBER_FIELDS
        return QueryDict()


def current_url_path(request: HtmxRequest) -> str:
    """The path of the page an HTMX request came from ("" when there is none or the header is not a URL)."""
    try:
        return urlsplit(request.htmx.current_url or "").path
    except ValueError:
        return ""
