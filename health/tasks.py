"""Celery entry points of the health app: circuit history, its retention and the expiry of operator holds.

They run from controlplane.periodic (Celery beat in production, a thread in embedded mode): the history and
the expiry every few seconds, the retention daily.
"""

import logging
from datetime import timedelta

from celery import shared_task
from django.conf import settings
from django.db import DatabaseError
from django.utils import timezone

from health.breaker import peek_engine
from health.breaker.events import history_stream
from health.events import circuit_events_flush_local, circuit_events_ingest, circuit_events_retention
from health.services import circuit_controls_expire

log = logging.getLogger(__name__)


@shared_task(name="health.events_ingest", ignore_result=True)
def events_ingest_task() -> int:
    """Store the breakers' transitions: the gateways' history stream (production) or this process's engine
    buffer (embedded mode, where the gateway runs in this process)."""
    if settings.EMBEDDED:
        engine = peek_engine()
        if engine is None:
            return 0  # no breaker in this process yet: nothing happened
        try:
            stored = circuit_events_flush_local(engine)
        except DatabaseError as exc:
            # The events went back into the buffer; the next run retries them.
            log.warning("circuit history: database unavailable, %d events kept in memory (%s)", len(engine.events), exc)
            return 0
    else:
        stored = circuit_events_ingest(
            redis_url=settings.REDIS_URL,
            stream=history_stream(settings.BREAKER_REDIS_NAMESPACE),
            claim_idle_ms=settings.REQUEST_LOG_CLAIM_IDLE_SECONDS * 1000,
        )
    if stored:
        log.info("circuit history: stored %d events", stored)
    return stored


@shared_task(name="health.controls_expire", ignore_result=True)
def controls_expire_task() -> int:
    """Remove operator holds past their expiry and record their release."""
    return circuit_controls_expire()


@shared_task(name="health.events_retention", ignore_result=True)
def events_retention_task() -> int:
    """Delete circuit events older than CIRCUIT_EVENT_RETENTION_DAYS, keeping what the timelines need to know
    each circuit's state at the cutoff."""
    cutoff = timezone.now() - timedelta(days=settings.CIRCUIT_EVENT_RETENTION_DAYS)
    deleted = circuit_events_retention(cutoff=cutoff)
    if deleted:
        log.info("circuit history: deleted %d events older than %s", deleted, cutoff.isoformat())
    return deleted
