"""Reads of routing rules, aliases and guardrails."""

from django.db.models import Q, QuerySet

from catalog.models import LlmModel
from routing.models import Alias, Guardrail, RoutingRule


def routing_rule_list() -> QuerySet[RoutingRule]:
    """Rules newest first, with their source and target models."""
    return RoutingRule.objects.select_related("source_model", "target_model").order_by("-created_at", "-id")


def alias_list() -> QuerySet[Alias]:
    """Aliases by name, with the model each maps to."""
    return Alias.objects.select_related("model").order_by("name", "id")


def routing_rules_referencing_model(*, model: LlmModel) -> list[str]:
    """Names of the rules that rewrite from or to `model`."""
    qs = RoutingRule.objects.filter(Q(source_model=model) | Q(target_model=model))
    return sorted(qs.values_list("name", flat=True))


def aliases_referencing_model(*, model: LlmModel) -> list[str]:
    """Names of the aliases that map to `model`."""
    return sorted(Alias.objects.filter(model=model).values_list("name", flat=True))


def guardrails_referencing_model(*, model: LlmModel) -> list[str]:
    """Names of the guardrails that match `model` or rewrite to it."""
    qs = Guardrail.objects.filter(Q(model=model) | Q(target_model=model))
    return sorted(set(qs.values_list("name", flat=True)))
