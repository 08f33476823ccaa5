"""The admin's "Unlock selected" locks every row its unlocks change before it audits the first (docs/decisions.md,
"One lock order"): it used to unlock and audit one row at a time, so the second row was locked after the first's
audit event had taken the audit log's lock, and a sign-in failure holding that row and about to audit its lockout
deadlocked with it. Production mode only: two real transactions race on PostgreSQL."""

from datetime import timedelta

import pytest
from django.utils import timezone

from access.enums import ThrottleKind, ThrottleScope
from access.models import AuthThrottle
from access.services import auth_attempt_failed, auth_attempt_reserve, login_idents
from tests.helpers.races import Pause, pause_before, race

pytestmark = [pytest.mark.production, pytest.mark.django_db(transaction=True)]

ADDRESS = "203.0.113.9"


def test_unlocking_two_accounts_while_the_second_is_being_locked_out_waits_and_unlocks_both(
    admin_user, admin_client, monkeypatch
):
    """T1: bob's 5th wrong password: auth_attempt_failed locks bob's and the address's rows, sets the lockout and
    is about to audit it ... T2: an admin unlocks alice and bob (selected together): locks both rows first, so
    waits on bob's ... T1 audits, COMMIT; T2 unlocks both. (Before: T2 unlocked and audited alice, taking the audit
    log's lock, then waited on bob's row while T1 waited on the audit log.)"""
    import access.services as access_services

    now = timezone.now()
    alice = AuthThrottle.objects.create(
        scope=ThrottleScope.LOGIN,
        kind=ThrottleKind.ACCOUNT,
        value="alice",
        failures=[],
        locked_until=now + timedelta(minutes=15),
        updated_at=now,
    )
    stamp = now.timestamp() - 10
    bob = AuthThrottle.objects.create(
        scope=ThrottleScope.LOGIN,
        kind=ThrottleKind.ACCOUNT,
        value="bob",
        failures=[stamp, stamp + 1, stamp + 2, stamp + 3],
        updated_at=now,
    )
    reservation = auth_attempt_reserve(
        scope=ThrottleScope.LOGIN, idents=login_idents(username="bob", address=ADDRESS), address=ADDRESS
    )
    assert not reservation.refused
    pause, statuses = Pause(), {}
    pause_before(monkeypatch, access_services, "audit_record", pause)

    def unlock() -> None:
        response = admin_client.post(
            "/admin/access/auththrottle/", {"action": "unlock", "_selected_action": [alice.pk, bob.pk]}
        )
        statuses["unlock"] = response.status_code

    outcome, blocked = race(lambda: auth_attempt_failed(reservation=reservation), unlock, pause)

    assert blocked is True
    assert outcome == {"first": "ok", "second": "ok"}
    assert statuses == {"unlock": 302}
    alice.refresh_from_db()
    assert alice.locked_until is None
    bob.refresh_from_db()
    assert bob.locked_until is None  # locked by T1, then unlocked by T2
    address = AuthThrottle.objects.get(kind=ThrottleKind.ADDRESS, value=ADDRESS)
    assert address.locked_until is None  # locked by the same attempt, unlocked with bob
