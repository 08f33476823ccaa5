"""The Celery app. Its beat schedule comes from controlplane.periodic (shared with embedded mode)."""

import os
import sys
from typing import Any

from celery import Celery, signals

from controlplane.periodic import beat_schedule

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")

app = Celery("controlplane")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

# The schedule lives in controlplane.periodic, shared with embedded mode's thread.
app.conf.beat_schedule = beat_schedule()


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
