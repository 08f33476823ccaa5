"""Gateway keys and their owners: no key for an inactive user, the user admin says how many keys a
(de)activation stops or restores, and an issued key's secret appears once on its page and nowhere else."""

import pytest
from django.contrib.messages import get_messages
from rest_framework.test import APIClient

from audit.models import AuditEvent
from catalog.models import ApiKey
from catalog.services import api_key_create, user_set_active
from core.errors import ValidationFailed
from tests.catalog.test_user_admin import user_form
from tests.factories import UserFactory
from tests.factories.keys import make_key

pytestmark = pytest.mark.django_db

INACTIVE = "User “bob” is deactivated: their keys do not work. Reactivate the user first."


def messages_of(response) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


def test_service_refuses_a_key_for_an_inactive_user(admin_user):
    bob = UserFactory(username="bob", is_active=False)

    with pytest.raises(ValidationFailed) as exc:
        api_key_create(actor=admin_user, name="ci", user=bob)

    assert exc.value.errors == {"user": [INACTIVE]}
    assert ApiKey.objects.count() == 0


def test_admin_key_form_shows_the_inactive_owner_error(admin_client):
    bob = UserFactory(username="bob", is_active=False)

    response = admin_client.post("/admin/catalog/apikey/add/", {"name": "ci", "user": bob.pk})

    assert response.status_code == 200
    assert response.context["adminform"].form.errors == {"user": [INACTIVE]}
    assert ApiKey.objects.count() == 0


def test_api_refuses_a_key_for_an_inactive_user(admin_user):
    UserFactory(username="bob", is_active=False)
    api = APIClient()
    api.force_authenticate(admin_user)

    response = api.post("/api/keys/", {"name": "ci", "user": "bob"}, format="json")

    assert (response.status_code, response.json()) == (400, {"detail": INACTIVE, "errors": {"user": [INACTIVE]}})
    assert ApiKey.objects.count() == 0


def test_change_form_says_how_many_keys_deactivation_stops(admin_client):
    bob = UserFactory(username="bob")
    for name in ("a", "b", "c"):
        make_key(user=bob, name=name)
    revoked = make_key(user=bob, name="old").key
    ApiKey.objects.filter(pk=revoked.pk).update(revoked_at="2026-01-01T00:00:00Z")

    page = admin_client.get(f"/admin/auth/user/{bob.pk}/change/")

    help_text = page.context["adminform"].form.fields["is_active"].help_text
    assert help_text == (
        "Unticking this signs the user out and 3 gateway keys stop working within a second. "
        "Ticking it again restores them; revoke a key to stop it for good."
    )


def test_deactivating_in_the_change_form_says_how_many_keys_stop(admin_client):
    bob = UserFactory(username="bob")
    make_key(user=bob, name="a")
    make_key(user=bob, name="b")

    response = admin_client.post(f"/admin/auth/user/{bob.pk}/change/", user_form(bob, is_active=None))

    assert response.status_code == 302
    assert messages_of(response)[0] == "bob is deactivated: 2 gateway keys stop working."


def test_bulk_deactivate_says_how_many_keys_stop_and_audits_each_user(admin_client):
    bob, carol, dave = UserFactory(username="bob"), UserFactory(username="carol"), UserFactory(username="dave")
    make_key(user=bob, name="a")
    make_key(user=bob, name="b")
    make_key(user=carol, name="c")
    user_set_active(actor=None, user=dave, active=False)  # already inactive: nothing more to stop

    response = admin_client.post(
        "/admin/auth/user/", {"action": "deactivate_users", "_selected_action": [bob.pk, carol.pk, dave.pk]}
    )

    assert messages_of(response) == ["Deactivated 2 users: 3 gateway keys stop working."]
    events = list(
        AuditEvent.objects.filter(action="user.update", object_repr__in=["bob", "carol"])
        .order_by("id")
        .values_list("object_repr", "before", "after")
    )
    assert events == [
        ("bob", {"is_active": True}, {"is_active": False}),
        ("carol", {"is_active": True}, {"is_active": False}),
    ]


def test_bulk_activate_says_how_many_keys_work_again(admin_client):
    bob = UserFactory(username="bob")
    make_key(user=bob, name="a")
    user_set_active(actor=None, user=bob, active=False)

    response = admin_client.post("/admin/auth/user/", {"action": "activate_users", "_selected_action": [bob.pk]})

    bob.refresh_from_db()
    assert bob.is_active is True
    assert messages_of(response) == ["Activated 1 user: 1 gateway key works again."]


def _cookies_and_session(client) -> str:
    session = client.session
    return " ".join([*(morsel.value for morsel in client.cookies.values()), repr(dict(session.items()))])


def test_issued_key_secret_is_shown_once_and_never_stored_in_cookies_messages_or_session(admin_client, admin_user):
    response = admin_client.post("/admin/catalog/apikey/add/", {"name": "ci", "user": admin_user.pk})
    next_page = admin_client.get("/admin/catalog/apikey/")

    key = ApiKey.objects.get(name="ci")
    page = response.content.decode()
    start = page.index(f"{key.prefix}-")
    secret = page[start : page.index("<", start)]
    assert len(secret) == len(key.prefix) + 1 + 43
    assert page.count(secret) == 1
    assert "no-store" in response["Cache-Control"]
    set_cookies = " ".join(str(r.cookies) for r in (response, next_page))
    assert secret not in set_cookies
    assert secret not in _cookies_and_session(admin_client)
    assert [str(m) for m in get_messages(response.wsgi_request)] == []
    assert secret not in " ".join(str(m) for m in next_page.context["messages"])
    assert secret not in next_page.content.decode()


def test_api_key_create_response_is_not_cacheable(admin_user):
    api = APIClient()
    api.force_authenticate(admin_user)

    response = api.post("/api/keys/", {"name": "ci"}, format="json")

    assert response.status_code == 201
    assert "no-store" in response["Cache-Control"]


def test_bulk_deactivate_refuses_to_deactivate_yourself_and_changes_nobody(admin_client, admin_user):
    bob = UserFactory(username="bob")

    response = admin_client.post(
        "/admin/auth/user/", {"action": "deactivate_users", "_selected_action": [admin_user.pk, bob.pk]}
    )

    admin_user.refresh_from_db()
    bob.refresh_from_db()
    assert messages_of(response) == ["You cannot deactivate yourself; ask another admin. No user was changed."]
    assert (admin_user.is_active, bob.is_active) == (True, True)
    assert not AuditEvent.objects.filter(action="user.update").exists()


def test_keys_of_an_inactive_owner_are_reported_inactive_in_the_api_and_the_admin(admin_client, admin_user):
    bob = UserFactory(username="bob")
    created = make_key(user=bob, name="bobs")
    user_set_active(actor=None, user=bob, active=False)

    detail = admin_client.get(f"/api/keys/{created.key.pk}/").json()
    listed = admin_client.get("/api/keys/").json()["results"]
    changelist = admin_client.get("/admin/catalog/apikey/")

    assert (detail["active"], detail["owner_active"], detail["revoked_at"]) == (False, False, None)
    assert [(k["active"], k["owner_active"]) for k in listed] == [(False, False)]
    admin = changelist.context["cl"].model_admin
    row = changelist.context["cl"].result_list[0]
    assert (admin.owner_active(row), admin.usable(row)) == (False, False)
