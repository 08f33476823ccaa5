"""Breaker API: circuits, reset, global thresholds and per-circuit overrides. Admin only (the default).

Input validation lives in the services so the console and the API give the same per-field messages.
"""

from typing import Any

from django.http import Http404
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.errors import ValidationFailed
from health.selectors import (
    breaker_config_get,
    breaker_override_get,
    circuit_get,
    circuit_list,
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
    last_failure_status = serializers.JSONField(allow_null=True)


class CircuitListApi(APIView):
    """GET: every tracked circuit."""

    def get(self, request: Request) -> Response:
        return Response(CircuitOutputSerializer(circuit_list(), many=True).data)


class CircuitResetApi(APIView):
    """POST {"provider", "model"}: close the circuit now (audited). Replies with the circuit after reset."""

    def post(self, request: Request) -> Response:
        body = _body(request)
        before = circuit_reset(actor=request.user, provider=body.get("provider"), model=body.get("model"))
        after = circuit_get(provider=before.provider, model=before.model)
        return Response(
            {
                "circuit": CircuitOutputSerializer(after).data,
                "previous": CircuitOutputSerializer(before).data,
            }
        )


class BreakerConfigOutputSerializer(serializers.Serializer):
    failure_threshold = serializers.IntegerField()
    window_seconds = serializers.IntegerField()
    minimum_requests = serializers.IntegerField()
    initial_cooldown_seconds = serializers.IntegerField()
    cooldown_cap_seconds = serializers.IntegerField()
    failure_status_codes = serializers.ListField(child=serializers.IntegerField())


class BreakerConfigApi(APIView):
    """GET the global thresholds; PUT new values (fields left out keep theirs)."""

    def get(self, request: Request) -> Response:
        return Response(BreakerConfigOutputSerializer(breaker_config_get().as_dict()).data)

    def put(self, request: Request) -> Response:
        values = breaker_config_update(actor=request.user, data=_body(request))
        return Response(BreakerConfigOutputSerializer(values.as_dict()).data)


class BreakerOverrideOutputSerializer(serializers.Serializer):
    provider = serializers.CharField()
    model = serializers.CharField()
    failure_threshold = serializers.IntegerField(allow_null=True)
    window_seconds = serializers.IntegerField(allow_null=True)
    minimum_requests = serializers.IntegerField(allow_null=True)
    initial_cooldown_seconds = serializers.IntegerField(allow_null=True)
    cooldown_cap_seconds = serializers.IntegerField(allow_null=True)
    failure_status_codes = serializers.ListField(child=serializers.IntegerField(), allow_null=True)


def _override_or_404(provider: str, model: str) -> dict[str, object]:
    values = breaker_override_get(provider=provider, model=model)
    if values is None:
        raise Http404(f"No breaker override for {provider}/{model}.")
    return values.as_dict()


class BreakerOverrideApi(APIView):
    """GET/PUT/DELETE the override of one (provider, model). PUT replaces it; empty fields inherit."""

    def get(self, request: Request, provider: str, model: str) -> Response:
        return Response(BreakerOverrideOutputSerializer(_override_or_404(provider, model)).data)

    def put(self, request: Request, provider: str, model: str) -> Response:
        # The URL names the circuit; "provider"/"model" in the body are ignored.
        body = {k: v for k, v in _body(request).items() if k not in ("provider", "model")}
        breaker_override_set(actor=request.user, provider=provider, model=model, data=body)
        return Response(BreakerOverrideOutputSerializer(_override_or_404(provider, model)).data)

    def delete(self, request: Request, provider: str, model: str) -> Response:
        _override_or_404(provider, model)
        breaker_override_delete(actor=request.user, provider=provider, model=model)
        return Response(status=204)
