from django.db import models
from django.db.models import Q

from catalog.enums import ScopeType
from catalog.models import LlmModel, Scoped


class RoutingRule(Scoped):
    """Rewrites the requested model for callers in a scope (before aliases and fallback)."""

    name = models.CharField(max_length=200)
    source_model = models.ForeignKey(LlmModel, on_delete=models.PROTECT, related_name="routing_rules_from")
    target_model = models.ForeignKey(LlmModel, on_delete=models.PROTECT, related_name="routing_rules_to")
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            # At most one rule per (source model, scope); global rules have no target id.
            models.UniqueConstraint(
                fields=["source_model", "scope_type", "scope_id"],
                condition=~Q(scope_type=ScopeType.GLOBAL),
                name="routing_rule_unique_scope",
            ),
            models.UniqueConstraint(
                fields=["source_model"], condition=Q(scope_type=ScopeType.GLOBAL), name="routing_rule_unique_global"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name}: {self.source_model} → {self.target_model}"


class Alias(models.Model):
    """A name clients may ask for, mapped to a concrete catalog model."""

    name = models.CharField(max_length=128, unique=True)
    model = models.ForeignKey(LlmModel, on_delete=models.PROTECT, related_name="aliases")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        verbose_name_plural = "aliases"

    def __str__(self) -> str:
        return f"{self.name} → {self.model}"
