import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import DatabaseError, connection, transaction

from audit.models import AuditEvent
from audit.services import audit_record

pytestmark = pytest.mark.django_db


def _record(n: int) -> list[AuditEvent]:
    with transaction.atomic():
        return [
            audit_record(actor=None, action="test.event", object_type="thing", object_id=i, after={"n": i})
            for i in range(n)
        ]


def _run_sql(sql: str, params: list) -> None:
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            # Tampering needs the trigger out of the way (as a database superuser could).
            cursor.execute("SET LOCAL session_replication_role = replica")
        cursor.execute(sql, params)
        if connection.vendor == "postgresql":
            cursor.execute("SET LOCAL session_replication_role = origin")


def test_audit_record_links_each_event_to_the_previous():
    events = _record(3)

    assert events[0].prev_hash == "0" * 64
    assert [e.prev_hash for e in events[1:]] == [e.hash for e in events[:-1]]


@pytest.mark.django_db(transaction=True)
def test_audit_record_refuses_to_run_outside_a_transaction():
    with pytest.raises(RuntimeError):
        audit_record(actor=None, action="x", object_type="y", object_id=1)


def test_verify_audit_passes_on_intact_chain(capsys):
    _record(3)

    call_command("verify_audit")

    assert capsys.readouterr().out.strip() == "Audit chain intact: 3 events verified."


def test_verify_audit_names_altered_event():
    events = _record(3)
    _run_sql("UPDATE audit_auditevent SET after = %s WHERE id = %s", ['{"n": 99}', events[1].pk])

    with pytest.raises(CommandError) as exc:
        call_command("verify_audit")

    assert str(exc.value).startswith(f"Audit chain broken at event {events[1].pk}: its content does not match")


def test_verify_audit_names_event_after_a_removed_one():
    events = _record(3)
    _run_sql("DELETE FROM audit_auditevent WHERE id = %s", [events[1].pk])

    with pytest.raises(CommandError) as exc:
        call_command("verify_audit")

    assert str(exc.value).startswith(f"Audit chain broken at event {events[2].pk}: its prev_hash does not match")


@pytest.mark.production
@pytest.mark.parametrize("sql", ["UPDATE audit_auditevent SET action = 'forged'", "DELETE FROM audit_auditevent"])
def test_postgres_trigger_refuses_update_and_delete(sql):
    _record(1)

    with pytest.raises(DatabaseError) as exc, transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(sql)

    assert "append-only" in str(exc.value)
    assert AuditEvent.objects.get().action == "test.event"


def test_deleting_a_user_keeps_the_audit_chain_intact(django_user_model, capsys):
    user = django_user_model.objects.create_user("leaver")
    user_id = user.pk
    with transaction.atomic():
        event = audit_record(actor=user, action="test.event", object_type="thing", object_id=1)

    user.delete()

    call_command("verify_audit")
    assert capsys.readouterr().out.strip() == "Audit chain intact: 1 events verified."
    stored = AuditEvent.objects.get(pk=event.pk)
    assert (stored.actor_id, stored.actor_name) == (user_id, "leaver")
