"""Provider protocols: Azure's api_version and deployments, and a model's max_output_tokens (docs/protocols.md,
"Provider settings"). Validated by the services, so the API, the admin and seed_demo refuse the same way."""

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from audit.models import AuditEvent
from catalog.models import LlmModel, Provider
from catalog.services import ProviderInput, provider_create
from core.errors import ValidationFailed
from tests.factories import LlmModelFactory, ProviderFactory
from tests.helpers.api import patch_json, post_json

pytestmark = pytest.mark.django_db

AZURE = {"name": "azure", "protocol": "azure", "base_url": "https://acme.openai.azure.com"}


@pytest.fixture
def gpt4o(db):
    return LlmModelFactory(name="gpt-4o", provider=ProviderFactory(name="openai"))


def test_azure_provider_takes_api_version_and_deployments(admin_client, gpt4o):
    body = {**AZURE, "api_version": " 2024-10-21 ", "deployments": {"gpt-4o": "gpt-4o-prod"}}

    response = post_json(admin_client, "/api/providers/", body)

    assert response.status_code == 201, response.json()
    assert (response.json()["api_version"], response.json()["deployments"]) == ("2024-10-21", {"gpt-4o": "gpt-4o-prod"})
    provider = Provider.objects.get(name="azure")
    assert (provider.protocol, provider.deployments) == ("azure", {"gpt-4o": "gpt-4o-prod"})
    event = AuditEvent.objects.get(action="provider.create")
    assert (event.after["api_version"], event.after["deployments"]) == ("2024-10-21", {"gpt-4o": "gpt-4o-prod"})


def test_azure_provider_without_api_version_is_400(admin_client, db):
    response = post_json(admin_client, "/api/providers/", AZURE)

    assert response.status_code == 400
    assert response.json()["errors"] == {
        "api_version": ["API version is required for Azure OpenAI providers (e.g. “2024-10-21”)."]
    }
    assert not Provider.objects.exists()


def test_api_version_is_optional_for_other_protocols_and_checked_when_given(admin_client, db):
    anthropic = post_json(
        admin_client, "/api/providers/", {"name": "anthropic", "protocol": "anthropic", "base_url": "https://x.test"}
    )
    bad = post_json(admin_client, "/api/providers/", {**AZURE, "api_version": "2024-10-21&x=1"})
    long = post_json(admin_client, "/api/providers/", {**AZURE, "api_version": "2" * 33})

    assert (anthropic.status_code, anthropic.json()["protocol"], anthropic.json()["api_version"]) == (
        201,
        "anthropic",
        "",
    )
    assert bad.json()["errors"] == {
        "api_version": ["API version may contain only letters, digits, “.” and “-” (e.g. “2024-10-21”)."]
    }
    assert long.json()["errors"] == {"api_version": ["API version is at most 32 characters."]}


def test_deployment_of_an_unknown_model_is_400_naming_it(admin_client, gpt4o):
    body = {**AZURE, "api_version": "2024-10-21", "deployments": {"gpt-4o": "prod", "gtp-4o-mini": "mini"}}

    response = post_json(admin_client, "/api/providers/", body)

    assert response.status_code == 400
    assert response.json()["errors"] == {
        "deployments": ["Unknown model “gtp-4o-mini”; keys must be catalog model names."]
    }


@pytest.mark.parametrize(
    ("deployments", "message"),
    [
        ({"gpt-4o": ""}, "Model and deployment names cannot be empty."),
        ({"gpt-4o": "a" * 129}, f"Deployment “{'a' * 40}…” is longer than 128 characters."),
        ({"gpt-4o": "prod/../x"}, "Deployment “prod/../x” cannot contain “/”, “?” or “#”."),
        ({"gpt-4o": "pr\u200bod"}, "Model and deployment names cannot contain control characters."),
    ],
)
def test_bad_deployment_names_are_400(admin_client, gpt4o, deployments, message):
    body = {**AZURE, "api_version": "2024-10-21", "deployments": deployments}

    response = post_json(admin_client, "/api/providers/", body)

    assert response.status_code == 400
    assert response.json()["errors"] == {"deployments": [message]}


def test_deployments_that_are_not_an_object_are_refused_by_the_service(gpt4o):
    data = ProviderInput(name="azure", base_url="https://x.test", protocol="azure", api_version="2024-10-21")

    with pytest.raises(ValidationFailed) as refused:
        provider_create(actor=None, data=ProviderInput(**{**data.__dict__, "deployments": ["gpt-4o"]}))
    with pytest.raises(ValidationFailed) as not_strings:
        provider_create(actor=None, data=ProviderInput(**{**data.__dict__, "deployments": {"gpt-4o": 5}}))

    assert refused.value.errors == {"deployments": ["Deployments must be an object of model name → deployment name."]}
    assert not_strings.value.errors == {
        "deployments": ["Deployments map model names to deployment names, both strings."]
    }


def test_patching_deployments_keeps_the_rest_and_is_audited(admin_client, gpt4o):
    created = post_json(admin_client, "/api/providers/", {**AZURE, "api_version": "2024-10-21"}).json()

    patched = patch_json(admin_client, f"/api/providers/{created['id']}/", {"deployments": {"gpt-4o": "prod"}})

    assert patched.status_code == 200
    assert (patched.json()["api_version"], patched.json()["deployments"]) == ("2024-10-21", {"gpt-4o": "prod"})
    event = AuditEvent.objects.get(action="provider.update")
    assert (event.before, event.after) == ({"deployments": {}}, {"deployments": {"gpt-4o": "prod"}})


def test_a_deployed_model_cannot_be_deleted_and_a_rename_carries_its_deployment(admin_client, gpt4o):
    post_json(
        admin_client, "/api/providers/", {**AZURE, "api_version": "2024-10-21", "deployments": {"gpt-4o": "prod"}}
    )

    refused = admin_client.delete(f"/api/models/{gpt4o.pk}/")
    renamed = patch_json(admin_client, f"/api/models/{gpt4o.pk}/", {"name": "gpt-4o-2024"})

    assert refused.status_code == 409
    assert refused.json()["errors"] == {"provider_deployments": ["azure"]}
    assert renamed.status_code == 200
    assert Provider.objects.get(name="azure").deployments == {"gpt-4o-2024": "prod"}
    event = AuditEvent.objects.filter(action="provider.update").get()
    assert (event.before, event.after) == (
        {"deployments": {"gpt-4o": "prod"}},
        {"deployments": {"gpt-4o-2024": "prod"}},
    )


def test_model_max_output_tokens_defaults_is_set_and_audited(admin_client, gpt4o):
    created = post_json(admin_client, "/api/models/", {"name": "claude", "provider": "openai"})
    url = f"/api/models/{created.json()['id']}/"

    patched = patch_json(admin_client, url, {"max_output_tokens": 8192})

    assert created.json()["max_output_tokens"] == 4096
    assert patched.json()["max_output_tokens"] == 8192
    assert LlmModel.objects.get(name="claude").max_output_tokens == 8192
    event = AuditEvent.objects.get(action="model.update")
    assert (event.before, event.after) == ({"max_output_tokens": 4096}, {"max_output_tokens": 8192})


@pytest.mark.parametrize("value", [0, -1, 2_147_483_648])
def test_model_max_output_tokens_out_of_range_is_400(admin_client, gpt4o, value):
    response = post_json(
        admin_client, "/api/models/", {"name": "claude", "provider": "openai", "max_output_tokens": value}
    )

    assert response.status_code == 400
    assert response.json()["errors"] == {"max_output_tokens": ["Max output tokens must be between 1 and 2147483647."]}


def test_admin_forms_take_the_new_fields(admin_client, gpt4o):
    provider_page = admin_client.post(
        "/admin/catalog/provider/add/",
        {
            "name": "azure",
            "protocol": "azure",
            "base_url": "https://acme.openai.azure.com",
            "api_key": "",
            "connect_timeout": "2",
            "read_timeout": "30",
            "api_version": "",
            "deployments": '{"gpt-4o": "prod", "nope": "x"}',
        },
    )
    model_page = admin_client.post(
        f"/admin/catalog/llmmodel/{gpt4o.pk}/change/",
        {
            "name": "gpt-4o",
            "provider": gpt4o.provider.pk,
            "input_price_per_mtok": "1",
            "output_price_per_mtok": "4",
            "context_window": "128000",
            "max_output_tokens": "16384",
        },
    )

    html = provider_page.content.decode()
    assert provider_page.status_code == 200  # the form again, with its errors
    assert "API version is required for Azure OpenAI providers" in html
    assert "Unknown model “nope”; keys must be catalog model names." in html
    assert not Provider.objects.filter(name="azure").exists()
    assert model_page.status_code == 302
    assert LlmModel.objects.get(pk=gpt4o.pk).max_output_tokens == 16384


def test_migration_0008_runs_forward_on_existing_rows(transactional_db):
    executor = MigrationExecutor(connection)
    executor.migrate([("catalog", "0007_provider_stream_timeouts")])
    old = executor.loader.project_state([("catalog", "0007_provider_stream_timeouts")]).apps
    provider = old.get_model("catalog", "Provider").objects.create(name="openai", base_url="https://x.test/v1")
    old.get_model("catalog", "LlmModel").objects.create(name="gpt-4o", provider_id=provider.pk)

    executor = MigrationExecutor(connection)
    executor.migrate([("catalog", "0008_provider_protocol_settings")])
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())

    stored = Provider.objects.get(name="openai")
    assert (stored.protocol, stored.api_version, stored.deployments) == ("openai", "", {})
    assert LlmModel.objects.get(name="gpt-4o").max_output_tokens == 4096


@pytest.fixture
def quoted_deployment():
    """A model whose name holds a double quote, deployed on Azure (SQLite's JSON path for that key matched nothing)."""
    azure = ProviderFactory(name="azure", protocol="azure", api_version="2024-10-21")
    model = LlmModelFactory(name='gpt-4o "eu"', provider=azure)
    Provider.objects.filter(pk=azure.pk).update(deployments={'gpt-4o "eu"': "gpt4o-prod"})
    return azure, model


def test_a_model_with_a_quote_in_its_name_carries_its_deployment_through_a_rename(admin_client, quoted_deployment):
    azure, model = quoted_deployment

    response = patch_json(admin_client, f"/api/models/{model.pk}/", {"name": "gpt-4o-eu"})

    assert response.status_code == 200, response.content
    azure.refresh_from_db()
    assert azure.deployments == {"gpt-4o-eu": "gpt4o-prod"}


def test_a_model_with_a_quote_in_its_name_that_a_deployment_names_cannot_be_deleted(admin_client, quoted_deployment):
    _, model = quoted_deployment

    response = admin_client.delete(f"/api/models/{model.pk}/")

    assert response.status_code == 409
    assert LlmModel.objects.filter(pk=model.pk).exists()
