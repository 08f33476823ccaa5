"""Validation shared by every app that accepts a name (catalog, routing, chains)."""

import unicodedata

from django.core.exceptions import ValidationError

CONTROL_CHARACTERS_MESSAGE = "Names cannot contain control characters such as line breaks."
SECRET_CONTROL_CHARACTERS_MESSAGE = "API keys cannot contain control characters such as line breaks."


def has_control_characters(value: str) -> bool:
    """True when `value` holds a C0 or C1 control character or DEL (Unicode category Cc).

    Names end up in upstream requests, log lines, CSV exports and HTTP headers, where a CR/LF or
    a NUL splits or truncates what follows.
    """
    return any(unicodedata.category(c) == "Cc" for c in value)


def validate_name(value: str) -> None:
    """Model field validator (forms and Django's admin) for names."""
    if isinstance(value, str) and has_control_characters(value):
        raise ValidationError(CONTROL_CHARACTERS_MESSAGE, code="control_characters")
