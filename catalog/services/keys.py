"""Writes of gateway API keys: issued to an active user, renamed or re-attributed, revoked (never deleted)."""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction

from audit.services import audit_record
from catalog.keys import KEY_PREFIX
from catalog.models import Agent, ApiKey, Application, Team
from catalog.selectors import user_by_username
from catalog.services._shared import (
    audit_update,
    create_with_fresh_prefix,
    lock_named,
    lock_reference_first,
    named,
    revoke_once,
)
from core.configbus import config_publish
from core.types import Actor
from core.validation import FieldErrors
from core.validators import CONTROL_CHARACTERS_MESSAGE, has_control_characters


@dataclass(frozen=True)
class CreatedKey:
    key: ApiKey
    secret: str  # shown once, never stored


@dataclass(frozen=True)
class ApiKeyInput:
    """A key's editable fields; team, application and agent by name (None or blank: none)."""

    name: str
    team: str | None = None
    application: str | None = None
    agent: str | None = None


def _api_key_snapshot(key: ApiKey) -> dict[str, Any]:
    return {
        "name": key.name,
        "prefix": key.prefix,
        "user": key.user.get_username(),
        "team": key.team.name if key.team else None,
        "application": key.application.name if key.application else None,
        "agent": key.agent.name if key.agent else None,
    }


def _api_key_name_checked(errors: FieldErrors, value: str | None) -> str:
    name = (value or "").strip()
    if not name:
        errors.add("name", "Key name is required and cannot be only whitespace.")
    elif has_control_characters(name):
        errors.add("name", CONTROL_CHARACTERS_MESSAGE)
    elif len(name) > 128:
        errors.add("name", "Key name is at most 128 characters.")
    return name


def _api_key_owner_checked(errors: FieldErrors, user: Any) -> None:
    if user is None:
        errors.add("user", "A key needs an owner.")
    elif not user.is_active:
        # The gateway refuses an inactive user's keys; a key issued now would look valid and never work.
        errors.add(
            "user", f"User “{user.get_username()}” is deactivated: their keys do not work. Reactivate the user first."
        )


def api_key_validate(*, name: str, user: Any) -> None:
    """Raise ValidationFailed as api_key_create would for this name and owner; writes nothing."""
    errors = FieldErrors()
    _api_key_name_checked(errors, name)
    _api_key_owner_checked(errors, user)
    errors.raise_if_any()


def _api_key_fields(errors: FieldErrors, data: ApiKeyInput) -> dict[str, Any]:
    name = _api_key_name_checked(errors, data.name)
    # Locked, in the order team, application, agent (that of their deletes' locks): a delete of one of them
    # waits for this write and sees the key (SET_NULL), or this write waits and finds it gone.
    team = named(errors, "team", data.team, label="team", lookup=lambda n: lock_named(Team, n))
    application = named(
        errors, "application", data.application, label="application", lookup=lambda n: lock_named(Application, n)
    )
    agent = named(errors, "agent", data.agent, label="agent", lookup=lambda n: lock_named(Agent, n))
    return {"name": name, "team": team, "application": application, "agent": agent}


def _still_there[M: (Team, Application, Agent)](errors: FieldErrors, field: str, row: M | None) -> M | None:
    """`row` as stored, locked; None (and a field error) when it was deleted meanwhile."""
    if row is None:
        return None
    stored = lock_named(type(row), row.pk, field="pk")
    if stored is None:
        errors.add(field, f"The {field} “{row.name}” no longer exists.")
    return stored


@transaction.atomic
def api_key_create(
    *,
    actor: Actor,
    name: str,
    user: Any,
    team: Team | None = None,
    application: Application | None = None,
    agent: Agent | None = None,
) -> CreatedKey:
    """Issue a gateway key to an active user; only its hash is stored, the secret is returned once."""
    errors = FieldErrors()
    name = _api_key_name_checked(errors, name)
    # Locked in the order team, application, agent, owner (that of their deletes): a delete waits for this key
    # and detaches it (SET_NULL) or, for the owner, refuses (ApiKey.user is PROTECT); or this waits and finds the
    # row gone (400), rather than a foreign key failing at COMMIT.
    team = _still_there(errors, "team", team)
    application = _still_there(errors, "application", application)
    agent = _still_there(errors, "agent", agent)
    if user is not None:
        user = lock_named(get_user_model(), user.pk, field="pk")
    _api_key_owner_checked(errors, user)
    errors.raise_if_any()
    key, secret = create_with_fresh_prefix(
        ApiKey, key_prefix=KEY_PREFIX, name=name, user=user, team=team, application=application, agent=agent
    )
    audit_record(
        actor=actor,
        action="api_key.create",
        object_type="api_key",
        object_id=key.pk,
        object_repr=str(key),
        after=_api_key_snapshot(key),
    )
    transaction.on_commit(config_publish)
    return CreatedKey(key=key, secret=secret)


@transaction.atomic
def api_key_issue(*, actor: Actor, data: ApiKeyInput, username: str | None = None) -> CreatedKey:
    """Issue a key for the user named `username` (default: the actor), resolving team/application/agent by name."""
    errors = FieldErrors()
    user: Any = actor
    wanted = (username or "").strip()
    if wanted:
        user = user_by_username(username=wanted)
        if user is None:
            errors.add("user", f"Unknown user “{wanted}”.")
    if user is not None:
        _api_key_owner_checked(errors, user)
    fields = _api_key_fields(errors, data)
    errors.raise_if_any()
    return api_key_create(actor=actor, user=user, **fields)


def api_key_update_locks_first(data: Mapping[str, Any], stored: ApiKey) -> None:
    """The locks api_key_update takes before the key's row: its team's, application's and agent's, in that
    order (gateway keys come last)."""
    lock_reference_first(Team, data, "team", stored.team_id)
    lock_reference_first(Application, data, "application", stored.application_id)
    lock_reference_first(Agent, data, "agent", stored.agent_id)


@transaction.atomic
def api_key_update(*, actor: Actor, key: ApiKey, data: ApiKeyInput) -> ApiKey:
    """Rename a key or change the team, application and agent it names; its owner and secret never change."""
    errors = FieldErrors()
    fields = _api_key_fields(errors, data)
    errors.raise_if_any()
    before = _api_key_snapshot(key)
    for name, value in fields.items():
        setattr(key, name, value)
    key.save(update_fields=list(fields))
    audit_update(actor=actor, object_type="api_key", obj=key, before=before, after=_api_key_snapshot(key))
    transaction.on_commit(config_publish)
    return key


@transaction.atomic
def api_key_revoke(*, actor: Actor, key: ApiKey) -> ApiKey:
    """Revoke a key at once (idempotent)."""
    if revoke_once(actor=actor, obj=key, object_type="api_key"):
        transaction.on_commit(config_publish)
    return key
