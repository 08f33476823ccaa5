"""An alert rule names its provider and model as text; a rename of either, committed meanwhile, must not leave it
naming a name nothing has (PostgreSQL, READ COMMITTED).

The rule's validation locks the model and provider rows it names; a rename locks the row it renames, then the
rules that name it. So the rename waits for the rule and carries it over, or the rule waits and finds the old
name unknown (400).

`*_simulated` tests run the other transaction at the exact point of the interleaving, on SQLite, with
PostgreSQL's locks simulated (tests/helpers/simulated_locks.py); `*_pg` tests race two real transactions
(production mode only, as tests/catalog/test_rename_locks.py).
"""

import pytest

from alerts.models import AlertRule
from alerts.services import RuleInput, alert_rule_create, alert_rule_update
from catalog.models import LlmModel
from catalog.services import LlmModelInput, llm_model_update
from core.errors import ValidationFailed
from tests.helpers.races import Pause, race
from tests.helpers.simulated_locks import simulate_locks

RULE = RuleInput(name="mini degraded", kind="degraded", model="gpt-4o-mini")


def _rename(actor, old: str, new: str) -> None:
    model = LlmModel.objects.select_related("provider").get(name=old)
    llm_model_update(actor=actor, model=model, data=LlmModelInput(name=new, provider=model.provider.name))


def _rules_naming_no_model() -> list[tuple[str, str]]:
    models = set(LlmModel.objects.values_list("name", flat=True))
    return [(rule.name, rule.model) for rule in AlertRule.objects.all() if rule.model and rule.model not in models]


@pytest.mark.django_db
def test_a_model_renamed_while_a_rule_names_it_waits_and_carries_the_rule_over_simulated(
    admin_user, catalog, monkeypatch
):
    """alert_rule_create validated "gpt-4o-mini"; the rename (no rule named it yet) used to commit first, and the
    rule was saved naming a model that no longer exists."""
    import alerts.services as alert_services

    locks = simulate_locks(monkeypatch)
    write = alert_services.write_unique

    def another_transaction_renames_the_model_first(*args, **kwargs):
        locks.run_other(lambda: _rename(admin_user, "gpt-4o-mini", "gpt-4o-mini-2024"))
        return write(*args, **kwargs)

    monkeypatch.setattr(alert_services, "write_unique", another_transaction_renames_the_model_first)

    alert_rule_create(actor=admin_user, data=RULE)
    [renamed] = locks.resume()

    assert renamed is None
    assert AlertRule.objects.get().model == "gpt-4o-mini-2024"
    assert _rules_naming_no_model() == []


@pytest.mark.django_db
def test_a_rule_saved_while_its_model_is_renamed_waits_and_is_refused_simulated(admin_user, catalog, monkeypatch):
    """The other order: the rename moved the rules naming gpt-4o-mini (none); the rule waits for it, then finds no
    model of that name."""
    import catalog.services.models as models_module

    locks = simulate_locks(monkeypatch)
    save = models_module.save_named

    def locked_then_another_transaction_saves_a_rule(obj, **kwargs):
        locks.run_other(lambda: alert_rule_create(actor=admin_user, data=RULE))
        return save(obj, **kwargs)

    monkeypatch.setattr(models_module, "save_named", locked_then_another_transaction_saves_a_rule)

    _rename(admin_user, "gpt-4o-mini", "gpt-4o-mini-2024")
    [rule] = locks.resume()

    assert isinstance(rule, ValidationFailed), rule
    assert rule.errors == {"model": ["Unknown model “gpt-4o-mini”."]}
    assert _rules_naming_no_model() == []


@pytest.mark.django_db
def test_a_rule_update_locks_the_model_and_provider_before_the_rule(admin_user, catalog, monkeypatch):
    """A rename locks the model, then the rules naming it; an update of a rule locks in the same order (model,
    provider, rule), so the two cannot deadlock."""
    rule = alert_rule_create(actor=admin_user, data=RuleInput(name="open", kind="circuit_open"))
    locks = simulate_locks(monkeypatch)

    alert_rule_update(
        actor=admin_user,
        rule_id=rule.pk,
        data=RuleInput(name="open", kind="circuit_open", provider="openai", model="gpt-4o"),
    )

    assert locks.taken == [
        ("catalog.LlmModel", catalog["gpt-4o"].pk),
        ("catalog.Provider", catalog["openai"].pk),
        ("alerts.AlertRule", rule.pk),
    ]


@pytest.mark.production
@pytest.mark.django_db(transaction=True)
def test_a_model_renamed_while_a_rule_names_it_waits_and_carries_the_rule_over_pg(admin_user, catalog, monkeypatch):
    """T1 alert_rule_create(model gpt-4o-mini) locks the model ... T2 renames it: waits ... T1 COMMIT; T2 moves the
    rule to the new name. (Before: T2 committed first and T1 saved a rule naming the old name.)"""
    import alerts.services as alert_services

    pause, write = Pause(), alert_services.write_unique

    def pause_then_write(*args, **kwargs):
        pause()
        return write(*args, **kwargs)

    monkeypatch.setattr(alert_services, "write_unique", pause_then_write)

    outcome, blocked = race(
        lambda: alert_rule_create(actor=admin_user, data=RULE),
        lambda: _rename(admin_user, "gpt-4o-mini", "gpt-4o-mini-2024"),
        pause,
    )

    assert blocked is True
    assert outcome == {"first": "ok", "second": "ok"}
    assert AlertRule.objects.get().model == "gpt-4o-mini-2024"
