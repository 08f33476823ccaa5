"""A provider key the gateway cannot decrypt is never replaced by an empty credential upstream."""

import httpx
from cryptography.fernet import Fernet
from django.db import connection

from catalog.models import Provider
from core.configbus import config_publish
from core.crypto import derived_key
from gateway.config import wait_for_version
from health.breaker.types import State

BODY = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
# "mistral" is served by provider "third" and has no fallback chain.
UNCHAINED = {**BODY, "model": "mistral"}


def _foreign_ciphertext() -> str:
    """The key as a process running with another SECRET_KEY wrote it."""
    return Fernet(derived_key("a-secret-key-this-gateway-never-had").encode()).encrypt(b"sk-openai").decode()


def _store_key(gateway, provider: str, ciphertext: str) -> None:
    """Write the stored column as-is and publish the change; wait until the gateway serves it."""
    with connection.cursor() as cursor:
        cursor.execute("UPDATE catalog_provider SET api_key = %s WHERE name = %s", [ciphertext, provider])
    assert wait_for_version(gateway.app.config, config_publish(), timeout=5.0)


def _post(gateway, world, body):
    return httpx.post(
        f"{gateway.url}/v1/chat/completions", json=body, headers=gateway.headers(world.secret), timeout=10
    )


def test_undecryptable_provider_key_is_refused_without_calling_upstream(gateway, world):
    foreign = _foreign_ciphertext()
    _store_key(gateway, "third", foreign)

    response = _post(gateway, world, UNCHAINED)

    assert response.status_code == 502
    error = response.json()["error"]
    assert error["code"] == "credential_unavailable"
    assert "cannot be decrypted" in error["message"]
    assert world.sim.requests["third"] == 0
    # The stored ciphertext is kept for when the keys are fixed.
    assert Provider.objects.get(name="third").api_key.ciphertext == foreign


def test_a_cached_adapter_never_calls_without_credentials_nor_keeps_refusing(gateway, world):
    # A keyless provider is called once: its adapter (no Authorization header) is cached.
    _store_key(gateway, "third", "")
    assert _post(gateway, world, UNCHAINED).status_code == 200
    assert world.sim.requests["third"] == 1

    # Another process (another SECRET_KEY) saves a key this gateway cannot decrypt: it reads as "" too,
    # so an adapter cache comparing the key alone would reuse the keyless adapter and call upstream.
    _store_key(gateway, "third", _foreign_ciphertext())
    refused = _post(gateway, world, UNCHAINED)

    assert refused.status_code == 502
    assert refused.json()["error"]["code"] == "credential_unavailable"
    assert world.sim.requests["third"] == 1

    # The key is cleared again: the refusing adapter must not be reused either.
    _store_key(gateway, "third", "")
    assert _post(gateway, world, UNCHAINED).status_code == 200
    assert world.sim.requests["third"] == 2


def test_an_undecryptable_key_never_opens_the_circuit(gateway, world):
    _store_key(gateway, "third", _foreign_ciphertext())

    # Well past the test breaker's threshold (3 failures of 3 requests).
    statuses = [_post(gateway, world, UNCHAINED).status_code for _ in range(8)]

    assert statuses == [502] * 8
    circuit = gateway.app.engine.get("third", "mistral")
    assert circuit.state is State.CLOSED
    assert circuit.failure_count == 0
    assert world.sim.requests["third"] == 0


def test_the_chain_serves_while_the_primary_key_is_undecryptable(gateway, world):
    _store_key(gateway, "openai", _foreign_ciphertext())

    responses = [_post(gateway, world, BODY) for _ in range(5)]

    assert [r.status_code for r in responses] == [200] * 5
    assert {r.headers["x-vidai-model"] for r in responses} == {"claude"}
    assert {r.headers["x-vidai-fallback-from"] for r in responses} == {"openai"}
    assert world.sim.requests["openai"] == 0
    assert gateway.app.engine.get("openai", "gpt-4o").state is State.CLOSED
