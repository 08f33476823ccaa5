"""Formatting of request-log values: durations, costs, token counts, times."""

from datetime import UTC, datetime
from decimal import Decimal

from django import template
from django.utils import timezone

register = template.Library()


@register.filter
def ms(value: float | None) -> str:
    """12.3 ms, 845 ms, 1.24 s; "—" when unknown."""
    if value is None:
        return "—"
    if value < 10:
        return f"{value:.1f} ms"
    if value < 1000:
        return f"{value:.0f} ms"
    return f"{value / 1000:.2f} s"


@register.filter
def usd(value: Decimal | None) -> str:
    """$0.000123, $0.0125, $1.50, $0.00000040 (as stored, to 8 places); "—" when not priced."""
    if value is None:
        return "—"
    text = f"{value:.8f}".rstrip("0")
    whole, _, fraction = text.partition(".")
    return f"${whole}.{fraction.ljust(2, '0')}"


@register.filter
def count(value: int | None) -> str:
    return "—" if value is None else f"{value:,}"


@register.filter
def utc_time(value: datetime | None) -> str:
    """The time of day in UTC, with the date when it is not today: "07:41:03", "Nov 29 07:41:03"."""
    if value is None:
        return ""
    moment = value.astimezone(UTC)
    if moment.date() == timezone.now().astimezone(UTC).date():
        return moment.strftime("%H:%M:%S")
    return moment.strftime("%b %d %H:%M:%S")


@register.filter
def utc_full(value: datetime | None) -> str:
    """2026-12-01 07:41:03.123 UTC."""
    if value is None:
        return ""
    moment = value.astimezone(UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{moment.microsecond // 1000:03d} UTC"
