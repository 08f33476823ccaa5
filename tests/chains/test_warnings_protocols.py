"""Chain editor warnings for mixed protocols: a smaller context window, a provider speaking another protocol (its
requests are translated, some refused), and what a missing tools or vision capability breaks."""

import pytest
from django.urls import reverse

from catalog.scopes import Scope
from chains.selectors import chain_warnings
from health.services import provider_drain
from health.views import provider_anchor
from tests.factories import LlmModelFactory, ProviderFactory

HX = {"HX-Request": "true"}


@pytest.fixture
def mixed(db):
    openai = ProviderFactory(name="openai", protocol="openai")
    anthropic = ProviderFactory(name="anthropic", protocol="anthropic")
    ProviderFactory(name="azure-openai", protocol="azure")
    return {
        "source": LlmModelFactory(
            name="gpt-4o", provider=openai, capabilities=["text", "vision", "tools"], context_window=128000
        ),
        "mini": LlmModelFactory(
            name="gpt-4o-mini", provider=openai, capabilities=["text", "vision", "tools"], context_window=128000
        ),
        "small": LlmModelFactory(
            name="mistral-small", provider=openai, capabilities=["text", "vision", "tools"], context_window=32000
        ),
        "sonnet": LlmModelFactory(
            name="claude-sonnet-4",
            provider=anthropic,
            capabilities=["text", "vision", "tools", "assistant_prefill"],
            context_window=200000,
        ),
        "haiku": LlmModelFactory(name="claude-haiku", provider=anthropic, capabilities=["text"], context_window=200000),
    }


def _kinds(warnings):
    return [(w.kind, w.message) for w in warnings]


def test_a_smaller_context_window_is_a_warning_a_larger_one_is_not(mixed):
    warnings = chain_warnings(source=mixed["source"], entries=[mixed["small"], mixed["mini"]], scope=Scope.global_())

    assert _kinds(warnings) == [
        (
            "context_window",
            "mistral-small has a 32k context window, smaller than gpt-4o's 128k: "
            "a long request that fits gpt-4o cannot be served by this entry.",
        )
    ]


def test_an_entry_on_another_protocol_says_requests_are_translated_and_what_is_refused(mixed):
    warnings = chain_warnings(source=mixed["source"], entries=[mixed["sonnet"]], scope=Scope.global_())

    assert _kinds(warnings) == [
        (
            "protocol",
            "claude-sonnet-4 via anthropic speaks Anthropic, while gpt-4o via openai speaks OpenAI: requests are "
            "translated, and those this entry cannot carry are refused (n > 1, logprobs, response_format "
            "json_object/json_schema and temperature above 1; see the “Refused” lists of docs/protocols.md).",
        )
    ]


def test_the_entry_provider_override_decides_the_protocol_and_azure_needs_no_translation(mixed):
    azure, anthropic = ProviderFactory(name="azure-openai"), ProviderFactory(name="anthropic")

    via_azure = chain_warnings(
        source=mixed["source"], entries=[mixed["mini"]], scope=Scope.global_(), providers=[azure]
    )
    via_anthropic = chain_warnings(
        source=mixed["source"], entries=[mixed["mini"]], scope=Scope.global_(), providers=[anthropic]
    )
    back_to_openai = chain_warnings(source=mixed["sonnet"], entries=[mixed["mini"]], scope=Scope.global_())

    assert via_azure == []
    assert [w.kind for w in via_anthropic] == ["protocol"]
    assert via_anthropic[0].message.startswith("gpt-4o-mini via anthropic speaks Anthropic, while gpt-4o via openai")
    assert [w.kind for w in back_to_openai] == ["capability", "context_window", "protocol"]
    assert "refused (top_k, extended thinking and Anthropic's server tools;" in back_to_openai[2].message


def test_missing_tools_and_vision_say_which_requests_break(mixed):
    warnings = chain_warnings(source=mixed["source"], entries=[mixed["haiku"]], scope=Scope.global_())

    assert _kinds(warnings)[0] == (
        "capability",
        "claude-haiku lacks vision, tools that gpt-4o has: requests with images and requests with tools "
        "cannot be served by this entry.",
    )
    assert [w.kind for w in warnings] == ["capability", "protocol"]


def test_the_editor_shows_the_protocol_and_context_warnings_and_protocol_badges(admin_client, mixed):
    data = {
        "name": "gpt-4o fallback",
        "source_model": "gpt-4o",
        "entries-0-model": "mistral-small",
        "entries-0-provider": "",
        "entries-1-model": "gpt-4o-mini",
        "entries-1-provider": "anthropic",
        "scope_type": "global",
        "scope_id": "",
        "enabled": "on",
        "version": "",
        "op": "refresh",
    }

    html = admin_client.post(reverse("chains:create"), data, headers=HX).content.decode()

    assert '<li data-warning="context_window">mistral-small has a 32k context window' in html
    assert (
        '<li data-warning="protocol">gpt-4o-mini via anthropic speaks Anthropic, while gpt-4o via openai speaks '
        "OpenAI: requests are translated" in html
    )
    assert '<option value="anthropic" selected>anthropic · Anthropic</option>' in html
    assert '<option value="azure-openai">azure-openai · Azure</option>' in html
    assert (
        '<span class="tag tag-protocol" data-protocol="anthropic" title="Protocol: Anthropic">Anthropic</span>' in html
    )


def test_provider_health_shows_each_providers_protocol(admin_client, admin_user, mixed):
    # A drained provider is listed even before the gateway tracks any of its circuits.
    provider_drain(actor=admin_user, provider="anthropic", reason="keys suspended", minutes=15)

    html = admin_client.get(reverse("health:index")).content.decode()

    header = html.split(f'id="provider-row-{provider_anchor("anthropic")}"', 1)[1].split("</th>", 1)[0]
    assert (
        '<span class="tag tag-protocol" data-protocol="anthropic" title="Protocol: Anthropic">Anthropic</span>'
        in header
    )
