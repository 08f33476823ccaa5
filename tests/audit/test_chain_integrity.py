import copy
import datetime as dt
import io

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import DatabaseError, IntegrityError, connection, transaction
from django.forms.models import model_to_dict

from audit.hashing import hashed_fields
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


def _verify(*args: str) -> str:
    """verify_audit's one line of output, or its error as "ERROR: ..."."""
    out = io.StringIO()
    try:
        call_command("verify_audit", *args, stdout=out)
    except CommandError as exc:
        return f"ERROR: {exc}"
    return out.getvalue().strip()


def test_floats_verify_as_recorded_whatever_their_json_form():
    """PostgreSQL's jsonb gives 1e16 back as 10000000000000000 and -0.0 as 0.0: the stored value must be the
    hashed one, or verify_audit calls an untouched event altered (a provider's read_timeout may be 1e16)."""
    values = {"big": 1e16, "bigger": 1.2345678901234567e20, "neg_zero": -0.0, "small": 1e-07, "plain": 0.1}
    with transaction.atomic():
        event = audit_record(actor=None, action="test.event", object_type="thing", object_id=1, after=values)

    assert _verify() == "Audit chain intact: 1 events verified."
    stored = AuditEvent.objects.get(pk=event.pk)
    assert (
        stored.after
        == event.after
        == {
            "big": 10**16,
            "bigger": 123456789012345670000,
            "neg_zero": 0.0,
            "small": 1e-07,
            "plain": 0.1,
        }
    )


def test_created_at_is_hashed_in_utc_whatever_the_time_zone_it_is_read_in():
    (event,) = _record(1)
    stored = AuditEvent.objects.get(pk=event.pk)
    elsewhere = copy.copy(stored)
    elsewhere.created_at = stored.created_at.astimezone(dt.timezone(dt.timedelta(hours=2)))

    assert hashed_fields(elsewhere) == hashed_fields(stored) == hashed_fields(event)
    assert hashed_fields(stored)["created_at"].endswith("+00:00")


def test_a_rolled_back_event_leaves_no_gap_in_the_chain():
    first = _record(1)[0]
    with pytest.raises(RuntimeError), transaction.atomic():
        audit_record(actor=None, action="test.event", object_type="thing", object_id=2)
        raise RuntimeError("the audited change fails after its event was hashed")
    (after,) = _record(1)

    assert after.prev_hash == first.hash
    assert _verify() == "Audit chain intact: 2 events verified."


def test_verify_audit_names_the_first_event_when_the_oldest_were_removed():
    events = _record(3)
    _run_sql("DELETE FROM audit_auditevent WHERE id = %s", [events[0].pk])

    assert _verify() == (
        f"ERROR: Audit chain broken at event {events[1].pk}: it is the oldest event left but does not start from"
        " the genesis hash (older events were removed)."
    )


def test_verify_audit_names_an_inserted_event():
    events = _record(2)
    forged = AuditEvent.objects.get(pk=events[1].pk)
    _run_sql(
        "INSERT INTO audit_auditevent (created_at, actor_name, action, object_type, object_id, object_repr,"
        " prev_hash, hash) VALUES (%s, 'system', 'test.event', 'thing', '9', '', %s, %s)",
        [forged.created_at, "f" * 64, "e" * 64],
    )
    inserted = AuditEvent.objects.get(hash="e" * 64)

    assert _verify().startswith(f"ERROR: Audit chain broken at event {inserted.pk}: its prev_hash does not match")


def test_verify_audit_names_reordered_events():
    events = _record(3)
    a, b = events[1].pk, events[2].pk
    _run_sql("UPDATE audit_auditevent SET id = %s WHERE id = %s", [-1, a])
    _run_sql("UPDATE audit_auditevent SET id = %s WHERE id = %s", [a, b])
    _run_sql("UPDATE audit_auditevent SET id = %s WHERE id = %s", [b, -1])

    assert _verify().startswith(f"ERROR: Audit chain broken at event {a}: its prev_hash does not match")


def test_verify_audit_prints_the_head_to_anchor_later_checks():
    events = _record(2)

    assert _verify("--show-head") == (
        f"Audit chain intact: 2 events verified.\nHead: event {events[1].pk}, hash {events[1].hash}"
    )


def test_a_truncated_tail_is_found_against_an_anchor():
    """Deleting the newest events leaves a valid chain: only a head recorded earlier (outside the database)
    tells."""
    events = _record(3)
    anchor = events[2].hash
    _run_sql("DELETE FROM audit_auditevent WHERE id = %s", [events[2].pk])

    assert _verify() == "Audit chain intact: 2 events verified."
    assert _verify("--anchor", anchor) == (
        f"ERROR: Audit chain broken: the anchored event (hash {anchor}) is not in the log; events were removed"
        " from its end, or the log was rewritten."
    )
    assert _verify("--anchor", events[1].hash) == "Audit chain intact: 2 events verified."


def test_an_empty_log_fails_an_anchored_check():
    anchor = _record(1)[0].hash
    _run_sql("DELETE FROM audit_auditevent", [])

    assert _verify("--anchor", anchor).startswith("ERROR: Audit chain broken: the anchored event")


def test_two_events_cannot_continue_the_same_event():
    """A fork (two events on one prev_hash) is refused by the database, whoever writes."""
    (event,) = _record(1)
    fork = AuditEvent(**{**model_to_dict(event, exclude=["id"]), "actor_id": None, "hash": "f" * 64})

    with pytest.raises(IntegrityError), transaction.atomic():
        fork.save(force_insert=True)


@pytest.mark.production
def test_postgres_trigger_refuses_truncate():
    _record(1)

    with pytest.raises(DatabaseError) as exc, transaction.atomic(), connection.cursor() as cursor:
        # Test connections may truncate (Django's flush between transactional tests); this one asks not to.
        cursor.execute("SET LOCAL audit.allow_truncate = off")
        cursor.execute("TRUNCATE audit_auditevent")

    assert "append-only" in str(exc.value)
    assert AuditEvent.objects.count() == 1


@pytest.mark.django_db
def test_a_head_recorded_on_an_empty_log_anchors_later_checks():
    """`verify_audit --show-head` on an empty log prints the genesis hash; passed back as --anchor, it failed every
    later check of an intact log ("events were removed from its end")."""
    from audit.selectors import GENESIS_HASH, audit_verify_chain

    empty = audit_verify_chain()
    assert empty.intact and empty.head_hash == GENESIS_HASH
    for i in range(2):
        with transaction.atomic():
            audit_record(actor=None, action="x.update", object_type="x", object_id=i, after={"a": i})

    assert audit_verify_chain(anchor=empty.head_hash).intact
