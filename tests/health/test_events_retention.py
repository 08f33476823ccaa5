"""Circuit history retention: old events go, but each circuit keeps what its timelines need at the cutoff."""

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from core.db import delete_in_batches
from health.events import circuit_events_retention
from health.history import circuit_segments, circuit_timeline
from health.models import CircuitEvent
from health.tasks import events_retention_task

pytestmark = pytest.mark.django_db

T = datetime(2026, 12, 1, 0, 0, tzinfo=UTC)
P, M = "openai", "gpt-4o"


def at(minutes: float) -> datetime:
    return T + timedelta(minutes=minutes)


def event(kind: str, minutes: float, provider: str = P, model: str = M, **fields) -> CircuitEvent:
    return CircuitEvent.objects.create(provider=provider, model=model, kind=kind, at=at(minutes), **fields)


def kept() -> list[tuple[str, str, str, float]]:
    return [
        (e.provider, e.model, e.kind, (e.at - T).total_seconds() / 60)
        for e in CircuitEvent.objects.order_by("at", "id")
    ]


def views(since: datetime) -> tuple:
    until = at(120)
    return (
        circuit_timeline(provider=P, model=M, since=since, until=until),
        circuit_timeline(provider=P, model="gpt-4o-mini", since=since, until=until),
        circuit_segments(since=since, until=until),
    )


def test_retention_keeps_the_last_event_of_each_layer_of_each_circuit_before_the_cutoff(django_assert_num_queries):
    event("drained", -60, model="", until=at(30))  # the provider's drain, still holding at the cutoff
    event("opened", -30)
    event("forced_open", -25, reason="maintenance")
    event("half_open", -20)
    event("released", -15)
    event("reopened", -10)
    event("opened", -50, model="gpt-4o-mini")  # another circuit: its only event, kept
    event("closed", 5)
    event("closed", 10, model="gpt-4o-mini")
    before = [views(at(0)), views(at(7))]

    with django_assert_num_queries(4):  # one batch: its ids, then one DELETE (in its savepoint), no rows loaded
        deleted = circuit_events_retention(cutoff=at(0))

    assert deleted == 3
    assert kept() == [
        (P, "", "drained", -60),
        (P, "gpt-4o-mini", "opened", -50),
        (P, M, "released", -15),
        (P, M, "reopened", -10),
        (P, M, "closed", 5),
        (P, "gpt-4o-mini", "closed", 10),
    ]
    # Timelines from the cutoff on are what they were.
    assert [views(at(0)), views(at(7))] == before
    assert views(at(0))[0][0].state == "drained"
    assert circuit_events_retention(cutoff=at(0)) == 0


def test_the_retention_job_deletes_events_past_the_setting(settings):
    settings.CIRCUIT_EVENT_RETENTION_DAYS = 90
    now = timezone.now()
    for days, kind in ((120, "opened"), (100, "half_open"), (95, "closed"), (89, "opened")):
        CircuitEvent.objects.create(provider=P, model=M, kind=kind, at=now - timedelta(days=days))

    deleted = events_retention_task()

    assert deleted == 2
    assert list(CircuitEvent.objects.order_by("at").values_list("kind", flat=True)) == ["closed", "opened"]


def test_retention_deletes_in_bounded_batches_and_keeps_what_the_timelines_need():
    # Each batch is one statement over at most batch_size ids, its own transaction: embedded mode's SQLite
    # write lock is never held for the whole backlog.
    for i in range(25):
        event("opened" if i % 2 == 0 else "closed", i, generation=i)
    event("opened", 200, generation=99)  # after the cutoff

    deleted = delete_in_batches(CircuitEvent.objects.filter(at__lt=at(100)).exclude(kind="closed"), batch_size=5)

    assert deleted == 13  # the 13 "opened" events before the cutoff, in three batches of five or fewer
    assert [k for _, _, k, _ in kept()] == ["closed"] * 12 + ["opened"]


def test_a_batch_deletes_at_most_its_size():
    for i in range(7):
        event("opened", i, generation=i)

    with CaptureQueriesContext(connection) as queries:
        assert delete_in_batches(CircuitEvent.objects.all(), batch_size=3) == 7

    deletes = [q["sql"] for q in queries.captured_queries if q["sql"].startswith("DELETE")]
    assert len(deletes) == 3  # 3 + 3 + 1 ids
    assert CircuitEvent.objects.count() == 0
