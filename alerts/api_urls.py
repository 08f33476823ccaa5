"""Alerts API under /api/."""

from django.urls import path

from alerts.api import (
    AlertDetailApi,
    AlertListApi,
    RuleCreateApi,
    RuleDeleteApi,
    RuleDetailApi,
    RuleListApi,
    RuleUpdateApi,
)
from core.api import api_endpoint

api_urlpatterns = [
    path("alerts/rules/", api_endpoint(RuleListApi, RuleCreateApi), name="api-alert-rules"),
    path(
        "alerts/rules/<int:rule_id>/", api_endpoint(RuleDetailApi, RuleUpdateApi, RuleDeleteApi), name="api-alert-rule"
    ),
    path("alerts/", AlertListApi.as_view(), name="api-alerts"),
    path("alerts/<int:alert_id>/", AlertDetailApi.as_view(), name="api-alert"),
]
