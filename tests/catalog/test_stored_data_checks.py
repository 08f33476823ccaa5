"""The checks that read stored rows, and what the console shows for a key it cannot decrypt."""

from io import StringIO

import pytest
from cryptography.fernet import Fernet
from django.core.management import call_command
from django.db import connection

from catalog.checks import check_secrets_decrypt, check_stored_names
from catalog.models import Provider, Team
from core.crypto import derived_key


def _foreign_key(provider: Provider) -> None:
    """Store a key as a process with another SECRET_KEY wrote it."""
    token = Fernet(derived_key("a-secret-key-this-process-never-had").encode()).encrypt(b"sk-x").decode()
    with connection.cursor() as cursor:
        cursor.execute("UPDATE catalog_provider SET api_key = %s WHERE id = %s", [token, provider.pk])


@pytest.fixture
def provider(db) -> Provider:
    return Provider.objects.create(name="acme", base_url="http://127.0.0.1:9/v1", api_key="sk-acme")


@pytest.mark.django_db
def test_names_saved_before_the_validators_are_reported_as_a_warning():
    ok = Team.objects.create(name="payments")
    bad = Team.objects.create(name="placeholder")
    # Rows written before the validators existed (update() skips them, as old code did).
    Team.objects.filter(pk=bad.pk).update(name="pay\u202eniam")
    stderr = StringIO()

    call_command("check", stderr=stderr, stdout=StringIO())

    assert "catalog.W001" in stderr.getvalue()
    assert f"1 stored team name(s) contain control or invisible formatting characters (ids {bad.pk})" in (
        stderr.getvalue()
    )
    assert str(ok.pk) not in stderr.getvalue().split("(ids ")[1].split(")")[0].split(", ")


@pytest.mark.django_db
def test_the_stored_data_checks_are_inert_unless_asked_for(provider):
    # Any management command runs the registered checks; these must then report nothing.
    _foreign_key(provider)
    Team.objects.create(name="placeholder")
    Team.objects.update(name="a\u2028b")

    assert check_secrets_decrypt() == []
    assert check_stored_names() == []


def test_the_provider_list_says_the_key_cannot_be_decrypted(admin_client, provider):
    Provider.objects.create(name="keyless", base_url="http://127.0.0.1:9/v1", api_key="")
    _foreign_key(provider)

    response = admin_client.get("/admin/catalog/provider/")

    page = response.content.decode()
    assert response.status_code == 200
    assert "Cannot be decrypted" in page
    assert "Not set" in page
    shown = [str(m) for m in response.context["messages"]]
    assert len(shown) == 1
    assert "cannot be decrypted with the configured keys" in shown[0]
    assert "FIELD_ENCRYPTION_KEYS" in shown[0] and "SECRET_KEY_FALLBACKS" in shown[0]


def test_the_provider_page_says_the_key_cannot_be_decrypted(admin_client, provider):
    _foreign_key(provider)

    response = admin_client.get(f"/admin/catalog/provider/{provider.pk}/change/")

    shown = [str(m) for m in response.context["messages"]]
    assert response.status_code == 200
    assert len(shown) == 1
    assert shown[0].startswith("This provider's stored API key cannot be decrypted")
    assert "SECRET_KEY_FALLBACKS" in shown[0]


def test_a_readable_key_shows_no_error(admin_client, provider):
    response = admin_client.get(f"/admin/catalog/provider/{provider.pk}/change/")

    assert [str(m) for m in response.context["messages"]] == []
    assert "✔ Set" in admin_client.get("/admin/catalog/provider/").content.decode()
