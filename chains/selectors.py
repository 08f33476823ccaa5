"""Reads of fallback chains."""

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from django.db import connection
from django.db.models import OuterRef, Prefetch, Q, QuerySet, Subquery, Value
from django.db.models.functions import Coalesce

from catalog.enums import Capability, Protocol
from catalog.models import LlmModel, Provider
from catalog.scopes import Scope, scopes_overlap
from chains.models import ChainEntry, FallbackChain, ResilienceDefaults
from chains.resilience import RESILIENCE_DEFAULTS

# Sort keys the list accepts (URL value → ORM ordering). "-" prefix = descending.
CHAIN_ORDERINGS: dict[str, tuple[str, ...]] = {
    "name": ("name", "id"),
    "source_model": ("source_model__name", "id"),
    # The Chain column shows the entries in order: it sorts by the first one's model name.
    "chain": ("first_entry_name", "id"),
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


def _with_first_entry_name(qs: QuerySet[FallbackChain]) -> QuerySet[FallbackChain]:
    """Annotate `first_entry_name`: the model name of the lowest-positioned entry ("" for a chain without entries,
    so an empty chain sorts first on every database rather than where each one puts NULL)."""
    first = ChainEntry.objects.filter(chain=OuterRef("pk")).order_by("position").values("model__name")[:1]
    return qs.annotate(first_entry_name=Coalesce(Subquery(first), Value("")))


def _matching(qs: QuerySet[FallbackChain], words: list[str]) -> QuerySet[FallbackChain]:
    """The chains of `qs` whose name or source model contains every word, in any case.

    PostgreSQL's icontains compares UPPER() of both sides, Unicode included; SQLite's LIKE folds ASCII letters only
    ("überlauf" would not find "Überlauf EU"), so there the names are folded in Python (chains are few)."""
    if not words:
        return qs
    if connection.vendor != "sqlite":
        for word in words:
            qs = qs.filter(Q(name__icontains=word) | Q(source_model__name__icontains=word))
        return qs
    folded = [word.casefold() for word in words]
    names = FallbackChain.objects.values_list("pk", "name", "source_model__name")
    return qs.filter(
        pk__in=[
            pk
            for pk, name, source in names
            if all(word in name.casefold() or word in source.casefold() for word in folded)
        ]
    )


def chain_list(*, search: str = "", ordering: str = DEFAULT_CHAIN_ORDERING) -> QuerySet[FallbackChain]:
    """Chains matching every word of `search` (name or source model), sorted by `ordering`."""
    qs = _matching(_with_first_entry_name(FallbackChain.objects.all()), search.split())
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


def chains_broken_by_provider_move(*, model: LlmModel, provider: Provider) -> list[str]:
    """What serving `model` by default through `provider` would do to the chains that name it: an entry that
    would be its chain's source (a chain cannot fall back to itself), or two entries that would be the same
    target. The chain editor refuses both; the gateway would call the same circuit twice."""

    def served_by(entry_model: LlmModel, entry_provider_id: int | None) -> int:
        if entry_provider_id is not None:
            return entry_provider_id
        return provider.pk if entry_model.pk == model.pk else entry_model.provider_id

    problems = []
    chains = FallbackChain.objects.filter(Q(source_model=model) | Q(entries__model=model)).distinct()
    for chain in _with_entries(chains).order_by("name", "id"):
        source = (chain.source_model_id, served_by(chain.source_model, None))
        seen: set[tuple[int, int]] = set()
        for entry in chain.entries.all():
            key = (entry.model_id, served_by(entry.model, entry.provider_id))
            if key != (model.pk, provider.pk):
                seen.add(key)  # only `model` via `provider` can clash because of the move: the rest is as it was
                continue
            if key == source:
                problems.append(
                    f"Chain “{chain.name}”: its entry {entry.model.name} via {provider.name} would be its own "
                    "source model; remove that entry first."
                )
            elif key in seen:
                problems.append(
                    f"Chain “{chain.name}”: two entries would both be {entry.model.name} via {provider.name}; "
                    "remove one first."
                )
            seen.add(key)
    return problems


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
    kind: str  # "routing_rule" | "capability" | "context_window" | "protocol"
    message: str


# What a request needs of a capability, so a warning says which requests an entry cannot serve.
_CAPABILITY_REQUESTS: dict[str, str] = {
    Capability.TEXT: "text requests",
    Capability.VISION: "requests with images",
    Capability.TOOLS: "requests with tools",
    Capability.JSON_OUTPUT: "requests asking for JSON output",
    Capability.AUDIO: "requests with audio",
    Capability.ASSISTANT_PREFILL: "requests ending in an assistant prefill",
}
# OpenAI and Azure OpenAI share the Chat Completions body; only Anthropic Messages needs a translation.
_PROTOCOL_FAMILY: dict[str, str] = {
    Protocol.OPENAI: "openai",
    Protocol.AZURE: "openai",
    Protocol.ANTHROPIC: "anthropic",
}
# docs/protocols.md's "Refused" lists, in words: what a translated request cannot carry.
_REFUSED_TOWARDS = {
    "anthropic": "n > 1, logprobs, response_format json_object/json_schema and temperature above 1",
    "openai": "top_k, extended thinking and Anthropic's server tools",
}


def _tokens(count: int) -> str:
    """128000 → "128k", 1000000 → "1M": how context windows are usually quoted."""
    if count >= 1_000_000 and count % 100_000 == 0:
        return f"{count / 1_000_000:g}M"
    if count >= 1000 and count % 100 == 0:
        return f"{count / 1000:g}k"
    return f"{count:,}"


def _protocol_label(protocol: str) -> str:
    return Protocol(protocol).label if protocol in Protocol.values else protocol


def _capability_warning(source: LlmModel, model: LlmModel) -> ChainWarning | None:
    missing = [c for c in Capability.values if c in (source.capabilities or []) and c not in (model.capabilities or [])]
    if not missing:
        return None
    what = " and ".join(_CAPABILITY_REQUESTS.get(c, f"requests using {c}") for c in missing)
    return ChainWarning(
        "capability",
        f"{model.name} lacks {', '.join(missing)} that {source.name} has: {what} cannot be served by this entry.",
    )


def _context_warning(source: LlmModel, model: LlmModel) -> ChainWarning | None:
    if model.context_window >= source.context_window:
        return None
    return ChainWarning(
        "context_window",
        f"{model.name} has a {_tokens(model.context_window)} context window, smaller than {source.name}'s "
        f"{_tokens(source.context_window)}: a long request that fits {source.name} cannot be served by this entry.",
    )


def _protocol_warning(source: LlmModel, model: LlmModel, provider: Provider) -> ChainWarning | None:
    source_family = _PROTOCOL_FAMILY.get(source.provider.protocol)
    entry_family = _PROTOCOL_FAMILY.get(provider.protocol)
    if source_family is None or entry_family is None or source_family == entry_family:
        return None
    return ChainWarning(
        "protocol",
        f"{model.name} via {provider.name} speaks {_protocol_label(provider.protocol)}, while {source.name} "
        f"via {source.provider.name} speaks {_protocol_label(source.provider.protocol)}: requests are translated, "
        f"and those this entry cannot carry are refused ({_REFUSED_TOWARDS[entry_family]}; "
        f"see the “Refused” lists of docs/protocols.md).",
    )


def _rewrite_guardrail_warnings(source: LlmModel, scope: Scope) -> list[ChainWarning]:
    """Enabled guardrails that rewrite the source (named, or every model) to another model in a scope overlapping
    the chain's: guardrails run before routing, so callers there never reach this chain either. Same kind as a
    routing rule's warning: for the admin it is the same surprise."""
    from routing.models import Guardrail, GuardrailAction

    guardrails = (
        Guardrail.objects.filter(Q(model=source) | Q(model__isnull=True), action=GuardrailAction.REWRITE, enabled=True)
        .exclude(target_model=source)
        .select_related("target_model")
        .order_by("name", "pk")
    )
    warnings = []
    for guardrail in guardrails:
        if guardrail.target_model is None or not scopes_overlap(Scope(guardrail.scope_type, guardrail.scope_id), scope):
            continue
        what = source.name if guardrail.model_id is not None else f"every model, {source.name} included,"
        warnings.append(
            ChainWarning(
                "routing_rule",
                f"Guardrail “{guardrail.name}” rewrites {what} to {guardrail.target_model.name} "
                f"in an overlapping scope, so callers there never reach this chain.",
            )
        )
    return warnings


def chain_warnings(
    *,
    source: LlmModel,
    entries: list[LlmModel],
    scope: Scope,
    providers: Sequence[Provider | None] = (),
) -> list[ChainWarning]:
    """Non-blocking warnings for the editor: a routing rule or a rewriting guardrail sends the source elsewhere; an
    entry lacks a capability, has a smaller context window, or speaks another protocol than the source (its
    requests are translated).

    `providers[i]` is entry i's provider override (None or absent: the model's default provider)."""
    from routing.models import RoutingRule

    warnings: list[ChainWarning] = _rewrite_guardrail_warnings(source, scope)
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
    for i, model in enumerate(entries):
        provider = (providers[i] if i < len(providers) else None) or model.provider
        found = (
            _capability_warning(source, model),
            _context_warning(source, model),
            _protocol_warning(source, model, provider),
        )
        warnings.extend(w for w in found if w is not None)
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
