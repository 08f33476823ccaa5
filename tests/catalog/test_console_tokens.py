"""REST API tokens for scripts: stored hashed, refused once revoked or when the user is inactive,
last use recorded at most once a minute, managed read-only in the admin."""

from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from audit.models import AuditEvent
from catalog.authentication import ConsoleTokenAuthentication
from catalog.keys import key_hash
from catalog.models import ConsoleToken
from catalog.services import console_token_create, console_token_revoke
from core.errors import ValidationFailed
from tests.factories.keys import make_key

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


def token_client(secret: str) -> Client:
    return Client(headers={"Authorization": f"Token {secret}"})


def raw_row(pk: int) -> tuple:
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM catalog_consoletoken WHERE id = %s", [pk])
        return cursor.fetchone()


def token_updates(queries: CaptureQueriesContext) -> list[str]:
    return [q["sql"] for q in queries.captured_queries if q["sql"].startswith('UPDATE "catalog_consoletoken"')]


# --- service ------------------------------------------------------------------------------------


def test_create_stores_only_the_hash_of_the_secret(admin_user):
    token, secret = console_token_create(actor=admin_user, user=admin_user, name="ci")

    row = raw_row(token.pk)
    assert all(secret not in str(value) for value in row)
    assert token.hashed_secret == key_hash(secret)
    assert len(token.hashed_secret) == 64
    assert secret.startswith(f"{token.prefix}-")
    assert token.prefix.startswith("cpt-")
    assert len(token.prefix) == len("cpt-") + 8
    int(token.prefix.removeprefix("cpt-"), 16)  # hex


def test_create_audits_without_the_secret_or_its_hash(admin_user):
    token, secret = console_token_create(actor=admin_user, user=admin_user, name="ci")

    event = AuditEvent.objects.get()
    assert (event.action, event.actor_name, event.object_type, event.object_id) == (
        "console_token.create",
        "alice",
        "console_token",
        str(token.pk),
    )
    assert event.after == {"name": "ci", "prefix": token.prefix, "user": "alice"}
    assert event.object_repr == f"ci ({token.prefix}…)"
    stored = str([event.before, event.after, event.object_repr])
    assert secret not in stored
    assert token.hashed_secret not in stored


def test_create_refuses_a_blank_name(admin_user):
    with pytest.raises(ValidationFailed) as exc:
        console_token_create(actor=admin_user, user=admin_user, name="   ")

    assert exc.value.errors == {"name": ["Token name is required and cannot be only whitespace."]}
    assert ConsoleToken.objects.count() == 0


def test_revoke_is_audited_once(admin_user):
    token, _ = console_token_create(actor=admin_user, user=admin_user, name="ci")

    with time_machine.travel(T0, tick=False):
        console_token_revoke(actor=admin_user, token=token)
        console_token_revoke(actor=admin_user, token=token)

    token.refresh_from_db()
    assert token.revoked_at == T0
    events = list(AuditEvent.objects.order_by("id").values_list("action", "before", "after"))
    assert events == [
        ("console_token.create", None, {"name": "ci", "prefix": token.prefix, "user": "alice"}),
        ("console_token.revoke", {"revoked_at": None}, {"revoked_at": str(T0)}),
    ]


# --- authentication -----------------------------------------------------------------------------


def test_token_authenticates_its_user(admin_user):
    _, secret = console_token_create(actor=None, user=admin_user, name="ci")

    response = token_client(secret).get("/api/teams/")

    assert response.status_code == 200
    assert response.json()["count"] == 0


def test_revoked_token_gets_401(admin_user):
    token, secret = console_token_create(actor=None, user=admin_user, name="ci")
    console_token_revoke(actor=None, token=token)

    response = token_client(secret).get("/api/teams/")

    assert response.status_code == 401
    assert response["WWW-Authenticate"] == 'Token realm="api"'
    assert response.json() == {"detail": "Invalid token."}


def test_inactive_users_token_gets_401(admin_user):
    _, secret = console_token_create(actor=None, user=admin_user, name="ci")
    admin_user.is_active = False
    admin_user.save(update_fields=["is_active"])

    response = token_client(secret).get("/api/teams/")

    assert response.status_code == 401
    assert response["WWW-Authenticate"] == 'Token realm="api"'
    assert response.json() == {"detail": "Invalid token."}


def test_gateway_key_is_not_an_api_token(admin_user):
    created = make_key(user=admin_user)

    response = token_client(created.secret).get("/api/teams/")

    assert response.status_code == 401
    assert response.json() == {"detail": "Invalid token."}


def test_token_hash_is_not_accepted_as_the_token(admin_user):
    token, _ = console_token_create(actor=None, user=admin_user, name="ci")

    response = token_client(token.hashed_secret).get("/api/teams/")

    assert response.status_code == 401
    assert response.json() == {"detail": "Invalid token."}


@pytest.mark.parametrize(
    ("header", "detail"),
    [
        ("Token", "Invalid token header. No credentials provided."),
        ("Token a b", "Invalid token header. Token string should not contain spaces."),
    ],
)
def test_malformed_token_header_gets_401(db, header, detail):
    response = Client(headers={"Authorization": header}).get("/api/teams/")

    assert response.status_code == 401
    assert response["WWW-Authenticate"] == 'Token realm="api"'
    assert response.json() == {"detail": detail}


def test_last_used_at_is_written_at_most_once_a_minute(admin_user):
    token, secret = console_token_create(actor=None, user=admin_user, name="ci")
    client = token_client(secret)

    with time_machine.travel(T0, tick=False) as traveller:
        with CaptureQueriesContext(connection) as first:
            client.get("/api/teams/")
        token.refresh_from_db()
        after_first = token.last_used_at

        traveller.shift(timedelta(seconds=59))
        with CaptureQueriesContext(connection) as within_the_minute:
            client.get("/api/teams/")
        token.refresh_from_db()
        after_second = token.last_used_at

        traveller.shift(timedelta(seconds=1))
        with CaptureQueriesContext(connection) as a_minute_later:
            client.get("/api/teams/")
        token.refresh_from_db()
        after_third = token.last_used_at

    assert (after_first, after_second, after_third) == (T0, T0, T0 + timedelta(seconds=60))
    assert (len(token_updates(first)), len(token_updates(within_the_minute)), len(token_updates(a_minute_later))) == (
        1,
        0,
        1,
    )


def test_last_used_at_update_is_conditional(admin_user):
    """A request that read the token before another request recorded its use does not write again."""
    token, secret = console_token_create(actor=None, user=admin_user, name="ci")
    auth = ConsoleTokenAuthentication()
    with time_machine.travel(T0, tick=False) as traveller:
        auth.authenticate_credentials(secret)
        traveller.shift(timedelta(minutes=2))
        read_before = ConsoleToken.objects.get(pk=token.pk)  # still says T0
        auth.authenticate_credentials(secret)  # the other request records T0 + 2 min
        traveller.shift(timedelta(seconds=10))

        auth._touch(read_before)

    token.refresh_from_db()
    assert token.last_used_at == T0 + timedelta(minutes=2)


# --- admin --------------------------------------------------------------------------------------


def test_admin_lists_tokens_without_secrets(admin_client, admin_user):
    token, secret = console_token_create(actor=None, user=admin_user, name="nightly export")

    response = admin_client.get("/admin/catalog/consoletoken/")

    html = response.content.decode()
    assert response.status_code == 200
    assert list(response.context["cl"].result_list) == [token]
    assert token.prefix in html
    assert secret not in html
    assert token.hashed_secret not in html


def test_admin_cannot_add_change_or_delete_tokens(admin_client, admin_user):
    token, _ = console_token_create(actor=None, user=admin_user, name="ci")

    add = admin_client.get("/admin/catalog/consoletoken/add/")
    change = admin_client.post(f"/admin/catalog/consoletoken/{token.pk}/change/", {"name": "renamed"})
    delete = admin_client.post(f"/admin/catalog/consoletoken/{token.pk}/delete/", {"post": "yes"})
    actions = admin_client.get("/admin/catalog/consoletoken/").context["action_form"].fields["action"].choices

    token.refresh_from_db()
    assert (add.status_code, change.status_code, delete.status_code) == (403, 403, 403)
    assert token.name == "ci"
    assert [name for name, _ in actions] == ["", "revoke"]


def test_admin_revoke_action_revokes_through_the_service(admin_client, admin_user):
    first, first_secret = console_token_create(actor=None, user=admin_user, name="one")
    second, _ = console_token_create(actor=None, user=admin_user, name="two")
    _, kept_secret = console_token_create(actor=None, user=admin_user, name="kept")

    response = admin_client.post(
        "/admin/catalog/consoletoken/",
        {"action": "revoke", "_selected_action": [first.pk, second.pk], "index": "0"},
        follow=True,
    )

    assert [str(m) for m in response.context["messages"]] == ["Revoked 2 token(s)."]
    assert set(ConsoleToken.objects.filter(revoked_at__isnull=False)) == {first, second}
    revokes = AuditEvent.objects.filter(action="console_token.revoke").values_list("actor_name", "object_id")
    assert sorted(revokes) == sorted([("alice", str(first.pk)), ("alice", str(second.pk))])
    assert token_client(first_secret).get("/api/teams/").status_code == 401
    assert token_client(kept_secret).get("/api/teams/").status_code == 200


def test_admin_view_page_shows_the_token_read_only(admin_client, admin_user):
    token, _ = console_token_create(actor=None, user=admin_user, name="ci")

    response = admin_client.get(f"/admin/catalog/consoletoken/{token.pk}/change/")

    assert response.status_code == 200
    assert response.context["has_change_permission"] is False
    shown = [
        (field.field["name"], field.is_readonly)
        for fieldset in response.context["adminform"]
        for line in fieldset
        for field in line
    ]
    assert shown == [
        ("prefix", True),
        ("user", True),
        ("name", True),
        ("created_at", True),
        ("last_used_at", True),
        ("revoked_at", True),
    ]
