import pytest
from django.core.management import call_command

from audit.models import AuditEvent
from catalog.models import ApiKey, LlmModel, Provider
from chains.models import FallbackChain
from routing.models import Alias, RoutingRule

pytestmark = pytest.mark.django_db


def test_seed_demo_loads_once_and_prints_admin_password(capsys, settings, tmp_path):
    settings.VAR_DIR = tmp_path

    call_command("seed_demo")
    first = capsys.readouterr().out
    call_command("seed_demo")
    second = capsys.readouterr().out

    password = (tmp_path / "admin_password").read_text().strip()
    assert f"admin / {password}" in first
    assert f"admin / {password}" in second
    assert "already present" in second
    counts = (
        Provider.objects.count(),
        LlmModel.objects.count(),
        RoutingRule.objects.count(),
        Alias.objects.count(),
        FallbackChain.objects.count(),
    )
    assert counts == (4, 6, 1, 2, 2)
    actions = list(AuditEvent.objects.order_by("id").values_list("action", flat=True))
    # Written through the services: every object is audited, in creation order.
    assert actions == [
        *["provider.create"] * 3,
        *["model.create"] * 6,
        "provider.create",  # azure-openai, whose deployments name gpt-4o
        "team.create",
        "team.create",
        "application.create",
        "agent.create",
        "routing_rule.create",
        "alias.create",
        "alias.create",
        "chain.create",
        "chain.create",
        *["alert_rule.create"] * 3,
        "api_key.create",
    ]
    call_command("verify_audit")


def test_admin_provider_key_is_write_only(admin_client):
    response = admin_client.post(
        "/admin/catalog/provider/add/",
        {
            "name": "acme",
            "protocol": "openai",
            "base_url": "http://127.0.0.1:9/v1",
            "api_key": "sk-top-secret",
            "connect_timeout": "2",
            "read_timeout": "30",
        },
    )
    provider = Provider.objects.get(name="acme")
    page = admin_client.get(f"/admin/catalog/provider/{provider.pk}/change/").content.decode()

    assert response.status_code == 302
    assert provider.api_key == "sk-top-secret"
    assert "sk-top-secret" not in page
    event = AuditEvent.objects.get()
    assert (event.action, event.after["has_api_key"]) == ("provider.create", True)
    assert "sk-top-secret" not in str(event.after)


def test_admin_provider_edit_with_blank_key_keeps_it(admin_client):
    provider = Provider.objects.create(name="acme", base_url="http://127.0.0.1:9/v1", api_key="sk-keep")

    admin_client.post(
        f"/admin/catalog/provider/{provider.pk}/change/",
        {
            "name": "acme",
            "protocol": "openai",
            "base_url": "http://127.0.0.1:9/v2",
            "api_key": "",
            "connect_timeout": "2",
            "read_timeout": "30",
        },
    )

    provider.refresh_from_db()
    assert (provider.base_url, provider.api_key) == ("http://127.0.0.1:9/v2", "sk-keep")


def test_admin_key_creation_shows_secret_once(admin_client, admin_user):
    response = admin_client.post("/admin/catalog/apikey/add/", {"name": "ci", "user": admin_user.pk}, follow=True)

    key = ApiKey.objects.get(name="ci")
    page = response.content.decode()
    assert f"{key.prefix}-" in page
    later = admin_client.get(f"/admin/catalog/apikey/{key.pk}/change/").content.decode()
    assert f"{key.prefix}-" not in later


def test_admin_refuses_deleting_a_model_used_by_a_chain(admin_client, settings, tmp_path):
    settings.VAR_DIR = tmp_path  # seed_demo writes the admin password and demo key there: not the checkout's var/
    call_command("seed_demo")
    model = LlmModel.objects.get(name="mistral-large")

    response = admin_client.post(f"/admin/catalog/llmmodel/{model.pk}/delete/", {"post": "yes"}, follow=True)

    assert LlmModel.objects.filter(pk=model.pk).exists()
    assert "Cannot delete" in response.content.decode()
    assert {p.name for p in tmp_path.iterdir()} >= {"admin_password", "demo_gateway_key"}
