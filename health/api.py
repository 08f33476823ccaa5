"""Breaker API: circuits, reset, global thresholds and per-circuit overrides. Admin only (the default).

Input validation lives in the services so the console and the API give the same per-field messages;
the input serializers here document the bodies in the OpenAPI schema and are not used to validate.
"""

from typing import Any

from django.http import Http404
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.errors import ValidationFailed
from health.selectors import (
    breaker_config_get,
    breaker_override_get,
    circuit_get,
    circuit_list,
    circuits_local_only,
)
from health.services import breaker_config_update, breaker_override_delete, breaker_override_set, circuit_reset


def _body(request: Request) -> dict[str, Any]:
    if not isinstance(request.data, dict):
        raise ValidationFailed("Send a JSON object.", errors={"__all__": ["Send a JSON object."]})
    return dict(request.data)


class CircuitOutputSerializer(serializers.Serializer):
    provider = serializers.CharField()
    model = serializers.CharField()
    state = serializers.CharField()
    failure_count = serializers.IntegerField()
    total_requests = serializers.IntegerField()
    cooldown_until = serializers.DateTimeField(allow_null=True)
    consecutive_opens = serializers.IntegerField()
    last_failure_at = serializers.DateTimeField(allow_null=True)
    last_failure_status = serializers.JSONField(
        allow_null=True, help_text="The last failure's HTTP status code, or its kind (such as a timeout)."
    )

    class Meta:
        ref_name = "Circuit"


DEGRADED_HEADER = "X-Circuits-Degraded"
DEGRADED_DETAIL = (
    "degraded: showing this process's local view (Redis is unreachable; other gateways may see other states)"
)


class CircuitListItemSerializer(CircuitOutputSerializer):
    degraded = serializers.SerializerMethodField(
        help_text=(
            "True while this process cannot reach Redis: the row is its local view, not the state every gateway "
            f"shares. The response then also carries the `{DEGRADED_HEADER}` header."
        )
    )

    class Meta:
        ref_name = "CircuitListItem"

    def get_degraded(self, row: object) -> bool:
        return bool(self.context.get("degraded"))


class CircuitListApi(APIView):
    """GET: every tracked circuit. Still a list; while Redis is unreachable every row says `degraded`."""

    @extend_schema(
        operation_id="circuit_list",
        responses=CircuitListItemSerializer(many=True),
        parameters=[
            OpenApiParameter(
                DEGRADED_HEADER,
                str,
                OpenApiParameter.HEADER,
                response=True,
                description="Present (with an explanation) while the circuits are this process's local view.",
            )
        ],
    )
    def get(self, request: Request) -> Response:
        rows = circuit_list()
        degraded = circuits_local_only()  # after the listing, which may be what found Redis unreachable
        data = CircuitListItemSerializer(rows, many=True, context={"degraded": degraded}).data
        headers = {DEGRADED_HEADER: DEGRADED_DETAIL} if degraded else None
        return Response(data, headers=headers)


class CircuitResetApi(APIView):
    """POST {"provider", "model"}: close the circuit now (audited). Replies with the circuit after reset."""

    class InputSerializer(serializers.Serializer):
        provider = serializers.CharField()
        model = serializers.CharField()

        class Meta:
            ref_name = "CircuitResetInput"

    class OutputSerializer(serializers.Serializer):
        circuit = CircuitOutputSerializer(help_text="The circuit after the reset.")
        previous = CircuitOutputSerializer(help_text="The circuit as it was when reset.")

        class Meta:
            ref_name = "CircuitReset"

    @extend_schema(operation_id="circuit_reset", request=InputSerializer, responses=OutputSerializer)
    def post(self, request: Request) -> Response:
        body = _body(request)
        before = circuit_reset(actor=request.user, provider=body.get("provider"), model=body.get("model"))
        after = circuit_get(provider=before.provider, model=before.model)
        return Response(CircuitResetApi.OutputSerializer({"circuit": after, "previous": before}).data)


class BreakerConfigApi(APIView):
    """GET the global thresholds; PUT new values (fields left out keep theirs)."""

    class InputSerializer(serializers.Serializer):
        failure_threshold = serializers.IntegerField(required=False)
        window_seconds = serializers.IntegerField(required=False)
        minimum_requests = serializers.IntegerField(required=False)
        initial_cooldown_seconds = serializers.IntegerField(required=False)
        cooldown_cap_seconds = serializers.IntegerField(required=False)
        failure_status_codes = serializers.ListField(child=serializers.IntegerField(), required=False)

        class Meta:
            ref_name = "BreakerConfigInput"

    class OutputSerializer(serializers.Serializer):
        failure_threshold = serializers.IntegerField()
        window_seconds = serializers.IntegerField()
        minimum_requests = serializers.IntegerField()
        initial_cooldown_seconds = serializers.IntegerField()
        cooldown_cap_seconds = serializers.IntegerField()
        failure_status_codes = serializers.ListField(child=serializers.IntegerField())

        class Meta:
            ref_name = "BreakerConfig"

    @extend_schema(operation_id="breaker_config_detail", responses=OutputSerializer)
    def get(self, request: Request) -> Response:
        return Response(BreakerConfigApi.OutputSerializer(breaker_config_get().as_dict()).data)

    @extend_schema(operation_id="breaker_config_update", request=InputSerializer, responses=OutputSerializer)
    def put(self, request: Request) -> Response:
        values = breaker_config_update(actor=request.user, data=_body(request))
        return Response(BreakerConfigApi.OutputSerializer(values.as_dict()).data)


def _override_or_404(provider: str, model: str) -> dict[str, object]:
    values = breaker_override_get(provider=provider, model=model)
    if values is None:
        raise Http404(f"No breaker override for {provider}/{model}.")
    return values.as_dict()


class BreakerOverrideApi(APIView):
    """GET/PUT/DELETE the override of one (provider, model). PUT replaces it; empty fields inherit."""

    class InputSerializer(serializers.Serializer):
        failure_threshold = serializers.IntegerField(required=False, allow_null=True)
        window_seconds = serializers.IntegerField(required=False, allow_null=True)
        minimum_requests = serializers.IntegerField(required=False, allow_null=True)
        initial_cooldown_seconds = serializers.IntegerField(required=False, allow_null=True)
        cooldown_cap_seconds = serializers.IntegerField(required=False, allow_null=True)
        failure_status_codes = serializers.ListField(child=serializers.IntegerField(), required=False, allow_null=True)

        class Meta:
            ref_name = "BreakerOverrideInput"

    class OutputSerializer(serializers.Serializer):
        provider = serializers.CharField()
        model = serializers.CharField()
        failure_threshold = serializers.IntegerField(allow_null=True)
        window_seconds = serializers.IntegerField(allow_null=True)
        minimum_requests = serializers.IntegerField(allow_null=True)
        initial_cooldown_seconds = serializers.IntegerField(allow_null=True)
        cooldown_cap_seconds = serializers.IntegerField(allow_null=True)
        failure_status_codes = serializers.ListField(child=serializers.IntegerField(), allow_null=True)

        class Meta:
            ref_name = "BreakerOverride"

    @extend_schema(operation_id="breaker_override_detail", responses=OutputSerializer)
    def get(self, request: Request, provider: str, model: str) -> Response:
        return Response(BreakerOverrideApi.OutputSerializer(_override_or_404(provider, model)).data)

    @extend_schema(operation_id="breaker_override_set", request=InputSerializer, responses=OutputSerializer)
    def put(self, request: Request, provider: str, model: str) -> Response:
        # The URL names the circuit; "provider"/"model" in the body are ignored.
        body = {k: v for k, v in _body(request).items() if k not in ("provider", "model")}
        breaker_override_set(actor=request.user, provider=provider, model=model, data=body)
        return Response(BreakerOverrideApi.OutputSerializer(_override_or_404(provider, model)).data)

    @extend_schema(operation_id="breaker_override_delete", responses={204: None})
    def delete(self, request: Request, provider: str, model: str) -> Response:
        _override_or_404(provider, model)
        breaker_override_delete(actor=request.user, provider=provider, model=model)
        return Response(status=204)
