"""Small template helpers shared by the console's list pages."""

from typing import Any
from urllib.parse import urlencode

from django import template

register = template.Library()


@register.simple_tag
def query(params: dict[str, Any], **changes: Any) -> str:
    """The query string of `params` with `changes` applied; empty values and page 1 are left out."""
    merged = {**params, **changes}
    items = [
        (key, value)
        for key, value in merged.items()
        if value not in (None, "") and not (key == "page" and str(value) == "1")
    ]
    return "?" + urlencode(items) if items else ""
