"""Validation shared by every app that accepts a name (catalog, routing, chains)."""

import unicodedata

from django.core.exceptions import ValidationError

CONTROL_CHARACTERS_MESSAGE = (
    "Names cannot contain control or invisible formatting characters (line breaks, zero-width or "
    "text-direction characters)."
)
SECRET_CONTROL_CHARACTERS_MESSAGE = "API keys cannot contain control characters such as line breaks."

# Cc: C0/C1 controls and DEL. Zl/Zp: U+2028/U+2029, line breaks to JavaScript, JSON-in-HTML and many
# log viewers. Cf: invisible formatting (zero-width space/joiners, bidi embeddings, overrides and
# isolates U+202A-E/U+2066-9, the BOM, soft hyphen, tag characters). Cs: lone surrogates, which JSON
# can spell ("\ud800") but no database encoding stores.
_REFUSED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
ZERO_WIDTH_JOINER = "\u200d"
_VARIATION_SELECTOR_16 = "\ufe0f"


def _emoji_side(c: str) -> bool:
    """A character an emoji ZWJ sequence joins: a pictograph (So), a skin-tone modifier (Sk) or VS-16."""
    return c == _VARIATION_SELECTOR_16 or unicodedata.category(c) in {"So", "Sk"}


def has_control_characters(value: str) -> bool:
    """True when `value` holds a control character or an invisible formatting character.

    Names end up in upstream requests, log lines, CSV exports and HTTP headers, where a CR/LF or a NUL
    splits or truncates what follows, and in the console, where a bidi override or a zero-width
    character makes one name look like another. The one exception is U+200D ZERO WIDTH JOINER between
    two emoji parts (👩‍💻): it only glues pictographs; anywhere else it is refused.
    """
    last = len(value) - 1
    for i, c in enumerate(value):
        if unicodedata.category(c) not in _REFUSED_CATEGORIES:
            continue
        if c == ZERO_WIDTH_JOINER and 0 < i < last and _emoji_side(value[i - 1]) and _emoji_side(value[i + 1]):
            continue
        return True
    return False


def validate_name(value: str) -> None:
    """Model field validator (forms and Django's admin) for names."""
    if isinstance(value, str) and has_control_characters(value):
        raise ValidationError(CONTROL_CHARACTERS_MESSAGE, code="control_characters")
