"""Django's group admin: the role groups keep their names, and every save and delete is audited in its
transaction."""

import pytest
from django.contrib.auth.models import Group, Permission

from audit.models import AuditEvent
from core.roles import Role
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def events() -> list[tuple]:
    return list(AuditEvent.objects.order_by("id").values_list("action", "object_repr", "before", "after"))


def permission(codename: str) -> Permission:
    return Permission.objects.get(content_type__app_label="catalog", codename=codename)


def role(name: str) -> Group:
    return Group.objects.get_or_create(name=name)[0]


@pytest.mark.parametrize("name", list(Role))
def test_a_role_group_cannot_be_renamed(admin_client, name):
    group = role(name)

    response = admin_client.post(f"/admin/auth/group/{group.pk}/change/", {"name": "renamed", "permissions": []})

    assert response.status_code == 302
    group.refresh_from_db()
    assert group.name == name
    assert events() == []


def test_a_role_groups_page_shows_its_name_read_only_and_no_delete_link(admin_client):
    group = role(Role.ADMIN)

    page = admin_client.get(f"/admin/auth/group/{group.pk}/change/").content.decode()

    assert '<div class="readonly">admin</div>' in page
    assert 'name="name"' not in page
    assert f"/admin/auth/group/{group.pk}/delete/" not in page


@pytest.mark.parametrize("name", list(Role))
def test_a_role_group_cannot_be_deleted(admin_client, name):
    group = role(name)
    group.user_set.add(UserFactory(username="bob"))

    page = admin_client.post(f"/admin/auth/group/{group.pk}/delete/", {"post": "yes"})
    bulk = admin_client.post(
        "/admin/auth/group/", {"action": "delete_selected", "_selected_action": [group.pk], "post": "yes"}
    )

    assert page.status_code == 403
    assert bulk.status_code == 403
    assert Group.objects.filter(pk=group.pk, user__username="bob").exists()
    assert events() == []


# Transactional: the audit write refuses to run outside a transaction, so this proves the admin save has one.
@pytest.mark.django_db(transaction=True)
def test_a_role_groups_permission_change_is_audited(admin_client):
    group = role(Role.BI_READ_ONLY)
    group.permissions.set([permission("view_provider")])

    response = admin_client.post(
        f"/admin/auth/group/{group.pk}/change/",
        {"permissions": [permission("view_provider").pk, permission("change_apikey").pk]},
    )

    assert response.status_code == 302
    assert set(group.permissions.values_list("codename", flat=True)) == {"view_provider", "change_apikey"}
    assert events() == [
        (
            "group.update",
            "bi_read_only",
            {"permissions": ["catalog.view_provider"]},
            {"permissions": ["catalog.change_apikey", "catalog.view_provider"]},
        )
    ]


def test_a_save_changing_nothing_writes_no_event(admin_client):
    group = role(Role.USER)

    response = admin_client.post(f"/admin/auth/group/{group.pk}/change/", {"permissions": []})

    assert response.status_code == 302
    assert events() == []


@pytest.mark.django_db(transaction=True)
def test_another_group_is_created_renamed_and_deleted_with_an_event_each(admin_client):
    created = admin_client.post(
        "/admin/auth/group/add/", {"name": "ops", "permissions": [permission("view_apikey").pk]}
    )
    group = Group.objects.get(name="ops")
    group.user_set.add(UserFactory(username="bob"))
    renamed = admin_client.post(
        f"/admin/auth/group/{group.pk}/change/", {"name": "operations", "permissions": [permission("view_apikey").pk]}
    )
    deleted = admin_client.post(f"/admin/auth/group/{group.pk}/delete/", {"post": "yes"})

    assert [created.status_code, renamed.status_code, deleted.status_code] == [302, 302, 302]
    assert not Group.objects.filter(pk=group.pk).exists()
    assert events() == [
        ("group.create", "ops", None, {"name": "ops", "permissions": ["catalog.view_apikey"]}),
        ("group.update", "operations", {"name": "ops"}, {"name": "operations"}),
        (
            "group.delete",
            "operations",
            {"name": "operations", "permissions": ["catalog.view_apikey"], "members": ["bob"]},
            None,
        ),
    ]


def test_a_bulk_delete_of_other_groups_is_audited(admin_client):
    first, second = Group.objects.create(name="ops"), Group.objects.create(name="oncall")

    response = admin_client.post(
        "/admin/auth/group/", {"action": "delete_selected", "_selected_action": [first.pk, second.pk], "post": "yes"}
    )

    assert response.status_code == 302
    assert not Group.objects.filter(name__in=["ops", "oncall"]).exists()
    assert sorted(action for action, *_ in events()) == ["group.delete", "group.delete"]
