import pytest
from django.db import connection
from django.test import override_settings

from catalog.keys import key_hash
from catalog.models import ApiKey, Provider
from core import crypto
from tests.factories import ProviderFactory, UserFactory
from tests.factories.keys import make_key

pytestmark = pytest.mark.django_db


def _raw(table: str, column: str, pk: int) -> str:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {column} FROM {table} WHERE id = %s", [pk])
        return cursor.fetchone()[0]


def test_provider_api_key_is_encrypted_at_rest():
    provider = ProviderFactory(api_key="sk-live-very-secret")

    raw = _raw("catalog_provider", "api_key", provider.pk)

    assert "sk-live-very-secret" not in raw
    assert Provider.objects.get(pk=provider.pk).api_key == "sk-live-very-secret"


def test_encryption_keys_rotate_without_losing_old_secrets():
    crypto._fernet.cache_clear()
    old_key = "0" * 43 + "="
    new_key = "1" * 43 + "="
    try:
        with override_settings(FIELD_ENCRYPTION_KEYS=[old_key]):
            token = crypto.encrypt("secret")
        crypto._fernet.cache_clear()
        with override_settings(FIELD_ENCRYPTION_KEYS=[new_key, old_key]):
            assert crypto.decrypt(token) == "secret"
        crypto._fernet.cache_clear()
        with override_settings(FIELD_ENCRYPTION_KEYS=[new_key]), pytest.raises(ValueError):
            crypto.decrypt(token)
    finally:
        crypto._fernet.cache_clear()


def test_api_key_secret_is_stored_only_as_hash():
    created = make_key(user=UserFactory())

    stored = ApiKey.objects.get(pk=created.key.pk)

    assert stored.hashed_secret == key_hash(created.secret)
    assert created.secret.startswith(stored.prefix + "-")
    assert created.secret not in (_raw("catalog_apikey", "hashed_secret", stored.pk), stored.prefix)


def test_undecryptable_secret_reads_empty_and_survives_a_save():
    provider = ProviderFactory(api_key="sk-before-rotation")
    raw = _raw("catalog_provider", "api_key", provider.pk)
    crypto._fernet.cache_clear()
    try:
        # A rotated SECRET_KEY too: keys derived from SECRET_KEY also decrypt (core.crypto).
        with override_settings(SECRET_KEY="rotated-" + "r" * 50, FIELD_ENCRYPTION_KEYS=["2" * 43 + "="]):
            loaded = Provider.objects.get(pk=provider.pk)
            loaded.base_url = "http://127.0.0.1:9/elsewhere"
            loaded.save()
            assert loaded.api_key == ""
    finally:
        crypto._fernet.cache_clear()

    assert _raw("catalog_provider", "api_key", provider.pk) == raw
    assert Provider.objects.get(pk=provider.pk).api_key == "sk-before-rotation"
