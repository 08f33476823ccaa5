"""A hold or a breaker override saved while its provider or model is renamed ends up under the new name, or is
refused: never left under the old name (where the kill switch is not in force and a later row of that name
would inherit it).

The services used to check the names with `.exists()` and no lock: a rename committing between that check and
the insert found nothing to carry over (`circuit_names_renamed`), and the row was saved under the old name. They
now lock the named catalog rows (model, then provider), which a rename updates, so the two serialise.

SQLite has no row locks and serialises writers, so `_RenameRace` replays the PostgreSQL interleaving: the rename
is ready to commit between the save's check and its insert. If the save has locked the row the rename updates,
the rename waits for the save's commit (it runs after the save); otherwise it commits there, in between. The
`*_pg` tests run it from two connections (production mode only).
"""

import threading
import time
from typing import Any

import pytest
from django.db import connections
from django.db.models import QuerySet

import health.services as health_services
from catalog.models import LlmModel, Provider
from core.errors import ValidationFailed
from health.models import BreakerOverride, CircuitControl
from health.selectors import breaker_config_snapshot
from health.services import breaker_override_set, circuit_force_open, provider_drain
from tests.helpers.api import patch_json
from tests.helpers.locks import waits_on_a_lock


class _RenameRace:
    def __init__(self, monkeypatch, client, row: Provider | LlmModel, new: str) -> None:
        self.client, self.row, self.new = client, row, new
        self.locked = False
        self.status: int | None = None
        self.saving = False
        lock = QuerySet.select_for_update

        def locking(qs, *args, **kwargs):
            if self.saving and qs.model is type(row):
                self.locked = True
            return lock(qs, *args, **kwargs)

        monkeypatch.setattr(QuerySet, "select_for_update", locking)

    def _rename(self) -> None:
        url = f"/api/{'providers' if isinstance(self.row, Provider) else 'models'}/{self.row.pk}/"
        self.status = patch_json(self.client, url, {"name": self.new}).status_code

    def between_check_and_insert(self, step):
        """Wrap the save's step that follows its name check: the rename commits there unless it must wait."""

        def wrapped(*args, **kwargs):
            if self.saving and not self.locked and self.status is None:
                self._rename()
            return step(*args, **kwargs)

        return wrapped

    def save(self, call) -> Exception | None:
        """Run the save; the rename, if it waited on the save's lock, right after it. The save's refusal, if any."""
        self.saving = True
        try:
            call()
            refused = None
        except ValidationFailed as exc:
            refused = exc
        finally:
            self.saving = False
        if self.status is None:
            self._rename()
        assert self.status == 200
        return refused


def _held(provider: str, model: str) -> bool:
    return breaker_config_snapshot().control_for(provider, model, time.time()) is not None


@pytest.mark.django_db
def test_a_hold_saved_while_its_model_is_renamed_is_in_force_on_the_new_name(
    admin_user, admin_client, catalog, monkeypatch
):
    race = _RenameRace(monkeypatch, admin_client, catalog["gpt-4o"], "gpt-4o-2024")
    monkeypatch.setattr(health_services, "_hold", race.between_check_and_insert(health_services._hold))

    refused = race.save(
        lambda: circuit_force_open(actor=admin_user, provider="openai", model="gpt-4o", reason="bad", minutes=None)
    )

    assert refused is None
    assert list(CircuitControl.objects.values_list("provider", "model")) == [("openai", "gpt-4o-2024")]
    assert _held("openai", "gpt-4o-2024")


@pytest.mark.django_db
def test_a_drain_saved_while_its_provider_is_renamed_is_in_force_on_the_new_name(
    admin_user, admin_client, catalog, monkeypatch
):
    race = _RenameRace(monkeypatch, admin_client, catalog["openai"], "openai-eu")
    monkeypatch.setattr(health_services, "_hold", race.between_check_and_insert(health_services._hold))

    refused = race.save(lambda: provider_drain(actor=admin_user, provider="openai", reason="migrating", minutes=None))

    assert refused is None
    assert list(CircuitControl.objects.values_list("provider", "model")) == [("openai-eu", "")]
    assert _held("openai-eu", "gpt-4o")


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("renamed", "new", "expected"),
    [("gpt-4o", "gpt-4o-2024", ("openai", "gpt-4o-2024")), ("openai", "openai-eu", ("openai-eu", "gpt-4o"))],
)
def test_an_override_saved_while_its_names_are_renamed_follows_the_rename(
    admin_user, admin_client, catalog, monkeypatch, renamed, new, expected
):
    race = _RenameRace(monkeypatch, admin_client, catalog[renamed], new)
    # The global values are read after the names are checked, before the override is inserted.
    monkeypatch.setattr(
        health_services, "breaker_config_get", race.between_check_and_insert(health_services.breaker_config_get)
    )

    refused = race.save(
        lambda: breaker_override_set(actor=admin_user, provider="openai", model="gpt-4o", data={"failure_threshold": 3})
    )

    assert refused is None
    assert list(BreakerOverride.objects.values_list("provider", "model", "failure_threshold")) == [(*expected, 3)]


@pytest.mark.django_db
def test_a_hold_on_a_name_renamed_first_is_refused(admin_user, admin_client, catalog):
    """The other order: the rename committed before the save locked the row, which then has no such name."""
    assert patch_json(admin_client, f"/api/models/{catalog['gpt-4o'].pk}/", {"name": "gpt-4o-2024"}).status_code == 200

    with pytest.raises(ValidationFailed) as excinfo:
        circuit_force_open(actor=admin_user, provider="openai", model="gpt-4o", reason="bad", minutes=None)

    assert excinfo.value.errors == {"model": ["Unknown model “gpt-4o”."]}
    assert not CircuitControl.objects.exists()


@pytest.mark.django_db
def test_a_hold_locks_the_model_then_the_provider_before_its_own_rows_and_the_audit_log(
    admin_user, catalog, monkeypatch
):
    """One order for every write (docs/decisions.md): catalog rows, then health's, then the audit log's lock. The
    model's row before the provider's, as a model rename takes them (its row, then the providers deploying it)."""
    steps: list[str] = []
    lock, audit = QuerySet.select_for_update, health_services.audit_record

    def locking(qs, *args, **kwargs):
        steps.append(f"lock {qs.model.__name__}")
        return lock(qs, *args, **kwargs)

    def auditing(**kwargs):
        steps.append("audit")
        return audit(**kwargs)

    monkeypatch.setattr(QuerySet, "select_for_update", locking)
    monkeypatch.setattr(health_services, "audit_record", auditing)

    circuit_force_open(actor=admin_user, provider="openai", model="gpt-4o", reason="bad", minutes=None)

    assert steps[:2] == ["lock LlmModel", "lock Provider"]
    assert steps.index("audit") > 1


# ---------- PostgreSQL: the race itself, from two connections ----------


def _thread(outcome: dict[str, Any], name: str, call) -> threading.Thread:
    def run() -> None:
        try:
            outcome[name] = call()
        except ValidationFailed as exc:
            outcome[name] = exc.errors
        except Exception as exc:  # reported by the test's assertion
            outcome[name] = repr(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run, name=name)
    thread.start()
    return thread


@pytest.mark.production
@pytest.mark.django_db(transaction=True)
def test_a_rename_waits_for_a_hold_being_saved_and_carries_it_over_pg(admin_user, admin_client, catalog, monkeypatch):
    """T1 circuit_force_open(openai/gpt-4o) checks the names (locking them) ... T2 PATCH the model's name: waits
    ... T1 inserts the hold, commits; T2 moves it to the new name, commits."""
    hold = health_services._hold
    checked, go_on = threading.Event(), threading.Event()
    outcome: dict[str, Any] = {}

    def paused(**kwargs):
        checked.set()
        go_on.wait(10)
        return hold(**kwargs)

    monkeypatch.setattr(health_services, "_hold", paused)
    holder = _thread(
        outcome,
        "hold",
        lambda: circuit_force_open(actor=admin_user, provider="openai", model="gpt-4o", reason="bad", minutes=None).pk,
    )
    assert checked.wait(10)
    url = f"/api/models/{catalog['gpt-4o'].pk}/"
    renamer = _thread(outcome, "rename", lambda: patch_json(admin_client, url, {"name": "gpt-4o-2024"}).status_code)
    blocked = waits_on_a_lock(renamer)
    go_on.set()
    holder.join(15)
    renamer.join(15)

    assert blocked is True
    assert outcome["rename"] == 200 and isinstance(outcome["hold"], int), outcome
    assert list(CircuitControl.objects.values_list("provider", "model")) == [("openai", "gpt-4o-2024")]
    assert _held("openai", "gpt-4o-2024")


@pytest.mark.production
@pytest.mark.django_db(transaction=True)
def test_an_override_waits_for_a_rename_and_is_refused_under_the_old_name_pg(
    admin_user, admin_client, catalog, monkeypatch
):
    """T1 PATCH the model's name, paused before its audit event ... T2 breaker_override_set(openai/gpt-4o) waits
    on the model's row ... T1 commits; T2 finds no model of the old name: refused, nothing saved."""
    import catalog.services.models as catalog_models

    audit_update = catalog_models.audit_update
    renamed, go_on = threading.Event(), threading.Event()
    outcome: dict[str, Any] = {}

    def paused(**kwargs):
        renamed.set()
        go_on.wait(10)
        return audit_update(**kwargs)

    monkeypatch.setattr(catalog_models, "audit_update", paused)
    url = f"/api/models/{catalog['gpt-4o'].pk}/"
    renamer = _thread(outcome, "rename", lambda: patch_json(admin_client, url, {"name": "gpt-4o-2024"}).status_code)
    assert renamed.wait(10)
    saver = _thread(
        outcome,
        "override",
        lambda: (
            breaker_override_set(actor=admin_user, provider="openai", model="gpt-4o", data={"failure_threshold": 3}).pk
        ),
    )
    blocked = waits_on_a_lock(saver)
    go_on.set()
    renamer.join(15)
    saver.join(15)

    assert blocked is True
    assert outcome == {"rename": 200, "override": {"model": ["Unknown model “gpt-4o”."]}}
    assert not BreakerOverride.objects.exists()
