"""Catalog asks the apps above it who still uses a row (catalog.references), and the database backs that up."""

import pytest

from catalog import references
from catalog.models import LlmModel, Provider
from catalog.services import LlmModelInput, llm_model_delete, llm_model_update, provider_delete
from chains.services import ChainInput, EntryInput, chain_create
from core.errors import ConflictError, ValidationFailed
from tests.helpers.api import patch_json

pytestmark = pytest.mark.django_db


def test_the_apps_above_register_their_referrers_in_the_409_order():
    # The order the kinds appear in a refusal's message and errors, whatever order the apps load in.
    model_kinds = sorted(references._model_referrers.values(), key=lambda r: r.order)
    scope_kinds = sorted(references._scope_referrers.values(), key=lambda r: r.order)

    provider_kinds = sorted(references._provider_referrers.values(), key=lambda r: r.order)

    assert [r.kind for r in model_kinds] == [
        "chains",
        "routing_rules",
        "guardrails",
        "aliases",
        "circuit_holds",
        "alert_rules",
        "provider_deployments",
    ]
    assert [r.kind for r in scope_kinds] == ["chains", "routing_rules", "guardrails"]
    assert [r.kind for r in provider_kinds] == ["chains", "circuit_holds", "alert_rules"]
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


def _catalog() -> tuple[LlmModel, Provider]:
    openai = Provider.objects.create(name="openai", base_url="http://127.0.0.1:9/v1")
    azure = Provider.objects.create(name="azure", base_url="http://127.0.0.1:9/v1")
    gpt = LlmModel.objects.create(name="gpt-4o", provider=openai)
    LlmModel.objects.create(name="gpt-4o-mini", provider=openai)
    return gpt, azure


def _move(model: LlmModel, provider: str) -> None:
    llm_model_update(actor=None, model=model, data=LlmModelInput(name=model.name, provider=provider))


def test_a_default_provider_that_would_make_an_entry_its_own_source_is_refused():
    # "gpt-4o via azure" is a fallback for gpt-4o served by openai; served by azure, it would be gpt-4o itself.
    gpt, _ = _catalog()
    chain_create(
        actor=None,
        data=ChainInput(name="Backup", source_model="gpt-4o", entries=[EntryInput("gpt-4o", provider="azure")]),
    )

    with pytest.raises(ValidationFailed) as exc:
        _move(gpt, "azure")

    assert exc.value.errors == {
        "provider": [
            "Chain “Backup”: its entry gpt-4o via azure would be its own source model; remove that entry first."
        ]
    }
    gpt.refresh_from_db()
    assert gpt.provider.name == "openai"


def test_a_default_provider_that_would_make_two_entries_one_is_refused():
    gpt, _ = _catalog()
    entries = [EntryInput("gpt-4o"), EntryInput("gpt-4o", provider="azure")]  # via openai, then via azure
    chain_create(actor=None, data=ChainInput(name="Mini first", source_model="gpt-4o-mini", entries=entries))

    with pytest.raises(ValidationFailed) as exc:
        _move(gpt, "azure")

    assert exc.value.errors["provider"] == [
        "Chain “Mini first”: two entries would both be gpt-4o via azure; remove one first."
    ]


def test_a_default_provider_that_breaks_no_chain_is_saved():
    gpt, _ = _catalog()
    chain_create(actor=None, data=ChainInput(name="Backup", source_model="gpt-4o", entries=[EntryInput("gpt-4o-mini")]))
    chain_create(actor=None, data=ChainInput(name="Mini", source_model="gpt-4o-mini", entries=[EntryInput("gpt-4o")]))

    _move(gpt, "azure")

    gpt.refresh_from_db()
    assert gpt.provider.name == "azure"


def test_the_api_answers_a_breaking_provider_change_with_the_field_s_400(admin_client):
    gpt, _ = _catalog()
    chain_create(
        actor=None,
        data=ChainInput(name="Backup", source_model="gpt-4o", entries=[EntryInput("gpt-4o", provider="azure")]),
    )

    response = patch_json(admin_client, f"/api/models/{gpt.pk}/", {"provider": "azure"})

    assert response.status_code == 400
    assert "would be its own source model" in response.json()["errors"]["provider"][0]


def test_a_clash_the_move_does_not_make_is_not_blamed_on_it():
    # Two entries of another model that already repeat each other (saved before the editor refused that) are the
    # chain's own problem, not something moving gpt-4o would cause.
    gpt, _ = _catalog()
    chain = chain_create(
        actor=None, data=ChainInput(name="Backup", source_model="gpt-4o", entries=[EntryInput("gpt-4o-mini")])
    )
    chain.entries.create(position=1, model=LlmModel.objects.get(name="gpt-4o-mini"))

    _move(gpt, "azure")

    gpt.refresh_from_db()
    assert gpt.provider.name == "azure"
