"""Writes of users the catalog owns: deleting one (refused while anything names them) and (de)activating."""

from collections.abc import Iterable
from typing import Any

from django.db import models, transaction

from audit.services import audit_record
from catalog.enums import ScopeType
from catalog.models import ConsoleToken
from catalog.references import scope_references
from catalog.selectors import api_keys_of_user, api_keys_usable_count
from catalog.services._shared import delete_checked, lock_stored, refuse_if_referenced
from core.configbus import config_publish
from core.db import for_update, lock_rows
from core.errors import ConflictError
from core.types import Actor


def _referrers_locked(user_model: Any, pks: list[int]) -> None:
    """Lock, before the users, the rows whose reference to them a delete sets to null (a chain's `created_by`,
    say): a write of such a row locks it first and may then lock the user (a chain scoped to them), so locked
    after the user, by the delete's UPDATE, the two could each wait for the other."""
    # Hidden relations too (related_name="+"), as the delete's collector finds them.
    for relation in user_model._meta.get_fields(include_hidden=True):
        if relation.auto_created and not relation.concrete and getattr(relation, "on_delete", None) is models.SET_NULL:
            lock_rows(relation.related_model._default_manager.filter(**{f"{relation.field.name}__in": pks}))


def user_deletes_locks_first(user_model: Any, pks: Iterable[int]) -> None:
    """Lock every row deleting these users locks, in the one order: the rows that name them and are set to null,
    the users, their console tokens. A batch of deletes (the admin's "delete selected") takes them all before its
    first delete's audit event takes the audit log's lock, which comes after every row's."""
    pks = list(pks)
    _referrers_locked(user_model, pks)
    lock_rows(user_model._default_manager.filter(pk__in=pks))
    lock_rows(ConsoleToken.objects.filter(user_id__in=pks))


@transaction.atomic
def user_delete(*, actor: Actor, user: Any) -> None:
    """Delete a user no chain, routing rule or guardrail is scoped to and who owns no gateway key.

    Keys are revoked, never deleted (request logs name them): such a user is deactivated instead, and the
    database refuses the delete too (ApiKey.user is PROTECT). The user's console API tokens are deleted with
    them, listed in the audit event.

    The user is locked before the checks: issuing a key or a token, or scoping a chain, rule or guardrail to
    the user, locks the user too, so that write committed first (and the checks see it) or waits and finds the
    user gone.
    """
    what = f"User “{user.get_username()}”"
    _referrers_locked(type(user), [user.pk])
    user = lock_stored(user, what=what)
    refuse_if_referenced(what, scope_references(scope_type=ScopeType.USER, scope_id=user.pk))
    if keys := api_keys_of_user(user=user):
        raise ConflictError(
            f"{what} owns gateway keys {', '.join(f'“{k}”' for k in keys)}. Keys are revoked, never deleted: "
            "deactivate the user instead.",
            errors={"api_keys": keys},
        )
    snapshot = {
        "username": user.get_username(),
        "email": user.email,
        "is_active": user.is_active,
        "is_staff": user.is_staff,
        "is_superuser": user.is_superuser,
        "groups": sorted(user.groups.values_list("name", flat=True)),
    }
    if tokens := [str(t) for t in for_update(ConsoleToken.objects.filter(user_id=user.pk).order_by("pk"))]:
        snapshot["console_tokens"] = sorted(tokens)  # deleted with the user (CASCADE)
    pk = user.pk
    delete_checked(user, what=what)
    audit_record(
        actor=actor,
        action="user.delete",
        object_type="user",
        object_id=pk,
        object_repr=snapshot["username"],
        before=snapshot,
    )


@transaction.atomic
def user_set_active(*, actor: Actor, user: Any, active: bool) -> int:
    """Activate or deactivate a user, audited; returns how many of their gateway keys this stops (or restores).

    The gateway refuses the keys of an inactive user (the config reload follows the commit); the keys are not
    revoked, so reactivating the user makes them work again. Setting the state the user already has changes,
    audits and publishes nothing, and returns 0.
    """
    updated = type(user)._default_manager.filter(pk=user.pk, is_active=not active).update(is_active=active)
    user.is_active = active
    if not updated:
        return 0
    audit_record(
        actor=actor,
        action="user.update",
        object_type="user",
        object_id=user.pk,
        object_repr=user.get_username(),
        before={"is_active": not active},
        after={"is_active": active},
    )
    transaction.on_commit(config_publish)
    return api_keys_usable_count(users=[user])
