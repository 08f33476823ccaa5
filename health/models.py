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

    # Names, not foreign keys: circuits are keyed by names (a tracked circuit may name no catalog row). A catalog
    # rename carries overrides over, and a delete is refused while one names the row (health.apps).
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


class CircuitEvent(models.Model):
    """One state change of one circuit: the history behind Provider Health, the Dashboard and alerts.

    Transitions come from the breaker of the process that made them (kinds opened, half_open, closed,
    reopened), through an off-request-path buffer; operator actions (reset, forced_open, drained, released)
    are written by the health services in the transaction of their audit event.
    """

    class Kind(models.TextChoices):
        OPENED = "opened", "Opened"
        HALF_OPEN = "half_open", "Half-open"
        CLOSED = "closed", "Closed"
        REOPENED = "reopened", "Re-opened"
        RESET = "reset", "Reset"
        FORCED_OPEN = "forced_open", "Forced open"
        DRAINED = "drained", "Drained"
        RELEASED = "released", "Released"

    provider = models.CharField(max_length=64)
    # "" for a provider-wide event (drained, or released of a drain).
    model = models.CharField(max_length=128, blank=True, default="")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    at = models.DateTimeField()
    # The circuit's generation after a breaker transition: (provider, model, generation) is one transition,
    # whichever process reports it, so a redelivered event is stored once. Null for operator actions.
    generation = models.BigIntegerField(null=True, blank=True)
    failures = models.PositiveIntegerField(null=True, blank=True)
    total = models.PositiveIntegerField(null=True, blank=True)
    last_status = models.CharField(max_length=32, blank=True, default="")
    cooldown_seconds = models.FloatField(null=True, blank=True)
    # A transition made by one process deciding alone while the shared state (Redis) was unreachable.
    local = models.BooleanField(default=False)
    actor = models.CharField(max_length=150, blank=True, default="")
    reason = models.CharField(max_length=500, blank=True, default="")
    until = models.DateTimeField(null=True, blank=True)  # a hold's expiry (forced_open, drained)
    # The engine's id of the event (BreakerEvent.event_id), so a re-sent or redelivered event is stored once,
    # local ones included. Null for operator actions and for events shipped before ids existed.
    event_id = models.CharField(max_length=32, null=True, blank=True, unique=True)

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [
            models.Index(fields=["provider", "model", "-at"], name="circuitevent_circuit_idx"),
            models.Index(fields=["-at"], name="circuitevent_time_idx"),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["provider", "model", "generation"],
                condition=Q(generation__isnull=False, local=False),
                name="circuitevent_one_per_transition",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.provider}/{self.model} {self.kind} at {self.at:%Y-%m-%d %H:%M:%S}"


class CircuitControl(models.Model):
    """An operator's hold (the kill switch): a circuit forced open, or a provider drained, until released.

    Part of the breaker configuration: every gateway process loads these with the thresholds and follows
    their changes, and they outlive any restart. A row past `expires_at` no longer holds (the engines check
    the time); the expiry job removes it and records the release.
    """

    class Kind(models.TextChoices):
        FORCED_OPEN = "forced_open", "Forced open"
        DRAINED = "drained", "Drained"

    provider = models.CharField(max_length=64)
    # "" for a drain (every circuit of the provider).
    model = models.CharField(max_length=128, blank=True, default="")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    reason = models.CharField(max_length=500)
    expires_at = models.DateTimeField(null=True, blank=True)
    created_by = models.CharField(max_length=150)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["provider", "model"]
        constraints = [
            models.UniqueConstraint(fields=["provider", "model"], name="circuitcontrol_unique_target"),
            models.CheckConstraint(
                condition=Q(kind="drained", model="") | Q(kind="forced_open") & ~Q(model=""),
                name="circuitcontrol_kind_matches_target",
            ),
        ]

    def __str__(self) -> str:
        target = self.provider if not self.model else f"{self.provider}/{self.model}"
        return f"{target} {self.kind}"
