from django.conf import settings
from django.db import models
from django.db.models import Q

from catalog.enums import ScopeType
from catalog.models import LlmModel, Provider, Scoped
from core.validators import validate_name

MAX_ENTRIES = 10


class FallbackChain(Scoped):
    name = models.CharField(max_length=200, validators=[validate_name])
    source_model = models.ForeignKey(LlmModel, on_delete=models.PROTECT, related_name="chains")
    enabled = models.BooleanField(default=True)
    # The resilience policy: only the knobs the admin set (chains.resilience); {} = off, every knob default.
    resilience = models.JSONField(default=dict, blank=True)
    # Optimistic locking: every save must name the version it edited.
    version = models.PositiveIntegerField(default=1)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            # At most one chain per (source model, scope). NULL target ids never collide,
            # so global chains get their own constraint.
            models.UniqueConstraint(
                fields=["source_model", "scope_type", "scope_id"],
                condition=~Q(scope_type=ScopeType.GLOBAL),
                name="chain_unique_scope",
            ),
            models.UniqueConstraint(
                fields=["source_model"], condition=Q(scope_type=ScopeType.GLOBAL), name="chain_unique_global"
            ),
        ]
        indexes = [
            # Default list order: newest first.
            models.Index(fields=["-created_at", "-id"], name="chain_newest_idx"),
        ]

    def __str__(self) -> str:
        return self.name


class ChainEntry(models.Model):
    chain = models.ForeignKey(FallbackChain, on_delete=models.CASCADE, related_name="entries")
    position = models.PositiveSmallIntegerField()
    model = models.ForeignKey(LlmModel, on_delete=models.PROTECT, related_name="chain_entries")
    # Optional: serve this model through another provider than its default one.
    provider = models.ForeignKey(
        Provider, null=True, blank=True, on_delete=models.PROTECT, related_name="chain_entries"
    )

    class Meta:
        ordering = ["chain", "position"]
        constraints = [models.UniqueConstraint(fields=["chain", "position"], name="chain_entry_unique_position")]

    def __str__(self) -> str:
        return f"{self.chain_id}#{self.position}: {self.model_id}"

    @property
    def served_by(self) -> Provider:
        return self.provider or self.model.provider


class ResilienceDefaults(models.Model):
    """The global default resilience policy: one row (pk 1), created on its first edit.

    `policy` holds only the knobs an admin set; the others take chains.resilience.RESILIENCE_DEFAULTS.
    New chains start from its `enabled`; every chain's omitted knob falls back to it.
    """

    SINGLETON_ID = 1

    policy = models.JSONField(default=dict, blank=True)
    version = models.PositiveIntegerField(default=1)
    updated_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "resilience defaults"
        verbose_name_plural = "resilience defaults"

    def __str__(self) -> str:
        return "Resilience defaults"
