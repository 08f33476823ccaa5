"""The Celery app. The beat schedule is declared here, in one place."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")

app = Celery("controlplane")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

# Periodic jobs (none yet: request-log ingestion and retention arrive with the gateway).
app.conf.beat_schedule = {}
