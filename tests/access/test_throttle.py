"""Sign-in (console and admin) and API token failures are throttled by account name and by client address."""

import io
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.core.management import call_command
from django.test import Client
from rest_framework.test import APIClient

from access.enums import ThrottleScope
from access.forms import LOCKED_MESSAGE
from access.models import AuthThrottle
from access.services import auth_attempt_failed, auth_attempt_reserve, auth_attempt_succeeded, login_idents
from audit.models import AuditEvent
from catalog.authentication import TOKEN_LOCKED_MESSAGE
from catalog.services import console_token_create
from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db

START = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
ATTACKER, OTHER = "203.0.113.7", "198.51.100.20"
INVALID = "Please enter a correct username and password. Note that both fields may be case-sensitive."


def sign_in(username: str, password: str, *, address: str = ATTACKER, path: str = "/login/", **headers):
    client = Client(REMOTE_ADDR=address, headers=headers)
    response = client.post(path, {"username": username, "password": password})
    errors = list(response.context["form"].non_field_errors()) if response.context else []
    return response.status_code, errors, client.session.get("_auth_user_id")


def fail(username: str, times: int = 5, **kwargs) -> list[tuple]:
    return [sign_in(username, "wrong-password", **kwargs)[:2] for _ in range(times)]


def test_five_failures_then_the_right_password_is_refused(admin_user):
    failures = fail("alice")

    refused = sign_in("alice", PASSWORD)

    assert failures == [(200, [INVALID])] * 4 + [(429, [LOCKED_MESSAGE])]
    assert refused == (429, [LOCKED_MESSAGE], None)


def test_an_unknown_user_gets_exactly_the_same_answers(admin_user):
    known = [*fail("alice"), sign_in("alice", PASSWORD)[:2]]
    unknown = [*fail("nobody", address=OTHER), sign_in("nobody", PASSWORD, address=OTHER)[:2]]

    assert unknown == known


def test_account_lock_holds_from_every_address_and_address_lock_for_every_account(admin_user, django_user_model):
    django_user_model.objects.create_user(username="bob", password=PASSWORD)
    fail("alice")

    bob_elsewhere = sign_in("bob", PASSWORD, address=OTHER)
    alice_elsewhere = sign_in("alice", PASSWORD, address=OTHER)
    bob_from_attacker = sign_in("bob", PASSWORD, address=ATTACKER)

    assert bob_elsewhere[0] == 302 and bob_elsewhere[2] is not None
    assert alice_elsewhere == (429, [LOCKED_MESSAGE], None)
    assert bob_from_attacker == (429, [LOCKED_MESSAGE], None)


def test_failures_spread_beyond_the_window_do_not_lock(admin_user):
    with time_machine.travel(START, tick=False) as clock:
        fail("alice", times=4)
        clock.shift(timedelta(minutes=15, seconds=1))
        later = fail("alice", times=1)

        signed_in = sign_in("alice", PASSWORD)

    assert later == [(200, [INVALID])]
    assert signed_in[0] == 302 and signed_in[2] is not None


def test_sign_in_works_again_after_the_cool_off(admin_user):
    with time_machine.travel(START, tick=False) as clock:
        fail("alice")
        clock.shift(timedelta(minutes=14, seconds=59))
        still_locked = sign_in("alice", PASSWORD)
        clock.shift(timedelta(seconds=2))

        after = sign_in("alice", PASSWORD)

    assert still_locked == (429, [LOCKED_MESSAGE], None)
    assert after[0] == 302 and after[2] == str(admin_user.pk)


def test_lockouts_are_audited_per_account_and_address(admin_user):
    with time_machine.travel(START, tick=False):
        fail("alice")

    events = list(AuditEvent.objects.filter(action="auth.lockout").order_by("id").values_list("actor_name", "after"))
    until = (START + timedelta(minutes=15)).isoformat()
    assert [(name, a["kind"], a["value"], a["failures"], a["client_address"]) for name, a in events] == [
        ("system", "account", "alice", 5, ATTACKER),
        ("system", "address", ATTACKER, 5, ATTACKER),
    ]
    assert [a["locked_until"] for _, a in events] == [until, until]


def test_admin_unlock_lets_the_account_sign_in_and_is_audited(admin_user, admin_client):
    fail("alice")
    locked = list(AuthThrottle.objects.order_by("id").values_list("pk", flat=True))

    response = admin_client.post(
        "/admin/access/auththrottle/", {"action": "unlock", "_selected_action": locked}, follow=True
    )
    after = sign_in("alice", PASSWORD)

    assert [str(m) for m in response.context["messages"]] == ["Unlocked 2 of 2 selected."]
    assert after[0] == 302 and after[2] == str(admin_user.pk)
    unlocks = AuditEvent.objects.filter(action="auth.unlock").order_by("id").values_list("actor_name", "after")
    assert list(unlocks) == [("alice", {"locked_until": None}), ("alice", {"locked_until": None})]


def test_lockout_list_shows_lockouts_to_admins_only(admin_client, user_client):
    fail("mallory")

    listed = admin_client.get("/admin/access/auththrottle/?locked=yes")
    refused = user_client.get("/admin/access/auththrottle/")

    assert sorted(str(row) for row in listed.context["cl"].result_list) == [
        "Sign-in (console and admin): account mallory",
        f"Sign-in (console and admin): client address {ATTACKER}",
    ]
    assert refused.status_code == 302  # not staff: sent to the admin's sign-in
    assert refused["Location"].startswith("/admin/login/")


def test_admin_login_is_throttled_the_same_way(admin_user):
    failures = fail("alice", path="/admin/login/")

    refused = sign_in("alice", PASSWORD, path="/admin/login/")

    assert [status for status, _ in failures] == [200, 200, 200, 200, 429]
    assert refused == (429, [LOCKED_MESSAGE], None)


def test_x_forwarded_for_is_ignored_by_default(admin_user):
    spoofed = [
        sign_in(f"guess{i}", "wrong-password", address=ATTACKER, **{"X-Forwarded-For": f"10.9.9.{i}"})[0]
        for i in range(5)
    ]

    refused = sign_in("alice", PASSWORD, address=ATTACKER, **{"X-Forwarded-For": "10.9.9.99"})

    assert spoofed == [200, 200, 200, 200, 429]
    assert refused == (429, [LOCKED_MESSAGE], None)


def test_a_trusted_proxy_count_uses_the_forwarded_address(admin_user, settings):
    settings.TRUSTED_PROXY_COUNT = 1
    proxy = "10.0.0.2"
    for i in range(5):
        sign_in(f"guess{i}", "wrong-password", address=proxy, **{"X-Forwarded-For": f"6.6.6.6, {ATTACKER}"})

    attacker = sign_in("alice", PASSWORD, address=proxy, **{"X-Forwarded-For": ATTACKER})
    neighbour = sign_in("alice", PASSWORD, address=proxy, **{"X-Forwarded-For": f"{ATTACKER}, {OTHER}"})

    assert attacker == (429, [LOCKED_MESSAGE], None)
    assert neighbour[0] == 302 and neighbour[2] == str(admin_user.pk)


def test_ipv6_addresses_count_per_64(admin_user):
    for i in range(5):
        sign_in(f"guess{i}", "wrong-password", address=f"2001:db8:1:2::{i + 1:x}")

    same_net = sign_in("alice", PASSWORD, address="2001:db8:1:2:ffff::1")
    other_net = sign_in("alice", PASSWORD, address="2001:db8:1:3::1")

    assert same_net == (429, [LOCKED_MESSAGE], None)
    assert other_net[0] == 302


def _api(address: str, token: str) -> APIClient:
    client = APIClient(REMOTE_ADDR=address)
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return client


def test_api_token_failures_are_throttled_with_429_and_a_message(admin_user):
    _, secret = console_token_create(actor=admin_user, user=admin_user, name="ci")
    with time_machine.travel(START, tick=False) as clock:
        bad = [_api(ATTACKER, "cpt-00000000-guess").get("/api/chains/").status_code for _ in range(5)]
        refused = _api(ATTACKER, secret).get("/api/chains/")
        elsewhere = _api(OTHER, secret).get("/api/chains/")
        clock.shift(timedelta(minutes=15, seconds=1))
        later = _api(ATTACKER, secret).get("/api/chains/")

    assert bad == [401, 401, 401, 401, 429]
    assert refused.status_code == 429
    assert refused.json() == {"detail": f"{TOKEN_LOCKED_MESSAGE} Expected available in 900 seconds."}
    assert refused["Retry-After"] == "900"
    assert (elsewhere.status_code, later.status_code) == (200, 200)
    lockouts = AuditEvent.objects.filter(action="auth.lockout").values_list("after", flat=True)
    assert [(a["scope"], a["kind"], a["value"]) for a in lockouts] == [("api", "address", ATTACKER)]


def test_a_successful_sign_in_resets_the_accounts_count_but_not_the_addresss(admin_user):
    third = "192.0.2.33"
    fail("alice", times=4)
    signed_in = sign_in("alice", PASSWORD, address=OTHER)
    again = fail("alice", times=3, address=third)

    from_attacker = fail("alice", times=1)

    assert signed_in[0] == 302
    assert again == [(200, [INVALID])] * 3  # the account's count started afresh after the sign-in
    assert from_attacker == [(429, [LOCKED_MESSAGE])]  # the address's 4 + 1: locked
    locked = AuthThrottle.objects.filter(locked_until__isnull=False).values_list("kind", "value")
    assert list(locked) == [("address", ATTACKER)]


@pytest.mark.parametrize(
    "typed",
    ["admin\x1b[2J\r\nFAKE LOG LINE", "admin\u2028FAKE LOG LINE\u2029"],  # U+2028/9: line breaks to JavaScript
    ids=["escape-crlf", "line-separator"],
)
def test_a_username_with_control_characters_counts_against_the_address_only(admin_user, typed):
    answers = fail(typed)

    assert answers == [(200, [INVALID])] * 4 + [(429, [LOCKED_MESSAGE])]
    assert list(AuthThrottle.objects.values_list("kind", "value")) == [("address", ATTACKER)]
    events = AuditEvent.objects.filter(action__startswith="auth.").values_list("object_repr", "after")
    assert not any("FAKE" in text for event in events for text in (event[0], str(event[1])))
    assert [a["kind"] for _, a in events] == ["address"]


def test_unlocking_an_account_also_unlocks_the_address_the_same_attempt_locked(admin_user, admin_client):
    fail("alice")
    account = AuthThrottle.objects.get(kind="account")

    response = admin_client.post(
        "/admin/access/auththrottle/", {"action": "unlock", "_selected_action": [account.pk]}, follow=True
    )
    after = sign_in("alice", PASSWORD)

    assert [str(m) for m in response.context["messages"]] == [
        "Unlocked 1 of 1 selected. Also unlocked, locked by the same attempt: "
        f"Sign-in (console and admin): client address {ATTACKER}."
    ]
    assert after[0] == 302 and after[2] == str(admin_user.pk)
    assert AuditEvent.objects.filter(action="auth.unlock").count() == 2


def test_auth_unlock_command_unlocks_a_locked_out_admin_and_is_audited(admin_user):
    from django.core.management import CommandError, call_command

    fail("alice")
    out = io.StringIO()

    call_command("auth_unlock", "alice", stdout=out)
    after = sign_in("alice", PASSWORD)
    with pytest.raises(CommandError, match=r"Nothing named 'alice' is locked out\."):
        call_command("auth_unlock", "alice")

    assert out.getvalue().splitlines() == [
        "Unlocked Sign-in (console and admin): account alice.",
        f"Unlocked Sign-in (console and admin): client address {ATTACKER}.",
    ]
    assert after[0] == 302 and after[2] == str(admin_user.pk)
    unlocks = AuditEvent.objects.filter(action="auth.unlock").values_list("actor_name", "object_repr")
    assert sorted(unlocks) == [
        ("system", "Sign-in (console and admin): account alice"),
        ("system", f"Sign-in (console and admin): client address {ATTACKER}"),
    ]


def test_the_prune_task_deletes_expired_rows_only_and_failures_no_longer_prune(admin_user, settings):
    from access.tasks import prune_task
    from controlplane.celery import app

    settings.EMBEDDED = False  # production: pruning is beat's job, never a failure's
    with time_machine.travel(START, tick=False) as clock:
        fail("old", times=1)
        fail("locked", times=5, address=OTHER)
        clock.shift(timedelta(minutes=20))
        AuthThrottle.objects.filter(value=OTHER).update(locked_until=START + timedelta(hours=1))  # still locked
        fail("fresh", times=1, address="192.0.2.33")
        kept_by_failure = sorted(AuthThrottle.objects.values_list("value", flat=True))

        deleted = prune_task()

    assert kept_by_failure == ["192.0.2.33", OTHER, ATTACKER, "fresh", "locked", "old"]
    assert deleted == 3  # "old", ATTACKER (expired failures) and "locked" (its lockout ended)
    assert sorted(AuthThrottle.objects.values_list("value", flat=True)) == ["192.0.2.33", OTHER, "fresh"]
    assert app.conf.beat_schedule["access-prune"]["task"] == "access.prune"


def _save_order(monkeypatch, call) -> list[str]:
    """The kinds of the throttle rows `call` saves, in order: the order it locks them in on PostgreSQL."""
    seen: list[str] = []
    original = AuthThrottle.save

    def spy(self, *args, **kwargs):
        seen.append(self.kind)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(AuthThrottle, "save", spy)
    call()
    monkeypatch.setattr(AuthThrottle, "save", original)
    return seen


@pytest.mark.parametrize("settle", [auth_attempt_failed, auth_attempt_succeeded], ids=["failed", "succeeded"])
def test_settling_an_attempt_locks_its_rows_in_the_order_its_reservation_did(admin_user, monkeypatch, settle):
    """The address row older than the account row (it tried another name first): settling used to lock them by
    id, the reverse of a concurrent reservation's order, and two attempts could deadlock (a 500, a lost lockout)."""
    fail("bob", times=1)
    idents = login_idents(username="alice", address=ATTACKER)

    auth_attempt_reserve(scope=ThrottleScope.LOGIN, idents=idents, address=ATTACKER)  # alice's row, created
    reservations = []
    reserve_order = _save_order(
        monkeypatch,
        lambda: reservations.append(auth_attempt_reserve(scope=ThrottleScope.LOGIN, idents=idents, address=ATTACKER)),
    )
    [reservation] = reservations
    settle_order = _save_order(monkeypatch, lambda: settle(reservation=reservation))

    assert AuthThrottle.objects.get(kind="address").pk < AuthThrottle.objects.get(value="alice").pk
    assert reserve_order == settle_order == ["account", "address"]


def _unsettled(username: str, times: int = 5) -> None:
    """Attempts reserved whose check never settled (the worker died during it)."""
    for _ in range(times):
        idents = login_idents(username=username, address=ATTACKER)
        auth_attempt_reserve(scope=ThrottleScope.LOGIN, idents=idents, address=ATTACKER)


def test_attempts_that_never_settled_become_a_lockout_an_admin_can_see_and_end(admin_user):
    """Five tentative failures left behind refused every sign-in with no lockout to list or unlock."""
    with time_machine.travel(START, tick=False) as clock:
        _unsettled("alice")
        in_flight = sign_in("alice", PASSWORD, address=OTHER)  # they may still be checking
        clock.shift(timedelta(minutes=2))
        refused = sign_in("alice", PASSWORD, address=OTHER)
        locked = AuthThrottle.objects.get(kind="account", value="alice").locked_until
        call_command("auth_unlock", "alice", stdout=io.StringIO())

        after = sign_in("alice", PASSWORD, address=OTHER)

    assert in_flight == (429, [LOCKED_MESSAGE], None)
    assert refused == (429, [LOCKED_MESSAGE], None)
    assert locked == START + timedelta(minutes=15)  # as if the last of them had failed when it was made
    lockouts = [a for a in AuditEvent.objects.filter(action="auth.lockout").values_list("after", flat=True)]
    assert [(a["kind"], a["value"], a["failures"], a.get("unsettled")) for a in lockouts] == [
        ("account", "alice", 5, True)
    ]
    assert AuditEvent.objects.filter(action="auth.unlock").count() == 1
    assert after[0] == 302 and after[2] == str(admin_user.pk)


def test_attempts_that_never_settled_lock_nothing_once_their_lockout_would_be_over(admin_user, settings):
    settings.AUTH_FAILURE_WINDOW_SECONDS = 3600  # longer than the 15 min lockout
    with time_machine.travel(START, tick=False) as clock:
        _unsettled("alice")
        clock.shift(timedelta(minutes=20))

        signed_in = sign_in("alice", PASSWORD, address=OTHER)

    assert signed_in[0] == 302
    assert not AuditEvent.objects.filter(action="auth.lockout").exists()
