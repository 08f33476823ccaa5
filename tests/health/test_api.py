import pytest

from audit.models import AuditEvent
from health.models import BreakerConfig, BreakerOverride
from tests.factories import LlmModelFactory, ProviderFactory
from tests.health.conftest import trip

pytestmark = pytest.mark.django_db

T0 = 1_700_000_000.0
OVERRIDE_URL = "/api/breaker-config/overrides/openai/gpt-4o/"


def test_circuit_list_api_returns_every_field(admin_client, engine):
    trip(engine)

    response = admin_client.get("/api/circuits/")

    assert response.status_code == 200
    assert response.json() == [
        {
            "provider": "openai",
            "model": "gpt-4o",
            "state": "open",
            "failure_count": 10,
            "total_requests": 10,
            "cooldown_until": "2023-11-14T22:14:20Z",
            "consecutive_opens": 1,
            "last_failure_at": "2023-11-14T22:13:20Z",
            "last_failure_status": 503,
            "control": None,
            "degraded": False,
        }
    ]


def test_circuit_reset_api_closes_and_audits(admin_client, engine):
    trip(engine)

    response = admin_client.post(
        "/api/circuits/reset/", {"provider": "openai", "model": "gpt-4o"}, content_type="application/json"
    )

    assert response.status_code == 200
    body = response.json()
    assert (body["circuit"]["state"], body["previous"]["state"]) == ("closed", "open")
    assert engine.get("openai", "gpt-4o").state == "closed"
    assert AuditEvent.objects.get().action == "circuit.reset"


def test_circuit_reset_api_requires_provider_and_model(admin_client, engine):
    response = admin_client.post("/api/circuits/reset/", {}, content_type="application/json")

    assert response.status_code == 400
    assert response.json() == {
        "detail": "Provider is required.",
        "errors": {"provider": ["Provider is required."], "model": ["Model is required."]},
    }


def test_breaker_config_api_get_and_put(admin_client, engine, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        put = admin_client.put(
            "/api/breaker-config/",
            {"minimum_requests": 20, "cooldown_cap_seconds": 600},
            content_type="application/json",
        )
    got = admin_client.get("/api/breaker-config/")

    expected = {
        "failure_threshold": 5,
        "window_seconds": 60,
        "minimum_requests": 20,
        "initial_cooldown_seconds": 60,
        "cooldown_cap_seconds": 600,
        "failure_status_codes": [429, 500, 502, 503, 504],
    }
    assert (put.status_code, put.json()) == (200, expected)
    assert (got.status_code, got.json()) == (200, expected)
    assert engine.config.default.minimum_requests == 20


def test_breaker_config_api_put_bad_input_is_400_with_field_messages(admin_client):
    response = admin_client.put(
        "/api/breaker-config/", {"window_seconds": 7200, "failure_threshold": 5}, content_type="application/json"
    )

    assert response.status_code == 400
    assert response.json() == {
        "detail": "Failure window must be between 1 and 3600 seconds (1 hour).",
        "errors": {"window_seconds": ["Failure window must be between 1 and 3600 seconds (1 hour)."]},
    }
    assert BreakerConfig.objects.count() == 0


def test_breaker_override_api_put_get_delete(admin_client, single_model_catalog, engine):
    put = admin_client.put(OVERRIDE_URL, {"failure_threshold": 2}, content_type="application/json")
    got = admin_client.get(OVERRIDE_URL)
    deleted = admin_client.delete(OVERRIDE_URL)
    gone = admin_client.get(OVERRIDE_URL)

    expected = {
        "provider": "openai",
        "model": "gpt-4o",
        "failure_threshold": 2,
        "window_seconds": None,
        "minimum_requests": None,
        "initial_cooldown_seconds": None,
        "cooldown_cap_seconds": None,
        "failure_status_codes": None,
    }
    assert (put.status_code, put.json()) == (200, expected)
    assert (got.status_code, got.json()) == (200, expected)
    assert (deleted.status_code, gone.status_code) == (204, 404)
    assert [e.action for e in AuditEvent.objects.order_by("id")] == ["breaker_override.set", "breaker_override.delete"]


def test_breaker_override_api_put_bad_input_is_400(admin_client, single_model_catalog):
    response = admin_client.put(OVERRIDE_URL, {"failure_status_codes": [200, 200]}, content_type="application/json")

    assert response.status_code == 400
    assert response.json()["errors"] == {"failure_status_codes": ["Status code 200 is listed more than once."]}
    assert BreakerOverride.objects.count() == 0


def test_breaker_override_api_model_name_with_slash(admin_client, engine):
    LlmModelFactory(name="meta/llama-3", provider=ProviderFactory(name="groq"))

    response = admin_client.put(
        "/api/breaker-config/overrides/groq/meta/llama-3/", {"window_seconds": 30}, content_type="application/json"
    )

    assert (response.status_code, response.json()["model"]) == (200, "meta/llama-3")


ENDPOINTS = [
    ("get", "/api/circuits/"),
    ("post", "/api/circuits/reset/"),
    ("get", "/api/breaker-config/"),
    ("put", "/api/breaker-config/"),
    ("get", OVERRIDE_URL),
    ("put", OVERRIDE_URL),
    ("delete", OVERRIDE_URL),
]


@pytest.mark.parametrize(("method", "url"), ENDPOINTS)
@pytest.mark.parametrize(
    ("client_fixture", "expected"), [("bi_client", 403), ("user_client", 403), ("anon_client", 401)]
)
def test_breaker_api_refuses_non_admin_roles(
    request, engine, single_model_catalog, client_fixture, expected, method, url
):
    trip(engine)
    client = request.getfixturevalue(client_fixture)

    response = getattr(client, method)(url, {"provider": "openai", "model": "gpt-4o"}, content_type="application/json")

    assert response.status_code == expected
    assert (BreakerConfig.objects.count(), BreakerOverride.objects.count(), AuditEvent.objects.count()) == (0, 0, 0)


def test_breaker_override_api_put_under_padded_names_answers_the_override_it_saved(admin_client, single_model_catalog):
    """The service trims the names (as every health endpoint does) and saves openai/gpt-4o; the answer used to
    look the override up under "openai " and say 404 although the write had taken effect."""
    response = admin_client.put(
        "/api/breaker-config/overrides/openai%20/%20gpt-4o/", {"failure_threshold": 3}, content_type="application/json"
    )

    assert response.status_code == 200
    assert (response.json()["provider"], response.json()["model"], response.json()["failure_threshold"]) == (
        "openai",
        "gpt-4o",
        3,
    )
    assert list(BreakerOverride.objects.values_list("provider", "model", "failure_threshold")) == [
        ("openai", "gpt-4o", 3)
    ]


def test_breaker_override_api_get_and_delete_under_padded_names_find_the_override_put_saved(
    admin_client, single_model_catalog
):
    """PUT under padded names saves openai/gpt-4o; GET and DELETE under the same URL used to answer 404."""
    padded = "/api/breaker-config/overrides/openai%20/%20gpt-4o/"
    admin_client.put(padded, {"failure_threshold": 3}, content_type="application/json")

    got = admin_client.get(padded)
    deleted = admin_client.delete(padded)

    assert (got.status_code, got.json()["failure_threshold"]) == (200, 3)
    assert deleted.status_code == 204
    assert BreakerOverride.objects.count() == 0
    assert AuditEvent.objects.filter(action="breaker_override.delete").values_list("object_id", flat=True).get() == (
        "openai/gpt-4o"
    )


def test_breaker_override_api_delete_of_an_override_deleted_meanwhile_is_a_404(
    admin_client, single_model_catalog, monkeypatch
):
    """The view finds the override, a concurrent DELETE removes it before the service locks it: 404 (nothing
    there), not a 400 as if the request were invalid."""
    import health.api as health_api

    BreakerOverride.objects.create(provider="openai", model="gpt-4o", failure_threshold=3)
    delete = health_api.breaker_override_delete

    def deleted_meanwhile(**kwargs):
        BreakerOverride.objects.all().delete()
        return delete(**kwargs)

    monkeypatch.setattr(health_api, "breaker_override_delete", deleted_meanwhile)

    response = admin_client.delete(OVERRIDE_URL)

    assert response.status_code == 404
    assert response.json()["detail"] == "No breaker override exists for openai/gpt-4o."
    assert not AuditEvent.objects.exists()
