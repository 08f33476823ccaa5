"""Routing rows and catalog writes committed at once (PostgreSQL, READ COMMITTED).

A rule, a guardrail or an alias locks the models it resolves (a model's delete locks the model first, so one waits
for the other: 409 or 400, never a foreign key failing at COMMIT); an alias and a model take one lock per name
before each checks the other's table (no constraint spans the two), so they cannot end up sharing a name.

`*_simulated` tests run the other transaction at the exact point of the interleaving, on SQLite, with
PostgreSQL's locks simulated (tests/helpers/simulated_locks.py); `*_pg` tests race two real transactions
(production mode only, as tests/catalog/test_rename_locks.py).
"""

from typing import Any

import pytest

from catalog.models import LlmModel
from catalog.services import LlmModelInput, llm_model_create, llm_model_delete, llm_model_update
from core.errors import ConflictError, ValidationFailed
from routing.models import Alias, Guardrail, RoutingRule
from routing.services import (
    AliasInput,
    GuardrailInput,
    RoutingRuleInput,
    alias_create,
    guardrail_create,
    routing_rule_create,
)
from tests.helpers.races import Pause, pause_before, race
from tests.helpers.simulated_locks import simulate_locks


def _shared_names() -> set[str]:
    return set(Alias.objects.values_list("name", flat=True)) & set(LlmModel.objects.values_list("name", flat=True))


@pytest.mark.django_db
def test_a_model_created_while_an_alias_takes_its_name_waits_and_is_refused_simulated(admin_user, catalog, monkeypatch):
    """alias_create checked no model is called "fast"; llm_model_create("fast") used to check no alias is, and
    both committed. Both now lock the name first: the model waits for the alias, then sees it."""
    import routing.services as routing_services

    locks = simulate_locks(monkeypatch)
    save = routing_services.save_unique

    def another_transaction_creates_the_model_first(obj, **kwargs):
        if isinstance(obj, Alias):
            locks.run_other(
                lambda: llm_model_create(actor=admin_user, data=LlmModelInput(name="fast", provider="openai"))
            )
        return save(obj, **kwargs)

    monkeypatch.setattr(routing_services, "save_unique", another_transaction_creates_the_model_first)

    alias_create(actor=admin_user, data=AliasInput(name="fast", model="gpt-4o-mini"))
    [model] = locks.resume()

    assert isinstance(model, ValidationFailed), model
    assert model.errors == {"name": ["“fast” is already an alias; choose another name."]}
    assert _shared_names() == set()


@pytest.mark.django_db
def test_an_alias_created_while_a_model_takes_its_name_waits_and_is_refused_simulated(admin_user, catalog, monkeypatch):
    """The other order, through a rename: llm_model_update locks the new name before its checks."""
    import catalog.services.models as models_module

    locks = simulate_locks(monkeypatch)
    save = models_module.save_named

    def checked_then_another_transaction_creates_the_alias(obj, **kwargs):
        locks.run_other(lambda: alias_create(actor=admin_user, data=AliasInput(name="fast", model="gpt-4o")))
        return save(obj, **kwargs)

    monkeypatch.setattr(models_module, "save_named", checked_then_another_transaction_creates_the_alias)

    model = LlmModel.objects.get(name="gpt-4o-mini")
    llm_model_update(actor=admin_user, model=model, data=LlmModelInput(name="fast", provider="openai"))
    [alias] = locks.resume()

    assert isinstance(alias, ValidationFailed), alias
    assert alias.errors == {"name": ["“fast” is the name of a model; an alias cannot shadow it."]}
    assert _shared_names() == set()


@pytest.mark.django_db
@pytest.mark.parametrize("kind", ["routing rule", "guardrail"])
def test_a_model_deleted_while_a_routing_row_names_it_waits_and_is_refused_simulated(
    admin_user, catalog, monkeypatch, kind
):
    """The rule (or guardrail) resolved claude-sonnet, then llm_model_delete found no reference: its COMMIT used to
    fail on the deferred foreign key (a 500). Now the delete waits for the rule and sees it (409)."""
    import routing.services as routing_services

    locks = simulate_locks(monkeypatch)
    validate = routing_services.scope_validate

    def resolved_then_another_transaction_deletes_the_model(**kwargs):
        scope = validate(**kwargs)
        locks.run_other(lambda: llm_model_delete(actor=admin_user, model=LlmModel.objects.get(name="claude-sonnet")))
        return scope

    monkeypatch.setattr(routing_services, "scope_validate", resolved_then_another_transaction_deletes_the_model)

    if kind == "routing rule":
        data = RoutingRuleInput(name="cheaper", source_model="gpt-4o", target_model="claude-sonnet")
        routing_rule_create(actor=admin_user, data=data)
    else:
        data = GuardrailInput(name="no sonnet", action="deny", model="claude-sonnet", message="Not here.")
        guardrail_create(actor=admin_user, data=data)
    [delete] = locks.resume()

    assert isinstance(delete, ConflictError), delete
    assert LlmModel.objects.filter(name="claude-sonnet").exists()
    assert RoutingRule.objects.count() + Guardrail.objects.count() == 1


@pytest.mark.django_db
def test_a_rule_locks_both_its_models_in_key_order(catalog, monkeypatch):
    """Two rules naming the same two models the other way round lock them in one order: no deadlock."""
    locks = simulate_locks(monkeypatch)

    routing_rule_create(
        actor=None, data=RoutingRuleInput(name="down", source_model="gpt-4o-mini", target_model="gpt-4o")
    )

    assert locks.taken == [("catalog.LlmModel", catalog["gpt-4o"].pk), ("catalog.LlmModel", catalog["gpt-4o-mini"].pk)]


@pytest.mark.production
@pytest.mark.django_db(transaction=True)
def test_a_model_created_while_an_alias_takes_its_name_waits_and_is_refused_pg(admin_user, catalog, monkeypatch):
    """T1 alias_create("fast"): locks the name, no model "fast" ... T2 llm_model_create("fast") waits on the name
    ... T1 COMMIT; T2 sees the alias: 400. (Before: both committed.)"""
    import routing.services as routing_services

    pause, save = Pause(), routing_services.save_unique

    def pause_then_save(obj, **kwargs):
        pause()
        return save(obj, **kwargs)

    monkeypatch.setattr(routing_services, "save_unique", pause_then_save)

    outcome, blocked = race(
        lambda: alias_create(actor=admin_user, data=AliasInput(name="fast", model="gpt-4o-mini")),
        lambda: llm_model_create(actor=admin_user, data=LlmModelInput(name="fast", provider="openai")),
        pause,
    )

    assert blocked is True
    assert outcome == {"first": "ok", "second": 400}
    assert _shared_names() == set()


@pytest.mark.production
@pytest.mark.django_db(transaction=True)
def test_a_model_deleted_while_a_rule_names_it_waits_and_is_refused_pg(admin_user, catalog, monkeypatch):
    import routing.services as routing_services

    pause, save = Pause(), routing_services.save_unique

    def pause_then_save(obj, **kwargs):
        pause()
        return save(obj, **kwargs)

    monkeypatch.setattr(routing_services, "save_unique", pause_then_save)

    outcome, blocked = race(
        lambda: routing_rule_create(
            actor=admin_user, data=RoutingRuleInput(name="cheaper", source_model="gpt-4o", target_model="claude-sonnet")
        ),
        lambda: llm_model_delete(actor=admin_user, model=LlmModel.objects.get(name="claude-sonnet")),
        pause,
    )

    assert blocked is True
    assert outcome == {"first": "ok", "second": 409}


@pytest.mark.production
@pytest.mark.django_db(transaction=True)
def test_two_catch_all_guardrails_for_one_scope_saved_at_once_one_waits_and_is_refused_pg(admin_user, monkeypatch):
    """T1 creates a deny-everything guardrail for the global scope: locks the (every model, global) pair, finds
    none ... T2 creates another for the same pair: waits on it ... T1 COMMIT; T2 sees T1's: 400. (Before: the two
    locked nothing in common, and both committed; the gateway applies only one.)"""
    import routing.services as routing_services

    pause = Pause()
    pause_before(monkeypatch, routing_services, "audit_record", pause)

    def deny(name: str) -> Any:
        return lambda: guardrail_create(
            actor=admin_user, data=GuardrailInput(name=name, action="deny", message="Maintenance until 14:00.")
        )

    outcome, blocked = race(deny("maintenance"), deny("freeze"), pause)

    assert blocked is True
    assert outcome == {"first": "ok", "second": 400}
    assert list(Guardrail.objects.values_list("name", flat=True)) == ["maintenance"]
