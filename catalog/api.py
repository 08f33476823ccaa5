"""Catalog API (admin only): providers, models, teams, applications, agents, gateway keys."""

from decimal import Decimal
from typing import Any

from django.shortcuts import get_object_or_404
from django.utils.cache import add_never_cache_headers
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from catalog.enums import Capability, Protocol, ScopeType
from catalog.models import Agent, ApiKey, Application, LlmModel, Provider, Team
from catalog.references import model_name_lock_first
from catalog.selectors import (
    agent_list,
    api_key_list,
    application_list,
    llm_model_list,
    provider_list,
    team_list,
)
from catalog.services import (
    AgentInput,
    ApiKeyInput,
    ApplicationInput,
    LlmModelInput,
    ProviderInput,
    TeamInput,
    agent_create,
    agent_delete,
    agent_update,
    agent_update_locks_first,
    api_key_issue,
    api_key_revoke,
    api_key_update,
    api_key_update_locks_first,
    application_create,
    application_delete,
    application_update,
    application_update_locks_first,
    llm_model_create,
    llm_model_delete,
    llm_model_update,
    provider_create,
    provider_delete,
    provider_update,
    provider_update_locks_first,
    team_create,
    team_delete,
    team_update,
)
from core.api import StandardPagination, input_validate, paginated_response, row_locked_update


class ScopeSerializer(serializers.Serializer):
    """A scope in requests: {"type": "team", "id": 3}; global has no id."""

    type = serializers.CharField(help_text="One of: " + ", ".join(ScopeType.values))
    id = serializers.IntegerField(required=False, allow_null=True, default=None)

    class Meta:
        ref_name = "ScopeInput"


class ScopeOutputSerializer(serializers.Serializer):
    type = serializers.CharField(source="scope_type")
    id = serializers.IntegerField(source="scope_id", allow_null=True)

    class Meta:
        ref_name = "Scope"


def scope_fields(scope: dict[str, Any] | None) -> dict[str, Any]:
    """ScopeSerializer data as service keyword arguments (absent: global)."""
    if scope is None:
        return {"scope_type": ScopeType.GLOBAL, "scope_id": None}
    return {"scope_type": scope["type"], "scope_id": scope.get("id")}


def _name_or_none(obj: Any) -> str | None:
    return obj.name if obj is not None else None


# --- providers --------------------------------------------------------------------------------


class ProviderDetailApi(APIView):
    """A provider; its API key is never returned, only whether one is set."""

    class OutputSerializer(serializers.Serializer):
        id = serializers.IntegerField()
        name = serializers.CharField()
        protocol = serializers.CharField()
        base_url = serializers.CharField()
        has_api_key = serializers.SerializerMethodField()
        connect_timeout = serializers.FloatField()
        read_timeout = serializers.FloatField()
        first_token_timeout_seconds = serializers.FloatField(allow_null=True)
        idle_timeout_seconds = serializers.FloatField(allow_null=True)
        api_version = serializers.CharField(help_text='Azure OpenAI\'s api-version query parameter; "" otherwise.')
        deployments = serializers.DictField(
            child=serializers.CharField(), help_text="Azure OpenAI: catalog model name → deployment name."
        )
        created_at = serializers.DateTimeField()
        updated_at = serializers.DateTimeField()

        class Meta:
            ref_name = "Provider"

        @extend_schema_field(OpenApiTypes.BOOL)
        def get_has_api_key(self, obj: Provider) -> bool:
            return bool(obj.api_key)

    @extend_schema(operation_id="provider_detail", responses=OutputSerializer)
    def get(self, request: Request, provider_id: int) -> Response:
        provider = get_object_or_404(provider_list(), pk=provider_id)
        return Response(ProviderDetailApi.OutputSerializer(provider).data)


class ProviderListApi(APIView):
    pagination_class = StandardPagination

    @extend_schema(operation_id="provider_list", responses=ProviderDetailApi.OutputSerializer(many=True))
    def get(self, request: Request) -> Response:
        return paginated_response(
            request=request, view=self, queryset=provider_list(), serializer_class=ProviderDetailApi.OutputSerializer
        )


class ProviderCreateApi(APIView):
    class InputSerializer(serializers.Serializer):
        name = serializers.CharField(allow_blank=True)
        protocol = serializers.ChoiceField(choices=Protocol.choices, default=Protocol.OPENAI)
        base_url = serializers.CharField(allow_blank=True)
        api_key = serializers.CharField(
            required=False,
            allow_blank=True,
            write_only=True,
            style={"input_type": "password"},
            help_text="Write-only: stored encrypted, never returned. On update, omit it to keep the stored key.",
        )
        connect_timeout = serializers.FloatField(default=5.0)
        read_timeout = serializers.FloatField(default=60.0)
        first_token_timeout_seconds = serializers.FloatField(
            allow_null=True, default=None, help_text="Resilient chains' time to first token; null = the policy's."
        )
        idle_timeout_seconds = serializers.FloatField(
            allow_null=True, default=None, help_text="Resilient chains' stream idle timeout; null = the policy's."
        )
        api_version = serializers.CharField(
            allow_blank=True,
            default="",
            help_text='Azure OpenAI\'s api-version query parameter, e.g. "2024-10-21"; required for protocol azure.',
        )
        deployments = serializers.DictField(
            child=serializers.CharField(allow_blank=True),
            default=dict,
            help_text='Azure OpenAI: catalog model name → deployment name, e.g. {"gpt-4o": "gpt-4o-prod"}; '
            "a model not listed is called by its own name. Keys must be catalog models.",
        )

        class Meta:
            ref_name = "ProviderInput"

    @extend_schema(
        operation_id="provider_create", request=InputSerializer, responses={201: ProviderDetailApi.OutputSerializer}
    )
    def post(self, request: Request) -> Response:
        data = input_validate(ProviderCreateApi.InputSerializer(data=request.data))
        api_key = data.pop("api_key", "")
        provider = provider_create(actor=request.user, data=ProviderInput(**data), api_key=api_key)
        return Response(ProviderDetailApi.OutputSerializer(provider).data, status=status.HTTP_201_CREATED)


class ProviderUpdateApi(APIView):
    """PUT replaces every field (omitted ones take their defaults); PATCH changes only the fields sent."""

    @extend_schema(
        operation_id="provider_update",
        request=ProviderCreateApi.InputSerializer,
        responses=ProviderDetailApi.OutputSerializer,
    )
    def put(self, request: Request, provider_id: int) -> Response:
        return ProviderUpdateApi._update(request, provider_id, partial=False)

    @extend_schema(
        operation_id="provider_partial_update",
        request=ProviderCreateApi.InputSerializer,
        responses=ProviderDetailApi.OutputSerializer,
    )
    def patch(self, request: Request, provider_id: int) -> Response:
        return ProviderUpdateApi._update(request, provider_id, partial=True)

    @staticmethod
    @row_locked_update(Provider, first=provider_update_locks_first, input_serializer=ProviderCreateApi.InputSerializer)
    def _update(request: Request, provider_id: int, *, partial: bool) -> Response:
        provider = get_object_or_404(provider_list(), pk=provider_id)
        data = input_validate(ProviderCreateApi.InputSerializer(data=request.data, partial=partial))
        api_key = data.pop("api_key", None)
        current = {
            "name": provider.name,
            "protocol": provider.protocol,
            "base_url": provider.base_url,
            "connect_timeout": provider.connect_timeout,
            "read_timeout": provider.read_timeout,
            "first_token_timeout_seconds": provider.first_token_timeout_seconds,
            "idle_timeout_seconds": provider.idle_timeout_seconds,
            "api_version": provider.api_version,
            "deployments": dict(provider.deployments or {}),
        }
        merged = {**current, **data} if partial else data
        provider = provider_update(actor=request.user, provider=provider, data=ProviderInput(**merged), api_key=api_key)
        return Response(ProviderDetailApi.OutputSerializer(provider).data)


class ProviderDeleteApi(APIView):
    @extend_schema(operation_id="provider_delete", responses={204: None})
    def delete(self, request: Request, provider_id: int) -> Response:
        provider = get_object_or_404(provider_list(), pk=provider_id)
        provider_delete(actor=request.user, provider=provider)
        return Response(status=status.HTTP_204_NO_CONTENT)


# --- models -----------------------------------------------------------------------------------


class LlmModelDetailApi(APIView):
    class OutputSerializer(serializers.Serializer):
        id = serializers.IntegerField()
        name = serializers.CharField()
        provider = serializers.CharField(source="provider.name")
        capabilities = serializers.ListField(child=serializers.CharField())
        input_price_per_mtok = serializers.DecimalField(max_digits=12, decimal_places=4)
        output_price_per_mtok = serializers.DecimalField(max_digits=12, decimal_places=4)
        context_window = serializers.IntegerField()
        max_output_tokens = serializers.IntegerField(
            help_text="max_tokens sent to upstreams that require it (Anthropic) when the client omits it."
        )
        created_at = serializers.DateTimeField()
        updated_at = serializers.DateTimeField()

        class Meta:
            ref_name = "Model"

    @extend_schema(operation_id="model_detail", responses=OutputSerializer)
    def get(self, request: Request, model_id: int) -> Response:
        model = get_object_or_404(llm_model_list(), pk=model_id)
        return Response(LlmModelDetailApi.OutputSerializer(model).data)


class LlmModelListApi(APIView):
    pagination_class = StandardPagination

    @extend_schema(operation_id="model_list", responses=LlmModelDetailApi.OutputSerializer(many=True))
    def get(self, request: Request) -> Response:
        return paginated_response(
            request=request, view=self, queryset=llm_model_list(), serializer_class=LlmModelDetailApi.OutputSerializer
        )


class LlmModelCreateApi(APIView):
    class InputSerializer(serializers.Serializer):
        name = serializers.CharField(allow_blank=True)
        provider = serializers.CharField(allow_blank=True, help_text="Name of the provider that serves it by default.")
        capabilities = serializers.ListField(
            child=serializers.CharField(), default=list, help_text="Subset of: " + ", ".join(Capability.values)
        )
        input_price_per_mtok = serializers.DecimalField(max_digits=12, decimal_places=4, default=Decimal(0))
        output_price_per_mtok = serializers.DecimalField(max_digits=12, decimal_places=4, default=Decimal(0))
        context_window = serializers.IntegerField(default=8192)
        max_output_tokens = serializers.IntegerField(
            default=4096,
            help_text="max_tokens sent to upstreams that require it (Anthropic) when the client omits it; at least 1.",
        )

        class Meta:
            ref_name = "ModelInput"

    @extend_schema(
        operation_id="model_create", request=InputSerializer, responses={201: LlmModelDetailApi.OutputSerializer}
    )
    def post(self, request: Request) -> Response:
        data = input_validate(LlmModelCreateApi.InputSerializer(data=request.data))
        model = llm_model_create(actor=request.user, data=LlmModelInput(**data))
        return Response(LlmModelDetailApi.OutputSerializer(model).data, status=status.HTTP_201_CREATED)


class LlmModelUpdateApi(APIView):
    """PUT replaces every field (omitted ones take their defaults); PATCH changes only the fields sent."""

    @extend_schema(
        operation_id="model_update",
        request=LlmModelCreateApi.InputSerializer,
        responses=LlmModelDetailApi.OutputSerializer,
    )
    def put(self, request: Request, model_id: int) -> Response:
        return LlmModelUpdateApi._update(request, model_id, partial=False)

    @extend_schema(
        operation_id="model_partial_update",
        request=LlmModelCreateApi.InputSerializer,
        responses=LlmModelDetailApi.OutputSerializer,
    )
    def patch(self, request: Request, model_id: int) -> Response:
        return LlmModelUpdateApi._update(request, model_id, partial=True)

    @staticmethod
    @row_locked_update(LlmModel, first=model_name_lock_first, input_serializer=LlmModelCreateApi.InputSerializer)
    def _update(request: Request, model_id: int, *, partial: bool) -> Response:
        model = get_object_or_404(llm_model_list(), pk=model_id)
        data = input_validate(LlmModelCreateApi.InputSerializer(data=request.data, partial=partial))
        current = {
            "name": model.name,
            "provider": model.provider.name,
            "capabilities": list(model.capabilities),
            "input_price_per_mtok": model.input_price_per_mtok,
            "output_price_per_mtok": model.output_price_per_mtok,
            "context_window": model.context_window,
            "max_output_tokens": model.max_output_tokens,
        }
        merged = {**current, **data} if partial else data
        model = llm_model_update(actor=request.user, model=model, data=LlmModelInput(**merged))
        return Response(LlmModelDetailApi.OutputSerializer(model).data)


class LlmModelDeleteApi(APIView):
    @extend_schema(operation_id="model_delete", responses={204: None})
    def delete(self, request: Request, model_id: int) -> Response:
        model = get_object_or_404(llm_model_list(), pk=model_id)
        llm_model_delete(actor=request.user, model=model)
        return Response(status=status.HTTP_204_NO_CONTENT)


# --- teams ------------------------------------------------------------------------------------


class TeamDetailApi(APIView):
    class OutputSerializer(serializers.Serializer):
        id = serializers.IntegerField()
        name = serializers.CharField()
        created_at = serializers.DateTimeField()

        class Meta:
            ref_name = "Team"

    @extend_schema(operation_id="team_detail", responses=OutputSerializer)
    def get(self, request: Request, team_id: int) -> Response:
        team = get_object_or_404(team_list(), pk=team_id)
        return Response(TeamDetailApi.OutputSerializer(team).data)


class TeamListApi(APIView):
    pagination_class = StandardPagination

    @extend_schema(operation_id="team_list", responses=TeamDetailApi.OutputSerializer(many=True))
    def get(self, request: Request) -> Response:
        return paginated_response(
            request=request, view=self, queryset=team_list(), serializer_class=TeamDetailApi.OutputSerializer
        )


class TeamCreateApi(APIView):
    class InputSerializer(serializers.Serializer):
        name = serializers.CharField(allow_blank=True)

        class Meta:
            ref_name = "TeamInput"

    @extend_schema(operation_id="team_create", request=InputSerializer, responses={201: TeamDetailApi.OutputSerializer})
    def post(self, request: Request) -> Response:
        data = input_validate(TeamCreateApi.InputSerializer(data=request.data))
        team = team_create(actor=request.user, data=TeamInput(**data))
        return Response(TeamDetailApi.OutputSerializer(team).data, status=status.HTTP_201_CREATED)


class TeamUpdateApi(APIView):
    @extend_schema(
        operation_id="team_update", request=TeamCreateApi.InputSerializer, responses=TeamDetailApi.OutputSerializer
    )
    def put(self, request: Request, team_id: int) -> Response:
        return TeamUpdateApi._update(request, team_id, partial=False)

    @extend_schema(
        operation_id="team_partial_update",
        request=TeamCreateApi.InputSerializer,
        responses=TeamDetailApi.OutputSerializer,
    )
    def patch(self, request: Request, team_id: int) -> Response:
        return TeamUpdateApi._update(request, team_id, partial=True)

    @staticmethod
    @row_locked_update(Team)
    def _update(request: Request, team_id: int, *, partial: bool) -> Response:
        team = get_object_or_404(team_list(), pk=team_id)
        data = input_validate(TeamCreateApi.InputSerializer(data=request.data, partial=partial))
        merged = {"name": team.name, **data} if partial else data
        team = team_update(actor=request.user, team=team, data=TeamInput(**merged))
        return Response(TeamDetailApi.OutputSerializer(team).data)


class TeamDeleteApi(APIView):
    @extend_schema(operation_id="team_delete", responses={204: None})
    def delete(self, request: Request, team_id: int) -> Response:
        team = get_object_or_404(team_list(), pk=team_id)
        team_delete(actor=request.user, team=team)
        return Response(status=status.HTTP_204_NO_CONTENT)


# --- applications -----------------------------------------------------------------------------


class ApplicationDetailApi(APIView):
    class OutputSerializer(serializers.Serializer):
        id = serializers.IntegerField()
        name = serializers.CharField()
        team = serializers.CharField(source="team.name", allow_null=True)
        created_at = serializers.DateTimeField()

        class Meta:
            ref_name = "Application"

    @extend_schema(operation_id="application_detail", responses=OutputSerializer)
    def get(self, request: Request, application_id: int) -> Response:
        application = get_object_or_404(application_list(), pk=application_id)
        return Response(ApplicationDetailApi.OutputSerializer(application).data)


class ApplicationListApi(APIView):
    pagination_class = StandardPagination

    @extend_schema(operation_id="application_list", responses=ApplicationDetailApi.OutputSerializer(many=True))
    def get(self, request: Request) -> Response:
        return paginated_response(
            request=request,
            view=self,
            queryset=application_list(),
            serializer_class=ApplicationDetailApi.OutputSerializer,
        )


class ApplicationCreateApi(APIView):
    class InputSerializer(serializers.Serializer):
        name = serializers.CharField(allow_blank=True)
        team = serializers.CharField(
            required=False, allow_null=True, allow_blank=True, default=None, help_text="Team name, or null."
        )

        class Meta:
            ref_name = "ApplicationInput"

    @extend_schema(
        operation_id="application_create",
        request=InputSerializer,
        responses={201: ApplicationDetailApi.OutputSerializer},
    )
    def post(self, request: Request) -> Response:
        data = input_validate(ApplicationCreateApi.InputSerializer(data=request.data))
        application = application_create(actor=request.user, data=ApplicationInput(**data))
        return Response(ApplicationDetailApi.OutputSerializer(application).data, status=status.HTTP_201_CREATED)


class ApplicationUpdateApi(APIView):
    @extend_schema(
        operation_id="application_update",
        request=ApplicationCreateApi.InputSerializer,
        responses=ApplicationDetailApi.OutputSerializer,
    )
    def put(self, request: Request, application_id: int) -> Response:
        return ApplicationUpdateApi._update(request, application_id, partial=False)

    @extend_schema(
        operation_id="application_partial_update",
        request=ApplicationCreateApi.InputSerializer,
        responses=ApplicationDetailApi.OutputSerializer,
    )
    def patch(self, request: Request, application_id: int) -> Response:
        return ApplicationUpdateApi._update(request, application_id, partial=True)

    @staticmethod
    @row_locked_update(
        Application, first=application_update_locks_first, input_serializer=ApplicationCreateApi.InputSerializer
    )
    def _update(request: Request, application_id: int, *, partial: bool) -> Response:
        application = get_object_or_404(application_list(), pk=application_id)
        data = input_validate(ApplicationCreateApi.InputSerializer(data=request.data, partial=partial))
        current = {"name": application.name, "team": _name_or_none(application.team)}
        merged = {**current, **data} if partial else data
        application = application_update(actor=request.user, application=application, data=ApplicationInput(**merged))
        return Response(ApplicationDetailApi.OutputSerializer(application).data)


class ApplicationDeleteApi(APIView):
    @extend_schema(operation_id="application_delete", responses={204: None})
    def delete(self, request: Request, application_id: int) -> Response:
        application = get_object_or_404(application_list(), pk=application_id)
        application_delete(actor=request.user, application=application)
        return Response(status=status.HTTP_204_NO_CONTENT)


# --- agents -----------------------------------------------------------------------------------


class AgentDetailApi(APIView):
    class OutputSerializer(serializers.Serializer):
        id = serializers.IntegerField()
        name = serializers.CharField()
        application = serializers.CharField(source="application.name", allow_null=True)
        created_at = serializers.DateTimeField()

        class Meta:
            ref_name = "Agent"

    @extend_schema(operation_id="agent_detail", responses=OutputSerializer)
    def get(self, request: Request, agent_id: int) -> Response:
        agent = get_object_or_404(agent_list(), pk=agent_id)
        return Response(AgentDetailApi.OutputSerializer(agent).data)


class AgentListApi(APIView):
    pagination_class = StandardPagination

    @extend_schema(operation_id="agent_list", responses=AgentDetailApi.OutputSerializer(many=True))
    def get(self, request: Request) -> Response:
        return paginated_response(
            request=request, view=self, queryset=agent_list(), serializer_class=AgentDetailApi.OutputSerializer
        )


class AgentCreateApi(APIView):
    class InputSerializer(serializers.Serializer):
        name = serializers.CharField(allow_blank=True)
        application = serializers.CharField(
            required=False, allow_null=True, allow_blank=True, default=None, help_text="Application name, or null."
        )

        class Meta:
            ref_name = "AgentInput"

    @extend_schema(
        operation_id="agent_create", request=InputSerializer, responses={201: AgentDetailApi.OutputSerializer}
    )
    def post(self, request: Request) -> Response:
        data = input_validate(AgentCreateApi.InputSerializer(data=request.data))
        agent = agent_create(actor=request.user, data=AgentInput(**data))
        return Response(AgentDetailApi.OutputSerializer(agent).data, status=status.HTTP_201_CREATED)


class AgentUpdateApi(APIView):
    @extend_schema(
        operation_id="agent_update", request=AgentCreateApi.InputSerializer, responses=AgentDetailApi.OutputSerializer
    )
    def put(self, request: Request, agent_id: int) -> Response:
        return AgentUpdateApi._update(request, agent_id, partial=False)

    @extend_schema(
        operation_id="agent_partial_update",
        request=AgentCreateApi.InputSerializer,
        responses=AgentDetailApi.OutputSerializer,
    )
    def patch(self, request: Request, agent_id: int) -> Response:
        return AgentUpdateApi._update(request, agent_id, partial=True)

    @staticmethod
    @row_locked_update(Agent, first=agent_update_locks_first, input_serializer=AgentCreateApi.InputSerializer)
    def _update(request: Request, agent_id: int, *, partial: bool) -> Response:
        agent = get_object_or_404(agent_list(), pk=agent_id)
        data = input_validate(AgentCreateApi.InputSerializer(data=request.data, partial=partial))
        current = {"name": agent.name, "application": _name_or_none(agent.application)}
        merged = {**current, **data} if partial else data
        agent = agent_update(actor=request.user, agent=agent, data=AgentInput(**merged))
        return Response(AgentDetailApi.OutputSerializer(agent).data)


class AgentDeleteApi(APIView):
    @extend_schema(operation_id="agent_delete", responses={204: None})
    def delete(self, request: Request, agent_id: int) -> Response:
        agent = get_object_or_404(agent_list(), pk=agent_id)
        agent_delete(actor=request.user, agent=agent)
        return Response(status=status.HTTP_204_NO_CONTENT)


# --- gateway API keys -------------------------------------------------------------------------


class ApiKeyDetailApi(APIView):
    """A gateway key. Its secret is never shown after creation."""

    class OutputSerializer(serializers.Serializer):
        id = serializers.IntegerField()
        name = serializers.CharField()
        prefix = serializers.CharField()
        user = serializers.CharField(source="user.username")
        team = serializers.CharField(source="team.name", allow_null=True)
        application = serializers.CharField(source="application.name", allow_null=True)
        agent = serializers.CharField(source="agent.name", allow_null=True)
        active = serializers.SerializerMethodField(
            help_text="The gateway accepts the key now: it is not revoked and its owner is active."
        )
        owner_active = serializers.BooleanField(
            source="user.is_active", help_text="False while the owner is deactivated: the key is refused until then."
        )
        created_at = serializers.DateTimeField()
        revoked_at = serializers.DateTimeField(allow_null=True)

        class Meta:
            ref_name = "ApiKey"

        @extend_schema_field(OpenApiTypes.BOOL)
        def get_active(self, key: ApiKey) -> bool:
            return key.is_active and key.user.is_active

    @extend_schema(operation_id="key_detail", responses=OutputSerializer)
    def get(self, request: Request, key_id: int) -> Response:
        key = get_object_or_404(api_key_list(), pk=key_id)
        return Response(ApiKeyDetailApi.OutputSerializer(key).data)


class ApiKeyListApi(APIView):
    pagination_class = StandardPagination

    @extend_schema(operation_id="key_list", responses=ApiKeyDetailApi.OutputSerializer(many=True))
    def get(self, request: Request) -> Response:
        return paginated_response(
            request=request, view=self, queryset=api_key_list(), serializer_class=ApiKeyDetailApi.OutputSerializer
        )


class ApiKeyCreateApi(APIView):
    """Issue a key. The response carries its secret: the only time it is ever shown."""

    class InputSerializer(serializers.Serializer):
        name = serializers.CharField(allow_blank=True)
        user = serializers.CharField(
            required=False,
            allow_null=True,
            allow_blank=True,
            default=None,
            help_text="Owner's username (default: you).",
        )
        team = serializers.CharField(required=False, allow_null=True, allow_blank=True, default=None)
        application = serializers.CharField(required=False, allow_null=True, allow_blank=True, default=None)
        agent = serializers.CharField(required=False, allow_null=True, allow_blank=True, default=None)

        class Meta:
            ref_name = "ApiKeyCreateInput"

    class OutputSerializer(ApiKeyDetailApi.OutputSerializer):
        secret = serializers.CharField(help_text="The full key. Shown once; only its hash is stored.")

        class Meta:
            ref_name = "ApiKeyCreated"

    @extend_schema(operation_id="key_create", request=InputSerializer, responses={201: OutputSerializer})
    def post(self, request: Request) -> Response:
        data = input_validate(ApiKeyCreateApi.InputSerializer(data=request.data))
        username = data.pop("user")
        created = api_key_issue(actor=request.user, data=ApiKeyInput(**data), username=username)
        key = get_object_or_404(api_key_list(), pk=created.key.pk)
        key.secret = created.secret  # type: ignore[attr-defined]  # for OutputSerializer only; never stored
        response = Response(ApiKeyCreateApi.OutputSerializer(key).data, status=status.HTTP_201_CREATED)
        add_never_cache_headers(response)  # the only copy of the secret: no cache may keep it
        return response


class ApiKeyUpdateApi(APIView):
    """Rename a key or change the team, application and agent it names. Owner and secret never change."""

    class InputSerializer(serializers.Serializer):
        name = serializers.CharField(allow_blank=True)
        team = serializers.CharField(required=False, allow_null=True, allow_blank=True, default=None)
        application = serializers.CharField(required=False, allow_null=True, allow_blank=True, default=None)
        agent = serializers.CharField(required=False, allow_null=True, allow_blank=True, default=None)

        class Meta:
            ref_name = "ApiKeyUpdateInput"

    @extend_schema(operation_id="key_update", request=InputSerializer, responses=ApiKeyDetailApi.OutputSerializer)
    def put(self, request: Request, key_id: int) -> Response:
        return ApiKeyUpdateApi._update(request, key_id, partial=False)

    @extend_schema(
        operation_id="key_partial_update", request=InputSerializer, responses=ApiKeyDetailApi.OutputSerializer
    )
    def patch(self, request: Request, key_id: int) -> Response:
        return ApiKeyUpdateApi._update(request, key_id, partial=True)

    @staticmethod
    @row_locked_update(ApiKey, first=api_key_update_locks_first, input_serializer=InputSerializer)
    def _update(request: Request, key_id: int, *, partial: bool) -> Response:
        key = get_object_or_404(api_key_list(), pk=key_id)
        data = input_validate(ApiKeyUpdateApi.InputSerializer(data=request.data, partial=partial))
        current = {
            "name": key.name,
            "team": _name_or_none(key.team),
            "application": _name_or_none(key.application),
            "agent": _name_or_none(key.agent),
        }
        merged = {**current, **data} if partial else data
        key = api_key_update(actor=request.user, key=key, data=ApiKeyInput(**merged))
        return Response(ApiKeyDetailApi.OutputSerializer(key).data)


class ApiKeyRevokeApi(APIView):
    """DELETE revokes the key (it stops working at once) and keeps the row for the logs; repeating it is harmless."""

    @extend_schema(operation_id="key_revoke", responses={204: None})
    def delete(self, request: Request, key_id: int) -> Response:
        key = get_object_or_404(api_key_list(), pk=key_id)
        api_key_revoke(actor=request.user, key=key)
        return Response(status=status.HTTP_204_NO_CONTENT)
