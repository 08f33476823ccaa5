"""A provider key the gateway cannot decrypt is never replaced by an empty credential upstream."""

import httpx
from cryptography.fernet import Fernet
from django.db import connection

from catalog.models import Provider
from controlplane.crypto import derived_key

BODY = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}


def test_undecryptable_provider_key_is_refused_without_calling_upstream(gateway, world):
    # The key as a gateway running with another SECRET_KEY wrote it.
    foreign = Fernet(derived_key("a-secret-key-this-gateway-never-had").encode()).encrypt(b"sk-openai").decode()
    with connection.cursor() as cursor:
        cursor.execute("UPDATE catalog_provider SET api_key = %s WHERE name = %s", [foreign, "openai"])
    gateway.app.config.reload()

    response = httpx.post(
        f"{gateway.url}/v1/chat/completions", json=BODY, headers=gateway.headers(world.secret), timeout=10
    )

    assert response.status_code == 502
    error = response.json()["error"]
    assert error["code"] == "credential_unavailable"
    assert "cannot be decrypted" in error["message"]
    assert world.sim.requests["openai"] == 0
    # The stored ciphertext is kept for when the keys are fixed.
    assert Provider.objects.get(name="openai").api_key.ciphertext == foreign
