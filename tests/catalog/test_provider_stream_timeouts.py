"""Per-provider stream timeouts of resilient chains: optional (null = the chain policy's value), bounded, audited."""

import pytest

from audit.models import AuditEvent
from catalog.models import Provider
from tests.helpers.api import patch_json, post_json, put_json

BODY = {"name": "openai", "protocol": "openai", "base_url": "https://api.openai.com/v1"}


def test_provider_stream_timeouts_default_to_null(admin_client, db):
    response = post_json(admin_client, "/api/providers/", BODY)

    assert response.status_code == 201
    assert (response.json()["first_token_timeout_seconds"], response.json()["idle_timeout_seconds"]) == (None, None)
    assert Provider.objects.get().first_token_timeout_seconds is None


def test_provider_stream_timeouts_are_set_patched_cleared_and_audited(admin_client, db):
    created = post_json(admin_client, "/api/providers/", {**BODY, "first_token_timeout_seconds": 8}).json()
    url = f"/api/providers/{created['id']}/"

    patched = patch_json(admin_client, url, {"idle_timeout_seconds": 20.5})

    assert patched.status_code == 200
    assert (patched.json()["first_token_timeout_seconds"], patched.json()["idle_timeout_seconds"]) == (8.0, 20.5)
    event = AuditEvent.objects.get(action="provider.update")
    assert (event.before, event.after) == ({"idle_timeout_seconds": None}, {"idle_timeout_seconds": 20.5})

    cleared = put_json(admin_client, url, BODY)
    assert (cleared.json()["first_token_timeout_seconds"], cleared.json()["idle_timeout_seconds"]) == (None, None)


@pytest.mark.parametrize("value", [0.1, 601, -1])
def test_provider_stream_timeouts_out_of_bounds_are_400(admin_client, db, value):
    response = post_json(admin_client, "/api/providers/", {**BODY, "idle_timeout_seconds": value})

    assert response.status_code == 400
    assert response.json()["errors"] == {
        "idle_timeout_seconds": ["Timeout must be between 0.5 and 600 seconds, or empty for the default."]
    }
    assert not Provider.objects.exists()
