import hashlib

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from audit.models import AuditEvent
from catalog.models import Agent, ApiKey, Application, LlmModel, Provider, Team
from routing.models import Guardrail
from tests.factories import (
    AgentFactory,
    AliasFactory,
    ApplicationFactory,
    ChainFactory,
    LlmModelFactory,
    ProviderFactory,
    RoutingRuleFactory,
    TeamFactory,
    UserFactory,
)
from tests.factories.keys import make_key
from tests.helpers.api import patch_json, post_json, put_json

PROVIDER_KEY = "sk-live-0123456789abcdef"


def without_timestamps(body: dict) -> dict:
    return {k: v for k, v in body.items() if k not in ("created_at", "updated_at")}


def raw_column(table: str, column: str, pk: int) -> str:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {column} FROM {table} WHERE id = %s", [pk])
        return cursor.fetchone()[0]


# --- providers -------------------------------------------------------------------------------


def provider_body(**overrides) -> dict:
    body = {
        "name": "openai",
        "protocol": "openai",
        "base_url": "https://api.openai.com/v1",
        "api_key": PROVIDER_KEY,
        "connect_timeout": 3.0,
        "read_timeout": 30.0,
    }
    body.update(overrides)
    return body


def test_provider_create_never_returns_the_key(admin_client):
    response = post_json(admin_client, "/api/providers/", provider_body())

    assert response.status_code == 201
    provider = Provider.objects.get()
    assert without_timestamps(response.json()) == {
        "id": provider.pk,
        "name": "openai",
        "protocol": "openai",
        "base_url": "https://api.openai.com/v1",
        "has_api_key": True,
        "connect_timeout": 3.0,
        "read_timeout": 30.0,
        "first_token_timeout_seconds": None,
        "idle_timeout_seconds": None,
        "api_version": "",
        "deployments": {},
    }
    assert PROVIDER_KEY not in response.content.decode()
    event = AuditEvent.objects.get()
    assert (event.action, event.after["has_api_key"]) == ("provider.create", True)
    assert PROVIDER_KEY not in str(event.after)


def test_provider_key_is_stored_encrypted(admin_client):
    post_json(admin_client, "/api/providers/", provider_body())

    provider = Provider.objects.get()
    raw = raw_column("catalog_provider", "api_key", provider.pk)
    assert raw != PROVIDER_KEY
    assert PROVIDER_KEY not in raw
    assert provider.api_key == PROVIDER_KEY


def test_provider_list_and_detail_never_show_the_key(admin_client):
    provider = ProviderFactory(name="openai", api_key=PROVIDER_KEY)

    listed = admin_client.get("/api/providers/")
    detail = admin_client.get(f"/api/providers/{provider.pk}/")

    assert [p["name"] for p in listed.json()["results"]] == ["openai"]
    assert "api_key" not in listed.json()["results"][0]
    assert detail.json()["has_api_key"] is True
    assert "api_key" not in detail.json()
    assert PROVIDER_KEY not in listed.content.decode() + detail.content.decode()


def test_provider_create_without_key_says_so(admin_client):
    body = provider_body()
    del body["api_key"]

    response = post_json(admin_client, "/api/providers/", body)

    assert response.status_code == 201
    assert response.json()["has_api_key"] is False


def test_provider_update_without_key_keeps_the_stored_key(admin_client):
    provider = ProviderFactory(name="openai", api_key=PROVIDER_KEY)
    body = provider_body(name="openai-eu")
    del body["api_key"]

    response = put_json(admin_client, f"/api/providers/{provider.pk}/", body)

    assert response.status_code == 200
    provider.refresh_from_db()
    assert (provider.name, provider.api_key) == ("openai-eu", PROVIDER_KEY)


def test_provider_patch_replaces_the_key_and_audits_without_it(admin_client):
    provider = ProviderFactory(name="openai", api_key=PROVIDER_KEY)

    response = patch_json(admin_client, f"/api/providers/{provider.pk}/", {"api_key": "sk-new"})

    assert response.status_code == 200
    provider.refresh_from_db()
    assert provider.api_key == "sk-new"
    event = AuditEvent.objects.get(action="provider.update")
    assert (event.before, event.after) == ({"api_key": "(previous key)"}, {"api_key": "(replaced)"})


def test_provider_patch_with_empty_key_clears_it(admin_client):
    provider = ProviderFactory(name="openai", api_key=PROVIDER_KEY)

    response = patch_json(admin_client, f"/api/providers/{provider.pk}/", {"api_key": ""})

    assert response.json()["has_api_key"] is False
    provider.refresh_from_db()
    assert provider.api_key == ""


@pytest.mark.parametrize(
    ("overrides", "errors"),
    [
        ({"name": ""}, {"name": ["Provider name is required and cannot be only whitespace."]}),
        ({"name": "   "}, {"name": ["Provider name is required and cannot be only whitespace."]}),
        ({"name": "x" * 65}, {"name": ["Provider name is at most 64 characters."]}),
        ({"name": "taken"}, {"name": ["A provider named “taken” already exists."]}),
        ({"base_url": "not-a-url"}, {"base_url": ["“not-a-url” is not a valid http(s) URL."]}),
        ({"name": "acme/eu"}, {"name": ["Provider name cannot contain “/” (circuits are named provider/model)."]}),
        ({"base_url": " "}, {"base_url": ["Base URL is required."]}),
        ({"protocol": "grpc"}, {"protocol": ['"grpc" is not a valid choice.']}),
        ({"connect_timeout": 0}, {"connect_timeout": ["Timeout must be at least 0.1 seconds."]}),
        ({"read_timeout": "slow"}, {"read_timeout": ["A valid number is required."]}),
    ],
)
def test_provider_create_refuses_invalid_input(admin_client, overrides, errors):
    ProviderFactory(name="taken")

    response = post_json(admin_client, "/api/providers/", provider_body(**overrides))

    assert response.status_code == 400
    assert response.json()["errors"] == errors
    assert list(Provider.objects.values_list("name", flat=True)) == ["taken"]
    assert AuditEvent.objects.count() == 0


@pytest.mark.parametrize(
    "base_url",
    [
        "http://ollama:11434/v1",
        "http://simulator:8001/openai/v1",
        "https://api.openai.com/v1",
        "http://localhost",
        "http://127.0.0.1:65535/v1",
        "http://[::1]:8080/v1",
        "http://llm_gateway:1/v1",
    ],
)
def test_provider_create_accepts_any_valid_host(admin_client, base_url):
    response = post_json(admin_client, "/api/providers/", provider_body(base_url=base_url))

    assert (response.status_code, response.json()["base_url"]) == (201, base_url)
    assert Provider.objects.get().base_url == base_url


@pytest.mark.parametrize(
    ("base_url", "message"),
    [
        ("ftp://ollama/v1", "“ftp://ollama/v1” is not a valid http(s) URL."),
        ("ollama:11434/v1", "“ollama:11434/v1” is not a valid http(s) URL."),
        ("http://ollama:0/v1", "Port must be between 1 and 65535 (got 0)."),
        ("http://ollama:65536/v1", "Port must be between 1 and 65535 (got 65536)."),
        ("http://ollama:port/v1", "Port must be a number between 1 and 65535 (got “port”)."),
        (
            "http://user:secret@ollama:11434/v1",
            "Base URL cannot contain credentials (user:password@); set the provider's API key instead.",
        ),
        ("http://oll ama/v1", "Base URL cannot contain spaces or control characters."),
        ("http://ollama/v\t1", "Base URL cannot contain spaces or control characters."),
        ("http://ollama/\x1bv1", "Base URL cannot contain spaces or control characters."),
        ("http://-ollama/v1", "“-ollama” is not a valid host name."),
        ("http://a..b/v1", "“a..b” is not a valid host name."),
        ("http:///v1", "Base URL needs a host name after the scheme."),
        (
            "http://ollama/v1?debug=1",
            "Base URL cannot have a query string or fragment; the gateway appends the endpoint path to it.",
        ),
    ],
)
def test_provider_create_refuses_bad_base_urls(admin_client, base_url, message):
    response = post_json(admin_client, "/api/providers/", provider_body(base_url=base_url))

    assert response.status_code == 400
    assert response.json() == {"detail": message, "errors": {"base_url": [message]}}
    assert Provider.objects.count() == 0


def test_provider_rename_with_a_slash_is_refused(admin_client):
    provider = ProviderFactory(name="acme")

    response = patch_json(admin_client, f"/api/providers/{provider.pk}/", {"name": "acme/eu"})

    assert response.status_code == 400
    assert response.json()["errors"] == {
        "name": ["Provider name cannot contain “/” (circuits are named provider/model)."]
    }
    provider.refresh_from_db()
    assert provider.name == "acme"


def test_provider_rename_to_another_providers_name_is_refused(admin_client):
    ProviderFactory(name="openai")
    other = ProviderFactory(name="anthropic")

    response = patch_json(admin_client, f"/api/providers/{other.pk}/", {"name": "openai"})

    assert response.status_code == 400
    assert response.json()["errors"] == {"name": ["A provider named “openai” already exists."]}


def test_provider_keeping_its_own_name_is_not_a_duplicate(admin_client):
    provider = ProviderFactory(name="openai")

    response = patch_json(admin_client, f"/api/providers/{provider.pk}/", {"name": "openai", "read_timeout": 9.5})

    assert response.status_code == 200
    assert response.json()["read_timeout"] == 9.5


def test_provider_delete_referenced_by_chain_and_models_is_409(admin_client):
    provider = ProviderFactory(name="openai")
    source = LlmModelFactory(name="gpt-4o", provider=provider)
    LlmModelFactory(name="gpt-4o-mini", provider=provider)
    ChainFactory(name="Backup", source_model=source)

    response = admin_client.delete(f"/api/providers/{provider.pk}/")

    assert response.status_code == 409
    assert response.json() == {
        "detail": "Provider “openai” is still used by chains “Backup”; models “gpt-4o”, “gpt-4o-mini”. "
        "Change, delete or release those first.",
        "errors": {"chains": ["Backup"], "models": ["gpt-4o", "gpt-4o-mini"]},
    }
    assert Provider.objects.filter(pk=provider.pk).exists()
    assert AuditEvent.objects.count() == 0


def test_provider_delete_referenced_only_as_entry_override_is_409(admin_client):
    provider = ProviderFactory(name="backup-host")
    chain = ChainFactory(name="Override")
    chain.entries.update(provider=provider)

    response = admin_client.delete(f"/api/providers/{provider.pk}/")

    assert response.status_code == 409
    assert response.json()["errors"] == {"chains": ["Override"]}


def test_provider_delete_unreferenced(admin_client):
    provider = ProviderFactory(name="spare")

    response = admin_client.delete(f"/api/providers/{provider.pk}/")

    assert response.status_code == 204
    assert Provider.objects.count() == 0
    event = AuditEvent.objects.get()
    assert (event.action, event.before["name"]) == ("provider.delete", "spare")


# --- models ----------------------------------------------------------------------------------


def model_body(**overrides) -> dict:
    body = {
        "name": "gpt-4o",
        "provider": "openai",
        "capabilities": ["vision", "text"],
        "input_price_per_mtok": "2.5",
        "output_price_per_mtok": "10",
        "context_window": 128000,
    }
    body.update(overrides)
    return body


def test_model_create(admin_client):
    ProviderFactory(name="openai")

    response = post_json(admin_client, "/api/models/", model_body())

    assert response.status_code == 201
    model = LlmModel.objects.get()
    assert without_timestamps(response.json()) == {
        "id": model.pk,
        "name": "gpt-4o",
        "provider": "openai",
        "capabilities": ["text", "vision"],
        "input_price_per_mtok": "2.5000",
        "output_price_per_mtok": "10.0000",
        "context_window": 128000,
        "max_output_tokens": 4096,
    }
    assert AuditEvent.objects.get().action == "model.create"


def test_model_create_with_only_name_and_provider_takes_defaults(admin_client):
    ProviderFactory(name="openai")

    response = post_json(admin_client, "/api/models/", {"name": "tiny", "provider": "openai"})

    assert response.status_code == 201
    body = response.json()
    assert (
        body["capabilities"],
        body["input_price_per_mtok"],
        body["output_price_per_mtok"],
        body["context_window"],
    ) == ([], "0.0000", "0.0000", 8192)


@pytest.mark.parametrize(
    ("overrides", "errors"),
    [
        ({"name": " "}, {"name": ["Model name is required and cannot be only whitespace."]}),
        ({"name": "taken"}, {"name": ["A model named “taken” already exists."]}),
        ({"name": "fast"}, {"name": ["“fast” is already an alias; choose another name."]}),
        ({"provider": "nope"}, {"provider": ["Unknown provider “nope”."]}),
        ({"provider": ""}, {"provider": ["Provider is required."]}),
        (
            {"capabilities": ["text", "telepathy"]},
            {
                "capabilities": [
                    "Unknown capabilities telepathy; allowed: "
                    "text, vision, tools, json_output, audio, assistant_prefill."
                ]
            },
        ),
        ({"capabilities": "text"}, {"capabilities": ['Expected a list of items but got type "str".']}),
        ({"input_price_per_mtok": "-1"}, {"input_price_per_mtok": ["Price cannot be negative."]}),
        ({"output_price_per_mtok": "cheap"}, {"output_price_per_mtok": ["A valid number is required."]}),
        ({"context_window": 0}, {"context_window": ["Context window must be between 1 and 2147483647 tokens."]}),
    ],
)
def test_model_create_refuses_invalid_input(admin_client, overrides, errors):
    ProviderFactory(name="openai")
    LlmModelFactory(name="taken")
    AliasFactory(name="fast")
    before = LlmModel.objects.count()

    response = post_json(admin_client, "/api/models/", model_body(**overrides))

    assert response.status_code == 400
    assert response.json()["errors"] == errors
    assert LlmModel.objects.count() == before
    assert AuditEvent.objects.count() == 0


def test_model_patch_changes_only_the_fields_sent(admin_client):
    model = LlmModelFactory(name="gpt-4o", capabilities=["text"], context_window=8000)

    response = patch_json(admin_client, f"/api/models/{model.pk}/", {"capabilities": ["text", "tools"]})

    assert response.status_code == 200
    model.refresh_from_db()
    assert (model.capabilities, model.context_window) == (["text", "tools"], 8000)
    event = AuditEvent.objects.get()
    assert (event.action, event.before, event.after) == (
        "model.update",
        {"capabilities": ["text"]},
        {"capabilities": ["text", "tools"]},
    )


def test_model_delete_referenced_by_chains_is_409_naming_them(admin_client):
    model = LlmModelFactory(name="gpt-4o")
    ChainFactory(name="As source", source_model=model)
    ChainFactory(name="As entry", entries=[model])

    response = admin_client.delete(f"/api/models/{model.pk}/")

    assert response.status_code == 409
    assert response.json() == {
        "detail": "Model “gpt-4o” is still used by chains “As entry”, “As source”. "
        "Change, delete or release those first.",
        "errors": {"chains": ["As entry", "As source"]},
    }
    assert LlmModel.objects.filter(pk=model.pk).exists()


def test_model_delete_referenced_by_rules_and_aliases_is_409_naming_them(admin_client):
    model = LlmModelFactory(name="gpt-4o")
    RoutingRuleFactory(name="Downgrade", target_model=model)
    AliasFactory(name="smart", model=model)

    response = admin_client.delete(f"/api/models/{model.pk}/")

    assert response.status_code == 409
    assert response.json()["errors"] == {"routing_rules": ["Downgrade"], "aliases": ["smart"]}


def test_model_delete_referenced_by_a_guardrail_is_409_naming_it(admin_client):
    model = LlmModelFactory(name="gpt-4o")
    Guardrail.objects.create(name="No gpt-4o", model=model, action="deny", message="Too expensive.")

    response = admin_client.delete(f"/api/models/{model.pk}/")

    assert response.status_code == 409
    assert response.json() == {
        "detail": "Model “gpt-4o” is still used by guardrails “No gpt-4o”. Change, delete or release those first.",
        "errors": {"guardrails": ["No gpt-4o"]},
    }


def test_model_delete_unreferenced(admin_client):
    model = LlmModelFactory(name="old")

    response = admin_client.delete(f"/api/models/{model.pk}/")

    assert response.status_code == 204
    assert LlmModel.objects.filter(name="old").exists() is False


# --- teams, applications, agents -------------------------------------------------------------


def test_team_crud(admin_client):
    created = post_json(admin_client, "/api/teams/", {"name": "  Payments  "})
    team_id = created.json()["id"]
    renamed = put_json(admin_client, f"/api/teams/{team_id}/", {"name": "Billing"})
    fetched = admin_client.get(f"/api/teams/{team_id}/")
    deleted = admin_client.delete(f"/api/teams/{team_id}/")

    assert (created.status_code, created.json()["name"]) == (201, "Payments")
    assert (renamed.status_code, fetched.json()["name"]) == (200, "Billing")
    assert deleted.status_code == 204
    assert Team.objects.count() == 0
    assert list(AuditEvent.objects.order_by("id").values_list("action", flat=True)) == [
        "team.create",
        "team.update",
        "team.delete",
    ]


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("", "Team name is required and cannot be only whitespace."),
        ("\t \n", "Team name is required and cannot be only whitespace."),
        ("Payments", "A team named “Payments” already exists."),
    ],
)
def test_team_create_refuses_blank_and_duplicate_names(admin_client, name, message):
    TeamFactory(name="Payments")

    response = post_json(admin_client, "/api/teams/", {"name": name})

    assert response.status_code == 400
    assert response.json() == {"detail": message, "errors": {"name": [message]}}
    assert Team.objects.count() == 1


def test_team_delete_refused_while_a_chain_or_rule_is_scoped_to_it(admin_client):
    team = TeamFactory(name="Payments")
    ChainFactory(name="Team chain", scope_type="team", scope_id=team.pk)
    RoutingRuleFactory(name="Team rule", scope_type="team", scope_id=team.pk)

    response = admin_client.delete(f"/api/teams/{team.pk}/")

    assert response.status_code == 409
    assert response.json() == {
        "detail": "Team “Payments” is still used by chains “Team chain”; routing rules “Team rule”. "
        "Change, delete or release those first.",
        "errors": {"chains": ["Team chain"], "routing_rules": ["Team rule"]},
    }
    assert Team.objects.filter(pk=team.pk).exists()


def test_application_create_names_its_team(admin_client):
    team = TeamFactory(name="Payments")

    response = post_json(admin_client, "/api/applications/", {"name": "checkout", "team": "Payments"})

    assert response.status_code == 201
    assert without_timestamps(response.json()) == {
        "id": Application.objects.get().pk,
        "name": "checkout",
        "team": "Payments",
    }
    assert Application.objects.get().team == team


def test_application_create_refuses_unknown_team_and_blank_name(admin_client):
    response = post_json(admin_client, "/api/applications/", {"name": " ", "team": "Nope"})

    assert response.status_code == 400
    assert response.json()["errors"] == {
        "name": ["Application name is required and cannot be only whitespace."],
        "team": ["Unknown team “Nope”."],
    }


def test_application_patch_clears_the_team(admin_client):
    application = ApplicationFactory(name="checkout", team=TeamFactory())

    response = patch_json(admin_client, f"/api/applications/{application.pk}/", {"team": None})

    assert (response.status_code, response.json()["team"]) == (200, None)
    application.refresh_from_db()
    assert application.team is None


def test_application_delete_refused_while_a_chain_is_scoped_to_it(admin_client):
    application = ApplicationFactory(name="checkout")
    ChainFactory(name="App chain", scope_type="application", scope_id=application.pk)

    response = admin_client.delete(f"/api/applications/{application.pk}/")

    assert response.status_code == 409
    assert response.json()["errors"] == {"chains": ["App chain"]}


def test_agent_create_and_rename(admin_client):
    ApplicationFactory(name="checkout")

    created = post_json(admin_client, "/api/agents/", {"name": "refund-bot", "application": "checkout"})
    renamed = patch_json(admin_client, f"/api/agents/{created.json()['id']}/", {"name": "refunds"})

    assert (created.status_code, created.json()["application"]) == (201, "checkout")
    assert (renamed.status_code, renamed.json()["name"], renamed.json()["application"]) == (200, "refunds", "checkout")


def test_agent_create_refuses_duplicate_name(admin_client):
    AgentFactory(name="refund-bot")

    response = post_json(admin_client, "/api/agents/", {"name": "refund-bot"})

    assert response.status_code == 400
    assert response.json()["errors"] == {"name": ["An agent named “refund-bot” already exists."]}
    assert Agent.objects.count() == 1


def test_agent_delete_unreferenced(admin_client):
    agent = AgentFactory()

    response = admin_client.delete(f"/api/agents/{agent.pk}/")

    assert response.status_code == 204
    assert Agent.objects.count() == 0


# --- gateway keys ----------------------------------------------------------------------------


def test_key_create_shows_the_secret_once_and_stores_its_hash(admin_client, admin_user):
    TeamFactory(name="Payments")

    response = post_json(admin_client, "/api/keys/", {"name": "ci", "team": "Payments"})

    assert response.status_code == 201
    body = response.json()
    key = ApiKey.objects.get()
    assert without_timestamps(body) == {
        "id": key.pk,
        "name": "ci",
        "prefix": key.prefix,
        "user": "alice",
        "team": "Payments",
        "application": None,
        "agent": None,
        "active": True,
        "owner_active": True,
        "revoked_at": None,
        "secret": body["secret"],
    }
    assert body["secret"].startswith(key.prefix + "-")
    assert raw_column("catalog_apikey", "hashed_secret", key.pk) == hashlib.sha256(body["secret"].encode()).hexdigest()
    listed = admin_client.get("/api/keys/")
    detail = admin_client.get(f"/api/keys/{key.pk}/")
    assert "secret" not in listed.json()["results"][0]
    assert "secret" not in detail.json()
    assert body["secret"] not in listed.content.decode() + detail.content.decode()
    assert body["secret"] not in str(AuditEvent.objects.get().after)


def test_key_create_for_another_user(admin_client, plain_user):
    response = post_json(admin_client, "/api/keys/", {"name": "ursula's", "user": "ursula"})

    assert response.status_code == 201
    assert ApiKey.objects.get().user == plain_user


def test_key_create_refuses_blank_name_and_unknown_references(admin_client):
    response = post_json(admin_client, "/api/keys/", {"name": "  ", "user": "ghost", "agent": "nope"})

    assert response.status_code == 400
    assert response.json()["errors"] == {
        "user": ["Unknown user “ghost”."],
        "name": ["Key name is required and cannot be only whitespace."],
        "agent": ["Unknown agent “nope”."],
    }
    assert ApiKey.objects.count() == 0


def test_key_delete_revokes_and_keeps_the_row(admin_client, admin_user):
    created = make_key(user=admin_user, actor=admin_user)

    response = admin_client.delete(f"/api/keys/{created.key.pk}/")
    again = admin_client.delete(f"/api/keys/{created.key.pk}/")

    assert (response.status_code, again.status_code) == (204, 204)
    key = ApiKey.objects.get()
    assert key.revoked_at is not None
    detail = admin_client.get(f"/api/keys/{key.pk}/").json()
    assert (detail["active"], detail["revoked_at"] is not None) == (False, True)
    assert list(AuditEvent.objects.order_by("id").values_list("action", flat=True)) == [
        "api_key.create",
        "api_key.revoke",
    ]


def test_key_patch_renames_without_touching_owner_or_secret(admin_client, admin_user, plain_user):
    created = make_key(user=plain_user, name="old")
    hashed = created.key.hashed_secret

    response = patch_json(admin_client, f"/api/keys/{created.key.pk}/", {"name": "new", "user": "alice"})

    assert response.status_code == 200
    key = ApiKey.objects.get()
    assert (key.name, key.user, key.hashed_secret) == ("new", plain_user, hashed)


# --- list query counts -----------------------------------------------------------------------


def _key_row():
    owner = UserFactory()
    return make_key(user=owner, team=TeamFactory(), application=ApplicationFactory(), agent=AgentFactory()).key


@pytest.mark.parametrize(
    ("url", "make_row"),
    [
        ("/api/providers/", ProviderFactory),
        ("/api/models/", LlmModelFactory),
        ("/api/teams/", TeamFactory),
        ("/api/applications/", lambda: ApplicationFactory(team=TeamFactory())),
        ("/api/agents/", lambda: AgentFactory(application=ApplicationFactory())),
        ("/api/keys/", _key_row),
        ("/api/routing-rules/", RoutingRuleFactory),
        ("/api/aliases/", AliasFactory),
    ],
)
def test_catalog_list_query_count_does_not_grow_with_rows(admin_client, url, make_row):
    make_row()
    with CaptureQueriesContext(connection) as one_row:
        admin_client.get(url)
    make_row()
    make_row()

    with CaptureQueriesContext(connection) as three_rows:
        response = admin_client.get(url)

    assert response.json()["count"] == 3
    assert len(three_rows.captured_queries) == len(one_row.captured_queries)
