"""The periodic jobs, declared once: Celery beat runs them in production, a thread runs them in embedded mode.

Each job is a Celery task by name. In embedded mode (`run_embedded`, no Celery, no Redis) one daemon thread
calls the tasks in process on the same schedule, so retention, circuit history, alert evaluation and
webhook deliveries work without any service.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Job:
    name: str  # the beat schedule's entry
    task: str  # the Celery task's name
    every: float  # seconds
    embedded: bool = True  # False: production only (the embedded process does this work itself)


JOBS: tuple[Job, ...] = (
    # Every second: copy gateway request logs from the Redis stream into the database (a run that finds
    # nothing costs two Redis round trips), so a request is on the Request Logs page within seconds.
    # Embedded mode: the gateway writes its logs itself.
    Job("requestlogs-ingest", "requestlogs.ingest", 1.0, embedded=False),
    # Hourly: delete request logs past their retention.
    Job("requestlogs-retention", "requestlogs.retention", 3600.0),
    # Every 10 minutes: forget sign-in throttle rows whose failures and lockout have all expired.
    Job("access-prune", "access.prune", 600.0),
    # Every second: store the breakers' transitions as circuit history (production: the gateways' history
    # stream; embedded: this process's engine buffer), so Provider Health shows an event within seconds.
    Job("health-events-ingest", "health.events_ingest", 1.0),
    # Every 10 s: remove operator holds (force open, drain) past their expiry and record the release. The
    # engines already stop honouring a hold at its expiry; this tidies the table and the history.
    Job("health-controls-expire", "health.controls_expire", 10.0),
    # Daily: delete circuit history past CIRCUIT_EVENT_RETENTION_DAYS (each circuit's last state is kept).
    Job("health-events-retention", "health.events_retention", 86400.0),
    # Every 30 s: evaluate the alert rules (open, update and resolve alerts; docs/alerts.md).
    Job("alerts-evaluate", "alerts.evaluate", 30.0),
    # Every 5 s: send the due webhook deliveries (new ones and retries with backoff; one run is capped at a
    # few deliveries / ~5 s, so the embedded thread's 1 s jobs keep their pace).
    Job("alerts-deliver", "alerts.deliver", 5.0),
)


def beat_schedule() -> dict[str, dict[str, Any]]:
    return {job.name: {"task": job.task, "schedule": job.every} for job in JOBS}


class EmbeddedScheduler:
    """Runs the embedded jobs in one daemon thread: each job when due, one at a time, failures logged."""

    def __init__(self, jobs: tuple[Job, ...] = JOBS) -> None:
        self._jobs = [job for job in jobs if job.embedded]
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._tasks: dict[str, Any] = {}

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="embedded-periodic", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def run_due(self, now: float, due: dict[str, float]) -> None:
        """Run every job whose time has come (`due` maps job names to their next run, updated in place)."""
        from django.db import connections

        ran = False
        for job in self._jobs:
            if now < due.get(job.name, 0.0):
                continue
            due[job.name] = now + job.every
            ran = True
            try:
                self._task(job.task)()
            except Exception:  # one failing job must not stop the others
                log.exception("periodic job %s failed", job.name)
                connections.close_all()  # a broken connection must not fail the next job
        if ran:
            connections.close_all()  # this thread's connections only

    def _task(self, name: str) -> Any:
        """The Celery task by name; the apps' task modules are imported on the first call, not on every run."""
        task = self._tasks.get(name)
        if task is None:
            from controlplane.celery import app

            app.loader.import_default_modules()
            task = self._tasks[name] = app.tasks[name]
        return task

    def _run(self) -> None:
        due: dict[str, float] = {}
        while not self._stop.is_set():
            self.run_due(time.monotonic(), due)
            wait = min(due.values(), default=1.0) - time.monotonic() if due else 1.0
            self._stop.wait(max(0.2, min(wait, 1.0)))
