"""Fallback chains API under /api/."""

from django.urls import path

from chains.api import (
    ChainCreateApi,
    ChainDeleteApi,
    ChainDetailApi,
    ChainListApi,
    ChainUpdateApi,
    ResilienceDefaultsApi,
)
from core.api import api_endpoint

api_urlpatterns = [
    path("chains/", api_endpoint(ChainListApi, ChainCreateApi), name="api-chains"),
    path(
        "chains/<int:chain_id>/",
        api_endpoint(ChainDetailApi, ChainUpdateApi, ChainDeleteApi),
        name="api-chain",
    ),
    path("resilience/defaults/", ResilienceDefaultsApi.as_view(), name="api-resilience-defaults"),
]
