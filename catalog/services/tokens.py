"""Writes of console API tokens: what REST API scripts authenticate with (never gateway keys)."""

from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction

from audit.services import audit_record
from catalog.keys import CONSOLE_TOKEN_PREFIX
from catalog.models import ConsoleToken
from catalog.services._shared import create_with_fresh_prefix, lock_named, revoke_once
from core.types import Actor
from core.validation import FieldErrors
from core.validators import CONTROL_CHARACTERS_MESSAGE, has_control_characters


def _console_token_snapshot(token: ConsoleToken) -> dict[str, Any]:
    # Never the secret nor its hash.
    return {"name": token.name, "prefix": token.prefix, "user": token.user.get_username()}


@transaction.atomic
def console_token_create(*, actor: Actor, user: Any, name: str) -> tuple[ConsoleToken, str]:
    """Issue a REST API token for `user`; only its SHA-256 is stored, the secret is returned once."""
    errors = FieldErrors()
    name = (name or "").strip()
    if not name:
        errors.add("name", "Token name is required and cannot be only whitespace.")
    elif has_control_characters(name):
        errors.add("name", CONTROL_CHARACTERS_MESSAGE)
    elif len(name) > 128:
        errors.add("name", "Token name is at most 128 characters.")
    # Locked: user_delete locks the user first, so the tokens its audit event lists are the ones it deletes.
    owner = lock_named(get_user_model(), user.pk, field="pk")
    if owner is None:
        errors.add("user", "This user no longer exists; it was deleted by someone else.")
    errors.raise_if_any()
    token, secret = create_with_fresh_prefix(ConsoleToken, key_prefix=CONSOLE_TOKEN_PREFIX, user=owner, name=name)
    audit_record(
        actor=actor,
        action="console_token.create",
        object_type="console_token",
        object_id=token.pk,
        object_repr=str(token),
        after=_console_token_snapshot(token),
    )
    return token, secret


@transaction.atomic
def console_token_revoke(*, actor: Actor, token: ConsoleToken) -> ConsoleToken:
    """Revoke a REST API token at once (idempotent: revoking it again changes and audits nothing)."""
    revoke_once(actor=actor, obj=token, object_type="console_token")
    return token
