"""Validation and write helpers every catalog service shares (name_checked also serves routing.services)."""

from collections.abc import Callable
from typing import Any

from django.db import models, transaction
from django.db.models.deletion import ProtectedError
from django.utils import timezone

from audit.services import audit_changes, audit_record
from catalog.references import reference_label
from core.db import save_unique
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
