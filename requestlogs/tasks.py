import logging
from datetime import timedelta

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from core.db import delete_in_batches
from requestlogs.ingest import request_logs_ingest
from requestlogs.models import AttemptMinute, RequestHour, RequestLog, RequestMinute, RequestQuarter

log = logging.getLogger(__name__)


@shared_task(name="requestlogs.ingest", ignore_result=True)
def ingest_task() -> int:
    """Copy batches from the gateways' Redis stream into the database."""
    if not settings.REDIS_URL:
        return 0  # embedded mode: the gateway writes its logs itself
    result = request_logs_ingest(
        redis_url=settings.REDIS_URL,
        stream=settings.REQUEST_LOG_STREAM,
        claim_idle_ms=settings.REQUEST_LOG_CLAIM_IDLE_SECONDS * 1000,
    )
    if result.read:
        log.info(
            "request logs: read %d, inserted %d, dead-lettered %d", result.read, result.inserted, result.dead_lettered
        )
    return result.inserted


@shared_task(name="requestlogs.retention", ignore_result=True)
def retention_task() -> int:
    """Delete request logs older than REQUEST_LOG_RETENTION_DAYS and aggregates past their own retention.

    The aggregates outlive the rows they count when their retention is longer (the hourly ones by default):
    the Dashboard reads only them.
    """
    now = timezone.now()
    cutoff = now - timedelta(days=settings.REQUEST_LOG_RETENTION_DAYS)
    deleted = delete_in_batches(RequestLog.objects.filter(created_at__lt=cutoff))
    minutes = now - timedelta(days=settings.REQUEST_AGGREGATE_MINUTE_DAYS)
    delete_in_batches(RequestMinute.objects.filter(start__lt=minutes))
    delete_in_batches(RequestQuarter.objects.filter(start__lt=minutes))
    delete_in_batches(AttemptMinute.objects.filter(start__lt=minutes))
    delete_in_batches(RequestHour.objects.filter(start__lt=now - timedelta(days=settings.REQUEST_AGGREGATE_HOUR_DAYS)))
    return deleted
