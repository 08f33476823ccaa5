"""Writes of authentication throttles: a failure counted, a lockout and an unlock, each audited."""

from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from access.models import AuthThrottle
from access.selectors import Ident
from audit.services import audit_record


def _window() -> timedelta:
    return timedelta(seconds=settings.AUTH_FAILURE_WINDOW_SECONDS)


def _cooloff() -> timedelta:
    return timedelta(seconds=settings.AUTH_LOCKOUT_SECONDS)


@transaction.atomic
def auth_failure_record(*, scope: str, idents: list[Ident], address: str) -> datetime | None:
    """Count one failed attempt against each account or address; lock one out when it reaches AUTH_FAILURE_LIMIT
    failures within AUTH_FAILURE_WINDOW_SECONDS, for AUTH_LOCKOUT_SECONDS (audited as "auth.lockout").

    Returns when the latest lockout among `idents` ends, or None when none is locked.
    """
    now = timezone.now()
    horizon = now - max(_window(), _cooloff())
    # Rows whose failures and lockout have all expired tell nothing any more.
    AuthThrottle.objects.filter(updated_at__lt=horizon).filter(Q(locked_until=None) | Q(locked_until__lt=now)).delete()
    oldest = (now - _window()).timestamp()
    locked: datetime | None = None
    for kind, value in idents:
        # Row lock: concurrent failures of one account (several console processes) count once each.
        throttle, _ = AuthThrottle.objects.select_for_update().get_or_create(
            scope=scope, kind=kind, value=value, defaults={"updated_at": now}
        )
        if throttle.locked_until is not None and throttle.locked_until > now:
            locked = max(locked or throttle.locked_until, throttle.locked_until)
            continue  # attempts during a lockout are refused unchecked and do not extend it
        failures = [t for t in throttle.failures if t > oldest] + [now.timestamp()]
        throttle.updated_at = now
        if len(failures) >= settings.AUTH_FAILURE_LIMIT:
            throttle.failures = []  # the lockout consumes them: after it, counting starts again
            throttle.locked_until = now + _cooloff()
            throttle.save()
            audit_record(
                actor=None,
                action="auth.lockout",
                object_type="auth_throttle",
                object_id=throttle.pk,
                object_repr=str(throttle),
                after={
                    "scope": scope,
                    "kind": kind,
                    "value": value,
                    "failures": len(failures),
                    "locked_until": throttle.locked_until.isoformat(),
                    "client_address": address,
                },
            )
            locked = max(locked or throttle.locked_until, throttle.locked_until)
        else:
            throttle.failures = failures
            throttle.locked_until = None
            throttle.save()
    return locked


@transaction.atomic
def auth_unlock(*, actor: Any, throttle: AuthThrottle) -> bool:
    """End a lockout now and forget its failures (audited as "auth.unlock"); False when it was not locked."""
    now = timezone.now()
    current = AuthThrottle.objects.select_for_update().filter(pk=throttle.pk).first()
    if current is None or current.locked_until is None or current.locked_until <= now:
        return False
    before = current.locked_until
    current.locked_until = None
    current.failures = []
    current.updated_at = now
    current.save()
    audit_record(
        actor=actor,
        action="auth.unlock",
        object_type="auth_throttle",
        object_id=current.pk,
        object_repr=str(current),
        before={"locked_until": before.isoformat()},
        after={"locked_until": None},
    )
    throttle.refresh_from_db()
    return True
