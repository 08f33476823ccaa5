"""Routing API under /api/: one URL per collection and per object, one APIView per operation."""

from django.urls import path

from core.api import api_endpoint
from routing.api import (
    AliasCreateApi,
    AliasDeleteApi,
    AliasDetailApi,
    AliasListApi,
    AliasUpdateApi,
    RoutingRuleCreateApi,
    RoutingRuleDeleteApi,
    RoutingRuleDetailApi,
    RoutingRuleListApi,
    RoutingRuleUpdateApi,
)

api_urlpatterns = [
    path("routing-rules/", api_endpoint(RoutingRuleListApi, RoutingRuleCreateApi), name="api-routing-rules"),
    path(
        "routing-rules/<int:rule_id>/",
        api_endpoint(RoutingRuleDetailApi, RoutingRuleUpdateApi, RoutingRuleDeleteApi),
        name="api-routing-rule",
    ),
    path("aliases/", api_endpoint(AliasListApi, AliasCreateApi), name="api-aliases"),
    path("aliases/<int:alias_id>/", api_endpoint(AliasDetailApi, AliasUpdateApi, AliasDeleteApi), name="api-alias"),
]
