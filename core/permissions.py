"""Role checks for console views and the API."""

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponseBase
from rest_framework.permissions import BasePermission

from core.roles import Role, has_role


def role_required(*roles: Role) -> Callable[[Callable[..., HttpResponseBase]], Callable[..., HttpResponseBase]]:
    """Console view decorator: anonymous users go to login, other roles get 403."""

    def decorator(view: Callable[..., HttpResponseBase]) -> Callable[..., HttpResponseBase]:
        @wraps(view)
        def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
            if not request.user.is_authenticated:
                return redirect_to_login(request.get_full_path())
            if not has_role(request.user, *roles):
                raise PermissionDenied("Your role does not allow this page.")
            return view(request, *args, **kwargs)

        return wrapped

    return decorator


class IsAdminRole(BasePermission):
    """API: only members of the admin group."""

    message = "Only the admin role may use this endpoint."

    def has_permission(self, request: Any, view: Any) -> bool:
        return bool(request.user and request.user.is_authenticated and has_role(request.user, Role.ADMIN))


class IsAuditReader(BasePermission):
    """API: admin and bi_read_only may read the audit log."""

    message = "Only the admin and bi_read_only roles may read the audit log."

    def has_permission(self, request: Any, view: Any) -> bool:
        return bool(
            request.user and request.user.is_authenticated and has_role(request.user, Role.ADMIN, Role.BI_READ_ONLY)
        )


class IsRequestLogReader(BasePermission):
    """API: admin, bi_read_only and user may read request logs (a user only their own keys' requests)."""

    message = "Your role does not allow reading request logs."

    def has_permission(self, request: Any, view: Any) -> bool:
        return bool(
            request.user
            and request.user.is_authenticated
            and has_role(request.user, Role.ADMIN, Role.BI_READ_ONLY, Role.USER)
        )
