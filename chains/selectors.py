"""Reads of fallback chains."""

from collections.abc import Iterable
from dataclasses import dataclass

from django.db.models import Prefetch, Q, QuerySet

from catalog.models import LlmModel, Provider
from catalog.scopes import Scope, scopes_overlap
from chains.models import ChainEntry, FallbackChain, ResilienceDefaults
from chains.resilience import RESILIENCE_DEFAULTS

# Sort keys the list accepts (URL value → ORM ordering). "-" prefix = descending.
CHAIN_ORDERINGS: dict[str, tuple[str, ...]] = {
    "name": ("name", "id"),
    "source_model": ("source_model__name", "id"),
    "scope": ("scope_type", "scope_id", "id"),
    "status": ("enabled", "id"),
    "created": ("created_at", "id"),
    "updated": ("updated_at", "id"),
}
DEFAULT_CHAIN_ORDERING = "-created"


def _with_entries(qs: QuerySet[FallbackChain]) -> QuerySet[FallbackChain]:
    return qs.select_related("source_model", "source_model__provider").prefetch_related(
        Prefetch("entries", queryset=ChainEntry.objects.select_related("model", "model__provider", "provider"))
    )


def chain_list(*, search: str = "", ordering: str = DEFAULT_CHAIN_ORDERING) -> QuerySet[FallbackChain]:
    """Chains matching every word of `search` (name or source model), sorted by `ordering`."""
    qs = FallbackChain.objects.all()
    for word in search.split():
        qs = qs.filter(Q(name__icontains=word) | Q(source_model__name__icontains=word))
    key = ordering.lstrip("-")
    fields = CHAIN_ORDERINGS.get(key) or CHAIN_ORDERINGS["created"]
    if key not in CHAIN_ORDERINGS:
        ordering = DEFAULT_CHAIN_ORDERING
    if ordering.startswith("-"):
        fields = tuple(f"-{f}" for f in fields)
    return _with_entries(qs.order_by(*fields))


def chain_get(*, chain_id: int) -> FallbackChain:
    """One chain with its entries; raises FallbackChain.DoesNotExist."""
    return _with_entries(FallbackChain.objects.all()).get(pk=chain_id)


def chains_referencing_model(*, model: LlmModel) -> list[str]:
    names = FallbackChain.objects.filter(Q(source_model=model) | Q(entries__model=model)).distinct()
    return sorted(names.values_list("name", flat=True))


def chains_referencing_provider(*, provider: Provider) -> list[str]:
    qs = FallbackChain.objects.filter(
        Q(source_model__provider=provider) | Q(entries__provider=provider) | Q(entries__model__provider=provider)
    ).distinct()
    return sorted(qs.values_list("name", flat=True))


def chains_referencing_scope(*, scope_type: str, scope_id: int) -> list[str]:
    """Names of the chains scoped to one target (a team, application, agent, user or key)."""
    qs = FallbackChain.objects.filter(scope_type=scope_type, scope_id=scope_id)
    return sorted(qs.values_list("name", flat=True))


def chain_snapshot(chain: FallbackChain) -> dict[str, object]:
    """The chain as plain data: what audit events record and the API returns."""
    return {
        "name": chain.name,
        "source_model": chain.source_model.name,
        "entries": [
            {"model": e.model.name, "provider": e.provider.name if e.provider is not None else None}
            for e in chain.entries.all()
        ],
        "scope": {"type": chain.scope_type, "id": chain.scope_id},
        "enabled": chain.enabled,
        "resilience": dict(chain.resilience or {}),
    }


def resilience_defaults_get() -> ResilienceDefaults:
    """The global default policy row; an unsaved one (version 1, nothing set) until its first edit."""
    row = ResilienceDefaults.objects.filter(pk=ResilienceDefaults.SINGLETON_ID).first()
    return row or ResilienceDefaults(pk=ResilienceDefaults.SINGLETON_ID, policy={}, version=1)


def resilience_defaults_effective(row: ResilienceDefaults) -> dict[str, object]:
    """Every knob of the global default policy: what the row sets over the built-in defaults."""
    return {**RESILIENCE_DEFAULTS, **{k: v for k, v in (row.policy or {}).items() if k in RESILIENCE_DEFAULTS}}


def cost_ratio(*, source: LlmModel, model: LlmModel) -> float | None:
    """Entry price relative to the source (input + output per 1M tokens); None when the source is free."""
    base = source.blended_price
    if base <= 0:
        return None
    return model.blended_price / base


def cost_hint(*, source: LlmModel, model: LlmModel) -> str:
    """Text such as "0.2× source cost" for the chain editor."""
    ratio = cost_ratio(source=source, model=model)
    if ratio is None:
        return "source has no price"
    text = f"{ratio:.0f}" if ratio >= 10 else f"{ratio:.2g}"
    return f"{text}× source cost"


@dataclass(frozen=True)
class ChainWarning:
    kind: str  # "routing_rule" | "capability"
    message: str


def chain_warnings(*, source: LlmModel, entries: list[LlmModel], scope: Scope) -> list[ChainWarning]:
    """Non-blocking warnings for the editor: a routing rule rewrites the source away; an entry lacks a capability."""
    from routing.models import RoutingRule

    warnings: list[ChainWarning] = []
    rules = RoutingRule.objects.filter(source_model=source, enabled=True).select_related("target_model")
    for rule in rules:
        if rule.target_model_id != source.pk and scopes_overlap(Scope(rule.scope_type, rule.scope_id), scope):
            warnings.append(
                ChainWarning(
                    "routing_rule",
                    f"Routing rule “{rule.name}” rewrites {source.name} to {rule.target_model.name} "
                    f"in an overlapping scope, so callers there never reach this chain.",
                )
            )
    needed = set(source.capabilities or [])
    for model in entries:
        missing = sorted(needed - set(model.capabilities or []))
        if missing:
            warnings.append(
                ChainWarning(
                    "capability",
                    f"{model.name} lacks {', '.join(missing)} that {source.name} has; "
                    f"requests using it may fail when served from this entry.",
                )
            )
    return warnings


@dataclass(frozen=True)
class ChainLink:
    """A chain that lists a circuit: as its source model (`position` None) or as entry `position` (1-based)."""

    chain_id: int
    name: str
    enabled: bool
    position: int | None


def chains_for_circuits(*, circuits: Iterable[tuple[str, str]]) -> dict[tuple[str, str], list[ChainLink]]:
    """For each (provider, model) circuit, the chains, enabled or not, that list it as source or entry, by
    name. Two queries whatever the number of circuits."""
    wanted = set(circuits)
    models = {model for _, model in wanted}
    out: dict[tuple[str, str], list[ChainLink]] = {key: [] for key in wanted}
    if not models:
        return out
    sources = FallbackChain.objects.filter(source_model__name__in=models).select_related("source_model__provider")
    for chain in sources:
        key = (chain.source_model.provider.name, chain.source_model.name)
        if key in wanted:
            out[key].append(ChainLink(chain.pk, chain.name, chain.enabled, None))
    entries = ChainEntry.objects.filter(model__name__in=models).select_related("chain", "model__provider", "provider")
    for entry in entries:
        key = (entry.served_by.name, entry.model.name)
        if key in wanted:
            out[key].append(ChainLink(entry.chain_id, entry.chain.name, entry.chain.enabled, entry.position + 1))
    for links in out.values():
        links.sort(key=lambda link: (link.name.lower(), link.chain_id, link.position or 0))
    return out
