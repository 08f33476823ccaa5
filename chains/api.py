"""Fallback chains API (admin only). Shapes and types are checked here; every rule lives in chains.services."""

from typing import Any, cast

from django.http import Http404
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from catalog.api import ScopeOutputSerializer, ScopeSerializer, scope_fields
from chains.models import FallbackChain
from chains.resilience import KNOB_NAMES
from chains.selectors import (
    CHAIN_ORDERINGS,
    DEFAULT_CHAIN_ORDERING,
    chain_get,
    chain_list,
    chain_snapshot,
    resilience_defaults_effective,
    resilience_defaults_get,
)
from chains.services import (
    ChainInput,
    EntryInput,
    chain_create,
    chain_delete,
    chain_update,
    resilience_defaults_update,
)
from core.api import (
    StandardPagination,
    StrictBooleanField,
    input_validate,
    nested_input_validate,
    paginated_response,
)
from core.errors import ValidationFailed


class ChainEntrySerializer(serializers.Serializer):
    """One entry in requests: a model name and an optional provider override (by name)."""

    model = serializers.CharField(allow_blank=True)
    provider = serializers.CharField(required=False, allow_blank=True, allow_null=True, default=None)

    class Meta:
        ref_name = "ChainEntryInput"


_RESILIENCE_HELP = (
    'The resilience policy: {"enabled": true, ...knobs}; omitted knobs take the global defaults '
    "(/api/resilience/defaults/). Knobs: " + ", ".join(KNOB_NAMES) + "."
)


def _resilience_field(**kwargs: Any) -> serializers.DictField:
    # Types and bounds are checked by chains.resilience.resilience_validate (errors name the knob).
    return serializers.DictField(child=serializers.JSONField(), help_text=_RESILIENCE_HELP, **kwargs)


def _chain_or_404(chain_id: int) -> FallbackChain:
    try:
        return chain_get(chain_id=chain_id)
    except FallbackChain.DoesNotExist:
        raise Http404("No chain with this id.") from None


def _chain_input(data: dict[str, Any]) -> ChainInput:
    return ChainInput(
        name=data["name"],
        source_model=data["source_model"],
        entries=[EntryInput(model=e["model"], provider=e.get("provider")) for e in data["entries"]],
        enabled=data["enabled"],
        resilience=data.get("resilience"),
        **scope_fields(data.get("scope")),
    )


class ChainDetailApi(APIView):
    """A chain with its ordered entries and its version (send it back when editing)."""

    class OutputSerializer(serializers.Serializer):
        class EntryOutputSerializer(serializers.Serializer):
            model = serializers.CharField(source="model.name")
            provider = serializers.CharField(source="provider.name", allow_null=True)

            class Meta:
                ref_name = "ChainEntry"

        id = serializers.IntegerField()
        name = serializers.CharField()
        source_model = serializers.CharField(source="source_model.name")
        entries = EntryOutputSerializer(many=True, source="entries.all")
        scope = ScopeOutputSerializer(source="*")
        enabled = serializers.BooleanField()
        resilience = _resilience_field()
        version = serializers.IntegerField()
        created_at = serializers.DateTimeField()
        updated_at = serializers.DateTimeField()

        class Meta:
            ref_name = "Chain"

    @extend_schema(operation_id="chain_detail", responses=OutputSerializer)
    def get(self, request: Request, chain_id: int) -> Response:
        chain = _chain_or_404(chain_id)
        return Response(ChainDetailApi.OutputSerializer(chain).data)


class ChainListApi(APIView):
    """Chains, newest first. `search` matches every word against the name or the source model."""

    pagination_class = StandardPagination

    class FilterSerializer(serializers.Serializer):
        search = serializers.CharField(required=False, allow_blank=True, default="", max_length=200)
        ordering = serializers.ChoiceField(
            choices=[key for name in CHAIN_ORDERINGS for key in (name, f"-{name}")],
            required=False,
            default=DEFAULT_CHAIN_ORDERING,
            help_text="A column, descending with a leading '-'.",
        )

        class Meta:
            ref_name = "ChainFilter"

    @extend_schema(
        operation_id="chain_list", parameters=[FilterSerializer], responses=ChainDetailApi.OutputSerializer(many=True)
    )
    def get(self, request: Request) -> Response:
        filters = input_validate(ChainListApi.FilterSerializer(data=request.query_params))
        chains = chain_list(search=filters["search"], ordering=filters["ordering"])
        return paginated_response(
            request=request, view=self, queryset=chains, serializer_class=ChainDetailApi.OutputSerializer
        )


class ChainCreateApi(APIView):
    """Create a chain: 1 to 10 entries, none equal to the source, one chain per (source model, scope)."""

    class InputSerializer(serializers.Serializer):
        name = serializers.CharField(allow_blank=True)
        source_model = serializers.CharField(allow_blank=True)
        entries = ChainEntrySerializer(many=True)
        scope = ScopeSerializer(required=False, help_text="Default: global.")
        enabled = StrictBooleanField(default=True)
        resilience = _resilience_field(required=False)

        class Meta:
            ref_name = "ChainCreateInput"

    @extend_schema(
        operation_id="chain_create", request=InputSerializer, responses={201: ChainDetailApi.OutputSerializer}
    )
    def post(self, request: Request) -> Response:
        data = input_validate(ChainCreateApi.InputSerializer(data=request.data))
        chain = chain_create(actor=request.user, data=_chain_input(data))
        return Response(ChainDetailApi.OutputSerializer(chain).data, status=status.HTTP_201_CREATED)


class ChainUpdateApi(APIView):
    """Edit a chain. `version` is required: a stale one is refused with 409 and nothing changes.

    PUT replaces every field; PATCH changes only the fields sent (entries and `resilience` are replaced as a
    whole). `resilience` is optional in both: omitted, the chain keeps its policy.
    """

    class InputSerializer(serializers.Serializer):
        name = serializers.CharField(allow_blank=True)
        source_model = serializers.CharField(allow_blank=True)
        entries = ChainEntrySerializer(many=True)
        scope = ScopeSerializer()
        enabled = StrictBooleanField()
        resilience = _resilience_field(required=False)
        version = serializers.IntegerField(min_value=1, help_text="The version you edited (from the last read).")

        class Meta:
            ref_name = "ChainUpdateInput"

    @extend_schema(operation_id="chain_update", request=InputSerializer, responses=ChainDetailApi.OutputSerializer)
    def put(self, request: Request, chain_id: int) -> Response:
        _chain_or_404(chain_id)
        data = input_validate(ChainUpdateApi.InputSerializer(data=request.data))
        chain = chain_update(actor=request.user, chain_id=chain_id, version=data["version"], data=_chain_input(data))
        return Response(ChainDetailApi.OutputSerializer(chain).data)

    @extend_schema(
        operation_id="chain_partial_update", request=InputSerializer, responses=ChainDetailApi.OutputSerializer
    )
    def patch(self, request: Request, chain_id: int) -> Response:
        chain = _chain_or_404(chain_id)
        data = input_validate(ChainUpdateApi.InputSerializer(data=request.data, partial=True))
        if "version" not in data:
            raise ValidationFailed(
                "version is required: send the version you edited.", errors={"version": ["This field is required."]}
            )
        # partial=True skips the required fields inside nested objects too: an entry or a scope that is
        # sent must be complete.
        raw = cast("dict[str, Any]", request.data)  # the serializer above accepted it: an object
        if "entries" in data:
            data["entries"] = nested_input_validate(
                ChainEntrySerializer(data=raw["entries"], many=True), field="entries"
            )
        if "scope" in data:
            data["scope"] = nested_input_validate(ScopeSerializer(data=raw["scope"]), field="scope")
        merged = {**chain_snapshot(chain), **data}
        chain = chain_update(actor=request.user, chain_id=chain_id, version=data["version"], data=_chain_input(merged))
        return Response(ChainDetailApi.OutputSerializer(chain).data)


class ChainDeleteApi(APIView):
    """Delete a chain. With `?version=`, a stale version is refused with 409."""

    class FilterSerializer(serializers.Serializer):
        version = serializers.IntegerField(required=False, min_value=1)

        class Meta:
            ref_name = "ChainDeleteFilter"

    @extend_schema(operation_id="chain_delete", parameters=[FilterSerializer], responses={204: None})
    def delete(self, request: Request, chain_id: int) -> Response:
        _chain_or_404(chain_id)
        filters = input_validate(ChainDeleteApi.FilterSerializer(data=request.query_params))
        chain_delete(actor=request.user, chain_id=chain_id, version=filters.get("version"))
        return Response(status=status.HTTP_204_NO_CONTENT)


class ResilienceDefaultsApi(APIView):
    """The global default resilience policy: every knob's value (`policy`) and what an admin set (`set`).

    New chains start from its `enabled`; a chain's omitted knob takes its value. PUT replaces it (knobs not
    sent take the built-in defaults); `version` is required and a stale one is refused with 409.
    """

    class OutputSerializer(serializers.Serializer):
        policy = serializers.DictField(child=serializers.JSONField(), help_text="Every knob's effective value.")
        set = serializers.DictField(child=serializers.JSONField(), help_text="Only the knobs an admin set.")
        version = serializers.IntegerField()
        updated_at = serializers.DateTimeField(allow_null=True)

        class Meta:
            ref_name = "ResilienceDefaults"

    class InputSerializer(serializers.Serializer):
        policy = serializers.DictField(child=serializers.JSONField(), help_text="Knobs: " + ", ".join(KNOB_NAMES))
        version = serializers.IntegerField(min_value=1, help_text="The version you edited (from the last read).")

        class Meta:
            ref_name = "ResilienceDefaultsInput"

    @staticmethod
    def _output(row: Any) -> dict[str, Any]:
        return {
            "policy": resilience_defaults_effective(row),
            "set": dict(row.policy or {}),
            "version": row.version,
            "updated_at": row.updated_at,
        }

    @extend_schema(operation_id="resilience_defaults", responses=OutputSerializer)
    def get(self, request: Request) -> Response:
        row = resilience_defaults_get()
        return Response(ResilienceDefaultsApi.OutputSerializer(self._output(row)).data)

    @extend_schema(operation_id="resilience_defaults_update", request=InputSerializer, responses=OutputSerializer)
    def put(self, request: Request) -> Response:
        data = input_validate(ResilienceDefaultsApi.InputSerializer(data=request.data))
        row = resilience_defaults_update(actor=request.user, version=data["version"], policy=data["policy"])
        return Response(ResilienceDefaultsApi.OutputSerializer(self._output(row)).data)
