"""Request Logs page: filters in the URL, keyset pages, live tail, the detail drawer and the CSV export.

HTMX regions (element id = partial name): `log-page` (filters + table, swapped when a filter changes and by
the pager), `log-table` (swapped by the follow poll), `log-drawer-body` (the detail drawer).
"""

from __future__ import annotations

import csv
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIRequest
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET
from django.views.decorators.vary import vary_on_headers
from django_htmx.http import HttpResponseClientRedirect

from core.htmx import HtmxRequest, htmx_target
from core.permissions import role_required
from core.roles import Role, has_role
from core.templatetags.console_tags import query
from health.selectors import circuit_anchor
from requestlogs.forms import (
    DEFAULT_RANGE,
    NOT_VISIBLE,
    RANGES,
    REQUEST_ID,
    LogParams,
    RequestLogFilterForm,
    normalise_request_id,
    url_moment,
)
from requestlogs.models import RequestLog
from requestlogs.selectors import (
    Attempt,
    CappedCount,
    FilterOptions,
    KeyLabel,
    Labels,
    LogPage,
    Viewer,
    log_attempts,
    mark_encode,
    request_log_any,
    request_log_batches,
    request_log_count,
    request_log_filter_options,
    request_log_get,
    request_log_labels,
    request_log_page,
    request_log_pipeline_losses,
    status_class_of,
    viewer_for,
)

READERS = (Role.ADMIN, Role.BI_READ_ONLY, Role.USER)
# Seconds between refreshes of the list while "follow" is on (browser tests shorten it).
FOLLOW_SECONDS = 2
COUNT_CAP = 1000
EXPORT_CAP = 100_000


def _viewer(request: HttpRequest) -> Viewer:
    viewer = viewer_for(request.user)
    if viewer is None:  # role_required let the request through, so this cannot happen
        raise Http404
    return viewer


# ---------- Presentation ----------

STATUS_CSS = {"2xx": "ok", "4xx": "client", "5xx": "server", "client_gone": "gone"}


def _status_css(status: int) -> str:
    cls = status_class_of(status)
    return STATUS_CSS.get(str(cls), "other") if cls else "other"


def fallback_badge(log: RequestLog) -> str:
    """ "chain step 2 · from openai"."""
    if not log.fallback_triggered:
        return ""
    origin = f" · from {log.fallback_from_provider}" if log.fallback_from_provider else ""
    return f"chain step {log.chain_step}{origin}"


@dataclass(frozen=True)
class LogRow:
    log: RequestLog
    key: KeyLabel | None
    status_css: str
    fallback_badge: str
    is_new: bool


def _rows(page: LogPage, labels: Labels, *, since_id: int | None) -> list[LogRow]:
    return [
        LogRow(
            log=log,
            key=labels.keys.get(log.key_id) if log.key_id is not None else None,
            status_css=_status_css(log.status),
            fallback_badge=fallback_badge(log),
            is_new=since_id is not None and log.pk > since_id,
        )
        for log in page.rows
    ]


# Plain words for what ended an attempt (the gateway's `error`); an unknown kind is shown as it came.
ERROR_WORDS = {
    "timeout": "timeout",
    "connect_timeout": "connect timeout",
    "first_token_timeout": "first-token timeout",
    "idle_timeout": "idle timeout (the stream stalled)",
    "deadline": "request deadline reached",
    "error_event": "error event in the stream",
    "stream_incomplete": "stream ended before its end marker",
    "connection_error": "connection error",
    "cancelled": "cancelled",
    "credential_unavailable": "credential unavailable",
    "upstream_status": "",  # the status code says it
}
CLASS_WORDS = {
    "rate_limit": "rate limit",
    "overloaded": "overloaded",
    "server_error": "server error",
    "timeout": "timeout",
    "connection": "connection",
    "context_length": "context too long",
    "content_filter": "content filter",
    "invalid_request": "invalid request",
    "auth": "authentication refused",
}
GIVE_UP_WORDS = {
    "disabled": "resilience is off",
    "not_retryable": "not retryable",
    "max_attempts": "attempt limit reached",
    "deadline": "request deadline reached",
    "exhausted": "no entry left to try",
    "no_continuation": "no entry could continue the stream",
}
STREAM_CUT = "stream cut after the first token"
WORD_CAP = 64


def _words(table: dict[str, str], value: str) -> str:
    return table[value] if value in table else value[:WORD_CAP]


def _seconds_text(seconds: float) -> str:
    return f"{round(seconds, 1):g} s"


def attempt_cause(attempt: Attempt) -> str:
    """Why the attempt ended, in plain words ("rate limit · Retry-After 1 s"); "" when it answered."""
    cut = attempt.next_step in ("continue", "give_up:no_continuation")
    parts = [STREAM_CUT] if cut else []
    error = _words(ERROR_WORDS, attempt.error)
    if attempt.status is None and attempt.error == "upstream_status":
        error = "error status"
    if error and not (cut and attempt.error == "stream_incomplete"):
        parts.append(error)
    failure = _words(CLASS_WORDS, attempt.failure_class)
    if failure and failure not in " ".join(parts):
        parts.append(failure)
    if attempt.retry_after is not None:
        parts.append(f"Retry-After {_seconds_text(attempt.retry_after)}")
    return " · ".join(parts)


def attempt_follow(attempt: Attempt, following: Attempt | None) -> str:
    """What the request did after this attempt failed ("moved on to the next entry"); "" when unknown."""
    step = attempt.next_step
    if step == "retry":
        return "retried"
    if step == "move_on":
        return "moved on to the next entry"
    if step == "continue":
        return f"continued on {following.model}" if following and following.model else "continued on the next entry"
    if step.startswith("give_up:"):
        reason = step.removeprefix("give_up:")
        return f"returned to the client ({_words(GIVE_UP_WORDS, reason)})" if reason else "returned to the client"
    return step


def _tokens(value: int | None) -> str:
    return f"{value:,}" if value is not None else "?"


def attempt_extras(attempt: Attempt) -> list[str]:
    """The attempt's side notes: dropped events, its own token usage."""
    extras = []
    if (dropped := attempt.malformed_events) is not None and dropped > 0:
        extras.append(f"{dropped:,} malformed event{'s' if dropped != 1 else ''} dropped")
    if (usage := attempt.usage) is not None:
        extras.append(f"this part: {_tokens(usage.prompt_tokens)} in / {_tokens(usage.completion_tokens)} out tokens")
    return extras


@dataclass(frozen=True)
class AttemptRow:
    number: int
    attempt: Attempt
    outcome_css: str
    returned: bool  # the attempt whose answer went to the client (the last one)
    served: bool  # returned, and a success
    cause: str = ""  # why it ended, in plain words
    follow: str = ""  # what the request did next
    extras: tuple[str, ...] = ()


def _attempt_rows(attempts: list[Attempt]) -> list[AttemptRow]:
    rows = []
    for number, attempt in enumerate(attempts, start=1):
        returned = number == len(attempts)
        status = attempt.status
        served = returned and status is not None and 200 <= status < 300
        rows.append(
            AttemptRow(
                number=number,
                attempt=attempt,
                outcome_css=_status_css(status) if status is not None else "server",
                returned=returned,
                served=served,
                cause="" if served else attempt_cause(attempt),
                follow=attempt_follow(attempt, attempts[number] if not returned else None),
                extras=tuple(attempt_extras(attempt)),
            )
        )
    return rows


@dataclass(frozen=True)
class LogDetail:
    log: RequestLog
    key: KeyLabel | None
    user: str
    team: str
    application: str
    agent: str
    status_css: str
    fallback_badge: str
    chain_name: str
    chain_url: str  # "" when the viewer may not edit chains or the chain is gone
    attempts: list[AttemptRow]
    continued: bool  # an attempt continued a stream another broke: the answer has several parts
    circuit_logs_url: str
    circuit_health_url: str  # "" when the viewer may not open Provider Health


def _named(ids: dict[int, str], pk: int | None, noun: str) -> str:
    if pk is None:
        return ""
    return ids.get(pk, f"{noun} #{pk} (deleted)")


def _detail(log: RequestLog, labels: Labels, *, is_admin: bool) -> LogDetail:
    chain_name = chain_url = ""
    if log.chain_id is not None:
        chain_name = labels.chains.get(log.chain_id, "")
        if chain_name and is_admin:
            chain_url = reverse("chains:edit", args=[log.chain_id])
        chain_name = chain_name or f"chain #{log.chain_id} (deleted)"
    circuit_logs_url = circuit_health_url = ""
    if log.served_provider and log.served_model:
        # The circuit's requests in the two hours around this one (whole minutes, as the range inputs show).
        start = (log.created_at - timedelta(hours=1)).replace(second=0, microsecond=0)
        end = (log.created_at + timedelta(hours=1, minutes=1)).replace(second=0, microsecond=0)
        circuit_logs_url = reverse("requestlogs:list") + query(
            {
                "provider": log.served_provider,
                "served_model": log.served_model,
                "from": url_moment(start),
                "to": url_moment(end),
            }
        )
        if is_admin:
            circuit_health_url = (
                reverse("health:index") + "#circuit-row-" + circuit_anchor(log.served_provider, log.served_model)
            )
    rows = _attempt_rows(log_attempts(log))
    return LogDetail(
        log=log,
        key=labels.keys.get(log.key_id) if log.key_id is not None else None,
        user=_named(labels.users, log.user_id, "user"),
        team=_named(labels.teams, log.team_id, "team"),
        application=_named(labels.applications, log.application_id, "application"),
        agent=_named(labels.agents, log.agent_id, "agent"),
        status_css=_status_css(log.status),
        fallback_badge=fallback_badge(log),
        chain_name=chain_name,
        chain_url=chain_url,
        attempts=rows,
        continued=any(row.attempt.continuation for row in rows),
        circuit_logs_url=circuit_logs_url,
        circuit_health_url=circuit_health_url,
    )


def _range_text(params: LogParams) -> str:
    if params.range != "custom":
        return "in the " + RANGES[params.range][0].lower()
    since, until = params.filters.since, params.filters.until
    start = since.strftime("%Y-%m-%d %H:%M") if since else ""
    end = until.strftime("%Y-%m-%d %H:%M") if until else "now"
    return f"from {start} to {end} UTC"


# ---------- List ----------


def _name_notices(params: LogParams, options: FilterOptions) -> list[str]:
    """A word when a model or provider name is not in the catalog: likely a typo, or a name from before."""
    known = {
        "requested_model": set(options.requested_suggestions),
        "served_model": set(options.models),
        "provider": set(options.providers),
    }
    nouns = {"requested_model": "model or alias", "served_model": "model", "provider": "provider"}
    return [
        f"“{params.query[name]}” is not a {nouns[name]} in the catalog now; "
        "only requests that name it exactly are shown."
        for name in known
        if name in params.query and params.query[name] not in known[name]
    ]


def _list_context(
    request: HtmxRequest, viewer: Viewer, *, with_form: bool
) -> tuple[dict[str, Any], HttpResponse | None]:
    """Everything the list renders. `with_form`: the filter controls are rendered too (so their choices are loaded)."""
    form = RequestLogFilterForm(request.GET, viewer=viewer)
    options = request_log_filter_options(viewer=viewer) if with_form else None
    list_url = reverse("requestlogs:list")
    context: dict[str, Any] = {
        "section": "request_logs",
        "form": form,
        "options": options,
        "list_url": list_url,
        "ranges": [(k, label) for k, (label, _) in RANGES.items()],
        "follow_seconds": FOLLOW_SECONDS,
        "updated_at": timezone.now(),
        "viewer": viewer,
        # Admins run the pipeline: they are told when records never reached this page.
        "losses": request_log_pipeline_losses() if with_form and has_role(request.user, Role.ADMIN) else None,
    }
    if options is not None:
        context["filter_choices"] = {
            "key": [("", "Any key"), *((str(pk), label) for pk, label in options.keys)],
            "team": [("", "Any team"), *((str(pk), name) for pk, name in options.teams)],
            "application": [("", "Any application"), *((str(pk), name) for pk, name in options.applications)],
        }
    if form.is_valid() and (request_id := form.cleaned_data["request_id"]):
        if request_log_get(viewer=viewer, request_id=request_id) is not None:
            url = reverse("requestlogs:detail", args=[request_id])
            return context, HttpResponseClientRedirect(url) if request.htmx else redirect(url)
        form.add_error("request_id", NOT_VISIBLE)
    if not form.is_valid():
        context["errors"] = form.error_list()
        custom = request.GET.get("from") or request.GET.get("to")  # as the form reads them
        raw_range = request.GET.get("range") or ("custom" if custom else DEFAULT_RANGE)
        following = request.GET.get("follow") == "1"
        context.update(
            range_value=raw_range,
            from_value=request.GET.get("from", ""),
            to_value=request.GET.get("to", ""),
            # The page's state stays in the form, so the next Apply keeps it.
            oldest_first=request.GET.get("order") == "oldest" and not following,
            following=following,
        )
        return context, None
    params = form.params(now=context["updated_at"])
    cursor = None if params.follow else params.cursor
    page = request_log_page(
        viewer=viewer,
        filters=params.filters,
        page_size=params.page_size,
        newest_first=params.newest_first,
        cursor=cursor,
    )
    labels = request_log_labels(page.rows, full=False)
    count: CappedCount | None = None
    if page.rows or page.prev_cursor is not None:  # a page past the end still counts what the filters match
        count = request_log_count(viewer=viewer, filters=params.filters, cap=COUNT_CAP)
    # Only an empty page asks whether there is anything at all (an index-only probe), for the empty state.
    anything = bool(page.rows) or request_log_any(viewer=viewer)
    newest_shown = max((row.pk for row in page.rows), default=params.since_id or 0)
    # The address names the page shown: no cursor once paging back has reached the first page.
    shown_cursor = cursor if page.prev_cursor is not None else None
    context.update(
        {
            "params": params,
            "page": page,
            "rows": _rows(page, labels, since_id=params.since_id),
            "count": count,
            "anything": anything,
            "notices": _name_notices(params, options) if options is not None else [],
            "range_text": _range_text(params),
            "active_filters": params.narrowing + (params.range != DEFAULT_RANGE),
            "range_value": params.range,
            "oldest_first": not params.newest_first,
            "following": params.follow,
            "from_value": params.query.get("from", ""),
            "to_value": params.query.get("to", ""),
            # The cursor as it came (a fresh token for the same place would change the address for nothing).
            "page_query": params.list_query(cursor=request.GET.get("cursor") if shown_cursor else None),
            "next_query": params.list_query(cursor=page.next_cursor.encode(), follow=None)
            if page.next_cursor
            else None,
            "prev_query": params.list_query(cursor=page.prev_cursor.encode(), follow=None)
            if page.prev_cursor
            else None,
            "first_query": params.list_query(follow=None),
            "order_query": params.list_query(order=None if not params.newest_first else "oldest", follow=None),
            "poll_query": params.list_query(since=mark_encode(newest_shown)),
        }
    )
    return context, None


@require_GET
@role_required(*READERS)
@vary_on_headers("HX-Request", "HX-Target")
def request_log_list_view(request: HtmxRequest) -> HttpResponse:
    viewer = _viewer(request)
    target = htmx_target(request)
    if target not in ("", "log-table", "log-page"):
        target = "log-page"
    context, jump = _list_context(request, viewer, with_form=target != "log-table")
    if jump is not None:
        return jump
    if target == "log-table" and "errors" in context:
        # The follow poll's filters stopped being valid (a key was deleted, say): show the whole region,
        # with the summary and the fields, instead of a table that only says "fix the filters above".
        context, _ = _list_context(request, viewer, with_form=True)
        response = render(request, "requestlogs/list.html#log-page", context)
        response["HX-Retarget"] = "#log-page"
        response["HX-Reswap"] = "outerHTML"
        return response
    template = "requestlogs/list.html" + (f"#{target}" if target else "")
    response = render(request, template, context)
    # Filter changes and paging update the address bar; the follow poll (triggered by the table) does not.
    if target and request.htmx.trigger != "log-table":
        if "page_query" in context:
            response["HX-Push-Url"] = context["list_url"] + query(context["page_query"])
        else:
            response["HX-Push-Url"] = request.get_full_path()
    return response


# ---------- Detail ----------


@require_GET
@role_required(*READERS)
@vary_on_headers("HX-Request", "HX-Target")
def request_log_detail_view(request: HtmxRequest, request_id: str) -> HttpResponse:
    viewer = _viewer(request)
    request_id = normalise_request_id(request_id)
    log = request_log_get(viewer=viewer, request_id=request_id) if REQUEST_ID.match(request_id) else None
    if log is None:
        raise Http404(NOT_VISIBLE)
    detail = _detail(log, request_log_labels([log]), is_admin=has_role(request.user, Role.ADMIN))
    context = {"section": "request_logs", "detail": detail, "list_url": reverse("requestlogs:list")}
    template = "requestlogs/detail.html"
    if htmx_target(request) == "log-drawer-body":
        template += "#log-detail"
    return render(request, template, context)


# ---------- CSV export ----------

CSV_COLUMNS = (
    "request_id",
    "created_at",
    "key_id",
    "key_name",
    "key_prefix",
    "requested_model",
    "routed_model",
    "served_provider",
    "served_model",
    "status",
    "error_kind",
    "stream",
    "latency_ms",
    "ttfb_ms",
    "tokens_in",
    "tokens_out",
    "cost_usd",
    "fallback_triggered",
    "chain_step",
    "chain_id",
    "fallback_from_provider",
    "fallback_original_model",
    "attempts",
    "user_id",
    "team_id",
    "application_id",
    "agent_id",
)


class _Line:
    """csv.writer target that hands back what was written."""

    def write(self, value: str) -> str:
        return value


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat().replace("+00:00", "Z")
    if isinstance(value, Decimal):
        return f"{value:f}"
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        # A spreadsheet would run this as a formula (requested_model comes from the client).
        return "'" + value
    return value


def _csv_attempt(a: Attempt) -> str:
    """ "openai/gpt-4o 429 rate_limit 310ms retry": the call, its failure class and what followed, if recorded."""
    outcome = str(a.status) if a.status is not None else a.error
    failure = f" {a.failure_class}" if a.failure_class else ""
    follow = f" {a.next_step}" if a.next_step else ""
    return f"{a.provider}/{a.model} {outcome}{failure} {a.duration_ms or 0:.0f}ms{follow}"


def _csv_row(log: RequestLog, keys: dict[int, KeyLabel]) -> list[Any]:
    key = keys.get(log.key_id) if log.key_id is not None else None
    attempts = "; ".join(_csv_attempt(a) for a in log_attempts(log))
    values = {
        "key_name": key.name if key else "",
        "key_prefix": key.prefix if key else "",
        "attempts": attempts,
    }
    return [_cell(values[c] if c in values else getattr(log, c)) for c in CSV_COLUMNS]


def _csv_chunks(viewer: Viewer, params: LogParams) -> Iterator[str]:
    """The header and each batch as one chunk: the first chunk waits for the first query, so its timing is honest."""
    writer = csv.writer(_Line())
    header = writer.writerow(CSV_COLUMNS)
    for batch in request_log_batches(
        viewer=viewer, filters=params.filters, limit=EXPORT_CAP, newest_first=params.newest_first
    ):
        keys = request_log_labels(batch, full=False).keys
        chunk = "".join(writer.writerow(_csv_row(log, keys)) for log in batch)
        yield header + chunk
        header = ""
    if header:
        yield header


def _next_chunk(chunks: Iterator[str]) -> str | None:
    return next(chunks, None)  # None: the export is complete (a chunk is a str)


async def _csv_chunks_async(viewer: Viewer, params: LogParams) -> AsyncIterator[str]:
    # Under ASGI Django would buffer a sync iterator whole; each batch is read in the sync thread instead.
    chunks = _csv_chunks(viewer, params)
    while True:
        chunk = await sync_to_async(_next_chunk, thread_sensitive=True)(chunks)
        if chunk is None:
            return
        yield chunk


@require_GET
@role_required(*READERS)
def request_log_export_view(request: HtmxRequest) -> HttpResponse | StreamingHttpResponse:
    viewer = _viewer(request)
    form = RequestLogFilterForm(request.GET, viewer=viewer, page_controls=False)
    if not form.is_valid():
        lines = "\n".join(f"{label}: {message}" for label, message in form.error_list())
        return HttpResponse(f"The filters are not valid:\n{lines}\n", status=400, content_type="text/plain")
    now = timezone.now()
    params = form.params(now=now)
    stamp = now.strftime("%Y%m%dT%H%MZ")
    content = _csv_chunks_async(viewer, params) if isinstance(request, ASGIRequest) else _csv_chunks(viewer, params)
    response = StreamingHttpResponse(content, content_type="text/csv; charset=utf-8")
    # The cap is in the file name: a reader of the file knows it may stop there.
    response["Content-Disposition"] = f'attachment; filename="request-logs-{stamp}-first-{EXPORT_CAP}-rows.csv"'
    response["X-Row-Cap"] = str(EXPORT_CAP)
    return response
