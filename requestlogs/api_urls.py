"""Request logs API under /api/."""

from django.urls import path

from requestlogs.api import RequestLogDetailApi, RequestLogListApi

api_urlpatterns = [
    path("request-logs/", RequestLogListApi.as_view(), name="api-request-log-list"),
    path("request-logs/<str:request_id>/", RequestLogDetailApi.as_view(), name="api-request-log-detail"),
]
