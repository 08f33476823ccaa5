"""Saves in Django's user admin are audited in the transaction of the save."""

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission

from audit.models import AuditEvent
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

NEW_PASSWORD = "a-much-longer-passphrase-42"


def events() -> list[tuple]:
    return list(AuditEvent.objects.order_by("id").values_list("action", "object_repr", "before", "after"))


def user_form(user, **overrides) -> dict:
    """What the change form posts back unchanged; booleans are sent only when true, as a browser does."""
    data = {
        "username": user.username,
        "first_name": user.first_name,
        "last_name": user.last_name,
        "email": user.email,
        "groups": list(user.groups.values_list("pk", flat=True)),
        "user_permissions": [],
        "date_joined_0": user.date_joined.strftime("%Y-%m-%d"),
        "date_joined_1": user.date_joined.strftime("%H:%M:%S"),
        "last_login_0": "",
        "last_login_1": "",
    }
    for flag in ("is_active", "is_staff", "is_superuser"):
        if getattr(user, flag):
            data[flag] = "on"
    data.update(overrides)
    return {k: v for k, v in data.items() if v is not None}


# Transactional: the audit write refuses to run outside a transaction, so this proves the admin save has one.
@pytest.mark.django_db(transaction=True)
def test_admin_group_change_is_audited_with_group_names(admin_client):
    user = UserFactory(username="bob")
    analysts = Group.objects.get_or_create(name="bi_read_only")[0]

    response = admin_client.post(f"/admin/auth/user/{user.pk}/change/", user_form(user, groups=[analysts.pk]))

    assert response.status_code == 302
    assert list(user.groups.values_list("name", flat=True)) == ["bi_read_only"]
    assert events() == [("user.update", "bob", {"groups": []}, {"groups": ["bi_read_only"]})]


def test_admin_permission_grant_is_audited_by_name(admin_client):
    # A permission given to one user lets a staff member act in this admin: as much a change of access as a role.
    user = UserFactory(username="bob", is_staff=True)
    revoke = Permission.objects.get(content_type__app_label="catalog", codename="change_apikey")

    response = admin_client.post(f"/admin/auth/user/{user.pk}/change/", user_form(user, user_permissions=[revoke.pk]))

    assert response.status_code == 302
    assert events() == [
        ("user.update", "bob", {"user_permissions": []}, {"user_permissions": ["catalog.change_apikey"]})
    ]


def test_admin_deactivate_is_audited(admin_client):
    user = UserFactory(username="bob", is_staff=True)

    response = admin_client.post(f"/admin/auth/user/{user.pk}/change/", user_form(user, is_active=None))

    assert response.status_code == 302
    user.refresh_from_db()
    assert user.is_active is False
    assert events() == [("user.update", "bob", {"is_active": True}, {"is_active": False})]


def test_admin_rename_and_promotion_record_every_changed_field(admin_client):
    user = UserFactory(username="bob")

    admin_client.post(
        f"/admin/auth/user/{user.pk}/change/", user_form(user, username="robert", is_staff="on", is_superuser="on")
    )

    assert events() == [
        (
            "user.update",
            "robert",
            {"username": "bob", "is_staff": False, "is_superuser": False},
            {"username": "robert", "is_staff": True, "is_superuser": True},
        )
    ]


def test_admin_save_changing_no_audited_field_writes_no_event(admin_client):
    user = UserFactory(username="bob")

    response = admin_client.post(f"/admin/auth/user/{user.pk}/change/", user_form(user, email="bob@example.com"))

    assert response.status_code == 302
    user.refresh_from_db()
    assert (user.email, events()) == ("bob@example.com", [])


def test_admin_invalid_user_change_saves_and_audits_nothing(admin_client):
    user = UserFactory(username="bob")
    UserFactory(username="carol")

    response = admin_client.post(
        f"/admin/auth/user/{user.pk}/change/", user_form(user, username="carol", is_active=None)
    )

    assert response.status_code == 200
    assert response.context["adminform"].form.errors == {"username": ["A user with that username already exists."]}
    user.refresh_from_db()
    assert (user.username, user.is_active, events()) == ("bob", True, [])


# Transactional: Django's password view has no transaction of its own; the admin wraps it in one.
@pytest.mark.django_db(transaction=True)
def test_admin_password_change_records_only_that_it_changed(admin_client):
    user = UserFactory(username="bob")
    user.set_password("old-passphrase-123456")
    user.save()

    response = admin_client.post(
        f"/admin/auth/user/{user.pk}/password/",
        {"password1": NEW_PASSWORD, "password2": NEW_PASSWORD, "usable_password": "true"},
    )

    assert response.status_code == 302
    user.refresh_from_db()
    assert user.check_password(NEW_PASSWORD)
    assert events() == [("user.update", "bob", None, {"password": "(changed)"})]


def test_admin_refused_password_change_writes_no_event(admin_client):
    user = UserFactory(username="bob")

    response = admin_client.post(
        f"/admin/auth/user/{user.pk}/password/",
        {"password1": NEW_PASSWORD, "password2": "something-else-entirely", "usable_password": "true"},
    )

    assert response.status_code == 200
    assert events() == []


@pytest.mark.django_db(transaction=True)
def test_admin_user_create_is_audited_without_the_password(admin_client):
    response = admin_client.post(
        "/admin/auth/user/add/",
        {"username": "carol", "password1": NEW_PASSWORD, "password2": NEW_PASSWORD, "usable_password": "true"},
    )

    assert response.status_code == 302
    carol = get_user_model().objects.get(username="carol")
    assert carol.check_password(NEW_PASSWORD)
    assert events() == [
        (
            "user.create",
            "carol",
            None,
            {
                "username": "carol",
                "is_active": True,
                "is_staff": False,
                "is_superuser": False,
                "groups": [],
                "user_permissions": [],
            },
        )
    ]


def test_the_change_form_refuses_to_deactivate_yourself(admin_client, admin_user):
    """The bulk action refused it; the change form signed the admin out (maybe the last one)."""
    response = admin_client.post(f"/admin/auth/user/{admin_user.pk}/change/", user_form(admin_user, is_active=None))

    admin_user.refresh_from_db()
    assert admin_user.is_active is True
    assert response.status_code == 200
    assert "You cannot deactivate yourself; ask another admin." in response.content.decode()
