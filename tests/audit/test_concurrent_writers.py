"""Writers in parallel (each thread its own connection, each event its own transaction) never fork the chain:
PostgreSQL serialises them with an advisory lock, SQLite with IMMEDIATE transactions, and a unique prev_hash
refuses a fork whatever the isolation level."""

import threading

import pytest
from django.core.management import call_command
from django.db import IntegrityError, connection, connections, transaction

from audit.models import AuditEvent
from audit.services import audit_record

pytestmark = pytest.mark.django_db(transaction=True)

WRITERS = 4
EVENTS_EACH = 10


def _write(writer: int, start: threading.Barrier, errors: list) -> None:
    try:
        start.wait(timeout=30)
        for i in range(EVENTS_EACH):
            with transaction.atomic():
                audit_record(actor=None, action="test.event", object_type="writer", object_id=writer, after={"i": i})
    except Exception as exc:  # reported by the test
        errors.append(exc)
    finally:
        connections.close_all()


def test_concurrent_writers_never_fork_the_chain(capsys):
    start = threading.Barrier(WRITERS)
    errors: list = []
    threads = [threading.Thread(target=_write, args=(w, start, errors)) for w in range(WRITERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)

    assert errors == []
    prev_hashes = list(AuditEvent.objects.values_list("prev_hash", flat=True))
    assert len(prev_hashes) == len(set(prev_hashes)) == WRITERS * EVENTS_EACH
    call_command("verify_audit")
    assert capsys.readouterr().out.strip() == f"Audit chain intact: {WRITERS * EVENTS_EACH} events verified."


def _record_one_in_another_connection() -> None:
    try:
        with transaction.atomic():
            audit_record(actor=None, action="test.event", object_type="thing", object_id="other")
    finally:
        connections.close_all()


@pytest.mark.production
def test_a_repeatable_read_writer_with_a_stale_snapshot_cannot_fork_the_chain(capsys):
    """Under REPEATABLE READ (a server's default_transaction_isolation may say so) the advisory lock does not
    help: the snapshot predates the other writer's event, so the head read is stale. The database refuses the
    fork instead of storing it."""
    with transaction.atomic():
        audit_record(actor=None, action="test.event", object_type="thing", object_id="first")

    with pytest.raises(IntegrityError), transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        assert AuditEvent.objects.count() == 1  # the snapshot is taken here
        other = threading.Thread(target=_record_one_in_another_connection)
        other.start()
        other.join(timeout=60)
        audit_record(actor=None, action="test.event", object_type="thing", object_id="stale")

    call_command("verify_audit")
    assert capsys.readouterr().out.strip() == "Audit chain intact: 2 events verified."
