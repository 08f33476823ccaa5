"""Request Logs filters from a query string: one parser for the page, the CSV export and the API.

Unlike the lenient list forms elsewhere, a bad value here is an error the user sees (a field error on
the page, a 400 from the API): a filter quietly dropped would show the wrong requests as if they were
the answer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django import forms
from django.utils.dateparse import parse_datetime

from chains.models import MAX_ENTRIES
from core.errors import ValidationFailed
from requestlogs.selectors import (
    STATUS_FILTER_LABELS,
    Cursor,
    LogFilter,
    StatusClass,
    Viewer,
    mark_decode,
    request_log_scope_visible,
)

RANGES: dict[str, tuple[str, timedelta | None]] = {
    "15m": ("Last 15 min", timedelta(minutes=15)),
    "1h": ("Last hour", timedelta(hours=1)),
    "24h": ("Last 24 h", timedelta(hours=24)),
    "7d": ("Last 7 days", timedelta(days=7)),
    "custom": ("Custom…", None),
}
DEFAULT_RANGE = "24h"
CHAIN_STEP_CHOICES = [
    ("", "Any step"),
    ("0", "Primary (0)"),
    *((str(n), f"Step {n}") for n in range(1, MAX_ENTRIES + 1)),
]
PAGE_SIZES = (25, 50, 100)
DEFAULT_PAGE_SIZE = 25
ORDERS = ("newest", "oldest")
TRISTATE = {"yes": True, "no": False}
REQUEST_ID = re.compile(r"^[0-9a-f]{32}$")
NOT_VISIBLE = "No request with this id in the logs you can see."

# Query parameter names, in the order links are written.
FILTER_NAMES = (
    "range",
    "from",
    "to",
    "requested_model",
    "served_model",
    "provider",
    "status",
    "fallback",
    "chain_step",
    "key",
    "team",
    "application",
    "stream",
)


def _parse_moment(value: str) -> datetime | None:
    """An ISO 8601 date-time from 1970 to 9999; without an offset it is UTC (the console shows UTC everywhere)."""
    try:
        moment = parse_datetime(value.strip())
        if moment is None:
            return None
        moment = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    except (ValueError, OverflowError):  # 0001-01-01T00:30+01:00 falls off the calendar
        return None
    return moment if 1970 <= moment.year <= 9999 else None


def normalise_request_id(value: str) -> str:
    """Accept the id as the x-vidai-request-id header shows it, or with a UUID's dashes."""
    return value.strip().replace("-", "").lower()


@dataclass(frozen=True)
class LogParams:
    """Everything a Request Logs URL says: the filters, paging and display state."""

    filters: LogFilter
    query: dict[str, Any]  # the filters as they appear in the URL (only what differs from the defaults)
    range: str
    page_size: int
    newest_first: bool
    cursor: Cursor | None
    follow: bool
    since_id: int | None

    @property
    def filtered(self) -> bool:
        """Anything but the defaults, the time range included."""
        return any(k != "range" for k in self.query) or self.range != DEFAULT_RANGE

    @property
    def narrowing(self) -> int:
        """How many filters besides the time range."""
        return len([k for k in self.query if k not in ("range", "from", "to")])

    def list_query(self, **changes: Any) -> dict[str, Any]:
        """The URL query of the list: filters, page size and order, then `changes` (None drops a key)."""
        out = dict(self.query)
        if self.page_size != DEFAULT_PAGE_SIZE:
            out["page_size"] = self.page_size
        if not self.newest_first:
            out["order"] = "oldest"
        if self.follow:
            out["follow"] = "1"
        out.update(changes)
        return {k: v for k, v in out.items() if v not in (None, "")}


class RequestLogFilterForm(forms.Form):
    """Validates a query string for one viewer: their keys, teams and applications; names as free text.

    Without `page_controls` (the API, the CSV) it leaves out what only the page has: follow, its
    refresh mark and the request-id box.
    """

    def __init__(self, data: Any, *, viewer: Viewer, page_controls: bool = True) -> None:
        super().__init__(data)
        self.viewer = viewer
        f = self.fields
        f["range"] = forms.ChoiceField(
            required=False,
            choices=[(k, label) for k, (label, _) in RANGES.items()],
            error_messages={"invalid_choice": "Unknown time range “%(value)s”: use 15m, 1h, 24h, 7d or custom."},
        )
        f["from"] = forms.CharField(required=False, max_length=64)
        f["to"] = forms.CharField(required=False, max_length=64)
        # Names are matched exactly and never refused: logs keep names the catalog no longer has.
        f["requested_model"] = forms.CharField(required=False, max_length=128)
        f["served_model"] = forms.CharField(required=False, max_length=128)
        f["provider"] = forms.CharField(required=False, max_length=64)
        f["status"] = forms.ChoiceField(
            required=False,
            choices=[("", "Any status"), *((str(k), v) for k, v in STATUS_FILTER_LABELS.items())],
            error_messages={
                "invalid_choice": "Unknown status class “%(value)s”: use 2xx, 4xx, 5xx, client_gone or errors."
            },
        )
        f["fallback"] = forms.ChoiceField(
            required=False,
            choices=[
                ("", "Any"),
                ("yes", "Fallback"),
                ("served", "Fallback, not 5xx"),
                ("no", "No fallback"),
            ],
            error_messages={"invalid_choice": "Fallback is “yes”, “served” or “no” (or empty for any)."},
        )
        f["chain_step"] = forms.TypedChoiceField(
            required=False,
            coerce=int,
            empty_value=None,
            choices=CHAIN_STEP_CHOICES,
            error_messages={
                "invalid_choice": f"Chain step is 0 (the primary) to {MAX_ENTRIES}; “%(value)s” is not one of them."
            },
        )
        for name in ("key", "team", "application"):
            f[name] = forms.CharField(required=False, max_length=20)
        f["stream"] = forms.ChoiceField(
            required=False,
            choices=[("", "Any"), ("yes", "Streaming"), ("no", "Not streaming")],
            error_messages={"invalid_choice": "Stream is “yes” or “no” (or empty for any)."},
        )
        f["page_size"] = forms.TypedChoiceField(
            required=False,
            coerce=int,
            empty_value=DEFAULT_PAGE_SIZE,  # type: ignore[arg-type]  # stubs: str | None; Django takes any value
            choices=[(str(n), str(n)) for n in PAGE_SIZES],
            error_messages={"invalid_choice": "Rows per page is 25, 50 or 100."},
        )
        f["order"] = forms.ChoiceField(
            required=False,
            choices=[(o, o) for o in ORDERS],
            error_messages={"invalid_choice": "Order is “newest” or “oldest”."},
        )
        f["cursor"] = forms.CharField(required=False, max_length=200)
        if page_controls:
            f["request_id"] = forms.CharField(required=False, max_length=64)
            f["follow"] = forms.ChoiceField(
                required=False,
                choices=[("", ""), ("1", "1"), ("0", "0")],
                error_messages={"invalid_choice": "Follow is 1 (on) or 0 (off)."},
            )
            f["since"] = forms.CharField(required=False, max_length=200)

    def _visible_id(self, name: str, noun: str) -> int | None:
        raw = (self.cleaned_data.get(name) or "").strip()
        if not raw:
            return None
        if raw.isascii() and raw.isdigit() and request_log_scope_visible(viewer=self.viewer, kind=name, pk=int(raw)):
            return int(raw)
        # The same words whether it does not exist or belongs to someone else.
        raise forms.ValidationError(f"Unknown {noun} “{raw}”.")

    def clean_key(self) -> int | None:
        return self._visible_id("key", "gateway key")

    def clean_team(self) -> int | None:
        return self._visible_id("team", "team")

    def clean_application(self) -> int | None:
        return self._visible_id("application", "application")

    def clean_since(self) -> int | None:
        value = self.cleaned_data.get("since") or ""
        return mark_decode(value) if value else None  # only highlights rows: a bad one highlights none

    def clean_request_id(self) -> str:
        value = normalise_request_id(self.cleaned_data.get("request_id") or "")
        if value and not REQUEST_ID.match(value):
            raise forms.ValidationError(
                "A request id is 32 hexadecimal characters, as in the x-vidai-request-id response header."
            )
        return value

    def clean_cursor(self) -> Cursor | None:
        value = self.cleaned_data.get("cursor") or ""
        if not value:
            return None
        try:
            return Cursor.decode(value)
        except ValidationFailed as exc:
            raise forms.ValidationError(exc.message) from None

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        assert data is not None  # Form.clean returns cleaned_data
        raw_from, raw_to = (self.data.get("from") or "").strip(), (self.data.get("to") or "").strip()
        range_key = data.get("range") or ("custom" if raw_from or raw_to else DEFAULT_RANGE)
        data["range"] = range_key
        data["from_at"] = data["to_at"] = None
        if range_key != "custom" or "range" in self.errors:
            return data
        example = "Enter a date and time such as 2026-12-01T07:40 (UTC), from 1970 on."
        from_at = _parse_moment(raw_from) if raw_from else None
        to_at = _parse_moment(raw_to) if raw_to else None
        if not raw_from:
            self.add_error("from", "A custom range needs a start (“from”).")
        elif from_at is None:
            self.add_error("from", example)
        if raw_to and to_at is None:
            self.add_error("to", example)
        if from_at and to_at and from_at >= to_at:
            self.add_error("to", "“To” must be later than “from”.")
        data["from_at"], data["to_at"] = from_at, to_at
        return data

    def params(self, *, now: datetime) -> LogParams:
        """The parsed URL; call only when is_valid()."""
        data = self.cleaned_data
        range_key = data["range"]
        delta = RANGES[range_key][1]
        since, until = (now - delta, None) if delta is not None else (data["from_at"], data["to_at"])
        status = data.get("status") or ""
        filters = LogFilter(
            since=since,
            until=until,
            requested_model=(data.get("requested_model") or "").strip(),
            served_model=data.get("served_model") or "",
            provider=data.get("provider") or "",
            status_class=StatusClass(status) if status else None,
            fallback=True if data.get("fallback") == "served" else TRISTATE.get(data.get("fallback") or ""),
            fallback_served=data.get("fallback") == "served",
            chain_step=data.get("chain_step"),
            key_id=data.get("key"),
            team_id=data.get("team"),
            application_id=data.get("application"),
            stream=TRISTATE.get(data.get("stream") or ""),
        )
        query: dict[str, Any] = {}
        if range_key != DEFAULT_RANGE:
            query["range"] = range_key
        if range_key == "custom":
            query["from"] = url_moment(data["from_at"])
            query["to"] = url_moment(data["to_at"]) if data["to_at"] else None
        for name in FILTER_NAMES[3:]:
            value = data.get(name)
            if value not in (None, ""):
                query[name] = value.strip() if isinstance(value, str) else value
        return LogParams(
            filters=filters,
            query={k: v for k, v in query.items() if v not in (None, "")},
            range=range_key,
            page_size=data.get("page_size") or DEFAULT_PAGE_SIZE,
            # Following shows what arrives, so it always reads newest first.
            newest_first=(data.get("order") or "newest") == "newest" or data.get("follow") == "1",
            cursor=data.get("cursor"),
            follow=data.get("follow") == "1",
            since_id=data.get("since"),
        )

    def error_list(self) -> list[tuple[str, str]]:
        """(field label, message) pairs for the error summary, in form order."""
        out: list[tuple[str, str]] = []
        for name, errors in self.errors.items():
            label = LABELS.get(name, name)
            out.extend((label, str(message)) for message in errors)
        return out

    def errors_by_param(self) -> dict[str, list[str]]:
        """API shape: query parameter name → messages."""
        return {name: [str(m) for m in errors] for name, errors in self.errors.items()}


LABELS = {
    "range": "Time range",
    "from": "From",
    "to": "To",
    "requested_model": "Requested model",
    "served_model": "Served model",
    "provider": "Provider",
    "status": "Status",
    "fallback": "Fallback",
    "chain_step": "Chain step",
    "key": "Gateway key",
    "team": "Team",
    "application": "Application",
    "stream": "Stream",
    "request_id": "Request id",
    "page_size": "Rows per page",
    "order": "Order",
    "cursor": "Page",
    "follow": "Follow",
    "since": "Since",
    "__all__": "Filters",
}


def url_moment(moment: datetime | None) -> str:
    """UTC, to the minute when that loses nothing (what a datetime-local input shows)."""
    if moment is None:
        return ""
    moment = moment.astimezone(UTC)
    if moment.second == 0 and moment.microsecond == 0:
        return moment.strftime("%Y-%m-%dT%H:%M")
    return moment.replace(tzinfo=None).isoformat()
