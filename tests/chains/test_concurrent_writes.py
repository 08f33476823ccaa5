"""A chain and a write of a model it names, committed at once (PostgreSQL, READ COMMITTED).

chain_create and chain_update lock the models and providers they resolve; a model's delete, and its update
(a provider move), lock the model first. So a chain never names a model deleted meanwhile (a foreign key failing
at COMMIT: a 500) and never falls back to itself.

`*_simulated` tests run the other transaction at the exact point of the interleaving, on SQLite, with
PostgreSQL's locks simulated (tests/helpers/simulated_locks.py); `*_pg` tests race two real transactions
(production mode only, as tests/catalog/test_rename_locks.py).
"""

import pytest

from catalog.models import LlmModel
from catalog.services import LlmModelInput, llm_model_delete, llm_model_update
from chains.models import ChainEntry, FallbackChain
from chains.selectors import chain_list
from chains.services import ChainInput, EntryInput, chain_create
from core.errors import ConflictError, ValidationFailed
from tests.helpers.races import Pause, race
from tests.helpers.simulated_locks import simulate_locks


def _backup() -> FallbackChain:
    return chain_create(
        actor=None, data=ChainInput(name="backup", source_model="gpt-4o", entries=[EntryInput("claude-sonnet")])
    )


def _self_fallbacks() -> list[str]:
    source = LlmModel.objects.get(name="gpt-4o")
    selfish = ChainEntry.objects.filter(chain__source_model=source, model=source, provider_id=source.provider_id)
    return list(selfish.values_list("chain__name", flat=True))


@pytest.mark.django_db
def test_a_model_deleted_while_a_chain_names_it_waits_and_is_refused_simulated(admin_user, catalog, monkeypatch):
    """chain_create resolved claude-sonnet; llm_model_delete (no chain named it yet) used to delete it and commit,
    and the chain's COMMIT failed on the deferred foreign key: a 500. Now the delete waits for the chain, then
    sees it (409)."""
    import chains.services as chain_services

    locks = simulate_locks(monkeypatch)
    write = chain_services.write_unique

    def another_transaction_deletes_the_entry_model_first(*args, **kwargs):
        locks.run_other(lambda: llm_model_delete(actor=admin_user, model=LlmModel.objects.get(name="claude-sonnet")))
        return write(*args, **kwargs)

    monkeypatch.setattr(chain_services, "write_unique", another_transaction_deletes_the_entry_model_first)

    _backup()
    [delete] = locks.resume()

    assert isinstance(delete, ConflictError), delete
    assert delete.errors == {"chains": ["backup"]}
    assert ChainEntry.objects.get().model.name == "claude-sonnet"


@pytest.mark.django_db
def test_a_chain_saved_while_its_source_moves_to_the_entrys_provider_is_refused_simulated(
    admin_user, catalog, monkeypatch
):
    """chain_create accepted "gpt-4o via anthropic" for gpt-4o (served by openai); a move of gpt-4o to anthropic
    waits for the chain (both lock gpt-4o), then is refused: the entry would be the chain's own source."""
    import chains.services as chain_services

    locks = simulate_locks(monkeypatch)
    write = chain_services.write_unique

    def move():
        model = LlmModel.objects.get(name="gpt-4o")
        llm_model_update(actor=admin_user, model=model, data=LlmModelInput(name="gpt-4o", provider="anthropic"))

    def another_transaction_moves_the_model_first(*args, **kwargs):
        locks.run_other(move)
        return write(*args, **kwargs)

    monkeypatch.setattr(chain_services, "write_unique", another_transaction_moves_the_model_first)

    chain_create(
        actor=admin_user,
        data=ChainInput(name="eu", source_model="gpt-4o", entries=[EntryInput("gpt-4o", "anthropic")]),
    )
    [moved] = locks.resume()

    assert isinstance(moved, ValidationFailed), moved
    assert LlmModel.objects.get(name="gpt-4o").provider.name == "openai"
    assert _self_fallbacks() == []


@pytest.mark.django_db
def test_a_model_moved_while_a_chain_names_it_makes_the_chain_wait_and_refuse_simulated(
    admin_user, catalog, monkeypatch
):
    """The other order: the move checked the chains (none) with gpt-4o locked; the chain waits for the move and
    is refused, its only entry now being its source."""
    import catalog.services.models as models_module

    locks = simulate_locks(monkeypatch)
    save = models_module.save_named

    def chain():
        return chain_create(
            actor=admin_user,
            data=ChainInput(name="eu", source_model="gpt-4o", entries=[EntryInput("gpt-4o", "anthropic")]),
        )

    def checked_then_another_transaction_saves_a_chain(obj, **kwargs):
        locks.run_other(chain)
        return save(obj, **kwargs)

    monkeypatch.setattr(models_module, "save_named", checked_then_another_transaction_saves_a_chain)

    model = LlmModel.objects.get(name="gpt-4o")
    llm_model_update(actor=admin_user, model=model, data=LlmModelInput(name="gpt-4o", provider="anthropic"))
    [saved] = locks.resume()

    assert isinstance(saved, ValidationFailed), saved
    assert "a chain cannot fall back to itself" in str(saved.errors)
    assert _self_fallbacks() == []


@pytest.mark.django_db
def test_a_chain_locks_its_models_before_its_providers_each_in_key_order(catalog, monkeypatch):
    """The lock order (docs/decisions.md, "One lock order"): models, then providers, then the scope target."""
    from catalog.services import TeamInput, team_create

    team = team_create(actor=None, data=TeamInput(name="payments"))
    locks = simulate_locks(monkeypatch)

    chain_create(
        actor=None,
        data=ChainInput(
            name="eu",
            source_model="gpt-4o",
            entries=[EntryInput("claude-sonnet"), EntryInput("gpt-4o-mini", "anthropic")],
            scope_type="team",
            scope_id=team.pk,
        ),
    )

    models = sorted(catalog[name].pk for name in ("gpt-4o", "gpt-4o-mini", "claude-sonnet"))
    assert locks.taken == [
        *[("catalog.LlmModel", pk) for pk in models],
        ("catalog.Provider", catalog["anthropic"].pk),
        ("catalog.Team", team.pk),
    ]


@pytest.mark.django_db
def test_the_chain_search_ignores_case_beyond_ascii(catalog):
    """PostgreSQL's icontains compares UPPER() of both sides (Unicode); SQLite's LIKE folds ASCII only."""
    chain_create(
        actor=None, data=ChainInput(name="Überlauf EU", source_model="gpt-4o", entries=[EntryInput("claude-sonnet")])
    )
    chain_create(
        actor=None, data=ChainInput(name="mini", source_model="gpt-4o-mini", entries=[EntryInput("claude-sonnet")])
    )

    assert [c.name for c in chain_list(search="überlauf")] == ["Überlauf EU"]
    assert [c.name for c in chain_list(search="ÜBERLAUF gpt")] == ["Überlauf EU"]
    assert [c.name for c in chain_list(search="GPT-4O", ordering="name")] == ["mini", "Überlauf EU"]
    assert list(chain_list(search="überlauf claude")) == []


@pytest.mark.production
@pytest.mark.django_db(transaction=True)
def test_a_model_deleted_while_a_chain_names_it_waits_and_is_refused_pg(admin_user, catalog, monkeypatch):
    """T1 chain_create resolves (locks) claude-sonnet ... T2 llm_model_delete(claude-sonnet) waits on it ... T1
    COMMIT; T2 sees the chain: 409. (Before: T2 deleted and committed, T1's COMMIT failed: a 500.)"""
    import chains.services as chain_services

    pause, write = Pause(), chain_services.write_unique

    def pause_then_write(*args, **kwargs):
        pause()
        return write(*args, **kwargs)

    monkeypatch.setattr(chain_services, "write_unique", pause_then_write)

    outcome, blocked = race(
        _backup,
        lambda: llm_model_delete(actor=admin_user, model=LlmModel.objects.get(name="claude-sonnet")),
        pause,
    )

    assert blocked is True
    assert outcome == {"first": "ok", "second": 409}


@pytest.mark.production
@pytest.mark.django_db(transaction=True)
def test_a_chain_saved_while_its_source_moves_to_the_entrys_provider_is_refused_pg(admin_user, catalog, monkeypatch):
    import chains.services as chain_services

    pause, write = Pause(), chain_services.write_unique

    def pause_then_write(*args, **kwargs):
        pause()
        return write(*args, **kwargs)

    monkeypatch.setattr(chain_services, "write_unique", pause_then_write)

    def move():
        model = LlmModel.objects.get(name="gpt-4o")
        llm_model_update(actor=admin_user, model=model, data=LlmModelInput(name="gpt-4o", provider="anthropic"))

    outcome, blocked = race(
        lambda: chain_create(
            actor=admin_user,
            data=ChainInput(name="eu", source_model="gpt-4o", entries=[EntryInput("gpt-4o", "anthropic")]),
        ),
        move,
        pause,
    )

    assert blocked is True
    assert outcome == {"first": "ok", "second": 400}
    assert _self_fallbacks() == []
