"""Validation and write helpers every catalog service shares (name_checked also serves routing.services)."""

from collections.abc import Callable, Mapping
from typing import Any

from django.contrib.auth import get_user_model
from django.db import IntegrityError, models, transaction
from django.db.models.deletion import ProtectedError
from django.utils import timezone

from audit.services import audit_changes, audit_record
from catalog.keys import key_generate
from catalog.references import reference_label
from core.db import for_update, key_share_lock, save_unique
from core.errors import ConflictError
from core.types import Actor
from core.validation import FieldErrors
from core.validators import CONTROL_CHARACTERS_MESSAGE, has_control_characters


def name_checked(
    errors: FieldErrors,
    value: str | None,
    *,
    label: str,
    max_length: int,
    taken: models.QuerySet[Any],
    field_name: str = "name",
) -> str:
    """Strip a name and check it is present, printable, short enough and not used by another row of `taken`."""
    name = (value or "").strip()
    if not name:
        errors.add(field_name, f"{label} name is required and cannot be only whitespace.")
    elif has_control_characters(name):
        errors.add(field_name, CONTROL_CHARACTERS_MESSAGE)
    elif len(name) > max_length:
        errors.add(field_name, f"{label} name is at most {max_length} characters.")
    elif taken.filter(name=name).exists():
        article = "An" if label[0].lower() in "aeiou" else "A"
        errors.add(field_name, f"{article} {label.lower()} named “{name}” already exists.")
    return name


def named(errors: FieldErrors, field_name: str, value: str | None, *, label: str, lookup: Callable[[str], Any]) -> Any:
    """Resolve an optional reference by name; None or blank means no reference."""
    name = (value or "").strip()
    if not name:
        return None
    found = lookup(name)
    if found is None:
        errors.add(field_name, f"Unknown {label} “{name}”.")
    return found


def lock_stored[M: models.Model](obj: M, *, what: str, related: tuple[str, ...] = ()) -> M:
    """The row as stored, locked until the transaction ends; a row deleted meanwhile is a ConflictError.

    A delete locks the row it deletes before its reference check: a write that names the row locks it too
    (`lock_named`), so it either waits for the delete and finds the row gone, or the check sees its reference."""
    # of=self: only this row, not the rows select_related joins (PostgreSQL cannot lock a nullable join's side).
    rows = type(obj)._default_manager.select_for_update(of=("self",))
    if related:  # select_related() with no names would join every relation
        rows = rows.select_related(*related)
    stored = rows.filter(pk=obj.pk).first()
    if stored is None:
        raise ConflictError(f"{what} no longer exists; it was deleted by someone else.")
    return stored


def lock_named[M: models.Model](model: type[M], name: object, *, field: str = "name") -> M | None:
    """The row of `model` called `name`, locked until the transaction ends (None when there is none).

    A write that will name the row (a foreign key, or its name as text) resolves it so: a concurrent delete or
    rename of it locks the same row, so one waits for the other (see docs/decisions.md, "One lock order")."""
    return for_update(model._default_manager.filter(**{field: name})).first()


def lock_all_named(model: type[models.Model], *names: str | None) -> None:
    """Lock the rows of `model` with these names (blank ones skipped) in primary key order, as every write that
    locks several rows of one table does: two writes naming the same two rows cannot each hold one."""
    wanted = {n for n in ((name or "").strip() for name in names) if n}
    if len(wanted) > 1:
        list(for_update(model._default_manager.filter(name__in=wanted).order_by("pk")).values_list("pk"))


def lock_reference_first(model: type[models.Model], data: Mapping[str, Any], field: str, stored_id: int | None) -> None:
    """Lock the row of `model` an update's body names in `field` (by name), or the stored row names (by key) when
    the body leaves the field out: the lock the update's service takes, taken before the edited row's (see
    `core.api.row_locked_update`)."""
    if field in data:
        value = data[field]
        if isinstance(value, str) and value.strip():
            lock_named(model, value.strip())
    elif stored_id is not None:
        lock_named(model, stored_id, field="pk")


def actor_locked(actor: Actor) -> None:
    """Lock the acting user's row FOR KEY SHARE, for a write whose new row names them (a chain's creator): the
    foreign key is checked at COMMIT (it is deferred), which takes that lock after the audit log's, so a write
    holding the user (a rule scoped to them, a key issued to them) and waiting on the audit log would deadlock
    with it. Taken here, at the users' place in the one lock order, the check finds it held."""
    if getattr(actor, "is_authenticated", False):
        key_share_lock(get_user_model(), getattr(actor, "pk", None))


def refuse_if_referenced(what: str, refs: dict[str, list[str]]) -> None:
    """Raise ConflictError naming every object that still refers to `what`."""
    if not refs:
        return
    parts = [f"{reference_label(kind)} {', '.join(f'“{n}”' for n in names)}" for kind, names in refs.items()]
    message = f"{what} is still used by {'; '.join(parts)}. Change, delete or release those first."
    raise ConflictError(message, errors=refs)


def save_named[M: models.Model](obj: M, *, label: str) -> M:
    """Save a row with a unique name; losing a concurrent race to the constraint is the name's field error."""
    message = f"Another {label.lower()} with this name was saved at the same time; choose another name."
    return save_unique(obj, field="name", message=message)


def delete_checked(obj: models.Model, *, what: str) -> None:
    """Delete a row the caller found unreferenced; a PROTECT foreign key added since then is a 409, not a 500."""
    try:
        with transaction.atomic():
            obj.delete()
    except ProtectedError:
        # Referenced by a row created after our reference check.
        raise ConflictError(f"{what} is still referenced; reload and try again.") from None


def audit_update(
    *, actor: Actor, object_type: str, obj: models.Model, before: dict[str, Any], after: dict[str, Any]
) -> None:
    audit_changes(
        actor=actor,
        action=f"{object_type}.update",
        object_type=object_type,
        object_id=obj.pk,
        object_repr=str(obj),
        before=before,
        after=after,
    )


def revoke_once(*, actor: Actor, obj: models.Model, object_type: str) -> bool:
    """Set `revoked_at` unless it is set already; audit `<object_type>.revoke` only when this call revoked it.

    The conditional UPDATE makes revoking idempotent under concurrency: of two revokes, one audits.
    `obj` is refreshed either way.
    """
    updated = type(obj)._default_manager.filter(pk=obj.pk, revoked_at=None).update(revoked_at=timezone.now())
    obj.refresh_from_db()
    if updated:
        audit_record(
            actor=actor,
            action=f"{object_type}.revoke",
            object_type=object_type,
            object_id=obj.pk,
            object_repr=str(obj),
            before={"revoked_at": None},
            after={"revoked_at": getattr(obj, "revoked_at")},  # noqa: B009 - any model with revoked_at
        )
    return bool(updated)


# Draws of a new key's secret before its prefix collision is an error: 32 random bits each, so with n keys
# stored a draw collides with probability n / 2**32 (about one issue in 43,000 at 100,000 keys).
KEY_DRAWS = 5


def create_with_fresh_prefix[M: models.Model](model: type[M], *, key_prefix: str, **fields: Any) -> tuple[M, str]:
    """Create a gateway key or a console token with a new secret: (the row, the secret shown once).

    The visible prefix ("cp-" and 8 hex digits) is unique; one another row has already is drawn again, with a
    fresh secret, in a savepoint (up to KEY_DRAWS times), not a 500. The format stays as it was."""
    for draw in range(1, KEY_DRAWS + 1):
        secret, prefix, hashed = key_generate(key_prefix)
        try:
            with transaction.atomic():
                return model._default_manager.create(prefix=prefix, hashed_secret=hashed, **fields), secret
        except IntegrityError:
            if draw == KEY_DRAWS or not model._default_manager.filter(prefix=prefix).exists():
                raise
    raise AssertionError("unreachable")
