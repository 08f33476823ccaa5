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


def routing_rules_referencing_scope(*, scope_type: str, scope_id: int) -> list[str]:
    """Names of the rules scoped to one target (a team, application, agent, user or key)."""
    return sorted(RoutingRule.objects.filter(scope_type=scope_type, scope_id=scope_id).values_list("name", flat=True))


def guardrails_referencing_scope(*, scope_type: str, scope_id: int) -> list[str]:
    """Names of the guardrails scoped to one target (a team, application, agent, user or key)."""
    return sorted(Guardrail.objects.filter(scope_type=scope_type, scope_id=scope_id).values_list("name", flat=True))


def alias_name_taken(*, name: str) -> bool:
    """Whether an alias has this name (a model cannot take it: clients could not tell them apart)."""
    return Alias.objects.filter(name=name).exists()
