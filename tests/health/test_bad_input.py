"""Bad input to Provider Health's console and API is a field error, a 400 or a 404, never a 500."""

import json

import pytest

from health.models import BreakerOverride, CircuitControl

pytestmark = pytest.mark.django_db

LONG = "1" * 4301  # a string of digits int() refuses (more than Python's 4,300)
HX = {"HX-Request": "true"}


def test_a_threshold_of_4301_digits_is_above_its_bound(admin_client, engine):
    data = {
        "failure_threshold": LONG,
        "window_seconds": "60",
        "minimum_requests": "10",
        "initial_cooldown_seconds": "30",
        "cooldown_cap_seconds": "300",
        "failure_status_codes": "500, 503",
    }

    response = admin_client.post("/fallback/health/configure/", data, headers=HX)

    assert response.status_code == 200
    assert "Failure threshold must be at most 1000000" in response.content.decode().replace(",", "")


def test_an_override_threshold_of_4301_digits_saves_nothing(admin_client, engine, health_catalog):
    data = {"override-provider": "openai", "override-model": "gpt-4o", "override-failure_threshold": LONG}

    response = admin_client.post("/fallback/health/configure/override/", data, headers=HX)

    assert response.status_code == 200
    assert "at most" in response.content.decode()
    assert not BreakerOverride.objects.exists()


@pytest.mark.parametrize("minutes", [LONG, "-" + LONG])
def test_hold_minutes_of_4301_digits_are_out_of_range(admin_client, engine, health_catalog, minutes):
    data = {
        "hold-provider": "openai",
        "hold-model": "gpt-4o",
        "hold-reason": "incident",
        "hold-expiry": "other",
        "hold-minutes": minutes,
    }

    response = admin_client.post("/fallback/health/force-open/", data, headers=HX)

    assert response.status_code == 200
    assert "Minutes must be between 1 and" in response.content.decode()
    assert not CircuitControl.objects.exists()


def test_the_api_answers_400_for_a_threshold_of_4301_digits(admin_client, engine):
    response = admin_client.put(
        "/api/breaker-config/", json.dumps({"failure_threshold": LONG}), content_type="application/json"
    )

    assert response.status_code == 400
    assert "at most" in response.json()["errors"]["failure_threshold"][0]


def test_the_api_answers_400_for_a_status_code_of_4301_digits(admin_client, engine, health_catalog):
    response = admin_client.put(
        "/api/breaker-config/overrides/openai/gpt-4o/",
        json.dumps({"failure_status_codes": f"500, {LONG}"}),
        content_type="application/json",
    )

    assert response.status_code == 400
    assert response.json()["errors"]["failure_status_codes"] == [
        "Status code of more than 18 digits is outside 100–599."
    ]
    assert not BreakerOverride.objects.exists()


def test_a_table_refresh_from_a_page_whose_url_is_no_url_keeps_the_default_sort(admin_client, engine):
    response = admin_client.get(
        "/fallback/health/", headers={**HX, "HX-Target": "circuit-table", "HX-Current-URL": "http://["}
    )

    assert response.status_code == 200
    assert 'id="circuit-table"' in response.content.decode()


def test_an_unknown_setting_named_with_a_lone_surrogate_is_a_400(admin_client, engine):
    response = admin_client.put("/api/breaker-config/", '{"\\ud800": 1}', content_type="application/json")

    assert response.status_code == 400
    assert b"\\ud800" in response.content


@pytest.mark.parametrize(
    ("method", "url"),
    [
        ("get", "/api/circuits/openai%00/gpt-4o/events/"),
        ("get", "/api/circuits/openai/gpt%0A-4o/events/"),
        ("get", "/api/breaker-config/overrides/openai%00/gpt-4o/"),
        ("delete", "/api/breaker-config/overrides/openai/gpt%00-4o/"),
        ("put", "/api/breaker-config/overrides/openai%00/gpt-4o/"),
    ],
)
def test_a_name_with_a_control_character_in_the_path_is_a_404(admin_client, health_catalog, method, url):
    # No provider or model name holds one, and PostgreSQL refuses NUL in a query's text.
    kwargs = {"data": '{"failure_threshold": 5}', "content_type": "application/json"} if method == "put" else {}

    response = getattr(admin_client, method)(url, **kwargs)

    assert response.status_code == 404
    assert not BreakerOverride.objects.exists()


def test_a_model_name_with_a_slash_still_reaches_its_events(admin_client, health_catalog):
    response = admin_client.get("/api/circuits/openai/meta/llama-3/events/")

    assert response.status_code == 200
