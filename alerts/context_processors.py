"""Frame data for admins on every console page: the firing-alerts banner and the Alerts link."""

from typing import Any

from django.http import HttpRequest
from django.urls import reverse
from django.utils.functional import SimpleLazyObject

from alerts.selectors import alert_banner
from core.roles import Role, has_role


def alerts(request: HttpRequest) -> dict[str, Any]:
    """`alert_banner` (lazy: queried once, only by a page that shows it) and `alerts_url`, admins only."""
    user = getattr(request, "user", None)
    if user is None or not has_role(user, Role.ADMIN):
        return {}
    return {"alert_banner": SimpleLazyObject(alert_banner), "alerts_url": reverse("alerts:list")}
