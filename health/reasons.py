"""Why a circuit is failing, in words, from the label of its last failure (a status code or an error kind)."""

from __future__ import annotations

# Error kinds as the breaker labels them (Outcome.timeout(), Outcome.connection_error()).
_KINDS = {"timeout": "timing out", "connection_error": "connection refused"}


def failure_reason(last_status: int | str | None) -> str:
    """ "rate limited · 429", "server errors · 503" (any 5xx), "timing out", "connection refused",
    "failing · <label>" for anything else; "" when there is no failure."""
    if last_status is None:
        return ""
    label = str(last_status).strip()
    if not label:
        return ""
    if label in _KINDS:
        return _KINDS[label]
    if label == "429":
        return "rate limited · 429"
    if label.isdigit() and len(label) == 3 and label.startswith("5"):
        return f"server errors · {label}"
    return f"failing · {label}"
