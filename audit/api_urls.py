"""Audit log API under /api/."""

from django.urls import path

from audit.api import AuditEventListApi

api_urlpatterns = [
    path("audit/", AuditEventListApi.as_view(), name="api-audit"),
]
