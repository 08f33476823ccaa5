"""Saving rows whose uniqueness the services checked first.

A service validates a unique field (a name, a source model in a scope) before it saves, but two
concurrent writes can both pass that check; the database constraint then refuses the second. The
caller gets the same field error a sequential write would have given, never a 500.
"""

from collections.abc import Callable

from django.db import IntegrityError, models, transaction

from core.errors import ValidationFailed


def unique_violation(field: str, message: str) -> ValidationFailed:
    """The field error for a concurrent write that lost the race to a unique constraint."""
    return ValidationFailed(message, errors={field: [message]})


def save_unique[M: models.Model](obj: M, *, field: str, message: str) -> M:
    """Save `obj` in a savepoint; a unique-constraint failure becomes ValidationFailed on `field`."""
    write_unique(obj.save, field=field, message=message)
    return obj


def write_unique[T](write: Callable[[], T], *, field: str, message: str) -> T:
    """Run one write in a savepoint; a unique-constraint failure becomes ValidationFailed on `field`."""
    try:
        with transaction.atomic():
            return write()
    except IntegrityError:
        raise unique_violation(field, message) from None
