"""Alert rules, the alerts they open, and the webhook deliveries of each opening and resolution."""

from django.db import models
from django.db.models import Q

from alerts.webhooks import webhook_url_redacted


class RuleKind(models.TextChoices):
    CIRCUIT_OPEN = "circuit_open", "Circuit open too long"
    DEGRADED = "degraded", "Degraded traffic (fallback share)"
    EXHAUSTED = "exhausted", "Chain exhausted"


class BodyFormat(models.TextChoices):
    JSON = "json", "JSON"
    SLACK = "slack", "Slack-compatible"


class AlertRule(models.Model):
    """What to watch and where to say so. Parameters a kind does not use are stored as null / ""."""

    name = models.CharField(max_length=200, unique=True)
    kind = models.CharField(max_length=16, choices=RuleKind.choices)
    # circuit_open: optionally one provider and/or model; degraded / exhausted: optionally one source model.
    provider = models.CharField(max_length=64, blank=True, default="")
    model = models.CharField(max_length=128, blank=True, default="")
    # circuit_open: N (open longer than); degraded / exhausted: M (the window). Also the clear window.
    minutes = models.PositiveIntegerField()
    threshold_percent = models.FloatField(null=True, blank=True)  # degraded: X
    min_requests = models.PositiveIntegerField(null=True, blank=True)  # degraded: V
    min_count = models.PositiveIntegerField(null=True, blank=True)  # exhausted: K
    enabled = models.BooleanField(default=True)
    webhook_url = models.CharField(max_length=2000, blank=True, default="")
    body_format = models.CharField(max_length=8, choices=BodyFormat.choices, default=BodyFormat.JSON)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name", "id"]

    def __str__(self) -> str:
        return self.name


class AlertState(models.TextChoices):
    FIRING = "firing", "Firing"
    RESOLVED = "resolved", "Resolved"


class Alert(models.Model):
    """One firing of one rule for one subject (a circuit "provider/model", or a source model), then its history.

    The rule's name and kind are copied so the history reads the same after the rule is edited or deleted.
    """

    rule = models.ForeignKey(AlertRule, on_delete=models.SET_NULL, null=True, related_name="alerts")
    rule_name = models.CharField(max_length=200)
    kind = models.CharField(max_length=16, choices=RuleKind.choices)
    subject = models.CharField(max_length=200)
    state = models.CharField(max_length=8, choices=AlertState.choices, default=AlertState.FIRING)
    # The latest figures while firing (kept as they were last seen once it resolves).
    figures = models.JSONField(default=dict)
    summary = models.CharField(max_length=500, blank=True, default="")
    opened_at = models.DateTimeField()
    last_seen_at = models.DateTimeField()  # the last evaluation that found the condition true
    # The first evaluation that found the condition clear (null while it holds); resolves a window later.
    clear_since = models.DateTimeField(null=True, blank=True)
    resolved_at = models.DateTimeField(null=True, blank=True)
    resolution = models.CharField(max_length=200, blank=True, default="")

    class Meta:
        ordering = ["-opened_at", "-id"]
        indexes = [
            # The banner on every console page and the firing list: firing alerts, newest first.
            models.Index(fields=["-opened_at", "-id"], condition=Q(state="firing"), name="alert_firing_idx"),
            # The history, newest first.
            models.Index(fields=["-opened_at", "-id"], name="alert_time_idx"),
        ]
        constraints = [
            # One open alert per (rule, subject), however many evaluators run at once.
            models.UniqueConstraint(fields=["rule", "subject"], condition=Q(state="firing"), name="alert_one_firing"),
        ]

    def __str__(self) -> str:
        return f"{self.rule_name}: {self.subject} ({self.state})"


class DeliveryStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    DELIVERED = "delivered", "Delivered"
    FAILED = "failed", "Failed"


class DeliveryEvent(models.TextChoices):
    OPENED = "opened", "Opened"
    RESOLVED = "resolved", "Resolved"


class Delivery(models.Model):
    """One webhook notification (an alert opened or resolved), with its body fixed when it was created."""

    alert = models.ForeignKey(Alert, on_delete=models.CASCADE, related_name="deliveries")
    event = models.CharField(max_length=8, choices=DeliveryEvent.choices)
    url = models.CharField(max_length=2000)
    body_format = models.CharField(max_length=8, choices=BodyFormat.choices)
    payload = models.JSONField()
    status = models.CharField(max_length=10, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField()
    next_attempt_at = models.DateTimeField()
    # A sender holds the row until this time while it sends (a conditional UPDATE takes it); a sender that
    # died mid-send leaves it to be taken again after the lease.
    claimed_until = models.DateTimeField(null=True, blank=True)
    claim_token = models.CharField(max_length=32, blank=True, default="")
    delivered_at = models.DateTimeField(null=True, blank=True)
    last_error = models.CharField(max_length=500, blank=True, default="")

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [
            # The sender's sweep: pending rows whose next attempt is due.
            models.Index(fields=["next_attempt_at"], condition=Q(status="pending"), name="delivery_due_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.event} of alert {self.alert_id} to {self.url_redacted} ({self.status})"

    @property
    def url_redacted(self) -> str:
        """The target as the delivery log shows it: scheme and host, the path (a webhook's secret) hidden."""
        return webhook_url_redacted(self.url)


class DeliveryAttempt(models.Model):
    """One POST of a delivery: when, what came back (a status code or an error), how long it took."""

    delivery = models.ForeignKey(Delivery, on_delete=models.CASCADE, related_name="attempt_log")
    number = models.PositiveIntegerField()
    at = models.DateTimeField()
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    error = models.CharField(max_length=500, blank=True, default="")
    duration_ms = models.FloatField()

    class Meta:
        ordering = ["at", "id"]

    def __str__(self) -> str:
        return f"attempt {self.number} of delivery {self.delivery_id}"
