"""API plumbing shared by every app: the exception handler and pagination."""

from typing import Any

from rest_framework import status
from rest_framework.exceptions import NotAuthenticated
from rest_framework.pagination import PageNumberPagination
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from controlplane.errors import ApplicationError


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """Map ApplicationError to 400/409 with a message and per-field errors."""
    if isinstance(exc, ApplicationError):
        body: dict[str, Any] = {"detail": exc.message}
        if exc.errors:
            body["errors"] = exc.errors
        return Response(body, status=exc.status_code)
    response = drf_exception_handler(exc, context)
    if response is not None and isinstance(exc, NotAuthenticated):
        response.status_code = status.HTTP_401_UNAUTHORIZED
    return response


class StandardPagination(PageNumberPagination):
    page_size = 25
    page_size_query_param = "page_size"
    max_page_size = 100
