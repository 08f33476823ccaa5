from django.urls import include, path
from drf_spectacular.drainage import GENERATOR_STATS, reset_generator_stats
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.validation import validate_schema

from audit.api_urls import api_urlpatterns as audit_api_urls
from catalog.api_urls import api_urlpatterns as catalog_api_urls
from chains.api_urls import api_urlpatterns as chains_api_urls

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

    assert sorted(schemas["ChainCreateInput"]["properties"]) == ["enabled", "entries", "name", "scope", "source_model"]
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


def test_configuration_api_schema_generates_without_warnings_or_errors():
    # Only the chains, catalog, routing and audit APIs: other apps' endpoints are checked by their own tests.
    patterns = [path("api/", include([*chains_api_urls, *catalog_api_urls, *audit_api_urls]))]
    reset_generator_stats()

    schema = SchemaGenerator(patterns=patterns).get_schema(request=None, public=True)

    validate_schema(schema)
    assert (dict(GENERATOR_STATS._warn_cache), dict(GENERATOR_STATS._error_cache)) == ({}, {})
    assert set(schema["paths"]) == API_PATHS
