from django.db import models
from django.db.models import Q

from health.breaker.types import DEFAULT_FAILURE_STATUS_CODES


def _default_status_codes() -> list[int]:
    return list(DEFAULT_FAILURE_STATUS_CODES)


class BreakerConfig(models.Model):
    """The global breaker thresholds: one row (pk=1), created on the first save."""

    SINGLETON_PK = 1

    failure_threshold = models.PositiveIntegerField(default=5)
    window_seconds = models.PositiveIntegerField(default=60)
    initial_cooldown_seconds = models.PositiveIntegerField(default=60)
    cooldown_cap_seconds = models.PositiveIntegerField(default=300)
    minimum_requests = models.PositiveIntegerField(default=10)
    failure_status_codes = models.JSONField(default=_default_status_codes)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.CheckConstraint(condition=Q(pk=1), name="health_breakerconfig_singleton")]

    def __str__(self) -> str:
        return "Breaker configuration"


class BreakerOverride(models.Model):
    """Per-(provider, model) thresholds; a null field inherits the global row's value."""

    # Names, not foreign keys: circuits are keyed by names, and an override must not block catalog edits.
    provider = models.CharField(max_length=64)
    model = models.CharField(max_length=128)
    failure_threshold = models.PositiveIntegerField(null=True, blank=True)
    window_seconds = models.PositiveIntegerField(null=True, blank=True)
    initial_cooldown_seconds = models.PositiveIntegerField(null=True, blank=True)
    cooldown_cap_seconds = models.PositiveIntegerField(null=True, blank=True)
    minimum_requests = models.PositiveIntegerField(null=True, blank=True)
    failure_status_codes = models.JSONField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["provider", "model"]
        constraints = [
            # One override per circuit; also serves the lookup by (provider, model).
            models.UniqueConstraint(fields=["provider", "model"], name="health_breakeroverride_unique_pair"),
        ]

    def __str__(self) -> str:
        return f"{self.provider}/{self.model}"
