"""Reads of request logs: who may see which rows, filters, keyset pages, capped counts, export batches.

Every query goes through `_visible()`, so a row outside the viewer's reach is never read, counted or
exported. Pages are keyset pages on (created_at, id), never OFFSET: a page costs one index range scan
whatever its depth (see the indexes in `requestlogs.models`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

import redis
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser
from django.db.models import F, Q, QuerySet
from django.db.models.fields.tuple_lookups import Tuple, TupleGreaterThan, TupleLessThan

from catalog.models import Agent, ApiKey, Application, LlmModel, Provider, Team
from chains.models import FallbackChain
from core.errors import ValidationFailed
from core.roles import Role, has_role
from requestlogs.models import RequestLog
from requestlogs.stream import StreamKeys
from requestlogs.tokens import seal, unseal
from routing.models import Alias

CLIENT_GONE = 499  # the gateway's status for a client that disconnected before the answer


class StatusClass(StrEnum):
    OK = "2xx"
    CLIENT_ERROR = "4xx"
    SERVER_ERROR = "5xx"
    CLIENT_GONE = "client_gone"
    # A filter, not a class of one answer: every status but 2xx and 3xx, so 4xx, 499, 5xx and the rare status
    # outside 100-599 (what the Dashboard's error chart counts, and links here for).
    ANY_ERROR = "errors"


STATUS_CLASS_LABELS = {
    StatusClass.OK: "2xx",
    StatusClass.CLIENT_ERROR: "4xx",
    StatusClass.SERVER_ERROR: "5xx",
    StatusClass.CLIENT_GONE: "Client gone (499)",
}
STATUS_FILTER_LABELS = {**STATUS_CLASS_LABELS, StatusClass.ANY_ERROR: "Any error (not 2xx or 3xx)"}


def status_class_of(status: int) -> StatusClass | None:
    if status == CLIENT_GONE:
        return StatusClass.CLIENT_GONE
    return {2: StatusClass.OK, 4: StatusClass.CLIENT_ERROR, 5: StatusClass.SERVER_ERROR}.get(status // 100)


# ---------- Who sees what ----------


@dataclass(frozen=True)
class Viewer:
    """What one console user may read: every row (admin, bi_read_only) or their own keys' rows (user)."""

    sees_all: bool
    user_id: int | None = None
    key_ids: tuple[int, ...] = ()


def viewer_for(user: AbstractBaseUser | AnonymousUser) -> Viewer | None:
    """None for a user with no role that may read request logs."""
    if has_role(user, Role.ADMIN, Role.BI_READ_ONLY):
        return Viewer(sees_all=True)
    if has_role(user, Role.USER):
        assert user.pk is not None  # a role means a signed-in user, stored
        keys = tuple(ApiKey.objects.filter(user_id=user.pk).order_by("id").values_list("id", flat=True))
        return Viewer(sees_all=False, user_id=user.pk, key_ids=keys)
    return None


def _visible(viewer: Viewer) -> QuerySet[RequestLog]:
    qs = RequestLog.objects.all()
    if viewer.sees_all:
        return qs
    if not viewer.key_ids:
        return qs.none()
    # Made by this user AND with a key this user owns: a key handed over later does not reveal its past.
    return qs.filter(user_id=viewer.user_id, key_id__in=viewer.key_ids)


# ---------- Filters ----------


@dataclass(frozen=True)
class LogFilter:
    """Validated filters; None / "" means "any". `since` <= created_at < `until`."""

    since: datetime | None = None
    until: datetime | None = None
    requested_model: str = ""
    served_model: str = ""
    provider: str = ""
    status_class: StatusClass | None = None
    fallback: bool | None = None
    # With fallback=True: only the requests a chain entry answered below 500, what the Dashboard counts as
    # "served by a fallback" (a chain entry's 5xx is counted as failed there).
    fallback_served: bool = False
    chain_step: int | None = None
    key_id: int | None = None
    team_id: int | None = None
    application_id: int | None = None
    stream: bool | None = None


def _status_q(status_class: StatusClass) -> Q:
    # Written as ranges the partial index on status >= 400 is proven to cover (4xx, 5xx, 499).
    if status_class is StatusClass.OK:
        return Q(status__gte=200, status__lt=300)
    if status_class is StatusClass.CLIENT_ERROR:
        return Q(status__gte=400, status__lt=CLIENT_GONE)
    if status_class is StatusClass.SERVER_ERROR:
        return Q(status__gte=500, status__lt=600)
    if status_class is StatusClass.ANY_ERROR:
        return Q(status__gte=400) | Q(status__lt=200)
    return Q(status=CLIENT_GONE)


def _filtered(viewer: Viewer, filters: LogFilter) -> QuerySet[RequestLog]:
    qs = _visible(viewer)
    f = filters
    if f.since is not None:
        qs = qs.filter(created_at__gte=f.since)
    if f.until is not None:
        qs = qs.filter(created_at__lt=f.until)
    exact = {
        "requested_model": f.requested_model or None,
        "served_model": f.served_model or None,
        "served_provider": f.provider or None,
        "fallback_triggered": f.fallback,
        "chain_step": f.chain_step,
        "key_id": f.key_id,
        "team_id": f.team_id,
        "application_id": f.application_id,
        "stream": f.stream,
    }
    qs = qs.filter(**{name: value for name, value in exact.items() if value is not None})
    if f.status_class is not None:
        qs = qs.filter(_status_q(f.status_class))
    if f.fallback and f.fallback_served:
        qs = qs.filter(status__lt=500)
    return qs


# ---------- Keyset cursors ----------


class Direction(StrEnum):
    NEXT = "n"  # the rows after this one in display order (older when newest first)
    PREV = "p"  # the rows before it


CURSOR_INVALID = "This paging link is invalid or was altered; start again from the first page."


@dataclass(frozen=True)
class Cursor:
    """A position in (created_at, id) order and which way to read from it, carried in URLs as a sealed token."""

    direction: Direction
    created_at: datetime
    id: int

    @classmethod
    def at(cls, direction: Direction, row: RequestLog) -> Cursor:
        return cls(direction, row.created_at, row.pk)

    def encode(self) -> str:
        micros = round(self.created_at.timestamp() * 1_000_000)
        return seal(f"{self.direction}{micros}.{self.id}", purpose="cursor")

    @classmethod
    def decode(cls, value: str) -> Cursor:
        """The cursor, or ValidationFailed for one that is malformed or was altered."""
        raw = unseal(value, purpose="cursor")
        try:
            if raw is None:
                raise ValueError(value)
            direction, (micros, row_id) = Direction(raw[0]), raw[1:].split(".")
            moment = datetime.fromtimestamp(int(micros) / 1_000_000, tz=UTC)
            return cls(direction, moment, int(row_id))
        except (ValueError, IndexError, OverflowError, OSError):
            raise ValidationFailed(CURSOR_INVALID, errors={"cursor": [CURSOR_INVALID]}) from None


def mark_encode(row_id: int) -> str:
    """The follow poll's "newest row shown so far", sealed."""
    return seal(str(row_id), purpose="mark")


def mark_decode(value: str) -> int | None:
    raw = unseal(value, purpose="mark")
    return int(raw) if raw is not None and raw.isdigit() else None


@dataclass(frozen=True)
class LogPage:
    rows: list[RequestLog]
    next_cursor: Cursor | None  # None: this is the last page
    prev_cursor: Cursor | None  # None: this is the first page


def _ordered(qs: QuerySet[RequestLog], *, descending: bool) -> QuerySet[RequestLog]:
    return qs.order_by("-created_at", "-id") if descending else qs.order_by("created_at", "id")


def _beyond(cursor: Cursor, *, descending: bool) -> TupleLessThan | TupleGreaterThan:
    # A row comparison, (created_at, id) < (c, i), so the (created_at, id) indexes serve it as one range.
    lookup = TupleLessThan if descending else TupleGreaterThan
    return lookup(Tuple(F("created_at"), F("id")), (cursor.created_at, cursor.id))


LIST_FIELDS_DEFERRED = ("attempts",)  # the list never shows attempts; they are the widest column


def request_log_page(
    *,
    viewer: Viewer,
    filters: LogFilter,
    page_size: int,
    newest_first: bool = True,
    cursor: Cursor | None = None,
    with_attempts: bool = False,
) -> LogPage:
    """One keyset page in display order (newest first by default) and the cursors of its neighbours.

    A "previous" cursor that finds less than a full page (rows were added, or the link is old) returns
    the first page instead, so paging back always ends on a full first page.
    """
    qs = _filtered(viewer, filters)
    if not with_attempts:
        qs = qs.defer(*LIST_FIELDS_DEFERRED)
    if cursor is not None and cursor.direction is Direction.PREV:
        backwards = not newest_first
        found = list(_ordered(qs.filter(_beyond(cursor, descending=backwards)), descending=backwards)[: page_size + 1])
        if len(found) > page_size:
            rows = found[:page_size][::-1]
            return LogPage(rows, Cursor.at(Direction.NEXT, rows[-1]), Cursor.at(Direction.PREV, rows[0]))
        cursor = None  # reached the start: show the first page
    if cursor is None:
        found = list(_ordered(qs, descending=newest_first)[: page_size + 1])
        has_prev = False
    else:
        found = list(
            _ordered(qs.filter(_beyond(cursor, descending=newest_first)), descending=newest_first)[: page_size + 1]
        )
        has_prev = True
    rows = found[:page_size]
    next_cursor = Cursor.at(Direction.NEXT, rows[-1]) if len(found) > page_size else None
    prev_cursor = None
    if has_prev and cursor is not None:
        # An empty page past the end (the range moved on, retention deleted rows) still leads back.
        prev_cursor = (
            Cursor.at(Direction.PREV, rows[0]) if rows else Cursor(Direction.PREV, cursor.created_at, cursor.id)
        )
    return LogPage(rows, next_cursor, prev_cursor)


@dataclass(frozen=True)
class CappedCount:
    value: int
    capped: bool  # True: there are more than `value` rows


def request_log_count(*, viewer: Viewer, filters: LogFilter, cap: int = 1000) -> CappedCount:
    """How many rows match, counting at most `cap` + 1: bounded work, never a COUNT(*) of the whole table."""
    counted = _filtered(viewer, filters).order_by()[: cap + 1].count()
    return CappedCount(min(counted, cap), counted > cap)


def request_log_any(*, viewer: Viewer) -> bool:
    """Whether the viewer can see any row at all (the empty state's "no requests yet")."""
    return _visible(viewer).exists()


def request_log_get(*, viewer: Viewer, request_id: str) -> RequestLog | None:
    """The row with this request id if the viewer may see it; None otherwise (missing and foreign look alike)."""
    return _visible(viewer).filter(request_id=request_id).first()


def request_log_batches(
    *,
    viewer: Viewer,
    filters: LogFilter,
    limit: int,
    batch_size: int = 2000,
    first_batch_size: int = 200,
    newest_first: bool = True,
) -> Iterator[list[RequestLog]]:
    """Up to `limit` rows in display order, in keyset batches: constant memory and no long-held cursor.

    The first batch is small, so a download starts at once; the later ones are large, so it goes fast.
    """
    cursor: Cursor | None = None
    left = limit
    size = first_batch_size
    while left > 0:
        page = request_log_page(
            viewer=viewer,
            filters=filters,
            page_size=min(size, left),
            newest_first=newest_first,
            cursor=cursor,
            with_attempts=True,
        )
        if not page.rows:
            return
        yield page.rows
        left -= len(page.rows)
        if page.next_cursor is None:
            return
        cursor, size = page.next_cursor, batch_size


# ---------- Attempts ----------


TEXT_CAP = 64  # an unknown "next" or "class" is shown as the gateway wrote it, cut to this many characters


@dataclass(frozen=True)
class PartUsage:
    """One attempt's own token usage (a continued stream's request tokens are the sum of its parts)."""

    prompt_tokens: int | None
    completion_tokens: int | None


@dataclass(frozen=True)
class Attempt:
    """One upstream call of a request, as the gateway recorded it (odd values read as unknown).

    The fields after `duration_ms` are recorded only under a chain's resilience policy; they are ""/None/
    False for requests logged without one (and for everything logged before it existed).
    """

    provider: str
    model: str
    status: int | None  # the upstream's HTTP status, None when it never answered
    error: str  # timeout, connection_error, cancelled, …; "" when it answered
    duration_ms: float | None
    next_step: str = ""  # retry, move_on, continue, give_up:<reason>; "" on the attempt that answered
    failure_class: str = ""  # rate_limit, overloaded, server_error, timeout, …; "" when unknown
    retry_after: float | None = None  # seconds the upstream asked for
    malformed_events: int | None = None  # `data:` lines that were not JSON and were dropped
    continuation: bool = False  # this attempt continued a stream another one broke
    usage: PartUsage | None = None


def _capped(value: object) -> str:
    """A label the gateway wrote: a short string, or "" for anything else (never an error)."""
    if not isinstance(value, str):
        return ""
    text = value.strip()
    return text if len(text) <= TEXT_CAP else text[: TEXT_CAP - 1] + "…"


def _count(value: object) -> int | None:
    """A non-negative int; a bool, a float or a negative number is unknown."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _seconds(value: object) -> float | None:
    """A finite, non-negative number of seconds; anything else is unknown."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    seconds = float(value)
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def _usage(value: object) -> PartUsage | None:
    if not isinstance(value, dict):
        return None
    usage = PartUsage(_count(value.get("prompt_tokens")), _count(value.get("completion_tokens")))
    return usage if usage.prompt_tokens is not None or usage.completion_tokens is not None else None


def _attempt(item: dict[str, Any]) -> Attempt:
    status, duration = item.get("status"), item.get("duration_ms")
    return Attempt(
        provider=str(item.get("provider") or ""),
        model=str(item.get("model") or ""),
        status=status if isinstance(status, int) and not isinstance(status, bool) else None,
        error=str(item.get("error") or ""),
        duration_ms=float(duration) if isinstance(duration, int | float) else None,
        next_step=_capped(item.get("next")),
        failure_class=_capped(item.get("class")),
        retry_after=_seconds(item.get("retry_after")),
        malformed_events=_count(item.get("malformed_events")),
        continuation=item.get("continuation") is True,
        usage=_usage(item.get("usage")),
    )


def log_attempts(log: RequestLog) -> list[Attempt]:
    """The attempts in call order; the last one is the answer the client got."""
    items = log.attempts if isinstance(log.attempts, list) else []
    return [_attempt(item if isinstance(item, dict) else {}) for item in items]


# ---------- Names behind the ids ----------


@dataclass(frozen=True)
class KeyLabel:
    name: str
    prefix: str
    revoked: bool

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"


@dataclass
class Labels:
    """Names of the keys, users, teams, applications, agents and chains a set of rows refers to."""

    keys: dict[int, KeyLabel] = field(default_factory=dict)
    users: dict[int, str] = field(default_factory=dict)
    teams: dict[int, str] = field(default_factory=dict)
    applications: dict[int, str] = field(default_factory=dict)
    agents: dict[int, str] = field(default_factory=dict)
    chains: dict[int, str] = field(default_factory=dict)


def _ids(rows: Iterable[RequestLog], attr: str) -> set[int]:
    return {value for row in rows if (value := getattr(row, attr)) is not None}


def request_log_labels(rows: list[RequestLog], *, full: bool = True) -> Labels:
    """One query per kind of name (keys only when `full` is False, as the list needs)."""
    labels = Labels()
    if key_ids := _ids(rows, "key_id"):
        labels.keys = {
            pk: KeyLabel(name, prefix, revoked is not None)
            for pk, name, prefix, revoked in ApiKey.objects.filter(pk__in=key_ids).values_list(
                "pk", "name", "prefix", "revoked_at"
            )
        }
    if not full:
        return labels
    user_model = get_user_model()
    lookups: list[tuple[str, dict[int, str], QuerySet, str]] = [
        ("user_id", labels.users, user_model._default_manager.all(), user_model.USERNAME_FIELD),
        ("team_id", labels.teams, Team.objects.all(), "name"),
        ("application_id", labels.applications, Application.objects.all(), "name"),
        ("agent_id", labels.agents, Agent.objects.all(), "name"),
        ("chain_id", labels.chains, FallbackChain.objects.all(), "name"),
    ]
    for attr, target, qs, name_field in lookups:
        if ids := _ids(rows, attr):
            target.update(qs.filter(pk__in=ids).values_list("pk", name_field))
    return labels


# ---------- Filter choices ----------


def request_log_scope_visible(*, viewer: Viewer, kind: str, pk: int) -> bool:
    """Whether a key, team or application id may be used as a filter by this viewer (one indexed lookup)."""
    if kind == "key":
        return (viewer.sees_all or pk in viewer.key_ids) and ApiKey.objects.filter(pk=pk).exists()
    models: dict[str, type[Team] | type[Application]] = {"team": Team, "application": Application}
    model = models[kind]
    qs = model.objects.filter(pk=pk)
    if not viewer.sees_all:
        qs = qs.filter(api_keys__in=viewer.key_ids)
    return qs.exists()


@dataclass(frozen=True)
class FilterOptions:
    """What the filter controls offer, and what they accept. Keys, teams and applications are the viewer's."""

    providers: list[str]
    models: list[str]
    requested_suggestions: list[str]  # models and aliases; any requested name is accepted
    keys: list[tuple[int, str]]
    teams: list[tuple[int, str]]
    applications: list[tuple[int, str]]


def request_log_filter_options(*, viewer: Viewer) -> FilterOptions:
    """Choices from the catalog (never from the log table, which can hold millions of rows)."""
    models = list(LlmModel.objects.order_by("name").values_list("name", flat=True))
    aliases = list(Alias.objects.order_by("name").values_list("name", flat=True))
    keys = ApiKey.objects.order_by("name", "id")
    teams = Team.objects.order_by("name", "id")
    applications = Application.objects.order_by("name", "id")
    if not viewer.sees_all:
        keys = keys.filter(pk__in=viewer.key_ids)
        teams = teams.filter(api_keys__in=viewer.key_ids).distinct()
        applications = applications.filter(api_keys__in=viewer.key_ids).distinct()
    return FilterOptions(
        providers=list(Provider.objects.order_by("name").values_list("name", flat=True)),
        models=models,
        requested_suggestions=sorted({*models, *aliases}),
        keys=[
            (pk, f"{name} ({prefix}…){' · revoked' if revoked else ''}")
            for pk, name, prefix, revoked in keys.values_list("pk", "name", "prefix", "revoked_at")
        ],
        teams=list(teams.values_list("pk", "name")),
        applications=list(applications.values_list("pk", "name")),
    )


# ---------- Pipeline losses ----------


@dataclass(frozen=True)
class PipelineLosses:
    """Request-log records lost on their way to the database, as counted in Redis (production only)."""

    dropped: int  # trimmed by the stream's cap before ingestion, or dropped by a gateway's full buffer
    since: datetime | None  # the first loss counted
    dead_lettered: int  # set aside in the dead-letter stream (undecodable or refused by the database)


def request_log_pipeline_losses() -> PipelineLosses | None:
    """What the pipeline lost or set aside; None in embedded mode, when nothing was, or when Redis is away."""
    if not settings.REDIS_URL:
        return None
    keys = StreamKeys(settings.REQUEST_LOG_STREAM)
    try:
        client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=0.5, socket_connect_timeout=0.5)
        trimmed, dropped, since, dead = client.mget(keys.trimmed, keys.dropped, keys.lost_since, keys.dead_lettered)
    except redis.RedisError:
        return None  # the page must not fail with Redis; /readyz and /metrics report Redis itself
    losses = PipelineLosses(
        dropped=int(trimmed or 0) + int(dropped or 0),
        since=datetime.fromtimestamp(int(since), tz=UTC) if since else None,
        dead_lettered=int(dead or 0),
    )
    return losses if losses.dropped or losses.dead_lettered else None
