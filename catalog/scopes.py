"""Scopes: one implementation shared by chains, routing rules and (later) guardrails.

A scope is (type, target id). Precedence, most specific first:
key > agent > user > team > application > global.
"""

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

from django.contrib.auth import get_user_model
from django.db import models

from catalog.enums import SCOPE_PRECEDENCE, ScopeType
from catalog.models import Agent, ApiKey, Application, Team
from core.errors import ValidationFailed

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Scope:
    type: str
    id: int | None = None

    @classmethod
    def global_(cls) -> "Scope":
        return cls(ScopeType.GLOBAL, None)


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: a gateway key and what it names."""

    key_id: int | None = None
    user_id: int | None = None
    team_id: int | None = None
    application_id: int | None = None
    agent_id: int | None = None

    @classmethod
    def from_key(cls, key: ApiKey) -> "Principal":
        return cls(
            key_id=key.pk,
            user_id=key.user_id,
            team_id=key.team_id,
            application_id=key.application_id,
            agent_id=key.agent_id,
        )

    def scopes(self) -> tuple[Scope, ...]:
        """The scopes this principal matches, most specific first."""
        ids = {
            ScopeType.KEY: self.key_id,
            ScopeType.AGENT: self.agent_id,
            ScopeType.USER: self.user_id,
            ScopeType.TEAM: self.team_id,
            ScopeType.APPLICATION: self.application_id,
        }
        out = [Scope(t, ids[t]) for t in SCOPE_PRECEDENCE if t != ScopeType.GLOBAL and ids[t] is not None]
        out.append(Scope.global_())
        return tuple(out)


def _target_model(scope_type: str) -> type[models.Model] | None:
    return {
        ScopeType.TEAM: Team,
        ScopeType.APPLICATION: Application,
        ScopeType.USER: get_user_model(),
        ScopeType.AGENT: Agent,
        ScopeType.KEY: ApiKey,
    }.get(scope_type)  # type: ignore[return-value]


def scope_validate(*, scope_type: str, scope_id: int | None, field: str = "scope") -> Scope:
    """Return a normalised Scope or raise ValidationFailed naming what is wrong."""
    if scope_type not in ScopeType.values:
        raise ValidationFailed(
            f"Unknown scope type {scope_type!r}.",
            errors={field: [f"Scope type must be one of: {', '.join(ScopeType.values)}."]},
        )
    if scope_type == ScopeType.GLOBAL:
        if scope_id not in (None, ""):
            raise ValidationFailed(
                "A global scope has no target.", errors={field: ["A global scope takes no target id."]}
            )
        return Scope.global_()
    if scope_id in (None, ""):
        raise ValidationFailed(
            f"A {scope_type} scope needs a target.", errors={field: [f"Choose the {scope_type} this applies to."]}
        )
    try:
        target_id = int(scope_id)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValidationFailed(
            "Scope target id must be an integer.", errors={field: ["Target id must be an integer."]}
        ) from None
    model = _target_model(scope_type)
    assert model is not None
    if not model._default_manager.filter(pk=target_id).exists():
        raise ValidationFailed(
            f"No {scope_type} with id {target_id}.", errors={field: [f"No {scope_type} with id {target_id} exists."]}
        )
    return Scope(scope_type, target_id)


def scope_label(scope_type: str, scope_id: int | None, names: dict[tuple[str, int], str] | None = None) -> str:
    """Human label such as "Team: payments"; `names` avoids a query per row."""
    if scope_type == ScopeType.GLOBAL:
        return "Global"
    label = ScopeType(scope_type).label
    if scope_id is None:
        return label
    if names is not None and (scope_type, scope_id) in names:
        return f"{label}: {names[(scope_type, scope_id)]}"
    return f"{label} #{scope_id}"


def scope_names(scopes: Iterable[tuple[str, int | None]]) -> dict[tuple[str, int], str]:
    """Names of scope targets, one query per scope type present."""
    wanted: dict[str, set[int]] = {}
    for scope_type, scope_id in scopes:
        if scope_type != ScopeType.GLOBAL and scope_id is not None:
            wanted.setdefault(scope_type, set()).add(scope_id)
    names: dict[tuple[str, int], str] = {}
    for scope_type, ids in wanted.items():
        model = _target_model(scope_type)
        assert model is not None
        if scope_type == ScopeType.USER:
            rows = model._default_manager.filter(pk__in=ids).values_list("pk", "username")
        elif scope_type == ScopeType.KEY:
            rows = [
                (pk, f"{name} ({prefix}…)")
                for pk, name, prefix in model._default_manager.filter(pk__in=ids).values_list("pk", "name", "prefix")
            ]
        else:
            rows = model._default_manager.filter(pk__in=ids).values_list("pk", "name")
        for pk, name in rows:
            names[(scope_type, pk)] = name
    return names


def scope_choices() -> list[tuple[str, list[tuple[int, str]]]]:
    """Targets for the scope picker, grouped by scope type."""
    user_model = get_user_model()
    return [
        (ScopeType.TEAM, list(Team.objects.values_list("pk", "name"))),
        (ScopeType.APPLICATION, list(Application.objects.values_list("pk", "name"))),
        (ScopeType.USER, list(user_model._default_manager.order_by("username").values_list("pk", "username"))),
        (ScopeType.AGENT, list(Agent.objects.values_list("pk", "name"))),
        (
            ScopeType.KEY,
            [
                (pk, f"{name} ({prefix}…)")
                for pk, name, prefix in ApiKey.objects.filter(revoked_at=None).values_list("pk", "name", "prefix")
            ],
        ),
    ]


def resolve_most_specific[T](items: Iterable[T], principal: Principal, scope_of: Callable[[T], Scope]) -> T | None:
    """Pick the item whose scope is the most specific one the principal matches."""
    rank = {scope: i for i, scope in enumerate(principal.scopes())}
    best: T | None = None
    best_rank = len(rank)
    for item in items:
        r = rank.get(scope_of(item))
        if r is not None and r < best_rank:
            best, best_rank = item, r
    return best


def scopes_overlap(a: Scope, b: Scope) -> bool:
    """Could one caller match both scopes? Decided from the keys that exist."""
    if a.type == ScopeType.GLOBAL or b.type == ScopeType.GLOBAL:
        return True
    if a == b:
        return True
    if a.type == b.type:
        return False
    field = {
        ScopeType.KEY: "pk",
        ScopeType.AGENT: "agent_id",
        ScopeType.USER: "user_id",
        ScopeType.TEAM: "team_id",
        ScopeType.APPLICATION: "application_id",
    }
    return ApiKey.objects.filter(**{field[a.type]: a.id, field[b.type]: b.id}).exists()
