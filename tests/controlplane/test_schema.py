from drf_spectacular.drainage import GENERATOR_STATS, reset_generator_stats
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.validation import validate_schema

API_PATHS = {
    "/api/chains/",
    "/api/chains/{chain_id}/",
    "/api/providers/",
    "/api/providers/{provider_id}/",
    "/api/models/",
    "/api/models/{model_id}/",
    "/api/teams/",
    "/api/teams/{team_id}/",
    "/api/applications/",
    "/api/applications/{application_id}/",
    "/api/agents/",
    "/api/agents/{agent_id}/",
    "/api/keys/",
    "/api/keys/{key_id}/",
    "/api/routing-rules/",
    "/api/routing-rules/{rule_id}/",
    "/api/aliases/",
    "/api/aliases/{alias_id}/",
    "/api/audit/",
}
REQUEST_LOG_PATHS = {"/api/request-logs/", "/api/request-logs/{request_id}/"}
ALERT_PATHS = {"/api/alerts/rules/", "/api/alerts/rules/{rule_id}/", "/api/alerts/", "/api/alerts/{alert_id}/"}
HEALTH_PATHS = {
    "/api/circuits/",
    "/api/circuits/reset/",
    "/api/circuits/force-open/",
    "/api/circuits/drain/",
    "/api/circuits/release/",
    "/api/circuits/{provider}/{model}/events/",
    "/api/breaker-config/",
    "/api/breaker-config/overrides/{provider}/{model}/",
}


def test_schema_lists_every_endpoint_and_operation(admin_client):
    response = admin_client.get("/api/schema/", {"format": "json"})

    assert response.status_code == 200
    paths = response.json()["paths"]
    assert API_PATHS <= set(paths)
    operations = {(url, method) for url in API_PATHS for method in paths[url]}
    detail_methods = {"get", "put", "patch", "delete"}
    expected = {("/api/audit/", "get")}
    for url in API_PATHS - {"/api/audit/"}:
        expected |= {(url, m) for m in (detail_methods if url.endswith("}/") else {"get", "post"})}
    assert operations == expected


def test_schema_documents_chain_body_and_write_only_provider_key(admin_client):
    schemas = admin_client.get("/api/schema/", {"format": "json"}).json()["components"]["schemas"]

    assert sorted(schemas["ChainCreateInput"]["properties"]) == [
        "enabled",
        "entries",
        "name",
        "resilience",
        "scope",
        "source_model",
    ]
    assert sorted(schemas["ChainUpdateInput"]["required"]) == [
        "enabled",
        "entries",
        "name",
        "scope",
        "source_model",
        "version",
    ]
    assert schemas["ProviderInput"]["properties"]["api_key"]["writeOnly"] is True
    assert "api_key" not in schemas["Provider"]["properties"]
    assert "secret" not in schemas["ApiKey"]["properties"]
    assert "secret" in schemas["ApiKeyCreated"]["properties"]


def test_whole_api_schema_generates_without_warnings_or_errors():
    # Every app's endpoints, from the project's URLconf: a new view without a documented serializer fails here.
    reset_generator_stats()

    schema = SchemaGenerator().get_schema(request=None, public=True)

    validate_schema(schema)
    assert (dict(GENERATOR_STATS._warn_cache), dict(GENERATOR_STATS._error_cache)) == ({}, {})
    # The global default resilience policy (GET/PUT).
    assert set(schema["paths"]) == API_PATHS | HEALTH_PATHS | REQUEST_LOG_PATHS | ALERT_PATHS | {
        "/api/resilience/defaults/"
    }


def test_schema_documents_the_health_api(admin_client):
    schema = admin_client.get("/api/schema/", {"format": "json"}).json()

    operations = {
        (url, method): operation["operationId"]
        for url in HEALTH_PATHS
        for method, operation in schema["paths"][url].items()
    }
    assert operations == {
        ("/api/circuits/", "get"): "circuit_list",
        ("/api/circuits/reset/", "post"): "circuit_reset",
        ("/api/circuits/force-open/", "post"): "circuit_force_open",
        ("/api/circuits/drain/", "post"): "provider_drain",
        ("/api/circuits/release/", "post"): "circuit_release",
        ("/api/circuits/{provider}/{model}/events/", "get"): "circuit_event_list",
        ("/api/breaker-config/", "get"): "breaker_config_detail",
        ("/api/breaker-config/", "put"): "breaker_config_update",
        ("/api/breaker-config/overrides/{provider}/{model}/", "get"): "breaker_override_detail",
        ("/api/breaker-config/overrides/{provider}/{model}/", "put"): "breaker_override_set",
        ("/api/breaker-config/overrides/{provider}/{model}/", "delete"): "breaker_override_delete",
    }
    schemas = schema["components"]["schemas"]
    assert sorted(schemas["CircuitResetInput"]["required"]) == ["model", "provider"]
    assert sorted(schemas["CircuitReset"]["properties"]) == ["circuit", "previous"]
    assert sorted(schemas["Circuit"]["properties"]) == [
        "consecutive_opens",
        "cooldown_until",
        "failure_count",
        "last_failure_at",
        "last_failure_status",
        "model",
        "provider",
        "state",
        "total_requests",
    ]
    assert "required" not in schemas["BreakerConfigInput"]


def test_schema_documents_session_and_token_auth(admin_client):
    schema = admin_client.get("/api/schema/", {"format": "json"}).json()

    assert schema["components"]["securitySchemes"] == {
        "cookieAuth": {"type": "apiKey", "in": "cookie", "name": "sessionid"},
        "tokenAuth": {
            "type": "apiKey",
            "in": "header",
            "name": "Authorization",
            "description": 'Token-based authentication with required prefix "Token"',
        },
    }
    assert schema["paths"]["/api/teams/"]["get"]["security"] == [{"cookieAuth": []}, {"tokenAuth": []}]
