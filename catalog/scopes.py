"""Scopes as the console and the services see them: validation, labels, pickers, overlap.

A scope is (type, target id). Which scope wins for a caller (the precedence) and the routing it
decides live in routing.resolution, the one implementation the gateway runs.
"""

from collections.abc import Iterable
from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.db import models

from catalog.enums import ScopeType
from catalog.models import Agent, ApiKey, Application, Team
from core.db import for_update, key_share_lock
from core.errors import ValidationFailed


@dataclass(frozen=True, slots=True)
class Scope:
    type: str
    id: int | None = None

    @classmethod
    def global_(cls) -> "Scope":
        return cls(ScopeType.GLOBAL, None)


def _target_model(scope_type: str) -> type[models.Model] | None:
    targets: dict[str, type[models.Model]] = {
        ScopeType.TEAM: Team,
        ScopeType.APPLICATION: Application,
        ScopeType.USER: get_user_model(),
        ScopeType.AGENT: Agent,
        ScopeType.KEY: ApiKey,
    }
    return targets.get(scope_type)


def scope_validate(
    *, scope_type: str, scope_id: int | str | None, field: str = "scope", creator_pk: int | None = None
) -> Scope:
    """Return a normalised Scope or raise ValidationFailed naming what is wrong (a form sends the id as text).

    `creator_pk`: the acting user, whom the written row names (a chain's creator) and whom the write locks FOR KEY
    SHARE after the scope's target; when the target is a user with a higher key, the creator is locked first, so
    two users are locked in primary key order, as every write locks several rows of one table."""
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
        target_id = int(scope_id)
    except (TypeError, ValueError):
        raise ValidationFailed(
            "Scope target id must be an integer.", errors={field: ["Target id must be an integer."]}
        ) from None
    model = _target_model(scope_type)
    assert model is not None
    if scope_type == ScopeType.USER and creator_pk is not None and creator_pk < target_id:
        key_share_lock(model, creator_pk)
    # Locked until the transaction ends: the target's delete locks it before its reference check, so it either
    # waits for this write (and sees the row scoped to it) or this waits and finds the target gone. A scope has
    # no foreign key to back that up.
    if for_update(model._default_manager.filter(pk=target_id)).first() is None:
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
        rows: Iterable[tuple[int, str]]
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


def scopes_overlap(a: Scope, b: Scope) -> bool:
    """Could one caller match both scopes? Decided from the keys that exist."""
    if a.type == ScopeType.GLOBAL or b.type == ScopeType.GLOBAL:
        return True
    if a == b:
        return True
    if a.type == b.type:
        return False
    field: dict[str, str] = {
        ScopeType.KEY: "pk",
        ScopeType.AGENT: "agent_id",
        ScopeType.USER: "user_id",
        ScopeType.TEAM: "team_id",
        ScopeType.APPLICATION: "application_id",
    }
    return ApiKey.objects.filter(**{field[a.type]: a.id, field[b.type]: b.id}).exists()
