"""Writes of alert rules (audited, one transaction each) and of the alerts the evaluator opens and resolves.

Opening or resolving an alert creates its webhook delivery in the same transaction; the sender's 5 s sweep
sends it (alerts.delivery, alerts.tasks).
"""

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import URLValidator
from django.db import IntegrityError, transaction
from django.urls import reverse

from alerts.models import (
    Alert,
    AlertRule,
    AlertState,
    BodyFormat,
    Delivery,
    DeliveryEvent,
    RuleKind,
)
from alerts.selectors import alert_banner_forget
from alerts.webhooks import literal_host_refused, webhook_port_usable, webhook_url_redacted, webhook_url_sendable
from audit.services import audit_changes, audit_record
from catalog.models import LlmModel, Provider
from catalog.services import lock_named
from core.db import write_unique
from core.errors import ConflictError
from core.types import Actor
from core.validation import FieldErrors, clean_name
from core.validators import has_control_characters

NAME_MAX = 200
URL_MAX = 2000
MINUTES_MAX = 1440  # a day
COUNT_MAX = 1_000_000

# The defaults of each kind's parameters (minutes is N for circuit_open, M otherwise).
DEFAULTS: dict[str, dict[str, Any]] = {
    RuleKind.CIRCUIT_OPEN: {"minutes": 5},
    RuleKind.DEGRADED: {"minutes": 5, "threshold_percent": 20.0, "min_requests": 20},
    RuleKind.EXHAUSTED: {"minutes": 5, "min_count": 5},
}
# Which optional parameters each kind uses; the others are stored as null / "".
USES: dict[str, frozenset[str]] = {
    RuleKind.CIRCUIT_OPEN: frozenset({"provider", "model", "minutes"}),
    RuleKind.DEGRADED: frozenset({"model", "minutes", "threshold_percent", "min_requests"}),
    RuleKind.EXHAUSTED: frozenset({"model", "minutes", "min_count"}),
}

_URL_VALIDATOR = URLValidator(schemes=["http", "https"])


@dataclass(frozen=True)
class RuleInput:
    """A rule as the console form or the API sends it. None = the kind's default (or "any" for a filter)."""

    name: str
    kind: str
    provider: str = ""
    model: str = ""
    minutes: int | None = None
    threshold_percent: float | None = None
    min_requests: int | None = None
    min_count: int | None = None
    enabled: bool = True
    webhook_url: str = ""
    body_format: str = BodyFormat.JSON


def _whole(value: int | float) -> bool:
    return isinstance(value, int) or value.is_integer()


def _number(errors: FieldErrors, field: str, label: str, value: Any, low: float, high: float, *, whole: bool) -> Any:
    # An int is compared as it is: float() of a very large one would overflow.
    if isinstance(value, bool) or not isinstance(value, int | float) or (whole and not _whole(value)):
        errors.add(field, f"{label} must be a {'whole ' if whole else ''}number.")
        return None
    if not low <= value <= high:
        errors.add(field, f"{label} must be between {low:g} and {high:g}.")
        return None
    return int(value) if whole else float(value)


def _clean(data: RuleInput, *, exclude_rule_id: int | None) -> dict[str, Any]:
    """Validate every field and collect all errors; the row's values (unused parameters null / "")."""
    errors = FieldErrors()
    name = clean_name(errors, data.name, max_length=NAME_MAX)
    if not errors.has("name") and AlertRule.objects.filter(name=name).exclude(pk=exclude_rule_id or 0).exists():
        errors.add("name", f"A rule named “{name}” already exists.")

    kind = data.kind
    if kind not in RuleKind.values:
        errors.add("kind", f"Kind must be one of: {', '.join(RuleKind.values)}.")
        errors.raise_if_any()
    uses = USES[kind]
    defaults = DEFAULTS[kind]
    row: dict[str, Any] = {
        "name": name,
        "kind": kind,
        "provider": "",
        "model": "",
        "threshold_percent": None,
        "min_requests": None,
        "min_count": None,
        "enabled": bool(data.enabled),
    }

    # The model and the provider named are locked (the model first: docs/decisions.md, "One lock order"): their
    # rename or delete locks the same row, so it waits for this rule and carries it over (or refuses), or this
    # waits and finds the old name unknown. Never a rule left naming a name nothing has.
    provider = (data.provider or "").strip() if "provider" in uses else ""
    model = (data.model or "").strip()
    if model and lock_named(LlmModel, model) is None:
        errors.add("model", f"Unknown model “{model}”.")
    row["model"] = model
    if provider and lock_named(Provider, provider) is None:
        errors.add("provider", f"Unknown provider “{provider}”.")
    row["provider"] = provider

    def param(field: str, label: str, low: float, high: float, *, whole: bool = True) -> None:
        value = getattr(data, field)
        if field not in uses:
            return
        row[field] = defaults[field] if value is None else _number(errors, field, label, value, low, high, whole=whole)

    param("minutes", "Minutes", 1, MINUTES_MAX)
    param("threshold_percent", "Fallback share", 0, 99.9, whole=False)
    param("min_requests", "Minimum requests", 1, COUNT_MAX)
    param("min_count", "Minimum count", 1, COUNT_MAX)

    url = (data.webhook_url or "").strip()
    if url:
        if len(url) > URL_MAX:
            errors.add("webhook_url", f"Webhook URL is at most {URL_MAX} characters.")
        elif has_control_characters(url):
            errors.add("webhook_url", "Webhook URL cannot contain control characters.")
        else:
            try:
                _URL_VALIDATOR(url)
            except ValidationError:
                errors.add("webhook_url", "Webhook URL must be a full http:// or https:// address.")
            else:
                if not webhook_url_sendable(url):
                    errors.add("webhook_url", "Webhook URL's host is not a valid domain name.")
                elif not webhook_port_usable(url):
                    errors.add("webhook_url", "Webhook URL's port must be between 1 and 65535.")
                elif literal_host_refused(url):
                    errors.add("webhook_url", "Webhook URL cannot point to a link-local or cloud metadata address.")
    row["webhook_url"] = url
    if data.body_format not in BodyFormat.values:
        errors.add("body_format", f"Body format must be one of: {', '.join(BodyFormat.values)}.")
    row["body_format"] = data.body_format
    errors.raise_if_any()
    return row


def rule_snapshot(rule: AlertRule) -> dict[str, Any]:
    """What the audit log records of a rule."""
    return {
        "name": rule.name,
        "kind": rule.kind,
        "provider": rule.provider,
        "model": rule.model,
        "minutes": rule.minutes,
        "threshold_percent": rule.threshold_percent,
        "min_requests": rule.min_requests,
        "min_count": rule.min_count,
        "enabled": rule.enabled,
        "webhook_url": webhook_url_redacted(rule.webhook_url),
        "body_format": rule.body_format,
    }


_NAME_TAKEN = "Another rule already has this name."


@transaction.atomic
def alert_rule_create(*, actor: Actor, data: RuleInput) -> AlertRule:
    """Create a rule and audit it."""
    row = _clean(data, exclude_rule_id=None)
    rule = write_unique(lambda: AlertRule.objects.create(**row), field="name", message=_NAME_TAKEN)
    audit_record(
        actor=actor,
        action="alert_rule.create",
        object_type="alert_rule",
        object_id=rule.pk,
        object_repr=rule.name,
        after=rule_snapshot(rule),
    )
    return rule


def _lock(rule_id: int) -> AlertRule:
    try:
        return AlertRule.objects.select_for_update().get(pk=rule_id)
    except AlertRule.DoesNotExist:
        raise ConflictError("This rule no longer exists; it was deleted by someone else.") from None


@transaction.atomic
def alert_rule_update(*, actor: Actor, rule_id: int, data: RuleInput) -> AlertRule:
    """Replace a rule's fields and audit what changed; disabling it resolves its firing alerts.

    The model and provider it names are locked before the rule itself: a rename locks them, then the rules that
    name them (`alert_rules_renamed`)."""
    row = _clean(data, exclude_rule_id=rule_id)
    rule = _lock(rule_id)
    before = rule_snapshot(rule)
    for field, value in row.items():
        setattr(rule, field, value)
    write_unique(rule.save, field="name", message=_NAME_TAKEN)
    audit_changes(
        actor=actor,
        action="alert_rule.update",
        object_type="alert_rule",
        object_id=rule.pk,
        object_repr=rule.name,
        before=before,
        after=rule_snapshot(rule),
    )
    if not rule.enabled:
        _resolve_all(rule, resolution="rule disabled")
    return rule


@transaction.atomic
def alert_rule_set_enabled(*, actor: Actor, rule_id: int, enabled: bool) -> AlertRule:
    """Enable or disable a rule (audited; nothing when unchanged). Disabling resolves its firing alerts."""
    rule = _lock(rule_id)
    if rule.enabled != enabled:
        rule.enabled = enabled
        rule.save(update_fields=["enabled", "updated_at"])
        audit_record(
            actor=actor,
            action="alert_rule.enable" if enabled else "alert_rule.disable",
            object_type="alert_rule",
            object_id=rule.pk,
            object_repr=rule.name,
            before={"enabled": not enabled},
            after={"enabled": enabled},
        )
        if not enabled:
            _resolve_all(rule, resolution="rule disabled")
    return rule


@transaction.atomic
def alert_rule_delete(*, actor: Actor, rule_id: int) -> None:
    """Delete a rule; its firing alerts resolve (and notify), the history stays; the audit keeps a snapshot."""
    rule = _lock(rule_id)
    snapshot = rule_snapshot(rule)
    _resolve_all(rule, resolution="rule deleted")
    rule.delete()
    audit_record(
        actor=actor,
        action="alert_rule.delete",
        object_type="alert_rule",
        object_id=rule_id,
        object_repr=str(snapshot["name"]),
        before=snapshot,
    )


# ---------- Alerts (the evaluator's writes) ----------


def alert_url(alert: Alert) -> str:
    """The absolute address of an alert's page, for notifications."""
    return settings.ALERT_CONSOLE_URL + reverse("alerts:detail", args=[alert.pk])


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def slack_escape(text: str) -> str:
    """Text as Slack's message format needs it: `&`, `<` and `>` escaped, so `<!channel>` or a link cannot appear."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def notification_body(alert: Alert, body_format: str) -> dict[str, Any]:
    """The webhook body: the JSON document, or a Slack-compatible {"text": ...}."""
    url = alert_url(alert)
    if body_format == BodyFormat.SLACK:
        name, summary = slack_escape(alert.rule_name), slack_escape(alert.summary)
        if alert.state == AlertState.FIRING:
            head = f":rotating_light: *Firing* · {name}"
            tail = summary
        else:
            head = f":white_check_mark: *Resolved* · {name}"
            tail = f"{slack_escape(alert.subject)}: {slack_escape(alert.resolution)}. Last seen: {summary}"
        return {"text": f"{head}\n{tail}\n<{url}|Open the alert>"}
    return {
        "rule": alert.rule_name,
        "rule_id": alert.rule_id,
        "kind": alert.kind,
        "subject": alert.subject,
        "state": alert.state,
        "summary": alert.summary,
        "figures": alert.figures,
        "opened_at": _iso(alert.opened_at),
        "resolved_at": _iso(alert.resolved_at),
        "resolution": alert.resolution,
        "url": url,
    }


def _changed(alert: Alert, rule: AlertRule | None, event: str, now: datetime) -> Delivery | None:
    """After an alert opened or resolved: forget the cached banner (now and on commit) and notify."""
    alert_banner_forget()
    transaction.on_commit(alert_banner_forget)
    return _notify(alert, rule, event, now)


def _notify(alert: Alert, rule: AlertRule | None, event: str, now: datetime) -> Delivery | None:
    """Create the delivery of this change (inside the caller's transaction); the 5 s sweep sends it.

    Nothing is enqueued here: this runs inside console requests too (disabling or deleting a rule), and a
    publish to an unreachable broker could hold the request up.
    """
    if rule is None or not rule.webhook_url:
        return None
    delivery = Delivery.objects.create(
        alert=alert,
        event=event,
        url=rule.webhook_url,
        body_format=rule.body_format,
        payload=notification_body(alert, rule.body_format),
        created_at=now,
        next_attempt_at=now,
    )
    return delivery


def alert_open(*, rule: AlertRule, subject: str, figures: dict[str, Any], summary: str, now: datetime) -> Alert | None:
    """Open one alert for (rule, subject) and its delivery; None when one is already firing (a racing evaluator)."""
    try:
        with transaction.atomic():
            alert = Alert.objects.create(
                rule=rule,
                rule_name=rule.name,
                kind=rule.kind,
                subject=subject,
                figures=figures,
                summary=summary[:500],
                opened_at=now,
                last_seen_at=now,
            )
    except IntegrityError:
        return None
    _changed(alert, rule, DeliveryEvent.OPENED, now)
    return alert


def alert_resolve(*, alert: Alert, rule: AlertRule | None, resolution: str, now: datetime) -> Alert:
    """Resolve a firing alert and create its delivery, in the caller's transaction."""
    alert.state = AlertState.RESOLVED
    alert.resolved_at = now
    alert.resolution = resolution[:200]
    alert.save(update_fields=["state", "resolved_at", "resolution"])
    _changed(alert, rule, DeliveryEvent.RESOLVED, now)
    return alert


def clear_window(rule: AlertRule) -> timedelta:
    """How long the condition must stay clear before an alert resolves: the rule's N or M minutes."""
    return timedelta(minutes=rule.minutes)


def _resolve_all(rule: AlertRule, *, resolution: str) -> None:
    from django.utils import timezone

    now = timezone.now()
    for alert in Alert.objects.select_for_update().filter(rule=rule, state=AlertState.FIRING):
        alert_resolve(alert=alert, rule=rule, resolution=resolution, now=now)


def alert_rules_renamed(*, actor: Actor, field: str, old: str, new: str) -> Callable[[], None]:
    """Carry the rules that name a provider or a model (`field`) over to its new name: catalog calls this in the
    rename's transaction. Left behind, such a rule matched nothing and could not be saved as it was. Locks the
    rules; the function returned moves and audits them (`catalog.references`)."""
    if field not in ("provider", "model"):
        raise ValueError(field)
    rules = list(AlertRule.objects.select_for_update().filter(**{field: old}).order_by("pk"))

    def move() -> None:
        for rule in rules:
            setattr(rule, field, new)
            rule.save(update_fields=[field, "updated_at"])
            audit_record(
                actor=actor,
                action="alert_rule.update",
                object_type="alert_rule",
                object_id=rule.pk,
                object_repr=rule.name,
                before={field: old},
                after={field: new},
            )

    return move


def alert_rules_referencing(*, field: str, name: str) -> list[str]:
    """The names of the rules that name a provider or a model (`field`), for a refused delete."""
    return list(AlertRule.objects.filter(**{field: name}).order_by("name").values_list("name", flat=True))
