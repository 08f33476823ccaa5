"""The Celery app. The beat schedule is declared here, in one place."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")

app = Celery("controlplane")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

app.conf.beat_schedule = {
    # Every second: copy gateway request logs from the Redis stream into the database (a run that finds
    # nothing costs two Redis round trips), so a request is on the Request Logs page within seconds.
    "requestlogs-ingest": {"task": "requestlogs.ingest", "schedule": 1.0},
    # Hourly: delete request logs past their retention.
    "requestlogs-retention": {"task": "requestlogs.retention", "schedule": 3600.0},
}
