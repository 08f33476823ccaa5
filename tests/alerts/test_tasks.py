"""The periodic jobs: declared once in controlplane.periodic, run in process by embedded mode (no Celery)."""

import time

from alerts.models import Alert, Delivery
from controlplane.periodic import JOBS, EmbeddedScheduler
from health.breaker import ManualClock, MemoryEngine, Outcome, use_engine
from tests.alerts.conftest import make_rule


def test_jobs_are_declared_for_beat_and_embedded_mode():
    jobs = {job.task: job for job in JOBS}

    assert (jobs["alerts.evaluate"].every, jobs["alerts.evaluate"].embedded) == (30.0, True)
    assert (jobs["alerts.deliver"].every, jobs["alerts.deliver"].embedded) == (5.0, True)


def test_embedded_scheduler_evaluates_and_delivers_in_process(transactional_db, catalog, receiver):
    make_rule(name="open", kind="circuit_open", minutes=5, webhook_url=receiver.url)
    engine = MemoryEngine(clock=ManualClock(round(time.time()) - 600))  # the circuit opened 10 minutes ago
    for _ in range(10):
        engine.record(engine.allow("openai", "gpt-4o"), Outcome.of_status(503))
    # run_due closes the connections after each job, as the embedded thread does: a transactional test.
    scheduler = EmbeddedScheduler(jobs=tuple(job for job in JOBS if job.task.startswith("alerts.")))

    with use_engine(engine):
        scheduler.run_due(0.0, {})

    alert = Alert.objects.get()
    assert (alert.subject, alert.state) == ("openai/gpt-4o", "firing")
    assert Delivery.objects.get().status == "delivered"
    assert [b["subject"] for b in receiver.bodies()] == ["openai/gpt-4o"]
