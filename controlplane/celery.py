"""The Celery app. The beat schedule is declared here, in one place."""

import os
import sys
from typing import Any

from celery import Celery, signals

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
    # Every 10 minutes: forget sign-in throttle rows whose failures and lockout have all expired.
    "access-prune": {"task": "access.prune", "schedule": 600.0},
}


@signals.worker_init.connect
@signals.beat_init.connect
def refuse_to_start_on_check_errors(**kwargs: Any) -> None:
    """Run Django's system checks like manage.py does before serving; exit on an error.

    Celery's own Django fixup runs the checks but ignores what they find, so a worker would start
    with, for example, provider API keys its SECRET_KEY cannot decrypt.
    """
    import django
    from django.core.management import call_command
    from django.core.management.base import SystemCheckError

    django.setup()
    from catalog.checks import stored_data_checks

    try:
        with stored_data_checks():  # undecryptable provider keys (catalog.E001) stop the worker too
            call_command("check")
    except SystemCheckError as exc:
        # The real stderr: by beat_init Celery may have swapped sys.stderr for a logging proxy.
        stderr = sys.__stderr__ or sys.stderr
        stderr.write(f"{exc}\n")
        stderr.flush()
        raise SystemExit(1) from None
