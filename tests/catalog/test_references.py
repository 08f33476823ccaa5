"""Catalog asks the apps above it who still uses a row (catalog.references), and the database backs that up."""

import pytest

from catalog import references
from catalog.models import LlmModel, Provider
from catalog.services import llm_model_delete, provider_delete
from chains.services import ChainInput, EntryInput, chain_create
from core.errors import ConflictError

pytestmark = pytest.mark.django_db


def test_the_apps_above_register_their_referrers_in_the_409_order():
    # The order the kinds appear in a refusal's message and errors, whatever order the apps load in.
    model_kinds = sorted(references._model_referrers.values(), key=lambda r: r.order)
    scope_kinds = sorted(references._scope_referrers.values(), key=lambda r: r.order)

    assert [r.kind for r in model_kinds] == ["chains", "routing_rules", "guardrails", "aliases", "provider_deployments"]
    assert [r.kind for r in scope_kinds] == ["chains", "routing_rules", "guardrails"]
    assert list(references._provider_referrers) == ["chains"]
    assert references.reference_label("routing_rules") == "routing rules"


def test_a_reference_the_check_missed_is_still_a_conflict_not_a_500(monkeypatch):
    provider = Provider.objects.create(name="openai", base_url="http://127.0.0.1:9/v1")
    model = LlmModel.objects.create(name="gpt-4o", provider=provider)
    LlmModel.objects.create(name="gpt-4o-mini", provider=provider)
    chain_create(actor=None, data=ChainInput(name="Backup", source_model="gpt-4o", entries=[EntryInput("gpt-4o-mini")]))
    # A chain saved between the reference check and the delete: the PROTECT foreign key refuses it.
    monkeypatch.setattr("catalog.services.models.model_references", lambda *, model: {})

    with pytest.raises(ConflictError) as exc:
        llm_model_delete(actor=None, model=model)

    assert exc.value.message == "Model “gpt-4o” is still referenced; reload and try again."
    assert exc.value.status_code == 409
    assert LlmModel.objects.filter(pk=model.pk).exists()


def test_provider_refusal_names_chains_before_models():
    provider = Provider.objects.create(name="openai", base_url="http://127.0.0.1:9/v1")
    LlmModel.objects.create(name="gpt-4o", provider=provider)
    LlmModel.objects.create(name="gpt-4o-mini", provider=provider)
    chain_create(actor=None, data=ChainInput(name="Backup", source_model="gpt-4o", entries=[EntryInput("gpt-4o-mini")]))

    with pytest.raises(ConflictError) as exc:
        provider_delete(actor=None, provider=provider)

    assert list(exc.value.errors) == ["chains", "models"]
