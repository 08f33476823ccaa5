"""Breaker API: circuits, their history, reset, operator holds (force open, drain, release), global thresholds
and per-circuit overrides. Admin only (the default).

The input serializers check shapes and types; every rule (ranges, the cooldown cap, known providers
and models) lives in health.services. The console sends the same fields as typed strings and the
services parse them, so the serializers refuse a value with the services' own message and otherwise
pass it on as sent: a field's message is the same in the console and the API. As in every other API, a
type error is reported on its own (with its field in `detail`); the rules are checked once the types are right.
"""

import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from django.http import Http404
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_field
from rest_framework import serializers
from rest_framework.fields import empty
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.views import APIView

from core.api import NullableObjectSerializer, input_validate
from health.breaker.types import ConfigSet, Control
from health.history import circuit_event_list
from health.models import CircuitControl, CircuitEvent
from health.selectors import (
    CONFIG_FIELDS,
    breaker_config_get,
    breaker_override_get,
    circuit_controls,
    circuit_get,
    circuit_list,
    circuits_local_only,
)
from health.services import (
    CODES_SHAPE_MESSAGE,
    breaker_config_update,
    breaker_override_delete,
    breaker_override_set,
    circuit_force_open,
    circuit_release,
    circuit_reset,
    code_items,
    is_blank,
    not_a_code_message,
    not_whole_number_message,
    provider_drain,
    unknown_field_message,
    whole_number,
)

NOT_AN_OBJECT = "Send a JSON object."


# The bases' notes are comments, not docstrings: the schema would show a docstring as every input's description.
class _ObjectSerializer(serializers.Serializer):
    # The body must be a JSON object (a JSON null too is refused with that message, not DRF's own).
    default_error_messages = {"invalid": NOT_AN_OBJECT}

    def validate_empty_values(self, data: Any) -> tuple[bool, Any]:
        if data is None:
            raise serializers.ValidationError({api_settings.NON_FIELD_ERRORS_KEY: [NOT_AN_OBJECT]}, code="invalid")
        return super().validate_empty_values(data)


class _ThresholdsSerializer(_ObjectSerializer):
    # Threshold fields; other keys (but `ignored`) are refused with the services' message, with the field errors.
    ignored: tuple[str, ...] = ()

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        unknown: dict[str, list[str]] = {}
        if isinstance(data, Mapping):
            unknown = {
                str(key): [unknown_field_message(key, CONFIG_FIELDS)]
                for key in data
                if key not in CONFIG_FIELDS and key not in self.ignored
            }
        try:
            value: dict[str, Any] = super().to_internal_value(data)
        except serializers.ValidationError as exc:
            if unknown and isinstance(exc.detail, dict):
                raise serializers.ValidationError({**unknown, **exc.detail}) from None
            raise
        if unknown:
            raise serializers.ValidationError(unknown)
        return value


class _NameField(serializers.CharField):
    """Text. Missing, null or not text reads as empty, which the service refuses as "… is required."."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(allow_blank=True, trim_whitespace=False, **kwargs)

    def validate_empty_values(self, data: Any) -> tuple[bool, Any]:
        if data is empty or data is None:
            return True, ""
        return super().validate_empty_values(data)

    def to_internal_value(self, data: Any) -> str:
        return data if isinstance(data, str) else ""


class _WholeNumberField(serializers.IntegerField):
    """An int or a string of digits, passed on as sent. Null or empty also passes: the service calls it
    required (global thresholds) or inherited (an override)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(required=False, **kwargs)

    def validate_empty_values(self, data: Any) -> tuple[bool, Any]:
        if data is None:
            return True, None
        return super().validate_empty_values(data)

    def to_internal_value(self, data: Any) -> Any:
        if not is_blank(data) and whole_number(data) is None:
            raise serializers.ValidationError(not_whole_number_message(self.field_name or "", data))
        return data


class _StatusCodesField(serializers.ListField):
    """A list of whole numbers (or a string of them, as the console sends), passed on as sent; null passes."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(child=serializers.IntegerField(), required=False, **kwargs)

    def get_value(self, dictionary: Mapping[str, Any]) -> Any:
        return dictionary.get(self.field_name or "", empty)

    def validate_empty_values(self, data: Any) -> tuple[bool, Any]:
        if data is None:
            return True, None
        return super().validate_empty_values(data)

    def to_internal_value(self, data: Any) -> Any:
        items = code_items(data)
        if items is None:
            raise serializers.ValidationError(CODES_SHAPE_MESSAGE)
        wrong = [not_a_code_message(item) for item in items if whole_number(item) is None]
        if wrong:
            raise serializers.ValidationError(wrong)
        return data


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


class HoldSerializer(NullableObjectSerializer):
    kind = serializers.ChoiceField(
        choices=CircuitControl.Kind.choices, help_text="forced_open: this circuit; drained: its whole provider."
    )
    reason = serializers.CharField()
    until = serializers.DateTimeField(allow_null=True, help_text="When the hold expires; null: until released.")

    class Meta:
        ref_name = "CircuitHold"


def _hold_data(control: Control | None) -> dict[str, Any] | None:
    if control is None:
        return None
    until = datetime.fromtimestamp(control.until, tz=UTC) if control.until is not None else None
    return dict(HoldSerializer({"kind": str(control.kind), "reason": control.reason, "until": until}).data)


class CircuitListItemSerializer(CircuitOutputSerializer):
    control = serializers.SerializerMethodField(
        help_text="The operator's hold in force on this circuit (forced open, or its provider drained), or null."
    )
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

    @extend_schema_field(HoldSerializer(allow_null=True))
    def get_control(self, row: Any) -> dict[str, Any] | None:
        holds: ConfigSet = self.context["holds"]
        return _hold_data(holds.control_for(row.provider, row.model, self.context["now"]))


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
        # Holds come from the database (what every gateway applies), not from this process's engine.
        context = {"degraded": degraded, "holds": ConfigSet(controls=circuit_controls()), "now": time.time()}
        data = CircuitListItemSerializer(rows, many=True, context=context).data
        headers = {DEGRADED_HEADER: DEGRADED_DETAIL} if degraded else None
        return Response(data, headers=headers)


class CircuitResetApi(APIView):
    """POST {"provider", "model"}: close the circuit now (audited). Replies with the circuit after reset."""

    class InputSerializer(_ObjectSerializer):
        provider = _NameField()
        model = _NameField()

        class Meta:
            ref_name = "CircuitResetInput"

    class OutputSerializer(serializers.Serializer):
        circuit = CircuitOutputSerializer(help_text="The circuit after the reset.")
        previous = CircuitOutputSerializer(help_text="The circuit as it was when reset.")

        class Meta:
            ref_name = "CircuitReset"

    @extend_schema(operation_id="circuit_reset", request=InputSerializer, responses=OutputSerializer)
    def post(self, request: Request) -> Response:
        data = input_validate(CircuitResetApi.InputSerializer(data=request.data))
        before = circuit_reset(actor=request.user, provider=data["provider"], model=data["model"])
        after = circuit_get(provider=before.provider, model=before.model)
        return Response(CircuitResetApi.OutputSerializer({"circuit": after, "previous": before}).data)


class CircuitEventOutputSerializer(serializers.Serializer):
    kind = serializers.ChoiceField(choices=CircuitEvent.Kind.choices)
    at = serializers.DateTimeField()
    model = serializers.CharField(help_text='"" for an event of the whole provider (a drain and its release).')
    generation = serializers.IntegerField(
        allow_null=True, help_text="The circuit's generation after a breaker transition; null for operator holds."
    )
    failures = serializers.IntegerField(allow_null=True, help_text="Failures in the window when it opened.")
    total = serializers.IntegerField(allow_null=True, help_text="Requests in the window when it opened.")
    last_status = serializers.CharField(help_text='The failure that tripped it: a status code ("503") or a kind.')
    cooldown_seconds = serializers.FloatField(allow_null=True, help_text="The cooldown chosen (opened, reopened).")
    local = serializers.BooleanField(help_text="Decided by one gateway alone while Redis was unreachable.")
    actor = serializers.CharField(help_text='Who acted (reset, holds); "expiry" for a hold that ran out.')
    reason = serializers.CharField()
    until = serializers.DateTimeField(allow_null=True, help_text="A hold's expiry (forced_open, drained).")

    class Meta:
        ref_name = "CircuitEvent"


EVENTS_DEFAULT = 50
EVENTS_MAX = 500


class CircuitEventListApi(APIView):
    """GET: the circuit's history, newest first (`?limit=`, default 50, at most 500), its provider's drains
    included."""

    class FilterSerializer(serializers.Serializer):
        limit = serializers.IntegerField(
            required=False, min_value=1, max_value=EVENTS_MAX, default=EVENTS_DEFAULT, help_text="1 to 500."
        )

        class Meta:
            ref_name = "CircuitEventFilter"

    @extend_schema(
        operation_id="circuit_event_list",
        parameters=[FilterSerializer],
        responses=CircuitEventOutputSerializer(many=True),
    )
    def get(self, request: Request, provider: str, model: str) -> Response:
        query = input_validate(CircuitEventListApi.FilterSerializer(data=request.query_params))
        events = circuit_event_list(provider=provider, model=model, limit=query["limit"])
        return Response(CircuitEventOutputSerializer(events, many=True).data)


class ControlOutputSerializer(serializers.Serializer):
    kind = serializers.ChoiceField(choices=CircuitControl.Kind.choices)
    provider = serializers.CharField()
    model = serializers.CharField(help_text='"" for a drain (every circuit of the provider).')
    reason = serializers.CharField()
    until = serializers.DateTimeField(
        source="expires_at", allow_null=True, help_text="When the hold expires; null: until released."
    )
    created_by = serializers.CharField()
    created_at = serializers.DateTimeField()

    class Meta:
        ref_name = "CircuitControl"


class _MinutesField(serializers.IntegerField):
    """Optional; null or missing: until released. The range (1 to 10080, 7 days) is the service's rule."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(required=False, allow_null=True, help_text="Hold for this many minutes (1 to 10080).")


class CircuitForceOpenApi(APIView):
    """POST {"provider", "model", "reason", "minutes"?}: hold the circuit open (no traffic, no probe) on every
    gateway until released or expired (audited, in the circuit's history)."""

    class InputSerializer(_ObjectSerializer):
        provider = _NameField()
        model = _NameField()
        reason = _NameField(help_text="Why (required, at most 500 characters).")
        minutes = _MinutesField()

        class Meta:
            ref_name = "CircuitForceOpenInput"

    @extend_schema(operation_id="circuit_force_open", request=InputSerializer, responses={201: ControlOutputSerializer})
    def post(self, request: Request) -> Response:
        data = input_validate(CircuitForceOpenApi.InputSerializer(data=request.data))
        row = circuit_force_open(
            actor=request.user,
            provider=data["provider"],
            model=data["model"],
            reason=data["reason"],
            minutes=data.get("minutes"),
        )
        return Response(ControlOutputSerializer(row).data, status=201)


class CircuitDrainApi(APIView):
    """POST {"provider", "reason", "minutes"?}: hold every circuit of the provider open until released or
    expired."""

    class InputSerializer(_ObjectSerializer):
        provider = _NameField()
        reason = _NameField(help_text="Why (required, at most 500 characters).")
        minutes = _MinutesField()

        class Meta:
            ref_name = "CircuitDrainInput"

    @extend_schema(operation_id="provider_drain", request=InputSerializer, responses={201: ControlOutputSerializer})
    def post(self, request: Request) -> Response:
        data = input_validate(CircuitDrainApi.InputSerializer(data=request.data))
        row = provider_drain(
            actor=request.user, provider=data["provider"], reason=data["reason"], minutes=data.get("minutes")
        )
        return Response(ControlOutputSerializer(row).data, status=201)


class CircuitReleaseApi(APIView):
    """POST {"provider", "model"?}: lift the hold on the circuit, or the provider's drain when `model` is
    empty or left out. 404 when there is no such hold. Replies with the hold lifted."""

    class InputSerializer(_ObjectSerializer):
        provider = _NameField()
        model = _NameField(required=False, help_text="Leave out (or empty) to release the provider's drain.")

        class Meta:
            ref_name = "CircuitReleaseInput"

    @extend_schema(operation_id="circuit_release", request=InputSerializer, responses=ControlOutputSerializer)
    def post(self, request: Request) -> Response:
        data = input_validate(CircuitReleaseApi.InputSerializer(data=request.data))
        row = circuit_release(actor=request.user, provider=data["provider"], model=data.get("model", ""))
        return Response(ControlOutputSerializer(row).data)


class BreakerConfigApi(APIView):
    """GET the global thresholds; PUT new values (fields left out keep theirs)."""

    class InputSerializer(_ThresholdsSerializer):
        failure_threshold = _WholeNumberField()
        window_seconds = _WholeNumberField()
        minimum_requests = _WholeNumberField()
        initial_cooldown_seconds = _WholeNumberField()
        cooldown_cap_seconds = _WholeNumberField()
        failure_status_codes = _StatusCodesField()

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
        data = input_validate(BreakerConfigApi.InputSerializer(data=request.data))
        values = breaker_config_update(actor=request.user, data=data)
        return Response(BreakerConfigApi.OutputSerializer(values.as_dict()).data)


def _override_or_404(provider: str, model: str) -> dict[str, object]:
    values = breaker_override_get(provider=provider, model=model)
    if values is None:
        raise Http404(f"No breaker override for {provider}/{model}.")
    return values.as_dict()


class BreakerOverrideApi(APIView):
    """GET/PUT/DELETE the override of one (provider, model). PUT replaces it; empty fields inherit."""

    class InputSerializer(_ThresholdsSerializer):
        ignored = ("provider", "model")  # the URL names the circuit

        failure_threshold = _WholeNumberField(allow_null=True)
        window_seconds = _WholeNumberField(allow_null=True)
        minimum_requests = _WholeNumberField(allow_null=True)
        initial_cooldown_seconds = _WholeNumberField(allow_null=True)
        cooldown_cap_seconds = _WholeNumberField(allow_null=True)
        failure_status_codes = _StatusCodesField(allow_null=True)

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
        data = input_validate(BreakerOverrideApi.InputSerializer(data=request.data))
        row = breaker_override_set(actor=request.user, provider=provider, model=model, data=data)
        # Under the names it was saved under (the service strips them, as every health endpoint does).
        return Response(BreakerOverrideApi.OutputSerializer(_override_or_404(row.provider, row.model)).data)

    @extend_schema(operation_id="breaker_override_delete", responses={204: None})
    def delete(self, request: Request, provider: str, model: str) -> Response:
        _override_or_404(provider, model)
        breaker_override_delete(actor=request.user, provider=provider, model=model)
        return Response(status=204)
