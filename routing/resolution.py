"""Routing resolution: where one caller's request for a model goes. The one implementation.

Pure: plain values in, plain results out; no ORM, no Django, no I/O. The gateway runs it over its
snapshot (gateway/snapshot.py) and memoises the result, so the rule exists once and the tests of
this module test what the gateway serves.

A scope is (type, target id). A caller (an API key and the user, team, application and agent it
names) matches several scopes; where several match, the most specific wins:
key > agent > user > team > application > global.

Resolution of a requested model, for one caller:

1. Guardrail: the most specific scope holding a guardrail on the model (or on every model; at the
   same scope, the one on the model wins) decides. A deny refuses; a rewrite names another model.
2. Routing rule: the most specific rule for the model rewrites it.
3. Alias: an alias names its model, and rules apply once more to that model.
4. A deny guardrail on the model reached (when it differs from the requested one) still refuses.
5. The model must exist in the catalog; its most specific fallback chain, if any, goes with it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

# The scope types, most specific first. Plain strings (catalog.enums.ScopeType's values) so that the
# gateway process imports no Django models to resolve a route.
SCOPE_PRECEDENCE: tuple[str, ...] = ("key", "agent", "user", "team", "application", "global")

ScopeKey = tuple[str, int | None]
GLOBAL: ScopeKey = ("global", None)
# (model, scope type, scope id): how rules, chains and guardrails are looked up. A guardrail on every
# model has None for the model.
ScopedKey = tuple[str, str, int | None]
GuardrailKey = tuple[str | None, str, int | None]
DENY = "deny"


def principal_scopes(
    *, key_id: int, user_id: int, team_id: int | None, application_id: int | None, agent_id: int | None
) -> tuple[ScopeKey, ...]:
    """The scopes a key (and what it names) matches, most specific first; global always, last."""
    ids = {"key": key_id, "agent": agent_id, "user": user_id, "team": team_id, "application": application_id}
    return (*((t, ids[t]) for t in SCOPE_PRECEDENCE[:-1] if ids[t] is not None), GLOBAL)


def most_specific[V](table: Mapping[ScopedKey, V], model: str, scopes: tuple[ScopeKey, ...]) -> V | None:
    """The entry for `model` at the most specific of `scopes` (most specific first) that has one."""
    for scope_type, scope_id in scopes:
        found = table.get((model, scope_type, scope_id))
        if found is not None:
            return found
    return None


class GuardrailLike(Protocol):
    @property
    def action(self) -> str: ...  # "deny" | "rewrite"

    @property
    def target_model(self) -> str | None: ...


class RoutingTables[G: GuardrailLike, C](Protocol):
    """The configuration resolution reads, as lookup tables (the gateway's Snapshot is one)."""

    @property
    def models(self) -> Mapping[str, object]: ...

    @property
    def aliases(self) -> Mapping[str, str]: ...

    @property
    def rules(self) -> Mapping[ScopedKey, str]: ...

    @property
    def guardrails(self) -> Mapping[GuardrailKey, G]: ...

    @property
    def chains(self) -> Mapping[ScopedKey, C]: ...


# Results are made on resolutions the gateway does not memoise (names the catalog does not know, first
# calls): plain slotted dataclasses, as a frozen one costs about four times as much to create. Treat them
# as immutable. A name not found (the common unmemoised case) allocates nothing: NOT_FOUND is shared.
@dataclass(slots=True)
class Resolved[C]:
    """The request goes to `model` (a catalog model), with its fallback chain if one applies."""

    requested: str
    model: str
    chain: C | None


@dataclass(slots=True)
class Denied[G: GuardrailLike]:
    """A deny guardrail refuses the request."""

    guardrail: G


@dataclass(frozen=True, slots=True)
class NotFound:
    """The model reached is not in the catalog."""


NOT_FOUND = NotFound()


def resolve_route[G: GuardrailLike, C](
    tables: RoutingTables[G, C], scopes: tuple[ScopeKey, ...], requested: str
) -> Resolved[C] | Denied[G] | NotFound:
    """guardrail -> routing rule -> alias -> routing rule -> chain, for a caller matching `scopes`."""
    guardrails = tables.guardrails
    model = requested
    for scope_type, scope_id in scopes:
        guard = guardrails.get((model, scope_type, scope_id))
        if guard is None:
            guard = guardrails.get((None, scope_type, scope_id))
        if guard is not None:
            if guard.action == DENY:
                return Denied(guard)
            model = guard.target_model or model
            break
    rules = tables.rules
    target = most_specific(rules, model, scopes)
    if target is not None:
        model = target
    aliased = tables.aliases.get(model)
    if aliased is not None:
        # A rule may target the alias's model too: apply rules once more after expanding it.
        target = most_specific(rules, aliased, scopes)
        model = aliased if target is None else target
    if model != requested:
        # A deny on a concrete model also holds when it is reached through an alias or a rule.
        for scope_type, scope_id in scopes:
            guard = guardrails.get((model, scope_type, scope_id))
            if guard is not None:
                if guard.action == DENY:
                    return Denied(guard)
                break
    if model not in tables.models:
        return NOT_FOUND
    return Resolved(requested, model, most_specific(tables.chains, model, scopes))
