"""Reads of authentication throttles and of dismissed console notices."""

from datetime import datetime

from django.db.models import Max
from django.utils import timezone

from access.models import AuthThrottle, DismissedNotice
from core.types import Actor

Ident = tuple[str, str]  # (ThrottleKind, value)


def auth_locked_until(*, scope: str, idents: list[Ident]) -> datetime | None:
    """When the latest lockout of any of these accounts or addresses ends, or None when none is locked now."""
    if not idents:
        return None
    now = timezone.now()
    found: datetime | None = None
    for kind, value in idents:
        until = AuthThrottle.objects.filter(scope=scope, kind=kind, value=value, locked_until__gt=now).aggregate(
            until=Max("locked_until")
        )["until"]
        if until is not None and (found is None or until > found):
            found = until
    return found


def notice_dismissed(*, user: Actor, notice: str) -> bool:
    """Whether `user` dismissed `notice` (an anonymous user never did)."""
    if user is None or not user.is_authenticated:
        return False
    return DismissedNotice.objects.filter(user_id=user.pk, notice=notice).exists()
