"""Small template helpers shared by the console's list pages."""

from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from django import template
from django.utils import timezone

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


@register.filter
def ago(value: datetime | None) -> str:
    """Relative time such as "42 s ago", "3 min ago"; the template puts the absolute UTC time in `title`."""
    if value is None:
        return ""
    seconds = int((timezone.now() - value).total_seconds())
    future = seconds < 0
    seconds = abs(seconds)
    if seconds < 5:
        return "just now"
    if seconds < 60:
        text = f"{seconds} s"
    elif seconds < 3600:
        text = f"{seconds // 60} min"
    elif seconds < 86400:
        text = f"{seconds // 3600} h"
    else:
        days = seconds // 86400
        text = f"{days} day{'s' if days != 1 else ''}"
    return f"in {text}" if future else f"{text} ago"
