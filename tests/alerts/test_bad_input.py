"""Alert rules' numbers: an integer too large for a float is out of range, not a 500."""

import json

import pytest

from alerts.models import AlertRule

pytestmark = pytest.mark.django_db

HUGE = 10**400  # a JSON integer Python reads exactly; float() of it overflows


@pytest.mark.parametrize(
    ("field", "kind"), [("minutes", "circuit_open"), ("min_requests", "degraded"), ("min_count", "exhausted")]
)
def test_an_integer_too_large_for_a_float_is_the_api_s_400(admin_client, field, kind):
    body = json.dumps({"name": "r", "kind": kind, field: HUGE})

    response = admin_client.post("/api/alerts/rules/", body, content_type="application/json")

    assert response.status_code == 400
    assert "must be between" in response.json()["errors"][field][0]
    assert not AlertRule.objects.exists()


def test_an_integer_too_large_for_a_float_is_a_field_error_in_the_console(admin_client):
    data = {"name": "r", "kind": "circuit_open", "minutes": str(HUGE), "body_format": "json", "enabled": "on"}

    response = admin_client.post("/alerts/rules/new/", data)

    assert response.status_code == 200
    assert "must be between" in response.content.decode()
    assert not AlertRule.objects.exists()


def test_a_lone_surrogate_echoed_in_a_message_stays_a_400(admin_client):
    response = admin_client.post(
        "/api/alerts/rules/", '{"name": "r", "kind": "\\ud800"}', content_type="application/json"
    )

    assert response.status_code == 400
    assert b"\\ud800" in response.content  # escaped: the answer is ASCII
    assert "kind" in response.json()["errors"]
