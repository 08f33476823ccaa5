"""Alerts API (admin only): rule CRUD, alerts and their deliveries. Every rule lives in alerts.services."""

from typing import Any

from django.http import Http404
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from alerts.models import Alert, AlertRule, AlertState, BodyFormat, RuleKind
from alerts.selectors import alert_get, alert_list, alert_rule_get, alert_rule_list
from alerts.services import RuleInput, alert_rule_create, alert_rule_delete, alert_rule_update
from core.api import StandardPagination, StrictBooleanField, input_validate, paginated_response


def _rule_or_404(rule_id: int) -> AlertRule:
    try:
        return alert_rule_get(rule_id=rule_id)
    except AlertRule.DoesNotExist:
        raise Http404("No alert rule with this id.") from None


class RuleInputSerializer(serializers.Serializer):
    """A rule. Parameters left out (or null) take the kind's default; those the kind does not use are ignored."""

    name = serializers.CharField(allow_blank=True)
    kind = serializers.ChoiceField(choices=RuleKind.values)
    provider = serializers.CharField(required=False, allow_blank=True, default="", help_text="circuit_open only.")
    model = serializers.CharField(
        required=False, allow_blank=True, default="", help_text="circuit_open: the model; others: the source model."
    )
    minutes = serializers.IntegerField(
        required=False, allow_null=True, default=None, help_text="circuit_open: N; degraded/exhausted: M (5)."
    )
    threshold_percent = serializers.FloatField(
        required=False, allow_null=True, default=None, help_text="degraded: X (20)."
    )
    min_requests = serializers.IntegerField(
        required=False, allow_null=True, default=None, help_text="degraded: V (20)."
    )
    min_count = serializers.IntegerField(required=False, allow_null=True, default=None, help_text="exhausted: K (5).")
    enabled = StrictBooleanField(default=True)
    webhook_url = serializers.CharField(required=False, allow_blank=True, default="", help_text="http(s) only.")
    body_format = serializers.ChoiceField(choices=BodyFormat.values, default=BodyFormat.JSON)

    class Meta:
        ref_name = "AlertRuleInput"


def _input(data: dict[str, Any]) -> RuleInput:
    return RuleInput(**data)


class RuleOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    kind = serializers.CharField()
    provider = serializers.CharField()
    model = serializers.CharField()
    minutes = serializers.IntegerField()
    threshold_percent = serializers.FloatField(allow_null=True)
    min_requests = serializers.IntegerField(allow_null=True)
    min_count = serializers.IntegerField(allow_null=True)
    enabled = serializers.BooleanField()
    webhook_url = serializers.CharField(help_text="The full address (admins only); deliveries show it redacted.")
    body_format = serializers.CharField()
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()

    class Meta:
        ref_name = "AlertRule"


class RuleListApi(APIView):
    """Alert rules by name."""

    pagination_class = StandardPagination

    @extend_schema(operation_id="alert_rule_list", responses=RuleOutputSerializer(many=True))
    def get(self, request: Request) -> Response:
        return paginated_response(
            request=request, view=self, queryset=alert_rule_list(), serializer_class=RuleOutputSerializer
        )


class RuleCreateApi(APIView):
    """Create a rule (audited): circuit_open, degraded or exhausted, with an optional webhook."""

    @extend_schema(operation_id="alert_rule_create", request=RuleInputSerializer, responses={201: RuleOutputSerializer})
    def post(self, request: Request) -> Response:
        data = input_validate(RuleInputSerializer(data=request.data))
        rule = alert_rule_create(actor=request.user, data=_input(data))
        return Response(RuleOutputSerializer(rule).data, status=status.HTTP_201_CREATED)


class RuleDetailApi(APIView):
    """One rule."""

    @extend_schema(operation_id="alert_rule_detail", responses=RuleOutputSerializer)
    def get(self, request: Request, rule_id: int) -> Response:
        return Response(RuleOutputSerializer(_rule_or_404(rule_id)).data)


class RuleUpdateApi(APIView):
    """Replace a rule's fields (audited). Disabling it resolves its firing alerts."""

    @extend_schema(operation_id="alert_rule_update", request=RuleInputSerializer, responses=RuleOutputSerializer)
    def put(self, request: Request, rule_id: int) -> Response:
        _rule_or_404(rule_id)
        data = input_validate(RuleInputSerializer(data=request.data))
        rule = alert_rule_update(actor=request.user, rule_id=rule_id, data=_input(data))
        return Response(RuleOutputSerializer(rule).data)


class RuleDeleteApi(APIView):
    """Delete a rule (audited). Its firing alerts resolve; the history stays."""

    @extend_schema(operation_id="alert_rule_delete", responses={204: None})
    def delete(self, request: Request, rule_id: int) -> Response:
        _rule_or_404(rule_id)
        alert_rule_delete(actor=request.user, rule_id=rule_id)
        return Response(status=status.HTTP_204_NO_CONTENT)


class AttemptSerializer(serializers.Serializer):
    number = serializers.IntegerField()
    at = serializers.DateTimeField()
    status_code = serializers.IntegerField(allow_null=True)
    error = serializers.CharField()
    duration_ms = serializers.FloatField()

    class Meta:
        ref_name = "AlertDeliveryAttempt"


class DeliverySerializer(serializers.Serializer):
    id = serializers.IntegerField()
    event = serializers.CharField()
    url = serializers.CharField(
        source="url_redacted", help_text="scheme://host/… (sha256 <digest>): the path is the webhook's secret."
    )
    body_format = serializers.CharField()
    status = serializers.CharField()
    attempts = serializers.IntegerField()
    created_at = serializers.DateTimeField()
    next_attempt_at = serializers.DateTimeField()
    delivered_at = serializers.DateTimeField(allow_null=True)
    last_error = serializers.CharField()
    attempt_log = AttemptSerializer(many=True, source="attempt_log.all")

    class Meta:
        ref_name = "AlertDelivery"


class AlertSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    rule_id = serializers.IntegerField(allow_null=True)
    rule = serializers.CharField(source="rule_name")
    kind = serializers.CharField()
    subject = serializers.CharField()
    state = serializers.CharField()
    summary = serializers.CharField()
    figures = serializers.JSONField()
    opened_at = serializers.DateTimeField()
    last_seen_at = serializers.DateTimeField()
    clear_since = serializers.DateTimeField(allow_null=True)
    resolved_at = serializers.DateTimeField(allow_null=True)
    resolution = serializers.CharField()

    class Meta:
        ref_name = "Alert"


class AlertDetailSerializer(AlertSerializer):
    deliveries = DeliverySerializer(many=True, source="deliveries.all")

    class Meta:
        ref_name = "AlertDetail"


class AlertListApi(APIView):
    """Alerts newest first; `?state=firing` or `?state=resolved`."""

    pagination_class = StandardPagination

    class FilterSerializer(serializers.Serializer):
        state = serializers.ChoiceField(choices=AlertState.values, required=False, default="")

        class Meta:
            ref_name = "AlertFilter"

    @extend_schema(operation_id="alert_list", parameters=[FilterSerializer], responses=AlertSerializer(many=True))
    def get(self, request: Request) -> Response:
        filters = input_validate(AlertListApi.FilterSerializer(data=request.query_params))
        return paginated_response(
            request=request, view=self, queryset=alert_list(state=filters["state"]), serializer_class=AlertSerializer
        )


class AlertDetailApi(APIView):
    """One alert with its deliveries and every attempt of each."""

    @extend_schema(operation_id="alert_detail", responses=AlertDetailSerializer)
    def get(self, request: Request, alert_id: int) -> Response:
        try:
            alert = alert_get(alert_id=alert_id)
        except Alert.DoesNotExist:
            raise Http404("No alert with this id.") from None
        return Response(AlertDetailSerializer(alert).data)
