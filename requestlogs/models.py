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


# Histogram bucket edges in milliseconds, shared by latency, time to first byte and attempt duration. Bucket i
# counts values in [BUCKET_EDGES_MS[i - 1], BUCKET_EDGES_MS[i]) (bucket 0 from 0, the last one to infinity), so a
# percentile is interpolated inside one bucket: within one bucket of the exact value. Changing the edges needs
# a migration that rebuilds the aggregates (their columns are these buckets).
BUCKET_EDGES_MS: tuple[float, ...] = (
    10, 25, 50, 100, 150, 250, 400, 600, 800, 1000, 1500, 2000, 3000, 5000, 8000, 12000, 20000, 30000, 60000, 120000,
)  # fmt: skip
BUCKETS = len(BUCKET_EDGES_MS) + 1


class Tier(models.TextChoices):
    """Who served a request. Exclusive, first match wins: optimistic, failed, rejected, then the chain step.

    Optimistic first: a request that found every chain entry unavailable is counted as such whatever its
    status (the exhaustion alert counts them; the status-class chart shows how they ended).
    """

    PRIMARY = "primary", "Primary"
    STEP1 = "step1", "Chain step 1"
    STEP2 = "step2", "Chain step 2"
    STEP3PLUS = "step3plus", "Chain step 3+"
    OPTIMISTIC = "optimistic", "Optimistic primary"
    # Status >= 500, or no upstream served it and the answer was not a 4xx of the gateway's own.
    FAILED = "failed", "Failed"
    # A 4xx the gateway answered itself before calling any upstream (bad key, unknown model, invalid body,
    # over a limit): the client's mistake, not a reliability problem, so neither served nor failed.
    REJECTED = "rejected", "Rejected by the gateway"


FALLBACK_TIERS = (Tier.STEP1, Tier.STEP2, Tier.STEP3PLUS)


class StatusGroup(models.TextChoices):
    """The status classes of the aggregates; 499 (the client went away) apart, as Request Logs filters it."""

    OK = "2xx", "2xx"
    REDIRECT = "3xx", "3xx"
    CLIENT_ERROR = "4xx", "4xx"
    CLIENT_GONE = "client_gone", "Client gone (499)"
    SERVER_ERROR = "5xx", "5xx"
    OTHER = "other", "Other"


class RequestAggregate(models.Model):
    """Requests counted per period, source model (the requested model after routing), tier and status class.

    Kept exact on ingest: `requestlogs.services.request_logs_insert` adds each newly stored row in the same
    transaction, with upserts that add (`ON CONFLICT ... DO UPDATE SET n = n + excluded.n`).
    """

    start = models.DateTimeField()  # the period's first moment (UTC)
    source_model = models.CharField(max_length=128)
    tier = models.CharField(max_length=16, choices=Tier.choices)
    status_class = models.CharField(max_length=16, choices=StatusGroup.choices)
    requests = models.BigIntegerField(default=0)
    latency_sum_ms = models.FloatField(default=0)
    latency_max_ms = models.FloatField(default=0)
    ttfb_count = models.BigIntegerField(default=0)  # requests with a time to first byte
    ttfb_sum_ms = models.FloatField(default=0)
    ttfb_max_ms = models.FloatField(default=0)
    # Latency: one count per bucket of BUCKET_EDGES_MS (lat_00: under 10 ms ... lat_20: 120 s and more).
    lat_00 = models.IntegerField(default=0)
    lat_01 = models.IntegerField(default=0)
    lat_02 = models.IntegerField(default=0)
    lat_03 = models.IntegerField(default=0)
    lat_04 = models.IntegerField(default=0)
    lat_05 = models.IntegerField(default=0)
    lat_06 = models.IntegerField(default=0)
    lat_07 = models.IntegerField(default=0)
    lat_08 = models.IntegerField(default=0)
    lat_09 = models.IntegerField(default=0)
    lat_10 = models.IntegerField(default=0)
    lat_11 = models.IntegerField(default=0)
    lat_12 = models.IntegerField(default=0)
    lat_13 = models.IntegerField(default=0)
    lat_14 = models.IntegerField(default=0)
    lat_15 = models.IntegerField(default=0)
    lat_16 = models.IntegerField(default=0)
    lat_17 = models.IntegerField(default=0)
    lat_18 = models.IntegerField(default=0)
    lat_19 = models.IntegerField(default=0)
    lat_20 = models.IntegerField(default=0)
    # Time to first byte: one count per bucket of BUCKET_EDGES_MS (ttfb_00: under 10 ms ... ttfb_20: 120 s and more).
    ttfb_00 = models.IntegerField(default=0)
    ttfb_01 = models.IntegerField(default=0)
    ttfb_02 = models.IntegerField(default=0)
    ttfb_03 = models.IntegerField(default=0)
    ttfb_04 = models.IntegerField(default=0)
    ttfb_05 = models.IntegerField(default=0)
    ttfb_06 = models.IntegerField(default=0)
    ttfb_07 = models.IntegerField(default=0)
    ttfb_08 = models.IntegerField(default=0)
    ttfb_09 = models.IntegerField(default=0)
    ttfb_10 = models.IntegerField(default=0)
    ttfb_11 = models.IntegerField(default=0)
    ttfb_12 = models.IntegerField(default=0)
    ttfb_13 = models.IntegerField(default=0)
    ttfb_14 = models.IntegerField(default=0)
    ttfb_15 = models.IntegerField(default=0)
    ttfb_16 = models.IntegerField(default=0)
    ttfb_17 = models.IntegerField(default=0)
    ttfb_18 = models.IntegerField(default=0)
    ttfb_19 = models.IntegerField(default=0)
    ttfb_20 = models.IntegerField(default=0)

    class Meta:
        abstract = True

    def __str__(self) -> str:
        return f"{self.start:%Y-%m-%d %H:%M} {self.source_model} {self.tier} {self.status_class}: {self.requests}"


class RequestMinute(RequestAggregate):
    """Per minute: the 1 h and 24 h Dashboard ranges, alerts, counters. Kept REQUEST_AGGREGATE_MINUTE_DAYS."""

    class Meta:
        constraints = [
            # The upsert's conflict target; its leading column also serves every "start in a range" read.
            models.UniqueConstraint(fields=["start", "source_model", "tier", "status_class"], name="reqminute_key"),
        ]


class RequestQuarter(RequestAggregate):
    """Per quarter of an hour: the 24 h Dashboard range reads 96 periods instead of 1,440. Kept as the minutes."""

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["start", "source_model", "tier", "status_class"], name="reqquarter_key"),
        ]


class RequestHour(RequestAggregate):
    """Per hour: the 7 d Dashboard range reads 168 periods instead of 10,080. Kept REQUEST_AGGREGATE_HOUR_DAYS."""

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["start", "source_model", "tier", "status_class"], name="reqhour_key"),
        ]


class AttemptMinute(models.Model):
    """Upstream attempts per minute and (provider, model), from each request's `attempts` (Provider Health).

    An error is a status among the breaker's default failure codes (429, 5xx) or an error kind other than
    cancelled; a cancelled attempt counts as an attempt, not an error.
    """

    start = models.DateTimeField()
    provider = models.CharField(max_length=64)
    model = models.CharField(max_length=128)
    attempts = models.BigIntegerField(default=0)
    errors = models.BigIntegerField(default=0)
    duration_sum_ms = models.FloatField(default=0)
    duration_max_ms = models.FloatField(default=0)
    # Duration: one count per bucket of BUCKET_EDGES_MS (dur_00: under 10 ms ... dur_20: 120 s and more).
    dur_00 = models.IntegerField(default=0)
    dur_01 = models.IntegerField(default=0)
    dur_02 = models.IntegerField(default=0)
    dur_03 = models.IntegerField(default=0)
    dur_04 = models.IntegerField(default=0)
    dur_05 = models.IntegerField(default=0)
    dur_06 = models.IntegerField(default=0)
    dur_07 = models.IntegerField(default=0)
    dur_08 = models.IntegerField(default=0)
    dur_09 = models.IntegerField(default=0)
    dur_10 = models.IntegerField(default=0)
    dur_11 = models.IntegerField(default=0)
    dur_12 = models.IntegerField(default=0)
    dur_13 = models.IntegerField(default=0)
    dur_14 = models.IntegerField(default=0)
    dur_15 = models.IntegerField(default=0)
    dur_16 = models.IntegerField(default=0)
    dur_17 = models.IntegerField(default=0)
    dur_18 = models.IntegerField(default=0)
    dur_19 = models.IntegerField(default=0)
    dur_20 = models.IntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["start", "provider", "model"], name="attemptminute_key"),
        ]

    def __str__(self) -> str:
        return f"{self.start:%Y-%m-%d %H:%M} {self.provider}/{self.model}: {self.attempts}"
