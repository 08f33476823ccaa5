from django.db import models
from django.db.models import Q

from catalog.enums import ScopeType
from catalog.models import LlmModel, Scoped
from core.validators import validate_name


class RoutingRule(Scoped):
    """Rewrites the requested model for callers in a scope (before aliases and fallback)."""

    name = models.CharField(max_length=200, validators=[validate_name])
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

    name = models.CharField(max_length=128, unique=True, validators=[validate_name])
    model = models.ForeignKey(LlmModel, on_delete=models.PROTECT, related_name="aliases")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        verbose_name_plural = "aliases"

    def __str__(self) -> str:
        return f"{self.name} → {self.model}"


class GuardrailAction(models.TextChoices):
    DENY = "deny", "Refuse the request"
    REWRITE = "rewrite", "Rewrite the model"


class Guardrail(Scoped):
    """A scoped check before routing: refuse a model (403 with `message`) or rewrite it to another.

    `model` empty matches every model. For one (model, scope) the most specific enabled
    guardrail wins, a model-specific one before a catch-all in the same scope.
    """

    name = models.CharField(max_length=200, validators=[validate_name])
    model = models.ForeignKey(
        LlmModel,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="guardrails",
        help_text="Leave empty to match every model.",
    )
    action = models.CharField(max_length=16, choices=GuardrailAction.choices, default=GuardrailAction.DENY)
    target_model = models.ForeignKey(
        LlmModel,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="guardrails_to",
        help_text="For rewrite: the model to call instead.",
    )
    message = models.CharField(
        max_length=300, blank=True, default="", help_text="For deny: the reason the client sees."
    )
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(
                condition=Q(action="deny") | Q(target_model__isnull=False), name="guardrail_rewrite_has_target"
            ),
        ]

    def __str__(self) -> str:
        return self.name
