from django.conf import settings
from django.db import models

from access.enums import Notice, ThrottleKind, ThrottleScope


class AuthThrottle(models.Model):
    """Recent authentication failures of one account name or client address, and its lockout."""

    scope = models.CharField(max_length=16, choices=ThrottleScope.choices)
    kind = models.CharField(max_length=16, choices=ThrottleKind.choices)
    # A username as typed (it need not exist) or a client address (an IPv6 address as its /64).
    value = models.CharField(max_length=150)
    # Epoch seconds of the failures inside the window, oldest first (at most AUTH_FAILURE_LIMIT of them).
    failures = models.JSONField(default=list)
    locked_until = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField()

    class Meta:
        verbose_name = "sign-in lockout"
        verbose_name_plural = "sign-in lockouts"
        constraints = [models.UniqueConstraint(fields=["scope", "kind", "value"], name="auth_throttle_unique")]
        # Pruning rows whose failures and lockout have all expired.
        indexes = [models.Index(fields=["updated_at"], name="auth_throttle_updated_idx")]

    def __str__(self) -> str:
        return f"{self.get_scope_display()}: {self.get_kind_display().lower()} {self.value}"


class DismissedNotice(models.Model):
    """A console notice one user dismissed: kept in the database, so it stays dismissed on every session and
    device of that user (a UI preference: not audited)."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="dismissed_notices")
    notice = models.CharField(max_length=64, choices=Notice.choices)
    dismissed_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "notice"], name="dismissed_notice_unique")]

    def __str__(self) -> str:
        return f"{self.user} dismissed {self.notice}"
