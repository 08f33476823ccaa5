"""The catalog admin writes through catalog.services: the API's validation, refusals and audit events."""

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth import get_user_model

from audit.models import AuditEvent
from catalog.enums import ScopeType
from catalog.models import Agent, Application, Provider, Team
from catalog.services import api_key_revoke, user_delete
from core.errors import ConflictError
from tests.factories import (
    AgentFactory,
    ApplicationFactory,
    ChainFactory,
    GuardrailFactory,
    RoutingRuleFactory,
    TeamFactory,
    UserFactory,
)
from tests.factories.keys import make_key

pytestmark = pytest.mark.django_db


def page_messages(response) -> list[str]:
    return [str(m) for m in response.context["messages"]]


def audit_actions() -> list[str]:
    return list(AuditEvent.objects.order_by("id").values_list("action", flat=True))


def provider_form(**overrides) -> dict:
    data = {
        "name": "ollama",
        "protocol": "openai",
        "base_url": "http://ollama:11434/v1",
        "api_key": "",
        "connect_timeout": "2",
        "read_timeout": "30",
    }
    data.update(overrides)
    return data


# --- deletes refused while something is scoped to the object ------------------------------------


def test_admin_refuses_deleting_a_team_a_chain_is_scoped_to(admin_client):
    team = TeamFactory(name="payments")
    ChainFactory(name="Payments backup", scope_type=ScopeType.TEAM, scope_id=team.pk)

    response = admin_client.post(f"/admin/catalog/team/{team.pk}/delete/", {"post": "yes"}, follow=True)

    assert response.redirect_chain == [(f"/admin/catalog/team/{team.pk}/change/", 302)]
    assert page_messages(response) == [
        "Team “payments” is still used by chains “Payments backup”. Change, delete or release those first."
    ]
    assert Team.objects.filter(pk=team.pk).exists()
    assert audit_actions() == []


def test_admin_refuses_deleting_an_application_a_routing_rule_is_scoped_to(admin_client):
    application = ApplicationFactory(name="checkout")
    RoutingRuleFactory(name="Cheaper checkout", scope_type=ScopeType.APPLICATION, scope_id=application.pk)

    response = admin_client.post(f"/admin/catalog/application/{application.pk}/delete/", {"post": "yes"}, follow=True)

    assert page_messages(response) == [
        "Application “checkout” is still used by routing rules “Cheaper checkout”. "
        "Change, delete or release those first."
    ]
    assert Application.objects.filter(pk=application.pk).exists()


def test_admin_refuses_deleting_an_agent_a_guardrail_is_scoped_to(admin_client):
    agent = AgentFactory(name="triage-bot")
    GuardrailFactory(
        name="No gpt-4o", model=None, action="deny", message="Too expensive.", scope_type="agent", scope_id=agent.pk
    )

    response = admin_client.post(f"/admin/catalog/agent/{agent.pk}/delete/", {"post": "yes"}, follow=True)

    assert page_messages(response) == [
        "Agent “triage-bot” is still used by guardrails “No gpt-4o”. Change, delete or release those first."
    ]
    assert Agent.objects.filter(pk=agent.pk).exists()


# Transactional: Django runs "Delete selected" outside a transaction, and the first delete must not commit alone.
@pytest.mark.django_db(transaction=True)
def test_admin_bulk_delete_with_one_referenced_team_deletes_none(admin_client):
    free = TeamFactory(name="alpha")
    scoped = TeamFactory(name="payments")
    ChainFactory(name="Payments backup", scope_type=ScopeType.TEAM, scope_id=scoped.pk)

    response = admin_client.post(
        "/admin/catalog/team/",
        {"action": "delete_selected", "_selected_action": [free.pk, scoped.pk], "post": "yes"},
        follow=True,
    )

    assert page_messages(response) == [
        "Team “payments” is still used by chains “Payments backup”. Change, delete or release those first."
    ]
    assert sorted(Team.objects.values_list("name", flat=True)) == ["alpha", "payments"]
    assert (audit_actions(), LogEntry.objects.count()) == ([], 0)


def test_admin_delete_of_an_unreferenced_team_is_audited_once(admin_client):
    team = TeamFactory(name="payments")

    response = admin_client.post(f"/admin/catalog/team/{team.pk}/delete/", {"post": "yes"})

    assert response.status_code == 302
    assert Team.objects.count() == 0
    event = AuditEvent.objects.get()
    assert (event.action, event.object_id, event.before) == ("team.delete", str(team.pk), {"name": "payments"})


def test_admin_bulk_delete_of_unreferenced_teams_audits_each(admin_client):
    first = TeamFactory(name="alpha")
    second = TeamFactory(name="beta")

    admin_client.post(
        "/admin/catalog/team/",
        {"action": "delete_selected", "_selected_action": [first.pk, second.pk], "post": "yes"},
    )

    assert Team.objects.count() == 0
    assert list(AuditEvent.objects.order_by("id").values_list("action", "object_repr")) == [
        ("team.delete", "alpha"),
        ("team.delete", "beta"),
    ]


# --- saves go through the services ---------------------------------------------------------------


def test_admin_team_create_and_rename_are_audited_once_each(admin_client):
    admin_client.post("/admin/catalog/team/add/", {"name": "  Payments  "})
    team = Team.objects.get()

    admin_client.post(f"/admin/catalog/team/{team.pk}/change/", {"name": "Billing"})

    team.refresh_from_db()
    assert team.name == "Billing"
    events = AuditEvent.objects.order_by("id")
    assert [(e.action, e.before, e.after) for e in events] == [
        ("team.create", None, {"name": "Payments"}),
        ("team.update", {"name": "Payments"}, {"name": "Billing"}),
    ]


def test_admin_save_that_changes_nothing_writes_no_event(admin_client):
    team = TeamFactory(name="payments")

    response = admin_client.post(f"/admin/catalog/team/{team.pk}/change/", {"name": "payments"})

    assert response.status_code == 302
    assert audit_actions() == []


def test_admin_application_form_shows_the_service_message(admin_client):
    ApplicationFactory(name="checkout")

    response = admin_client.post("/admin/catalog/application/add/", {"name": "checkout", "team": ""})

    assert response.status_code == 200
    assert response.context["adminform"].form.errors == {"name": ["An application named “checkout” already exists."]}
    assert Application.objects.count() == 1


# --- providers ---------------------------------------------------------------------------------


def test_admin_provider_accepts_a_single_label_host(admin_client):
    response = admin_client.post("/admin/catalog/provider/add/", provider_form())

    assert response.status_code == 302
    provider = Provider.objects.get()
    assert provider.base_url == "http://ollama:11434/v1"
    assert audit_actions() == ["provider.create"]


@pytest.mark.parametrize(
    ("overrides", "errors"),
    [
        ({"base_url": "http://ollama:0/v1"}, {"base_url": ["Port must be between 1 and 65535 (got 0)."]}),
        ({"base_url": "http://ollama:70000/v1"}, {"base_url": ["Port must be between 1 and 65535 (got 70000)."]}),
        ({"base_url": "ftp://ollama/v1"}, {"base_url": ["“ftp://ollama/v1” is not a valid http(s) URL."]}),
        (
            {"base_url": "http://me:pw@ollama/v1"},
            {"base_url": ["Base URL cannot contain credentials (user:password@); set the provider's API key instead."]},
        ),
        ({"name": "ollama/eu"}, {"name": ["Provider name cannot contain “/” (circuits are named provider/model)."]}),
    ],
)
def test_admin_provider_form_refuses_what_the_service_refuses(admin_client, overrides, errors):
    response = admin_client.post("/admin/catalog/provider/add/", provider_form(**overrides))

    assert response.status_code == 200
    assert response.context["adminform"].form.errors == errors
    assert Provider.objects.count() == 0
    assert audit_actions() == []


def test_admin_provider_key_replacement_is_audited_without_the_key(admin_client):
    provider = Provider.objects.create(name="ollama", base_url="http://ollama:11434/v1", api_key="sk-old")

    admin_client.post(f"/admin/catalog/provider/{provider.pk}/change/", provider_form(api_key="sk-new"))

    provider.refresh_from_db()
    assert provider.api_key == "sk-new"
    event = AuditEvent.objects.get()
    assert (event.action, event.before, event.after) == (
        "provider.update",
        {"api_key": "(previous key)", "connect_timeout": 5.0, "read_timeout": 60.0},
        {"api_key": "(replaced)", "connect_timeout": 2.0, "read_timeout": 30.0},
    )


# --- users -------------------------------------------------------------------------------------


def test_admin_refuses_deleting_a_user_a_chain_is_scoped_to(admin_client):
    user = UserFactory(username="bob")
    ChainFactory(name="Bob's backup", scope_type=ScopeType.USER, scope_id=user.pk)

    response = admin_client.post(f"/admin/auth/user/{user.pk}/delete/", {"post": "yes"}, follow=True)

    assert page_messages(response) == [
        "User “bob” is still used by chains “Bob's backup”. Change, delete or release those first."
    ]
    assert get_user_model().objects.filter(pk=user.pk).exists()


def test_admin_refuses_deleting_a_user_who_owns_keys(admin_client):
    user = UserFactory(username="bob")
    key = make_key(user=user, name="ci").key

    confirm = admin_client.get(f"/admin/auth/user/{user.pk}/delete/")
    response = admin_client.post(f"/admin/auth/user/{user.pk}/delete/", {"post": "yes"})

    # Keys are never deleted: the foreign key is PROTECT, so Django's admin lists the key as what prevents the
    # delete, and the confirmation deletes nothing.
    assert confirm.status_code == 200
    assert [f"{key}</a>" in str(p) for p in confirm.context["protected"]] == [True]
    assert response.status_code == 200
    assert "Cannot delete user" in response.content.decode()
    assert get_user_model().objects.filter(pk=user.pk).exists()


def test_user_delete_refuses_a_user_who_owns_keys(admin_user):
    user = UserFactory(username="bob")
    key = make_key(user=user, name="ci").key
    api_key_revoke(actor=admin_user, key=key)

    with pytest.raises(ConflictError) as exc:
        user_delete(actor=admin_user, user=user)

    assert exc.value.message == (
        f"User “bob” owns gateway keys “ci ({key.prefix}…)”. Keys are revoked, never deleted: "
        "deactivate the user instead."
    )
    assert get_user_model().objects.filter(pk=user.pk).exists()


def test_admin_deletes_an_unreferenced_user_and_audits_it(admin_client):
    user = UserFactory(username="bob", email="bob@example.com")

    response = admin_client.post(f"/admin/auth/user/{user.pk}/delete/", {"post": "yes"})

    assert response.status_code == 302
    assert not get_user_model().objects.filter(pk=user.pk).exists()
    event = AuditEvent.objects.get()
    assert (event.action, event.object_repr, event.before) == (
        "user.delete",
        "bob",
        {
            "username": "bob",
            "email": "bob@example.com",
            "is_active": True,
            "is_staff": False,
            "is_superuser": False,
            "groups": [],
        },
    )


# --- staff with view permission only -----------------------------------------------------------


def _staff_client_with(django_user_model, *codenames: str):
    from django.contrib.auth.models import Permission
    from django.test import Client

    staff = django_user_model.objects.create_user(username="viewer", password="x", is_staff=True)
    staff.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    client = Client()
    client.force_login(staff)
    return client


def test_admin_provider_page_never_shows_the_api_key_to_a_view_only_staff_user(django_user_model):
    client = _staff_client_with(django_user_model, "view_provider")
    provider = Provider.objects.create(name="ollama", base_url="http://ollama:11434/v1", api_key="sk-live-secret")

    response = client.get(f"/admin/catalog/provider/{provider.pk}/change/")

    assert response.status_code == 200
    assert "sk-live-secret" not in response.content.decode()
    assert "✔ Set" in response.content.decode()


def test_admin_provider_change_page_never_shows_the_api_key(admin_client):
    provider = Provider.objects.create(name="ollama", base_url="http://ollama:11434/v1", api_key="sk-live-secret")

    response = admin_client.get(f"/admin/catalog/provider/{provider.pk}/change/")

    assert response.status_code == 200
    assert "sk-live-secret" not in response.content.decode()


def test_admin_key_revoke_action_needs_the_change_permission(django_user_model):
    client = _staff_client_with(django_user_model, "view_apikey")
    key = make_key(user=UserFactory()).key

    response = client.post(
        "/admin/catalog/apikey/", {"action": "revoke", "_selected_action": [key.pk], "index": "0"}, follow=True
    )

    assert response.status_code == 200
    key.refresh_from_db()
    assert key.revoked_at is None
    assert audit_actions() == ["api_key.create"]


def test_admin_key_revoke_action_works_with_the_change_permission(django_user_model):
    client = _staff_client_with(django_user_model, "view_apikey", "change_apikey")
    key = make_key(user=UserFactory()).key

    client.post("/admin/catalog/apikey/", {"action": "revoke", "_selected_action": [key.pk], "index": "0"})

    key.refresh_from_db()
    assert key.revoked_at is not None
    assert audit_actions() == ["api_key.create", "api_key.revoke"]


def test_revoke_selected_keys_counts_only_the_keys_it_revoked(admin_client, admin_user):
    from django.contrib.messages import get_messages

    old = make_key(user=admin_user, name="old").key
    api_key_revoke(actor=admin_user, key=old)
    live = make_key(user=admin_user, name="live").key

    response = admin_client.post(
        "/admin/catalog/apikey/", {"action": "revoke", "_selected_action": [old.pk, live.pk]}, follow=True
    )

    assert [str(m) for m in get_messages(response.wsgi_request)] == ["Revoked 1 key(s)."]
    assert AuditEvent.objects.filter(action="api_key.revoke").count() == 2  # the earlier revoke and this one


# Transactional: the admin's history entries are saved once the change commits.
@pytest.mark.django_db(transaction=True)
def test_the_admins_history_entry_is_saved_after_the_change_commits(admin_user, admin_client):
    """Saved in the transaction, its foreign key to the admin was checked at COMMIT, after the audit log's lock
    (docs/decisions.md, "One lock order"); it is written after the commit, with what Django's would hold."""
    response = admin_client.post("/admin/catalog/team/add/", {"name": "payments"})

    team = Team.objects.get(name="payments")
    assert response.status_code == 302
    entry = LogEntry.objects.get()
    assert (entry.user_id, entry.object_id, entry.object_repr, entry.action_flag) == (
        admin_user.pk,
        str(team.pk),
        "payments",
        1,  # addition
    )
    assert "Added" in entry.get_change_message()


@pytest.mark.django_db(transaction=True)
def test_an_admin_deleting_their_own_user_leaves_no_history_entry_and_no_error(admin_user, admin_client, caplog):
    """Django's cascade deleted the admin's history with them; the entry of the delete itself has no user left to
    name, so it is not written (it used to fail after the commit, logged as an error)."""
    response = admin_client.post(f"/admin/auth/user/{admin_user.pk}/delete/", {"post": "yes"})

    assert response.status_code == 302
    assert not get_user_model().objects.filter(pk=admin_user.pk).exists()
    assert LogEntry.objects.count() == 0
    assert [r.getMessage() for r in caplog.records if r.levelname == "ERROR"] == []
    assert AuditEvent.objects.filter(action="user.delete").count() == 1
