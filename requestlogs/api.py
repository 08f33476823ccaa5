"""Request logs API: the page's filters as query parameters, keyset (cursor) paging, one request by id.

Same visibility as the page: admin and bi_read_only read every request, a `user` only those made with
their own gateway keys. Filters are validated by the page's own form, so a bad value gets the same
message here (as a 400) as on the page.
"""

from typing import Any

from django.http import Http404
from django.urls import reverse
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api import NullableObjectSerializer
from core.errors import ValidationFailed
from core.permissions import IsRequestLogReader
from core.templatetags.console_tags import query
from requestlogs.forms import NOT_VISIBLE, PAGE_SIZES, RANGES, REQUEST_ID, RequestLogFilterForm, normalise_request_id
from requestlogs.models import RequestLog
from requestlogs.selectors import (
    STATUS_CLASS_LABELS,
    STATUS_FILTER_LABELS,
    Labels,
    Viewer,
    log_attempts,
    request_log_get,
    request_log_labels,
    request_log_page,
    status_class_of,
    viewer_for,
)


def _viewer(request: Request) -> Viewer:
    viewer = viewer_for(request.user)
    if viewer is None:  # IsRequestLogReader already refused
        raise Http404
    return viewer


class _NamedSerializer(NullableObjectSerializer):
    id = serializers.IntegerField()
    name = serializers.CharField(allow_null=True, help_text="null when the object was deleted since.")


class _KeySerializer(_NamedSerializer):
    prefix = serializers.CharField(allow_null=True)
    revoked = serializers.BooleanField(allow_null=True)


class _PartUsageSerializer(NullableObjectSerializer):
    prompt_tokens = serializers.IntegerField(allow_null=True)
    completion_tokens = serializers.IntegerField(allow_null=True)


class _AttemptSerializer(serializers.Serializer):
    provider = serializers.CharField()
    model = serializers.CharField()
    status = serializers.IntegerField(allow_null=True, help_text="HTTP status of the upstream's answer.")
    error = serializers.CharField(allow_null=True, help_text="timeout, connection_error, cancelled, …")
    duration_ms = serializers.FloatField(allow_null=True)
    next = serializers.CharField(
        allow_null=True,
        help_text="What the request did after this attempt failed: retry (same target), move_on (next chain "
        "entry), continue (a stream broken after its first byte, resumed on another entry), or "
        "give_up:<reason> (disabled, not_retryable, max_attempts, deadline, exhausted, no_continuation). "
        "null on the attempt that answered, and when the chain's resilience policy is off.",
    )
    failure_class = serializers.CharField(
        allow_null=True,
        help_text="Named `class`: the failure's class (rate_limit, overloaded, server_error, timeout, connection, "
        "context_length, content_filter, invalid_request, auth); null when not recorded.",
    )
    retry_after = serializers.FloatField(allow_null=True, help_text="Seconds the upstream asked to wait (Retry-After).")
    malformed_events = serializers.IntegerField(
        allow_null=True, help_text="Stream `data:` lines that were not JSON and were dropped."
    )
    continuation = serializers.BooleanField(
        allow_null=True, help_text="true on an attempt that continued a broken stream; null when not recorded."
    )
    usage = _PartUsageSerializer(
        allow_null=True, help_text="This attempt's own usage; a continued stream's request tokens sum its parts."
    )

    def get_fields(self) -> dict[str, serializers.Field]:
        # `class` is a Python keyword, so the field is declared as failure_class and renamed here.
        fields = super().get_fields()
        fields["class"] = fields.pop("failure_class")
        return fields


class _FallbackSerializer(serializers.Serializer):
    triggered = serializers.BooleanField()
    chain_id = serializers.IntegerField(allow_null=True)
    chain_name = serializers.CharField(allow_null=True)
    chain_step = serializers.IntegerField(help_text="0 = the primary target; n = the chain's n-th entry served.")
    from_provider = serializers.CharField(allow_blank=True)
    original_model = serializers.CharField(allow_blank=True)


class RequestLogOutputSerializer(serializers.Serializer):
    request_id = serializers.CharField()
    created_at = serializers.DateTimeField()
    key = _KeySerializer(allow_null=True)
    user = _NamedSerializer(allow_null=True)
    team = _NamedSerializer(allow_null=True)
    application = _NamedSerializer(allow_null=True)
    agent = _NamedSerializer(allow_null=True)
    requested_model = serializers.CharField()
    routed_model = serializers.CharField(help_text="The model after routing rules and aliases.")
    served_provider = serializers.CharField()
    served_model = serializers.CharField()
    status = serializers.IntegerField()
    status_class = serializers.ChoiceField(choices=[str(c) for c in STATUS_CLASS_LABELS], allow_null=True)
    error_kind = serializers.CharField(allow_blank=True)
    stream = serializers.BooleanField()
    latency_ms = serializers.FloatField()
    ttfb_ms = serializers.FloatField(allow_null=True)
    tokens_in = serializers.IntegerField(allow_null=True)
    tokens_out = serializers.IntegerField(allow_null=True)
    cost_usd = serializers.DecimalField(max_digits=14, decimal_places=8, allow_null=True)
    priced_model = serializers.CharField(allow_null=True, help_text="The model whose prices gave cost_usd.")
    fallback = _FallbackSerializer()
    attempts = _AttemptSerializer(many=True, help_text="Every upstream call, in order; the last one answered.")

    class Meta:
        ref_name = "RequestLog"


class RequestLogPageSerializer(serializers.Serializer):
    next = serializers.CharField(allow_null=True, help_text="URL of the next page (older, when newest first).")
    previous = serializers.CharField(allow_null=True, help_text="URL of the previous page.")
    results = RequestLogOutputSerializer(many=True)

    class Meta:
        ref_name = "RequestLogPage"


def _named(ids: dict[int, str], pk: int | None) -> dict[str, Any] | None:
    return None if pk is None else {"id": pk, "name": ids.get(pk)}


def request_log_data(log: RequestLog, labels: Labels) -> dict[str, Any]:
    """One row as the API shows it (ids with their names)."""
    key = labels.keys.get(log.key_id) if log.key_id is not None else None
    status_class = status_class_of(log.status)
    return {
        "request_id": log.request_id,
        "created_at": log.created_at,
        "key": None
        if log.key_id is None
        else {
            "id": log.key_id,
            "name": key.name if key else None,
            "prefix": key.prefix if key else None,
            "revoked": key.revoked if key else None,
        },
        "user": _named(labels.users, log.user_id),
        "team": _named(labels.teams, log.team_id),
        "application": _named(labels.applications, log.application_id),
        "agent": _named(labels.agents, log.agent_id),
        "requested_model": log.requested_model,
        "routed_model": log.routed_model,
        "served_provider": log.served_provider,
        "served_model": log.served_model,
        "status": log.status,
        "status_class": str(status_class) if status_class else None,
        "error_kind": log.error_kind,
        "stream": log.stream,
        "latency_ms": log.latency_ms,
        "ttfb_ms": log.ttfb_ms,
        "tokens_in": log.tokens_in,
        "tokens_out": log.tokens_out,
        "cost_usd": log.cost_usd,
        "priced_model": log.served_model if log.cost_usd is not None else None,
        "fallback": {
            "triggered": log.fallback_triggered,
            "chain_id": log.chain_id,
            "chain_name": labels.chains.get(log.chain_id) if log.chain_id is not None else None,
            "chain_step": log.chain_step,
            "from_provider": log.fallback_from_provider,
            "original_model": log.fallback_original_model,
        },
        "attempts": [
            {
                "provider": a.provider,
                "model": a.model,
                "status": a.status,
                "error": a.error or None,
                "duration_ms": a.duration_ms,
                "next": a.next_step or None,
                "class": a.failure_class or None,
                "retry_after": a.retry_after,
                "malformed_events": a.malformed_events,
                "continuation": True if a.continuation else None,
                "usage": None
                if a.usage is None
                else {"prompt_tokens": a.usage.prompt_tokens, "completion_tokens": a.usage.completion_tokens},
            }
            for a in log_attempts(log)
        ],
    }


def _choice(name: str, choices: list[str], description: str) -> OpenApiParameter:
    return OpenApiParameter(name, OpenApiTypes.STR, enum=choices, description=description)


FILTER_PARAMETERS = [
    _choice("range", list(RANGES), "Time range ending now (default 24h); custom uses from/to."),
    OpenApiParameter(
        "from", OpenApiTypes.DATETIME, description="Start of a custom range (ISO 8601, UTC if no offset)."[:80]
    ),
    OpenApiParameter("to", OpenApiTypes.DATETIME, description="End of a custom range (exclusive; default now)."),
    OpenApiParameter("requested_model", OpenApiTypes.STR, description="The model name the client sent (exact)."),
    OpenApiParameter("served_model", OpenApiTypes.STR, description="The model that served the request (exact)."),
    OpenApiParameter("provider", OpenApiTypes.STR, description="The provider that served the request (exact)."),
    _choice(
        "status", [str(c) for c in STATUS_FILTER_LABELS], "Status class; client_gone is 499; errors: not 2xx or 3xx."
    ),
    _choice(
        "fallback", ["yes", "served", "no"], "Whether a chain entry served the request; served: and answered below 500."
    ),
    OpenApiParameter("chain_step", OpenApiTypes.INT, description="0 = the primary target; n = the chain's n-th entry."),
    OpenApiParameter("key", OpenApiTypes.INT, description="Gateway key id (a user may name only their own keys)."),
    OpenApiParameter("team", OpenApiTypes.INT, description="Team id."),
    OpenApiParameter("application", OpenApiTypes.INT, description="Application id."),
    _choice("stream", ["yes", "no"], "Streaming requests only, or non-streaming only."),
    _choice("order", ["newest", "oldest"], "Sort order (default newest)."),
    _choice("page_size", [str(n) for n in PAGE_SIZES], "Rows per page (default 25)."),
    OpenApiParameter("cursor", OpenApiTypes.STR, description="Opaque cursor from `next` or `previous`."),
]


class RequestLogListApi(APIView):
    """Request logs newest first (or oldest first), filtered like the Request Logs page, in cursor pages."""

    permission_classes = [IsRequestLogReader]

    @extend_schema(operation_id="request_log_list", parameters=FILTER_PARAMETERS, responses=RequestLogPageSerializer)
    def get(self, request: Request) -> Response:
        viewer = _viewer(request)
        if "request_id" in request.query_params:
            message = "To fetch one request, GET /api/request-logs/<request_id>/."
            raise ValidationFailed(f"request_id: {message}", errors={"request_id": [message]})
        form = RequestLogFilterForm(request.query_params, viewer=viewer, page_controls=False)
        if not form.is_valid():
            errors = form.errors_by_param()
            name, messages = next(iter(errors.items()))
            raise ValidationFailed(f"{name}: {messages[0]}", errors=errors)
        params = form.params(now=timezone.now())
        page = request_log_page(
            viewer=viewer,
            filters=params.filters,
            page_size=params.page_size,
            newest_first=params.newest_first,
            cursor=params.cursor,
            with_attempts=True,
        )
        labels = request_log_labels(page.rows)
        base = request.build_absolute_uri(reverse("api-request-log-list"))

        def link(cursor: Any) -> str | None:
            return None if cursor is None else base + query(params.list_query(cursor=cursor.encode(), follow=None))

        return Response(
            {
                "next": link(page.next_cursor),
                "previous": link(page.prev_cursor),
                "results": RequestLogOutputSerializer([request_log_data(r, labels) for r in page.rows], many=True).data,
            }
        )


class RequestLogDetailApi(APIView):
    """One request by its id (the x-vidai-request-id response header). 404 when missing or not yours."""

    permission_classes = [IsRequestLogReader]

    @extend_schema(operation_id="request_log_get", responses=RequestLogOutputSerializer)
    def get(self, request: Request, request_id: str) -> Response:
        request_id = normalise_request_id(request_id)
        log = request_log_get(viewer=_viewer(request), request_id=request_id) if REQUEST_ID.match(request_id) else None
        if log is None:
            raise Http404(NOT_VISIBLE)
        return Response(RequestLogOutputSerializer(request_log_data(log, request_log_labels([log]))).data)
