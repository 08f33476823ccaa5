"""A burst of concurrent sign-in attempts checks at most AUTH_FAILURE_LIMIT passwords: each attempt is reserved
(under row locks) before its password is checked. PostgreSQL only: it is where console processes run attempts
truly in parallel (SQLite serialises the writers anyway)."""

import threading

import pytest
from django.db import connections
from django.test import Client

from access.forms import LOCKED_MESSAGE
from audit.models import AuditEvent
from tests.access.hashers import GatedCountingHasher
from tests.conftest import PASSWORD
from tests.servers import until

pytestmark = [pytest.mark.production]

ADDRESS = "203.0.113.7"
BURST = 20


def _attempt(password: str, results: list) -> None:
    try:
        client = Client(REMOTE_ADDR=ADDRESS)
        response = client.post("/login/", {"username": "alice", "password": password})
        errors = list(response.context["form"].non_field_errors()) if response.context else []
        results.append((response.status_code, errors, client.session.get("_auth_user_id")))
    finally:
        connections.close_all()


def test_a_burst_of_concurrent_attempts_checks_at_most_five_passwords(transactional_db, admin_user, settings):
    settings.PASSWORD_HASHERS = ["tests.access.hashers.GatedCountingHasher"]
    GatedCountingHasher.reset()
    wrong: list = []
    right: list = []
    threads = [threading.Thread(target=_attempt, args=("wrong-password", wrong)) for _ in range(BURST)]
    try:
        for thread in threads:
            thread.start()
        # Every attempt has either been answered unchecked or is held inside the hasher.
        until(lambda: len(wrong) + GatedCountingHasher.checks >= BURST, 60, "the burst to settle")
        held = GatedCountingHasher.checks
        # The right password, while the checked attempts are still in flight.
        late = threading.Thread(target=_attempt, args=(PASSWORD, right))
        threads.append(late)
        late.start()
        until(lambda: right or GatedCountingHasher.checks > held, 60, "the right password's attempt")
    finally:
        GatedCountingHasher.gate.set()
        for thread in threads:
            thread.join(timeout=120)

    print(f"{BURST} concurrent wrong passwords + the right one: {GatedCountingHasher.checks} password checks")
    assert held == 5
    assert GatedCountingHasher.checks == 5
    assert right == [(429, [LOCKED_MESSAGE], None)]
    assert len(wrong) == BURST and {status for status, _, _ in wrong} <= {200, 429}
    lockouts = AuditEvent.objects.filter(action="auth.lockout").values_list("after", flat=True)
    assert sorted((a["kind"], a["value"]) for a in lockouts) == [("account", "alice"), ("address", ADDRESS)]
