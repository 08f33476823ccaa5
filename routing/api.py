"""Routing API (admin only): routing rules and aliases."""

from typing import Any, cast

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from catalog.api import ScopeOutputSerializer, ScopeSerializer, scope_fields
from catalog.references import model_name_lock_first
from core.api import (
    StandardPagination,
    StrictBooleanField,
    input_validate,
    nested_input_validate,
    paginated_response,
    row_locked_update,
)
from routing.models import Alias, RoutingRule
from routing.selectors import alias_list, routing_rule_list
from routing.services import (
    AliasInput,
    RoutingRuleInput,
    alias_create,
    alias_delete,
    alias_update,
    routing_rule_create,
    routing_rule_delete,
    routing_rule_update,
)

# --- routing rules ----------------------------------------------------------------------------


class RoutingRuleDetailApi(APIView):
    class OutputSerializer(serializers.Serializer):
        id = serializers.IntegerField()
        name = serializers.CharField()
        source_model = serializers.CharField(source="source_model.name")
        target_model = serializers.CharField(source="target_model.name")
        scope = ScopeOutputSerializer(source="*")
        enabled = serializers.BooleanField()
        created_at = serializers.DateTimeField()
        updated_at = serializers.DateTimeField()

        class Meta:
            ref_name = "RoutingRule"

    @extend_schema(operation_id="routing_rule_detail", responses=OutputSerializer)
    def get(self, request: Request, rule_id: int) -> Response:
        rule = get_object_or_404(routing_rule_list(), pk=rule_id)
        return Response(RoutingRuleDetailApi.OutputSerializer(rule).data)


class RoutingRuleListApi(APIView):
    pagination_class = StandardPagination

    @extend_schema(operation_id="routing_rule_list", responses=RoutingRuleDetailApi.OutputSerializer(many=True))
    def get(self, request: Request) -> Response:
        return paginated_response(
            request=request,
            view=self,
            queryset=routing_rule_list(),
            serializer_class=RoutingRuleDetailApi.OutputSerializer,
        )


class RoutingRuleCreateApi(APIView):
    """Create a rule rewriting `source_model` to `target_model` for callers in `scope` (default global)."""

    class InputSerializer(serializers.Serializer):
        name = serializers.CharField(allow_blank=True)
        source_model = serializers.CharField(allow_blank=True)
        target_model = serializers.CharField(allow_blank=True)
        scope = ScopeSerializer(required=False)
        enabled = StrictBooleanField(default=True)

        class Meta:
            ref_name = "RoutingRuleInput"

    @extend_schema(
        operation_id="routing_rule_create",
        request=InputSerializer,
        responses={201: RoutingRuleDetailApi.OutputSerializer},
    )
    def post(self, request: Request) -> Response:
        data = input_validate(RoutingRuleCreateApi.InputSerializer(data=request.data))
        rule = routing_rule_create(actor=request.user, data=_rule_input(data))
        return Response(RoutingRuleDetailApi.OutputSerializer(rule).data, status=status.HTTP_201_CREATED)


def _rule_input(data: dict) -> RoutingRuleInput:
    return RoutingRuleInput(
        name=data["name"],
        source_model=data["source_model"],
        target_model=data["target_model"],
        enabled=data["enabled"],
        **scope_fields(data.get("scope")),
    )


class RoutingRuleUpdateApi(APIView):
    """PUT replaces every field (omitted ones take their defaults); PATCH changes only the fields sent."""

    @extend_schema(
        operation_id="routing_rule_update",
        request=RoutingRuleCreateApi.InputSerializer,
        responses=RoutingRuleDetailApi.OutputSerializer,
    )
    def put(self, request: Request, rule_id: int) -> Response:
        return RoutingRuleUpdateApi._update(request, rule_id, partial=False)

    @extend_schema(
        operation_id="routing_rule_partial_update",
        request=RoutingRuleCreateApi.InputSerializer,
        responses=RoutingRuleDetailApi.OutputSerializer,
    )
    def patch(self, request: Request, rule_id: int) -> Response:
        return RoutingRuleUpdateApi._update(request, rule_id, partial=True)

    @staticmethod
    @row_locked_update(RoutingRule)
    def _update(request: Request, rule_id: int, *, partial: bool) -> Response:
        rule = get_object_or_404(routing_rule_list(), pk=rule_id)
        data = input_validate(RoutingRuleCreateApi.InputSerializer(data=request.data, partial=partial))
        if partial and "scope" in data:
            # partial=True skips the required fields inside the scope too: a scope that is sent must be complete.
            raw = cast("dict[str, Any]", request.data)  # the serializer above accepted it: an object
            data["scope"] = nested_input_validate(ScopeSerializer(data=raw["scope"]), field="scope")
        current = {
            "name": rule.name,
            "source_model": rule.source_model.name,
            "target_model": rule.target_model.name,
            "scope": {"type": rule.scope_type, "id": rule.scope_id},
            "enabled": rule.enabled,
        }
        merged = {**current, **data} if partial else data
        rule = routing_rule_update(actor=request.user, rule=rule, data=_rule_input(merged))
        return Response(RoutingRuleDetailApi.OutputSerializer(rule).data)


class RoutingRuleDeleteApi(APIView):
    @extend_schema(operation_id="routing_rule_delete", responses={204: None})
    def delete(self, request: Request, rule_id: int) -> Response:
        rule = get_object_or_404(routing_rule_list(), pk=rule_id)
        routing_rule_delete(actor=request.user, rule=rule)
        return Response(status=status.HTTP_204_NO_CONTENT)


# --- aliases ----------------------------------------------------------------------------------


class AliasDetailApi(APIView):
    class OutputSerializer(serializers.Serializer):
        id = serializers.IntegerField()
        name = serializers.CharField()
        model = serializers.CharField(source="model.name")
        created_at = serializers.DateTimeField()

        class Meta:
            ref_name = "Alias"

    @extend_schema(operation_id="alias_detail", responses=OutputSerializer)
    def get(self, request: Request, alias_id: int) -> Response:
        alias = get_object_or_404(alias_list(), pk=alias_id)
        return Response(AliasDetailApi.OutputSerializer(alias).data)


class AliasListApi(APIView):
    pagination_class = StandardPagination

    @extend_schema(operation_id="alias_list", responses=AliasDetailApi.OutputSerializer(many=True))
    def get(self, request: Request) -> Response:
        return paginated_response(
            request=request, view=self, queryset=alias_list(), serializer_class=AliasDetailApi.OutputSerializer
        )


class AliasCreateApi(APIView):
    """Create an alias: a name clients may ask for, mapped to a catalog model. It may not be a model's name."""

    class InputSerializer(serializers.Serializer):
        name = serializers.CharField(allow_blank=True)
        model = serializers.CharField(allow_blank=True)

        class Meta:
            ref_name = "AliasInput"

    @extend_schema(
        operation_id="alias_create", request=InputSerializer, responses={201: AliasDetailApi.OutputSerializer}
    )
    def post(self, request: Request) -> Response:
        data = input_validate(AliasCreateApi.InputSerializer(data=request.data))
        alias = alias_create(actor=request.user, data=AliasInput(**data))
        return Response(AliasDetailApi.OutputSerializer(alias).data, status=status.HTTP_201_CREATED)


class AliasUpdateApi(APIView):
    @extend_schema(
        operation_id="alias_update", request=AliasCreateApi.InputSerializer, responses=AliasDetailApi.OutputSerializer
    )
    def put(self, request: Request, alias_id: int) -> Response:
        return AliasUpdateApi._update(request, alias_id, partial=False)

    @extend_schema(
        operation_id="alias_partial_update",
        request=AliasCreateApi.InputSerializer,
        responses=AliasDetailApi.OutputSerializer,
    )
    def patch(self, request: Request, alias_id: int) -> Response:
        return AliasUpdateApi._update(request, alias_id, partial=True)

    @staticmethod
    @row_locked_update(Alias, first=model_name_lock_first, input_serializer=AliasCreateApi.InputSerializer)
    def _update(request: Request, alias_id: int, *, partial: bool) -> Response:
        alias = get_object_or_404(alias_list(), pk=alias_id)
        data = input_validate(AliasCreateApi.InputSerializer(data=request.data, partial=partial))
        merged = {"name": alias.name, "model": alias.model.name, **data} if partial else data
        alias = alias_update(actor=request.user, alias=alias, data=AliasInput(**merged))
        return Response(AliasDetailApi.OutputSerializer(alias).data)


class AliasDeleteApi(APIView):
    @extend_schema(operation_id="alias_delete", responses={204: None})
    def delete(self, request: Request, alias_id: int) -> Response:
        alias = get_object_or_404(alias_list(), pk=alias_id)
        alias_delete(actor=request.user, alias=alias)
        return Response(status=status.HTTP_204_NO_CONTENT)
