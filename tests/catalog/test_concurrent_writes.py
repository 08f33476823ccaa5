"""Catalog writes that check another row, committed at once with a write of that row (PostgreSQL, READ COMMITTED),
and key prefixes that collide.

An Azure provider's deployments name models as text: its validation locks the models named, and a model's rename
locks the model first, so the rename carries the deployment over, or the provider finds the old name unknown.
A model's update locks, in this order, the new name, the model, its provider (docs/decisions.md, "One lock order").

`*_simulated` tests run the other transaction at the exact point of the interleaving, on SQLite, with
PostgreSQL's locks simulated (tests/helpers/simulated_locks.py); `*_pg` tests race two real transactions
(production mode only, as tests/catalog/test_rename_locks.py).
"""

import itertools

import pytest

from catalog.enums import Protocol
from catalog.models import ApiKey, ConsoleToken, LlmModel, Provider
from catalog.services import (
    LlmModelInput,
    ProviderInput,
    console_token_create,
    llm_model_update,
    provider_create,
    provider_update,
)
from core.errors import ValidationFailed
from tests.helpers.api import post_json
from tests.helpers.races import Pause, race
from tests.helpers.simulated_locks import simulate_locks


def _azure(deployments: dict[str, str]) -> ProviderInput:
    return ProviderInput(
        name="azure",
        base_url="https://example.openai.azure.com/openai",
        protocol=Protocol.AZURE,
        api_version="2024-10-21",
        deployments=deployments,
    )


def _rename(actor, old: str, new: str) -> None:
    model = LlmModel.objects.select_related("provider").get(name=old)
    llm_model_update(actor=actor, model=model, data=LlmModelInput(name=new, provider=model.provider.name))


@pytest.mark.django_db
def test_a_model_renamed_while_a_deployment_names_it_waits_and_carries_it_over_simulated(
    admin_user, catalog, monkeypatch
):
    """provider_update validated the deployment of "gpt-4o-mini"; the rename (no provider deployed it yet) used to
    commit first, and the deployment was saved under a name no model has: the model's calls lost it."""
    import catalog.services.providers as providers_module

    azure = provider_create(actor=admin_user, data=_azure({}))
    locks = simulate_locks(monkeypatch)
    save = providers_module.save_named

    def another_transaction_renames_the_model_first(obj, **kwargs):
        locks.run_other(lambda: _rename(admin_user, "gpt-4o-mini", "gpt-4o-mini-2024"))
        return save(obj, **kwargs)

    monkeypatch.setattr(providers_module, "save_named", another_transaction_renames_the_model_first)

    provider_update(actor=admin_user, provider=azure, data=_azure({"gpt-4o-mini": "mini-prod"}))
    [renamed] = locks.resume()

    assert renamed is None
    assert Provider.objects.get(pk=azure.pk).deployments == {"gpt-4o-mini-2024": "mini-prod"}


@pytest.mark.django_db
def test_a_deployment_saved_while_its_model_is_renamed_waits_and_is_refused_simulated(admin_user, catalog, monkeypatch):
    import catalog.services.models as models_module

    azure = provider_create(actor=admin_user, data=_azure({}))
    locks = simulate_locks(monkeypatch)
    save = models_module.save_named

    def locked_then_another_transaction_deploys_the_model(obj, **kwargs):
        locks.run_other(
            lambda: provider_update(
                actor=admin_user, provider=Provider.objects.get(pk=azure.pk), data=_azure({"gpt-4o-mini": "mini"})
            )
        )
        return save(obj, **kwargs)

    monkeypatch.setattr(models_module, "save_named", locked_then_another_transaction_deploys_the_model)

    _rename(admin_user, "gpt-4o-mini", "gpt-4o-mini-2024")
    [deployed] = locks.resume()

    assert isinstance(deployed, ValidationFailed), deployed
    assert "Unknown model “gpt-4o-mini”" in str(deployed.errors["deployments"])
    assert Provider.objects.get(pk=azure.pk).deployments == {}


@pytest.mark.django_db
def test_a_model_update_locks_its_new_name_then_itself_then_its_provider(admin_user, catalog, monkeypatch):
    locks = simulate_locks(monkeypatch)

    llm_model_update(
        actor=admin_user, model=catalog["gpt-4o-mini"], data=LlmModelInput(name="mini", provider="anthropic")
    )

    assert locks.taken == [
        ("advisory", "name:mini"),
        ("catalog.LlmModel", catalog["gpt-4o-mini"].pk),
        ("catalog.Provider", catalog["anthropic"].pk),
    ]


@pytest.mark.django_db
def test_a_provider_update_locks_the_models_it_deploys_before_itself(admin_user, catalog, monkeypatch):
    """A model's rename locks the model, then the providers deploying it: a provider's update that names models
    locks them before its own row is written."""
    azure = provider_create(actor=admin_user, data=_azure({}))
    locks = simulate_locks(monkeypatch)

    provider_update(actor=admin_user, provider=azure, data=_azure({"gpt-4o": "big", "gpt-4o-mini": "mini"}))

    assert locks.kinds() == ["catalog.LlmModel", "catalog.LlmModel"]
    assert [pk for _, pk in locks.taken] == sorted([catalog["gpt-4o"].pk, catalog["gpt-4o-mini"].pk])


# ---------- A key's 32-bit visible prefix: a collision draws again ----------


@pytest.mark.django_db
def test_a_key_whose_random_prefix_is_taken_is_issued_with_a_fresh_one(admin_client, monkeypatch):
    """key_generate draws `cp-` + 8 hex digits (unique): with 100,000 keys stored, about one issue in 43,000
    collides. That was a 500; now the key is drawn again, in the same format."""
    import catalog.keys as keys

    draws = itertools.chain(["deadbeef", "deadbeef", "deadbeef"], itertools.repeat("cafef00d"))
    monkeypatch.setattr(keys.secrets, "token_hex", lambda n: next(draws))

    first = post_json(admin_client, "/api/keys/", {"name": "one"})
    second = post_json(admin_client, "/api/keys/", {"name": "two"})

    assert (first.status_code, second.status_code) == (201, 201)
    assert sorted(ApiKey.objects.values_list("prefix", flat=True)) == ["cp-cafef00d", "cp-deadbeef"]
    secret = second.json()["secret"]
    assert secret.startswith("cp-cafef00d-")
    # The secret returned is the one stored (its hash), not one of the draws that collided.
    assert ApiKey.objects.get(prefix="cp-cafef00d").hashed_secret == keys.key_hash(secret)


@pytest.mark.django_db
def test_a_console_token_whose_random_prefix_is_taken_is_issued_with_a_fresh_one(admin_user, monkeypatch):
    import catalog.keys as keys

    draws = itertools.chain(["deadbeef", "deadbeef"], itertools.repeat("cafef00d"))
    monkeypatch.setattr(keys.secrets, "token_hex", lambda n: next(draws))

    console_token_create(actor=admin_user, user=admin_user, name="one")
    token, secret = console_token_create(actor=admin_user, user=admin_user, name="two")

    assert token.prefix == "cpt-cafef00d"
    assert ConsoleToken.objects.get(pk=token.pk).hashed_secret == keys.key_hash(secret)


@pytest.mark.django_db
def test_a_prefix_that_keeps_colliding_is_not_drawn_for_ever(admin_user, monkeypatch):
    from django.db import IntegrityError

    import catalog.keys as keys
    from catalog.services._shared import KEY_DRAWS

    draws: list[int] = []

    def token_hex(n: int) -> str:
        draws.append(n)
        return "deadbeef"

    monkeypatch.setattr(keys.secrets, "token_hex", token_hex)
    console_token_create(actor=admin_user, user=admin_user, name="one")
    draws.clear()

    with pytest.raises(IntegrityError):
        console_token_create(actor=admin_user, user=admin_user, name="two")

    assert len(draws) == KEY_DRAWS


@pytest.mark.production
@pytest.mark.django_db(transaction=True)
def test_a_model_renamed_while_a_deployment_names_it_waits_and_carries_it_over_pg(admin_user, catalog, monkeypatch):
    """T1 provider_update(deployments {gpt-4o-mini}) locks gpt-4o-mini ... T2 renames it: waits ... T1 COMMIT; T2
    moves the deployment to the new name. (Before: T2 committed first, T1 saved the old name.)"""
    import catalog.services.providers as providers_module

    azure = provider_create(actor=admin_user, data=_azure({}))
    pause, save = Pause(), providers_module.save_named

    def pause_then_save(obj, **kwargs):
        pause()
        return save(obj, **kwargs)

    monkeypatch.setattr(providers_module, "save_named", pause_then_save)

    outcome, blocked = race(
        lambda: provider_update(
            actor=admin_user, provider=Provider.objects.get(pk=azure.pk), data=_azure({"gpt-4o-mini": "mini-prod"})
        ),
        lambda: _rename(admin_user, "gpt-4o-mini", "gpt-4o-mini-2024"),
        pause,
    )

    assert blocked is True
    assert outcome == {"first": "ok", "second": "ok"}
    assert Provider.objects.get(pk=azure.pk).deployments == {"gpt-4o-mini-2024": "mini-prod"}
