from typing import Any

from django.conf import settings
from django.http import HttpRequest

from core.roles import ROLE_LABELS, Role, has_role, primary_role


def console(request: HttpRequest) -> dict[str, Any]:
    """Frame data: environment badge, role, and which nav links this role may see."""
    user = request.user
    role = primary_role(user)
    return {
        "environment_name": settings.ENVIRONMENT_NAME,
        "user_role": role,
        "user_role_label": ROLE_LABELS.get(role, "No role") if role else "No role",
        "nav": {
            "dashboard": has_role(user, Role.ADMIN, Role.BI_READ_ONLY),
            "fallback": has_role(user, Role.ADMIN),
            "request_logs": has_role(user, Role.ADMIN, Role.BI_READ_ONLY, Role.USER),
            "audit": has_role(user, Role.ADMIN, Role.BI_READ_ONLY),
            "admin": user.is_authenticated and user.is_staff,
        },
    }
