"""The gateway's immutable view of the configuration.

Built from the database off the request path (at start and after every config
change), then swapped atomically. Route resolution reads only this object.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from chains.resilience import DEFAULT_POLICY, ResiliencePolicy
from routing.resolution import Denied, NotFound, ScopeKey, principal_scopes, resolve_route


@dataclass(frozen=True, slots=True)
class Target:
    provider: str
    model: str


@dataclass(frozen=True, slots=True)
class KeyInfo:
    id: int
    prefix: str
    user_id: int
    team_id: int | None
    application_id: int | None
    agent_id: int | None
    # Most specific first (routing.resolution.principal_scopes): key > agent > user > team > application > global.
    scopes: tuple[ScopeKey, ...]


@dataclass(frozen=True, slots=True)
class ProviderInfo:
    name: str
    protocol: str
    base_url: str
    api_key: str = field(repr=False)
    connect_timeout: float = 5.0
    read_timeout: float = 60.0
    # The stored key exists but the configured keys cannot decrypt it (api_key is then ""). A field, so
    # that it takes part in equality: a provider whose key became (or stopped being) undecryptable is
    # a different configuration, never served by an adapter built for the other one.
    credential_unavailable: bool = False
    # Resilient chains' stream timeouts for this provider; None = the chain policy's value.
    first_token_timeout: float | None = None
    idle_timeout: float | None = None
    # Azure OpenAI: the `api-version` query parameter, and catalog model -> deployment name (default: the
    # model's own name). A tuple of pairs, so the frozen dataclass stays hashable and comparable.
    api_version: str = ""
    deployments: tuple[tuple[str, str], ...] = ()

    def deployment(self, model: str) -> str:
        return dict(self.deployments).get(model, model)


@dataclass(frozen=True, slots=True)
class ModelInfo:
    name: str
    provider: str
    capabilities: frozenset[str]
    input_price_per_mtok: float
    output_price_per_mtok: float
    # Tokens; the resilience policy moves a context-length failure only to a larger window.
    context_window: int | None = None
    # `max_tokens` sent to an upstream that requires it (Anthropic) when the client did not say.
    max_output_tokens: int = 4096

    def cost(self, tokens_in: int | None, tokens_out: int | None) -> float | None:
        if tokens_in is None and tokens_out is None:
            return None
        return ((tokens_in or 0) * self.input_price_per_mtok + (tokens_out or 0) * self.output_price_per_mtok) / 1e6


@dataclass(frozen=True, slots=True)
class ChainInfo:
    id: int
    name: str
    source_model: str
    entries: tuple[Target, ...]
    # The effective policy (chain knobs over the global defaults); off unless the chain enabled it.
    resilience: ResiliencePolicy = DEFAULT_POLICY


@dataclass(frozen=True, slots=True)
class GuardrailInfo:
    id: int
    name: str
    action: str  # "deny" | "rewrite"
    target_model: str | None
    message: str


@dataclass(frozen=True, slots=True)
class Route:
    """Where one (key, requested model) goes before breakers are consulted."""

    requested_model: str
    routed_model: str
    primary: Target
    chain: ChainInfo | None


@dataclass(frozen=True, slots=True)
class Refusal:
    """The pipeline refuses the request before any upstream call."""

    status: int
    message: str
    code: str
    kind: str = "invalid_request_error"


@dataclass(frozen=True)
class Snapshot:
    version: int
    keys: Mapping[str, KeyInfo] = field(default_factory=dict)  # by SHA-256 of the secret
    providers: Mapping[str, ProviderInfo] = field(default_factory=dict)
    models: Mapping[str, ModelInfo] = field(default_factory=dict)
    aliases: Mapping[str, str] = field(default_factory=dict)
    rules: Mapping[tuple[str, str, int | None], str] = field(default_factory=dict)
    # (model or None for every model, scope type, scope id) -> guardrail
    guardrails: Mapping[tuple[str | None, str, int | None], GuardrailInfo] = field(default_factory=dict)
    chains: Mapping[tuple[str, str, int | None], ChainInfo] = field(default_factory=dict)
    # The global default policy, every knob filled in.
    resilience_defaults: ResiliencePolicy = DEFAULT_POLICY
    built_at: float = field(default_factory=time.time)
    # Memo of resolve(); the snapshot is immutable, so entries never go stale.
    _routes: dict[tuple[int, str], Route | Refusal] = field(default_factory=dict, compare=False, repr=False)

    def resolve(self, key: KeyInfo, requested: str) -> Route | Refusal:
        """guardrails -> routing rule -> alias -> rule -> chain (routing.resolution), memoised per (key, model)."""
        memo = (key.id, requested)
        found = self._routes.get(memo)
        if found is None:
            found = self._resolve(key, requested)
            # Only names the catalog knows are memoised: invented names must not grow memory.
            known = requested in self.models or requested in self.aliases
            if known and len(self._routes) < 100_000:
                self._routes[memo] = found
        return found

    def _resolve(self, key: KeyInfo, requested: str) -> Route | Refusal:
        """The routing rule (routing.resolution) over this snapshot, in the gateway's terms."""
        found = resolve_route(self, key.scopes, requested)
        if isinstance(found, Denied):
            guard = found.guardrail
            return Refusal(
                403,
                f"Refused by guardrail “{guard.name}”: {guard.message}",
                "guardrail_refused",
                "permission_error",
            )
        if isinstance(found, NotFound):
            shown = requested if len(requested) <= 80 else requested[:80] + "…"
            return Refusal(
                404, f"The model `{shown}` does not exist or you do not have access to it.", "model_not_found"
            )
        model = found.model
        return Route(
            requested_model=requested,
            routed_model=model,
            primary=Target(self.models[model].provider, model),
            chain=found.chain,
        )

    def models_for(self, key: KeyInfo) -> list[str]:
        """Names this key may ask for: catalog models and aliases not refused by a guardrail."""
        names = sorted({*self.models, *self.aliases})
        return [n for n in names if not isinstance(self.resolve(key, n), Refusal)]


def snapshot_build(*, version: int) -> Snapshot:
    """Read the whole configuration in one consistent read (a handful of queries) into a new Snapshot."""
    from django.db import connection, transaction

    with transaction.atomic():
        if connection.vendor == "postgresql":
            # One snapshot of the database for all queries: a change committing mid-build is not half-seen.
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        return _snapshot_read(version)


def _snapshot_read(version: int) -> Snapshot:
    from catalog.models import ApiKey, LlmModel, Provider
    from chains.models import FallbackChain
    from chains.resilience import resilience_effective
    from chains.selectors import resilience_defaults_get
    from core.crypto import Undecryptable
    from routing.models import Alias, Guardrail, RoutingRule

    providers = {
        p.name: ProviderInfo(
            p.name,
            p.protocol,
            p.base_url.rstrip("/"),
            str(p.api_key),
            p.connect_timeout,
            p.read_timeout,
            credential_unavailable=isinstance(p.api_key, Undecryptable),
            first_token_timeout=p.first_token_timeout_seconds,
            idle_timeout=p.idle_timeout_seconds,
            api_version=p.api_version,
            deployments=tuple(sorted((p.deployments or {}).items())),
        )
        for p in Provider.objects.all()
    }
    models = {
        m.name: ModelInfo(
            m.name,
            m.provider.name,
            frozenset(m.capabilities or ()),
            float(m.input_price_per_mtok),
            float(m.output_price_per_mtok),
            m.context_window,
            max_output_tokens=m.max_output_tokens,
        )
        for m in LlmModel.objects.select_related("provider")
    }
    keys = {
        k.hashed_secret: KeyInfo(
            k.pk,
            k.prefix,
            k.user_id,
            k.team_id,
            k.application_id,
            k.agent_id,
            principal_scopes(
                key_id=k.pk, user_id=k.user_id, team_id=k.team_id, application_id=k.application_id, agent_id=k.agent_id
            ),
        )
        # A deactivated owner's keys stop too (and work again if the owner is reactivated).
        for k in ApiKey.objects.filter(revoked_at=None, user__is_active=True)
    }
    aliases = {a.name: a.model.name for a in Alias.objects.select_related("model")}
    rules = {
        (r.source_model.name, r.scope_type, r.scope_id): r.target_model.name
        for r in RoutingRule.objects.filter(enabled=True).select_related("source_model", "target_model")
    }
    guardrails: dict[tuple[str | None, str, int | None], GuardrailInfo] = {}
    for g in Guardrail.objects.filter(enabled=True).select_related("model", "target_model").order_by("id"):
        guardrails.setdefault(
            (g.model.name if g.model is not None else None, g.scope_type, g.scope_id),
            GuardrailInfo(
                g.pk, g.name, g.action, g.target_model.name if g.target_model is not None else None, g.message
            ),
        )
    default_policy = resilience_defaults_get().policy or {}
    chains = {}
    for c in (
        FallbackChain.objects.filter(enabled=True)
        .select_related("source_model")
        .prefetch_related("entries__model__provider", "entries__provider")
    ):
        entries = tuple(Target((e.provider or e.model.provider).name, e.model.name) for e in c.entries.all())
        chains[(c.source_model.name, c.scope_type, c.scope_id)] = ChainInfo(
            c.pk, c.name, c.source_model.name, entries, resilience_effective(c.resilience or {}, default_policy)
        )
    ro: Any = MappingProxyType
    return Snapshot(
        version=version,
        keys=ro(keys),
        providers=ro(providers),
        models=ro(models),
        aliases=ro(aliases),
        rules=ro(rules),
        guardrails=ro(guardrails),
        chains=ro(chains),
        resilience_defaults=resilience_effective({}, default_policy),
    )
