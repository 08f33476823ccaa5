from django.db import models
from django.db.models import Q


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
    # Every chain entry was unavailable (or there was no chain) and the open primary was tried anyway.
    optimistic_primary = models.BooleanField(default=False)
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
        # Every Request Logs query is "newest (or oldest) first within a time range", paged by keyset on
        # (created_at, id). Each equality filter has its own (column, created_at, id) index, so a filtered page
        # is one index range scan that stops after page_size rows, whatever the page. Rare conditions get
        # partial indexes in time order instead (a few % of the rows each). Common ones (stream, 2xx,
        # fallback = no) scan the time index and filter: most rows match, so a page stops early.
        indexes = [
            # No filter, and common filters (stream, 2xx, fallback = no, chain step 0).
            models.Index(fields=["-created_at", "-id"], name="reqlog_time_idx"),
            # Filter: requested model.
            models.Index(fields=["requested_model", "-created_at", "-id"], name="reqlog_requested_idx"),
            # Filter: served model (and the circuit link, provider + model: the model nearly implies the provider).
            models.Index(fields=["served_model", "-created_at", "-id"], name="reqlog_served_model_idx"),
            # Filter: provider.
            models.Index(fields=["served_provider", "-created_at", "-id"], name="reqlog_provider_idx"),
            # Filters: gateway key, team, application.
            models.Index(fields=["key_id", "-created_at", "-id"], name="reqlog_key_idx"),
            models.Index(fields=["team_id", "-created_at", "-id"], name="reqlog_team_idx"),
            models.Index(fields=["application_id", "-created_at", "-id"], name="reqlog_application_idx"),
            # The user role: only their own keys' requests.
            models.Index(fields=["user_id", "-created_at", "-id"], name="reqlog_user_time_idx"),
            # Status 4xx / 5xx / client gone (errors are a few % of the rows).
            models.Index(fields=["-created_at", "-id"], condition=Q(status__gte=400), name="reqlog_errors_idx"),
            # Fallback = yes.
            models.Index(
                fields=["-created_at", "-id"], condition=Q(fallback_triggered=True), name="reqlog_fallback_time_idx"
            ),
            # Chain step n > 0 (the planner proves chain_step = n implies chain_step > 0).
            models.Index(fields=["-created_at", "-id"], condition=Q(chain_step__gt=0), name="reqlog_chain_step_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.request_id} {self.requested_model} {self.status}"
