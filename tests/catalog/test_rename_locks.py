"""A rename locks every row it moves before it writes an audit event (which takes the audit log's lock), the order
every other write keeps: a rename and another write of a moved row cannot deadlock.

Production mode only: the wait is made certain by seeing the rename wait on PostgreSQL's row lock.
"""

import threading
from typing import Any

import pytest
from django.db import connections, transaction

from audit.services import audit_record
from health.models import CircuitControl
from health.services import provider_drain
from tests.helpers.api import patch_json
from tests.helpers.locks import waits_on_a_lock

pytestmark = [pytest.mark.production, pytest.mark.django_db(transaction=True)]


def test_a_rename_waiting_on_a_hold_another_write_holds_does_not_deadlock_with_it(admin_user, admin_client, catalog):
    """The other writer locks the hold, then audits (as a release does). The rename used to audit first and then
    wait on the hold, while the other waited on the audit log's lock: PostgreSQL broke the deadlock with an error."""
    provider_drain(actor=admin_user, provider="openai", reason="migrating", minutes=None)
    holding, release = threading.Event(), threading.Event()
    outcome: dict[str, Any] = {}

    def other_writer() -> None:
        try:
            with transaction.atomic():
                CircuitControl.objects.select_for_update().get(provider="openai")
                holding.set()
                release.wait(10)
                audit_record(actor=None, action="x.test", object_type="x", object_id=1)
            outcome["other"] = "committed"
        except Exception as exc:  # a deadlock victim: what this test must not see
            outcome["other"] = repr(exc)
        finally:
            connections.close_all()

    def renamer() -> None:
        try:
            url = f"/api/providers/{catalog['openai'].pk}/"
            outcome["rename"] = patch_json(admin_client, url, {"name": "openai-eu"}).status_code
        finally:
            connections.close_all()

    writer = threading.Thread(target=other_writer)
    writer.start()
    assert holding.wait(10)
    renaming = threading.Thread(target=renamer)
    renaming.start()
    blocked = waits_on_a_lock(renaming)
    release.set()
    writer.join(15)
    renaming.join(15)

    assert blocked is True
    assert outcome == {"other": "committed", "rename": 200}
    assert CircuitControl.objects.get().provider == "openai-eu"
