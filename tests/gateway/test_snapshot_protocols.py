"""The gateway's snapshot carries what its protocol adapters need: a provider's protocol, Azure's api-version and
deployments, and each model's max_output_tokens (the `max_tokens` an Anthropic upstream requires)."""

from catalog.services import ProviderInput, provider_create
from gateway.snapshot import snapshot_build
from tests.factories import LlmModelFactory, ProviderFactory


def test_snapshot_carries_protocol_api_version_deployments_and_max_output_tokens(transactional_db):
    # Transactional: snapshot_build opens its own (on PostgreSQL repeatable-read) transaction, as in the gateway.
    openai = ProviderFactory(name="openai")
    LlmModelFactory(name="gpt-4o", provider=openai, max_output_tokens=16384)
    LlmModelFactory(name="gpt-4o-mini", provider=openai)
    LlmModelFactory(name="claude-sonnet-4", provider=ProviderFactory(name="anthropic", protocol="anthropic"))
    provider_create(
        actor=None,
        data=ProviderInput(
            name="azure-openai",
            base_url="https://acme.openai.azure.com/",
            protocol="azure",
            api_version="2024-10-21",
            deployments={"gpt-4o-mini": "mini-eu", "gpt-4o": "gpt-4o-prod"},
        ),
    )

    snap = snapshot_build(version=1)

    azure = snap.providers["azure-openai"]
    assert (azure.protocol, azure.base_url, azure.api_version) == (
        "azure",
        "https://acme.openai.azure.com",
        "2024-10-21",
    )
    assert azure.deployments == (("gpt-4o", "gpt-4o-prod"), ("gpt-4o-mini", "mini-eu"))
    assert (azure.deployment("gpt-4o"), azure.deployment("claude-sonnet-4")) == ("gpt-4o-prod", "claude-sonnet-4")
    assert (snap.providers["anthropic"].protocol, snap.providers["anthropic"].deployments) == ("anthropic", ())
    assert snap.providers["openai"].api_version == ""
    assert snap.models["gpt-4o"].max_output_tokens == 16384
    assert snap.models["claude-sonnet-4"].max_output_tokens == 4096
