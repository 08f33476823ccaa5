"""seed_demo's providers speak their own protocols to the simulator (docs/simulator.md): Anthropic Messages at
<sim>/anthropic/v1/messages, Azure at <sim>/azure/openai/deployments/<deployment>/...; and a demo seeded before
that is moved over on the next run, once."""

import pytest
from django.core.management import call_command

from audit.models import AuditEvent
from catalog.models import LlmModel, Provider
from chains.models import FallbackChain

pytestmark = pytest.mark.django_db

SIM = "http://sim.test:8001"


@pytest.fixture
def demo_settings(settings, tmp_path):
    settings.VAR_DIR = tmp_path
    settings.SIMULATOR_URL = SIM
    return settings


def _provider(name):
    p = Provider.objects.get(name=name)
    return (p.protocol, p.base_url, p.api_version, p.deployments)


def test_demo_providers_speak_their_protocols(demo_settings):
    call_command("seed_demo")

    assert _provider("openai") == ("openai", f"{SIM}/openai/v1", "", {})
    assert _provider("anthropic") == ("anthropic", f"{SIM}/anthropic", "", {})
    assert _provider("azure-openai") == ("azure", f"{SIM}/azure", "2024-10-21", {"gpt-4o": "gpt-4o-prod"})
    assert _provider("mistral") == ("openai", f"{SIM}/mistral/v1", "", {})
    claude = {m.name: m for m in LlmModel.objects.filter(provider__name="anthropic")}
    assert sorted(claude) == ["claude-haiku-3.5", "claude-sonnet-4"]
    assert all("assistant_prefill" in m.capabilities for m in claude.values())
    assert {(m.context_window, m.max_output_tokens) for m in claude.values()} == {(200000, 8192)}
    chain = FallbackChain.objects.get(name="GPT-4o fallback")
    entries = [(e.model.name, e.provider.name if e.provider else None) for e in chain.entries.order_by("position")]
    assert entries == [("gpt-4o", "azure-openai"), ("claude-sonnet-4", None), ("mistral-large", None)]


def test_a_demo_seeded_on_the_openai_protocol_is_moved_over_once(demo_settings, capsys):
    call_command("seed_demo")
    # The demo as seeded before the simulator spoke Anthropic and Azure.
    Provider.objects.filter(name="anthropic").update(protocol="openai", base_url=f"{SIM}/anthropic/v1")
    Provider.objects.filter(name="azure-openai").update(
        protocol="openai", base_url=f"{SIM}/azure/v1", api_version="", deployments={}
    )
    capsys.readouterr()
    before = set(AuditEvent.objects.values_list("pk", flat=True))

    call_command("seed_demo")
    first = capsys.readouterr().out
    call_command("seed_demo")
    second = capsys.readouterr().out

    assert _provider("anthropic") == ("anthropic", f"{SIM}/anthropic", "", {})
    assert _provider("azure-openai") == ("azure", f"{SIM}/azure", "2024-10-21", {"gpt-4o": "gpt-4o-prod"})
    assert "Demo provider anthropic now speaks the anthropic protocol." in first
    assert "now speaks" not in second
    updates = AuditEvent.objects.exclude(pk__in=before).values_list("action", "object_repr")
    assert sorted(updates) == [("provider.update", "anthropic"), ("provider.update", "azure-openai")]


def test_a_provider_changed_by_hand_is_left_alone(demo_settings):
    call_command("seed_demo")
    Provider.objects.filter(name="anthropic").update(protocol="openai", base_url="https://llm.internal/v1")

    call_command("seed_demo")

    assert _provider("anthropic") == ("openai", "https://llm.internal/v1", "", {})
