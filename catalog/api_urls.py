"""Catalog API under /api/: one URL per collection and per object, one APIView per operation."""

from django.urls import path

from catalog.api import (
    AgentCreateApi,
    AgentDeleteApi,
    AgentDetailApi,
    AgentListApi,
    AgentUpdateApi,
    ApiKeyCreateApi,
    ApiKeyDetailApi,
    ApiKeyListApi,
    ApiKeyRevokeApi,
    ApiKeyUpdateApi,
    ApplicationCreateApi,
    ApplicationDeleteApi,
    ApplicationDetailApi,
    ApplicationListApi,
    ApplicationUpdateApi,
    LlmModelCreateApi,
    LlmModelDeleteApi,
    LlmModelDetailApi,
    LlmModelListApi,
    LlmModelUpdateApi,
    ProviderCreateApi,
    ProviderDeleteApi,
    ProviderDetailApi,
    ProviderListApi,
    ProviderUpdateApi,
    TeamCreateApi,
    TeamDeleteApi,
    TeamDetailApi,
    TeamListApi,
    TeamUpdateApi,
)
from core.api import api_endpoint

api_urlpatterns = [
    path("providers/", api_endpoint(ProviderListApi, ProviderCreateApi), name="api-providers"),
    path(
        "providers/<int:provider_id>/",
        api_endpoint(ProviderDetailApi, ProviderUpdateApi, ProviderDeleteApi),
        name="api-provider",
    ),
    path("models/", api_endpoint(LlmModelListApi, LlmModelCreateApi), name="api-models"),
    path(
        "models/<int:model_id>/",
        api_endpoint(LlmModelDetailApi, LlmModelUpdateApi, LlmModelDeleteApi),
        name="api-model",
    ),
    path("teams/", api_endpoint(TeamListApi, TeamCreateApi), name="api-teams"),
    path("teams/<int:team_id>/", api_endpoint(TeamDetailApi, TeamUpdateApi, TeamDeleteApi), name="api-team"),
    path("applications/", api_endpoint(ApplicationListApi, ApplicationCreateApi), name="api-applications"),
    path(
        "applications/<int:application_id>/",
        api_endpoint(ApplicationDetailApi, ApplicationUpdateApi, ApplicationDeleteApi),
        name="api-application",
    ),
    path("agents/", api_endpoint(AgentListApi, AgentCreateApi), name="api-agents"),
    path("agents/<int:agent_id>/", api_endpoint(AgentDetailApi, AgentUpdateApi, AgentDeleteApi), name="api-agent"),
    path("keys/", api_endpoint(ApiKeyListApi, ApiKeyCreateApi), name="api-keys"),
    path("keys/<int:key_id>/", api_endpoint(ApiKeyDetailApi, ApiKeyUpdateApi, ApiKeyRevokeApi), name="api-key"),
]
