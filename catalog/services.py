"""Writes of catalog objects that carry rules beyond a plain save."""

from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.utils import timezone

from audit.services import audit_record
from catalog.keys import key_generate
from catalog.models import Agent, ApiKey, Application, Team
from controlplane.configbus import config_publish


@dataclass(frozen=True)
class CreatedKey:
    key: ApiKey
    secret: str  # shown once, never stored


@transaction.atomic
def api_key_create(
    *,
    actor: Any,
    name: str,
    user: Any,
    team: Team | None = None,
    application: Application | None = None,
    agent: Agent | None = None,
) -> CreatedKey:
    """Issue a gateway key; only its hash is stored, the secret is returned once."""
    secret, prefix, hashed = key_generate()
    key = ApiKey.objects.create(
        name=name.strip(), prefix=prefix, hashed_secret=hashed, user=user, team=team, application=application, agent=agent
    )
    audit_record(
        actor=actor, action="api_key.create", object_type="api_key", object_id=key.pk, object_repr=str(key),
        after={"name": key.name, "prefix": prefix, "user": user.get_username(),
               "team": team and team.name, "application": application and application.name, "agent": agent and agent.name},
    )
    transaction.on_commit(config_publish)
    return CreatedKey(key=key, secret=secret)


@transaction.atomic
def api_key_revoke(*, actor: Any, key: ApiKey) -> ApiKey:
    """Revoke a key at once (idempotent)."""
    updated = ApiKey.objects.filter(pk=key.pk, revoked_at=None).update(revoked_at=timezone.now())
    key.refresh_from_db()
    if updated:
        audit_record(
            actor=actor, action="api_key.revoke", object_type="api_key", object_id=key.pk, object_repr=str(key),
            before={"revoked_at": None}, after={"revoked_at": key.revoked_at},
        )
        transaction.on_commit(config_publish)
    return key
