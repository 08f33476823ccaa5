"""The breaker thresholds' writers serialise on one lock, whether or not the global row exists yet.

`breaker_config_update` and `breaker_override_set` each check what the other writes (cap >= initial cooldown)
and the global row is created on first save, so locking that row locked nothing on a fresh database: two first
saves lost a change, two first saves of one override got an IntegrityError (a 500), and a global initial cooldown
and an override's cap could both pass their checks. They now take `_lock_breaker_config` (a transaction-level
advisory lock on PostgreSQL; SQLite's IMMEDIATE transactions already serialise writers).

SQLite serialises writers, so the race cannot happen there: the tests here check the order of the steps, the
fallbacks, and (`*_simulated`, `_BreakerRace`) replay the interleaving with the lock modelled; the `*_pg` tests
run it from two connections (production mode only).
"""

import threading
from typing import Any

import pytest
from django.db import connection, connections, transaction
from django.db.models import QuerySet

import health.services as health_services
from audit.models import AuditEvent
from catalog.models import LlmModel, Provider
from core.errors import ValidationFailed
from health.models import BreakerConfig, BreakerOverride
from health.selectors import breaker_config_get, breaker_override_get
from health.services import breaker_config_update, breaker_override_set
from tests.helpers.api import put_json
from tests.helpers.locks import waits_on_a_lock

OVERRIDE_API_URL = "/api/breaker-config/overrides/openai/gpt-4o/"
OVERRIDE_FORM_URL = "/fallback/health/configure/override/"


def _record_steps(monkeypatch) -> list[str]:
    """Record, in order: catalog rows locked, the breaker lock taken, the global values read, audit events."""
    steps: list[str] = []
    lock_rows, lock_config = QuerySet.select_for_update, health_services._lock_breaker_config
    read, audit = health_services.breaker_config_get, health_services.audit_record

    def locking_rows(self, *args, **kwargs):
        if self.model in (Provider, LlmModel):
            steps.append(f"lock {self.model.__name__}")
        return lock_rows(self, *args, **kwargs)

    def locking_config():
        steps.append("lock breaker config")
        return lock_config()

    def reading():
        steps.append("read")
        return read()

    def auditing(**kwargs):
        steps.append("audit")
        return audit(**kwargs)

    monkeypatch.setattr(QuerySet, "select_for_update", locking_rows)
    monkeypatch.setattr(health_services, "_lock_breaker_config", locking_config)
    monkeypatch.setattr(health_services, "breaker_config_get", reading)
    monkeypatch.setattr(health_services, "audit_record", auditing)
    return steps


@pytest.mark.django_db
def test_a_global_save_takes_the_breaker_lock_before_reading_with_no_global_row(admin_user, monkeypatch):
    steps = _record_steps(monkeypatch)
    assert not BreakerConfig.objects.exists()

    breaker_config_update(actor=admin_user, data={"failure_threshold": 7})

    assert steps[:2] == ["lock breaker config", "read"]
    assert steps.count("audit") == 1 and steps.index("audit") > 1
    assert BreakerConfig.objects.get().failure_threshold == 7


@pytest.mark.django_db
def test_an_override_save_locks_its_names_then_the_breaker_lock_before_reading_with_no_global_row(
    admin_user, single_model_catalog, monkeypatch
):
    """The catalog rows first (as a rename takes them), then the breaker lock, then the audit log's."""
    steps = _record_steps(monkeypatch)

    breaker_override_set(actor=admin_user, provider="openai", model="gpt-4o", data={"cooldown_cap_seconds": 100})

    assert steps == ["lock LlmModel", "lock Provider", "lock breaker config", "read", "audit"]
    assert not BreakerConfig.objects.exists()  # the lock creates no global row


@pytest.mark.django_db
def test_a_global_save_writes_back_only_the_fields_it_changed(admin_user, monkeypatch):
    """Another global save committed between this one's read and its write (what the lock now prevents) used
    to be undone: get_or_create found its row, and every field was written back from the stale read, with an
    audit event that did not mention the revert. Only the fields this save changes are written."""
    diff = health_services.diff_fields
    state = {"other_saved": False}

    def another_save_commits_first(before, after):
        if not state["other_saved"]:
            state["other_saved"] = True
            breaker_config_update(actor=admin_user, data={"failure_threshold": 3})
        return diff(before, after)

    monkeypatch.setattr(health_services, "diff_fields", another_save_commits_first)
    assert not BreakerConfig.objects.exists()

    breaker_config_update(actor=admin_user, data={"window_seconds": 120})

    saved = breaker_config_get()
    assert (saved.failure_threshold, saved.window_seconds) == (3, 120)
    events = AuditEvent.objects.filter(action="breaker_config.update").order_by("id")
    assert [(e.before, e.after) for e in events] == [
        ({"failure_threshold": 5}, {"failure_threshold": 3}),
        ({"window_seconds": 60}, {"window_seconds": 120}),
    ]


class _BreakerRace:
    """Replays on SQLite the PostgreSQL interleaving of two breaker writes: the other write is ready to commit
    right after the write under test has read the global values. If the write under test holds the breaker lock
    by then, the other waits for its commit (it runs after it, in `finish`); otherwise it commits there."""

    def __init__(self, monkeypatch, other) -> None:
        self.other, self.outcome = other, None
        self.locked = self.ran = self.in_other = False
        real_lock = getattr(health_services, "_lock_breaker_config", None)
        real_read = health_services.breaker_config_get

        def locking() -> None:
            if not self.in_other:
                self.locked = True
            if real_lock is not None:
                real_lock()

        def reading():
            values = real_read()
            if not self.in_other and not self.locked and not self.ran:
                self._run_other()
            return values

        # raising=False: the code as reviewed has no such lock, and the race then runs in between.
        monkeypatch.setattr(health_services, "_lock_breaker_config", locking, raising=False)
        monkeypatch.setattr(health_services, "breaker_config_get", reading)

    def _run_other(self) -> None:
        self.ran, self.in_other = True, True
        try:
            self.other()
            self.outcome = "saved"
        except ValidationFailed as exc:
            self.outcome = exc.errors
        finally:
            self.in_other = False

    def finish(self) -> None:
        if not self.ran:
            self._run_other()


@pytest.mark.django_db
def test_two_first_global_saves_keep_both_changes_simulated(admin_user, monkeypatch):
    race = _BreakerRace(monkeypatch, lambda: breaker_config_update(actor=admin_user, data={"failure_threshold": 3}))
    assert not BreakerConfig.objects.exists()

    breaker_config_update(actor=admin_user, data={"window_seconds": 120})
    race.finish()

    assert race.outcome == "saved"
    saved = breaker_config_get()
    assert (saved.failure_threshold, saved.window_seconds) == (3, 120)


@pytest.mark.django_db
def test_an_override_cap_and_a_raised_initial_cooldown_cannot_both_pass_simulated(
    admin_user, single_model_catalog, monkeypatch
):
    """The override (a cap of 100 s alone, checked against the default initial cooldown of 60 s) and a global
    initial cooldown of 200 s (checked against the overrides that set a cap alone) both passed on a fresh
    database, leaving the circuit a cap below its initial cooldown. Now the second one waits and is refused."""
    race = _BreakerRace(
        monkeypatch, lambda: breaker_config_update(actor=admin_user, data={"initial_cooldown_seconds": 200})
    )

    breaker_override_set(actor=admin_user, provider="openai", model="gpt-4o", data={"cooldown_cap_seconds": 100})
    race.finish()

    effective = breaker_override_get(provider="openai", model="gpt-4o")
    assert effective is not None
    assert effective.effective.cooldown_cap_seconds >= effective.effective.initial_cooldown_seconds
    assert race.outcome == {
        "initial_cooldown_seconds": [
            "Initial cooldown (200 s) is above the cooldown cap of the override(s) openai/gpt-4o (100 s), which "
            "inherit the initial cooldown; change or delete those overrides first."
        ]
    }


def _a_concurrent_insert_of_the_same_override(monkeypatch) -> None:
    """The other request's row, committed while this one's INSERT waited on the unique (provider, model)."""
    save = BreakerOverride.save
    state = {"raced": False}

    def racing_save(self, *args, **kwargs):
        if self.pk is None and not state["raced"]:
            state["raced"] = True
            BreakerOverride.objects.bulk_create(
                [BreakerOverride(provider=self.provider, model=self.model, failure_threshold=4)]
            )
        return save(self, *args, **kwargs)

    monkeypatch.setattr(BreakerOverride, "save", racing_save)


@pytest.mark.django_db
def test_a_concurrent_insert_of_the_same_new_override_is_a_409_not_a_500(
    admin_client, single_model_catalog, monkeypatch
):
    _a_concurrent_insert_of_the_same_override(monkeypatch)
    admin_client.raise_request_exception = False

    response = put_json(admin_client, OVERRIDE_API_URL, {"failure_threshold": 3})

    assert response.status_code == 409
    message = "A breaker override for openai/gpt-4o was saved at the same time; reload and try again."
    assert response.json() == {"detail": message, "errors": {"__all__": [message]}}
    assert not AuditEvent.objects.filter(action="breaker_override.set").exists()


@pytest.mark.django_db
def test_a_concurrent_insert_of_the_same_new_override_is_a_form_error_in_the_console(
    admin_client, single_model_catalog, monkeypatch
):
    _a_concurrent_insert_of_the_same_override(monkeypatch)
    admin_client.raise_request_exception = False

    response = admin_client.post(
        OVERRIDE_FORM_URL,
        {"override-provider": "openai", "override-model": "gpt-4o", "override-failure_threshold": "3"},
    )

    assert response.status_code == 200
    assert "was saved at the same time; reload and try again." in response.content.decode()


# ---------- PostgreSQL: the race itself, from two connections ----------


def _in_thread(name: str, outcome: dict[str, Any], call) -> threading.Thread:
    def run() -> None:
        try:
            call()
            outcome[name] = "saved"
        except ValidationFailed as exc:
            outcome[name] = exc.errors
        except Exception as exc:  # reported by the test's assertion
            outcome[name] = repr(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run, name=name)
    thread.start()
    return thread


def _first_waits_after_reading(monkeypatch) -> tuple[threading.Event, threading.Event]:
    """The thread named "first" pauses right after reading the global values (under the lock, if taken)."""
    read, go_on = threading.Event(), threading.Event()
    real_read = health_services.breaker_config_get

    def reading():
        values = real_read()
        if threading.current_thread().name == "first":
            read.set()
            go_on.wait(10)
        return values

    monkeypatch.setattr(health_services, "breaker_config_get", reading)
    return read, go_on


def _race(monkeypatch, first, second, *, query_like: str = "%pg_advisory_xact_lock%") -> tuple[bool, dict[str, Any]]:
    """Run `first` up to its read, then `second`; True if `second` waited on a lock meanwhile (by default, the
    breaker lock)."""
    read, go_on = _first_waits_after_reading(monkeypatch)
    outcome: dict[str, Any] = {}
    one = _in_thread("first", outcome, first)
    assert read.wait(10)
    two = _in_thread("second", outcome, second)
    blocked = waits_on_a_lock(two, query_like=query_like)
    go_on.set()
    one.join(15)
    two.join(15)
    return blocked, outcome


@pytest.mark.production
@pytest.mark.django_db(transaction=True)
def test_the_breaker_lock_is_a_transaction_level_advisory_lock_pg():
    with transaction.atomic():
        health_services._lock_breaker_config()
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()")
            assert cursor.fetchone()[0] == 1
    with connection.cursor() as cursor:  # released at the end of the transaction
        cursor.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()")
        assert cursor.fetchone()[0] == 0


@pytest.mark.production
@pytest.mark.django_db(transaction=True)
def test_two_first_global_saves_keep_both_changes_pg(admin_user, monkeypatch):
    blocked, outcome = _race(
        monkeypatch,
        lambda: breaker_config_update(actor=admin_user, data={"window_seconds": 120}),
        lambda: breaker_config_update(actor=admin_user, data={"failure_threshold": 3}),
    )

    assert blocked is True
    assert outcome == {"first": "saved", "second": "saved"}
    saved = breaker_config_get()
    assert (saved.failure_threshold, saved.window_seconds) == (3, 120)


@pytest.mark.production
@pytest.mark.django_db(transaction=True)
def test_two_first_saves_of_the_same_override_update_one_row_pg(admin_user, single_model_catalog, monkeypatch):
    def save(threshold: int):
        return lambda: breaker_override_set(
            actor=admin_user, provider="openai", model="gpt-4o", data={"failure_threshold": threshold}
        )

    # The second waits on the model's row, which the first locked before the breaker lock (either serialises them).
    blocked, outcome = _race(monkeypatch, save(3), save(4), query_like="%")

    assert blocked is True
    assert outcome == {"first": "saved", "second": "saved"}
    assert list(BreakerOverride.objects.values_list("failure_threshold", flat=True)) == [4]
    assert not BreakerConfig.objects.exists()


@pytest.mark.production
@pytest.mark.django_db(transaction=True)
def test_a_cap_cannot_pass_its_check_while_the_initial_cooldown_is_raised_pg(
    admin_user, single_model_catalog, monkeypatch
):
    blocked, outcome = _race(
        monkeypatch,
        lambda: breaker_config_update(actor=admin_user, data={"initial_cooldown_seconds": 200}),
        lambda: breaker_override_set(
            actor=admin_user, provider="openai", model="gpt-4o", data={"cooldown_cap_seconds": 100}
        ),
    )

    assert blocked is True
    assert outcome == {
        "first": "saved",
        "second": {"cooldown_cap_seconds": ["Cooldown cap (100 s) must be at least the initial cooldown (200 s)."]},
    }
    assert breaker_override_get(provider="openai", model="gpt-4o") is None
