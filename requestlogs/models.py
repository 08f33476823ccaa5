from django.db import models


class RequestLog(models.Model):
    """One record per gateway request, written in batches off the request path."""

    # The gateway assigns ids (uuid hex) so a batch retried after a crash is idempotent.
    request_id = models.CharField(max_length=32, unique=True)
    created_at = models.DateTimeField()
    key_id = models.BigIntegerField(null=True)
    user_id = models.BigIntegerField(null=True)
    team_id = models.BigIntegerField(null=True)
    application_id = models.BigIntegerField(null=True)
    agent_id = models.BigIntegerField(null=True)
    requested_model = models.CharField(max_length=128, blank=True, default="")
    routed_model = models.CharField(max_length=128, blank=True, default="")
    served_provider = models.CharField(max_length=64, blank=True, default="")
    served_model = models.CharField(max_length=128, blank=True, default="")
    # 0 = the primary target; n = the chain's n-th entry served.
    chain_step = models.PositiveSmallIntegerField(default=0)
    chain_id = models.BigIntegerField(null=True)
    fallback_triggered = models.BooleanField(default=False)
    fallback_from_provider = models.CharField(max_length=64, blank=True, default="")
    fallback_original_model = models.CharField(max_length=128, blank=True, default="")
    status = models.PositiveSmallIntegerField()
    stream = models.BooleanField(default=False)
    latency_ms = models.FloatField()
    ttfb_ms = models.FloatField(null=True)
    tokens_in = models.PositiveIntegerField(null=True)
    tokens_out = models.PositiveIntegerField(null=True)
    cost_usd = models.DecimalField(max_digits=14, decimal_places=8, null=True)
    error_kind = models.CharField(max_length=32, blank=True, default="")
    # [{"provider", "model", "status", "error", "duration_ms"}, ...] in call order.
    attempts = models.JSONField(default=list)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            # Request Logs page: newest first within a time range (keyset on created_at, id).
            models.Index(fields=["-created_at", "-id"], name="reqlog_time_idx"),
            # Filters combined with the time range.
            models.Index(fields=["served_provider", "served_model", "-created_at"], name="reqlog_served_idx"),
            models.Index(fields=["status", "-created_at"], name="reqlog_status_idx"),
            models.Index(fields=["fallback_triggered", "-created_at"], name="reqlog_fallback_idx"),
            # "Their own keys' request logs" for the user role.
            models.Index(fields=["user_id", "-created_at"], name="reqlog_user_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.request_id} {self.requested_model} {self.status}"
