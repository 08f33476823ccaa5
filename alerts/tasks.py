"""Celery entry points of alerts: the evaluator (every 30 s) and the webhook sender (every 5 s)."""

import logging

from celery import shared_task
from django.utils import timezone

from alerts.delivery import deliveries_send
from alerts.evaluator import alerts_evaluate

log = logging.getLogger(__name__)


@shared_task(name="alerts.evaluate", ignore_result=True)
def evaluate_task() -> int:
    """Evaluate every enabled rule now; returns how many alerts opened or resolved."""
    result = alerts_evaluate(timezone.now())
    if result.opened or result.resolved:
        log.info("alerts: %d opened, %d resolved", len(result.opened), len(result.resolved))
    return len(result.opened) + len(result.resolved)


@shared_task(name="alerts.deliver", ignore_result=True)
def deliver_task() -> int:
    """Send the due webhook deliveries (one run is capped: the rest next time); returns how many went out."""
    result = deliveries_send()
    return len(result.delivered)
