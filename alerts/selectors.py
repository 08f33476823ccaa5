"""Reads of alert rules, alerts and deliveries."""

import logging
from dataclasses import dataclass

from django.core.cache import cache
from django.db.models import Count, Prefetch, Q, QuerySet

from alerts.models import Alert, AlertRule, AlertState, Delivery, DeliveryStatus, RuleKind

log = logging.getLogger(__name__)

# Kinds whose firing makes the banner red (traffic is failing or a circuit is down); the rest amber.
SEVERE_KINDS = frozenset({RuleKind.CIRCUIT_OPEN, RuleKind.EXHAUSTED})
BANNER_MAX = 100


def alert_rule_list() -> QuerySet[AlertRule]:
    """Rules by name, each with how many of its alerts are firing (`firing_count`)."""
    firing = Count("alerts", filter=Q(alerts__state=AlertState.FIRING))
    return AlertRule.objects.annotate(firing_count=firing).order_by("name", "id")


def alert_rule_get(*, rule_id: int) -> AlertRule:
    """One rule (AlertRule.DoesNotExist when there is none)."""
    return AlertRule.objects.get(pk=rule_id)


def alert_list(*, state: str = "") -> QuerySet[Alert]:
    """Alerts newest first, optionally only firing or resolved ones."""
    qs = Alert.objects.order_by("-opened_at", "-id")
    if state:
        qs = qs.filter(state=state)
    return qs


def alert_get(*, alert_id: int) -> Alert:
    """One alert with its deliveries and their attempts (Alert.DoesNotExist when there is none)."""
    deliveries = Delivery.objects.order_by("created_at", "id").prefetch_related("attempt_log")
    return Alert.objects.prefetch_related(Prefetch("deliveries", queryset=deliveries)).get(pk=alert_id)


@dataclass(frozen=True)
class Banner:
    """The firing alerts as the banner shows them: how many, the newest one's subject, and how severe."""

    count: int
    more: bool  # more than BANNER_MAX are firing
    first_subject: str
    first_rule: str
    severe: bool

    def __bool__(self) -> bool:
        return self.count > 0


BANNER_CACHE_KEY = "alerts:banner"
BANNER_CACHE_SECONDS = 5


def alert_banner() -> Banner:
    """The banner: cached for a few seconds (every alert change clears it), else one query over the firing index.

    Never raises for the cache: with it away (Redis down) every admin page still renders, from the query.
    """
    try:
        cached = cache.get(BANNER_CACHE_KEY)
    except Exception:  # an unreachable Redis cache: read the database instead, and do not wait on it twice
        log.warning("alerts: could not read the cached banner", exc_info=True)
        return _banner_query()
    if isinstance(cached, Banner):
        return cached
    banner = _banner_query()
    try:
        cache.set(BANNER_CACHE_KEY, banner, BANNER_CACHE_SECONDS)
    except Exception:  # the same: the next page queries again
        log.warning("alerts: could not cache the banner", exc_info=True)
    return banner


def alert_banner_forget() -> None:
    """Drop the cached banner (after an alert opens or resolves). Never raises: the cache may be away."""
    try:
        cache.delete(BANNER_CACHE_KEY)
    except Exception:  # a Redis cache that is unreachable: the entry expires by itself
        log.warning("alerts: could not clear the cached banner", exc_info=True)


def _banner_query() -> Banner:
    rows = list(
        Alert.objects.filter(state=AlertState.FIRING)
        .order_by("-opened_at", "-id")
        .values_list("subject", "rule_name", "kind")[: BANNER_MAX + 1]
    )
    if not rows:
        return Banner(count=0, more=False, first_subject="", first_rule="", severe=False)
    shown = rows[:BANNER_MAX]
    return Banner(
        count=len(shown),
        more=len(rows) > BANNER_MAX,
        first_subject=shown[0][0],
        first_rule=shown[0][1],
        severe=any(kind in SEVERE_KINDS for _, _, kind in shown),
    )


def delivery_counts() -> dict[str, int]:
    """How many webhook deliveries are in each status (pending, delivered, failed), zeros included."""
    counts = {status: 0 for status in DeliveryStatus.values}
    for status, n in Delivery.objects.values_list("status").annotate(n=Count("id")).order_by():
        counts[status] = n
    return counts
