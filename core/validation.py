"""The one validation style of the services: collect every field error, then raise them together.

    errors = FieldErrors()
    if not name:
        errors.add("name", "Name is required.")
    errors.raise_if_any()          # ValidationFailed; its message is the first error

Services validate everything they are given before they raise, so a form or an API client sees all of
its mistakes at once, each under its field ("__all__" for errors of the whole input).
"""

from collections.abc import Iterable, Mapping

from core.errors import ValidationFailed
from core.validators import CONTROL_CHARACTERS_MESSAGE, has_control_characters


class FieldErrors:
    """Field name → messages, in the order they were found."""

    __slots__ = ("errors",)

    def __init__(self) -> None:
        self.errors: dict[str, list[str]] = {}

    def add(self, field: str, message: str) -> None:
        self.errors.setdefault(field, []).append(message)

    def extend(self, errors: Mapping[str, Iterable[str]], *, prefix: str = "") -> None:
        """Add another validation's errors, optionally under `prefix` (e.g. "entries.0.")."""
        for field, messages in errors.items():
            for message in messages:
                self.add(prefix + field, message)

    def has(self, field: str) -> bool:
        return field in self.errors

    def __bool__(self) -> bool:
        return bool(self.errors)

    def raise_if_any(self) -> None:
        """Raise ValidationFailed carrying every error; the first message is the summary."""
        if self.errors:
            first = next(iter(self.errors.values()))[0]
            raise ValidationFailed(first, errors=self.errors)


def clean_name(
    errors: FieldErrors, value: str | None, *, max_length: int, label: str = "Name", field: str = "name"
) -> str:
    """A required one-line name, trimmed: not blank, no control characters, at most `max_length` characters.

    Returns the trimmed value; a problem is added under `field` (test `errors.has(field)` before looking the name
    up, e.g. for uniqueness).
    """
    name = (value or "").strip()
    if not name:
        errors.add(field, f"{label} is required and cannot be only whitespace.")
    elif has_control_characters(name):
        errors.add(field, CONTROL_CHARACTERS_MESSAGE)
    elif len(name) > max_length:
        errors.add(field, f"{label} is at most {max_length} characters.")
    return name
