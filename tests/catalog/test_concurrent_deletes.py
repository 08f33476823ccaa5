"""A catalog row's delete and a write that names it, committed at once (PostgreSQL, READ COMMITTED).

The delete locks its row before it looks for references; every write that names the row (a foreign key, a scope
target, a key's owner) locks it as it resolves it. So one of the two waits for the other: the delete sees the new
reference (409), or the write finds the row gone (400). Never a key deleted with its owner, a scope naming a
deleted target, or a foreign key failing at COMMIT (a 500).

`*_simulated` tests run the other transaction at the exact point of the interleaving, on SQLite, with
PostgreSQL's locks simulated (tests/helpers/simulated_locks.py); `*_pg` tests race two real transactions
(production mode only, as tests/catalog/test_rename_locks.py).
"""

import pytest

from audit.models import AuditEvent
from catalog.models import ApiKey, Application, LlmModel, Provider, Team
from catalog.services import (
    ApplicationInput,
    LlmModelInput,
    TeamInput,
    application_create,
    application_delete,
    console_token_create,
    llm_model_create,
    provider_delete,
    team_create,
    team_delete,
    user_delete,
)
from chains.models import FallbackChain
from chains.services import ChainInput, EntryInput, chain_create
from core.errors import ConflictError, ValidationFailed
from tests.factories.keys import make_key
from tests.helpers.races import Pause, race
from tests.helpers.simulated_locks import simulate_locks


def _scoped_chain(team: Team) -> FallbackChain:
    return chain_create(
        actor=None,
        data=ChainInput(
            name="payments backup",
            source_model="gpt-4o",
            entries=[EntryInput("claude-sonnet")],
            scope_type="team",
            scope_id=team.pk,
        ),
    )


def _orphan_chains() -> list[str]:
    orphans = FallbackChain.objects.filter(scope_type="team").exclude(scope_id__in=Team.objects.values("pk"))
    return list(orphans.values_list("name", flat=True))


# ---------- A user's keys: never deleted with the user ----------


@pytest.mark.django_db
def test_a_key_the_users_check_missed_refuses_the_delete_it_is_not_deleted_with_the_user_simulated(
    admin_user, django_user_model, monkeypatch
):
    """Whatever issues a key after user_delete's check (a write that skips the user's lock), the database refuses
    the delete: ApiKey.user is PROTECT, no longer CASCADE, which deleted the key silently."""
    bob = django_user_model.objects.create_user(username="bob", password="x")
    import catalog.services.users as users_module

    check = users_module.api_keys_of_user
    issued: list[ApiKey] = []

    def check_then_a_key_is_issued(*, user):
        found = check(user=user)
        issued.append(make_key(user=bob, actor=admin_user, name="ci").key)
        return found

    monkeypatch.setattr(users_module, "api_keys_of_user", check_then_a_key_is_issued)

    with pytest.raises(ConflictError) as refused:
        user_delete(actor=admin_user, user=bob)

    # (The key, issued inside the refused delete's transaction here, is rolled back with it; on PostgreSQL it is
    # another transaction's, committed.)
    assert issued
    assert refused.value.status_code == 409
    assert django_user_model.objects.filter(pk=bob.pk).exists()


@pytest.mark.django_db
def test_a_key_issued_while_its_owner_is_deleted_waits_and_finds_the_owner_gone_simulated(
    admin_user, django_user_model, monkeypatch
):
    """user_delete locks the user before it looks for keys; issuing a key locks its owner: on PostgreSQL the
    issue waits for the delete's commit, then refuses (400), rather than being deleted with the user."""
    bob = django_user_model.objects.create_user(username="bob", password="x")
    import catalog.services.users as users_module

    locks = simulate_locks(monkeypatch)
    check = users_module.api_keys_of_user

    def check_then_another_transaction_issues_a_key(*, user):
        found = check(user=user)
        locks.run_other(lambda: make_key(user=bob, actor=admin_user, name="ci"))
        return found

    monkeypatch.setattr(users_module, "api_keys_of_user", check_then_another_transaction_issues_a_key)

    user_delete(actor=admin_user, user=bob)
    assert locks.waiting, "issuing the key did not wait for the user's delete"
    [issue] = locks.resume()

    assert isinstance(issue, ValidationFailed)
    assert issue.errors == {"user": ["A key needs an owner."]}
    assert not django_user_model.objects.filter(pk=bob.pk).exists()
    assert not ApiKey.objects.filter(name="ci").exists()


# ---------- Scope targets: no chain, rule or guardrail left scoped to a deleted one ----------


@pytest.mark.django_db
def test_a_chain_scoped_to_a_team_being_deleted_waits_and_is_refused_simulated(admin_user, catalog, monkeypatch):
    """team_delete found nothing scoped to the team; a chain scoped to it then: it waits for the delete (both
    lock the team) and finds the team gone. It used to be saved, scoped to a team that no longer exists."""
    team = team_create(actor=admin_user, data=TeamInput(name="payments"))
    import catalog.services.principals as principals

    locks = simulate_locks(monkeypatch)
    check = principals.scope_references

    def check_then_another_transaction_scopes_a_chain(*, scope_type, scope_id):
        found = check(scope_type=scope_type, scope_id=scope_id)
        locks.run_other(lambda: _scoped_chain(team))
        return found

    monkeypatch.setattr(principals, "scope_references", check_then_another_transaction_scopes_a_chain)

    team_delete(actor=admin_user, team=team)
    [chain] = locks.resume()

    assert isinstance(chain, ValidationFailed), chain
    assert chain.errors["scope"] == [f"No team with id {team.pk} exists."]
    assert _orphan_chains() == []


@pytest.mark.django_db
def test_a_team_deleted_while_a_chain_is_scoped_to_it_waits_and_is_refused_simulated(admin_user, catalog, monkeypatch):
    """The other order: the chain's scope check saw (and locked) the team; the delete waits for the chain's commit
    and then sees it (409)."""
    team = team_create(actor=admin_user, data=TeamInput(name="payments"))
    import chains.services as chain_services

    locks = simulate_locks(monkeypatch)
    validate = chain_services.scope_validate

    def validate_then_another_transaction_deletes_the_team(**kwargs):
        scope = validate(**kwargs)
        locks.run_other(lambda: team_delete(actor=admin_user, team=Team.objects.get(pk=team.pk)))
        return scope

    monkeypatch.setattr(chain_services, "scope_validate", validate_then_another_transaction_deletes_the_team)

    _scoped_chain(team)
    [delete] = locks.resume()

    assert isinstance(delete, ConflictError), delete
    assert delete.errors == {"chains": ["payments backup"]}
    assert Team.objects.filter(pk=team.pk).exists()
    assert _orphan_chains() == []


# ---------- A foreign key to a row deleted meanwhile: a 400 or a 409, never a failed COMMIT ----------


def _write_waits_for_the_delete(monkeypatch, *, module, hook: str, write, delete) -> list:
    """Run `write`; where it has resolved its references (at `module.hook`), the other transaction runs `delete`.
    Returns the delete's outcome once `write` committed, asserting it had to wait."""
    locks = simulate_locks(monkeypatch)
    original = getattr(module, hook)

    def resolved_then_another_transaction_deletes(*args, **kwargs):
        locks.run_other(delete)
        return original(*args, **kwargs)

    monkeypatch.setattr(module, hook, resolved_then_another_transaction_deletes)
    write()
    assert locks.waiting, "the delete did not wait for the write that names its row"
    return locks.resume()


@pytest.mark.django_db
def test_a_model_saved_while_its_provider_is_deleted_keeps_the_provider_simulated(admin_user, monkeypatch):
    import catalog.services.models as models_module

    provider = Provider.objects.create(name="mistral", base_url="http://127.0.0.1:9/v1")
    [delete] = _write_waits_for_the_delete(
        monkeypatch,
        module=models_module,
        hook="save_named",
        write=lambda: llm_model_create(actor=admin_user, data=LlmModelInput(name="mistral-large", provider="mistral")),
        delete=lambda: provider_delete(actor=admin_user, provider=Provider.objects.get(pk=provider.pk)),
    )

    assert isinstance(delete, ConflictError), delete
    assert LlmModel.objects.get(name="mistral-large").provider_id == provider.pk


@pytest.mark.django_db
def test_an_application_saved_while_its_team_is_deleted_is_detached_by_the_delete_simulated(admin_user, monkeypatch):
    import catalog.services.principals as principals

    team = team_create(actor=admin_user, data=TeamInput(name="payments"))
    [delete] = _write_waits_for_the_delete(
        monkeypatch,
        module=principals,
        hook="save_named",
        write=lambda: application_create(actor=admin_user, data=ApplicationInput(name="billing", team="payments")),
        delete=lambda: team_delete(actor=admin_user, team=Team.objects.get(pk=team.pk)),
    )

    assert delete is None  # the team deleted after the application's commit: SET_NULL, and recorded
    assert Application.objects.get(name="billing").team_id is None
    assert AuditEvent.objects.get(action="team.delete").before == {"name": "payments", "applications": ["billing"]}


@pytest.mark.django_db
def test_a_key_issued_while_its_team_is_deleted_is_detached_by_the_delete_simulated(admin_user, monkeypatch):
    import catalog.services.keys as keys_module

    team = team_create(actor=admin_user, data=TeamInput(name="payments"))
    [delete] = _write_waits_for_the_delete(
        monkeypatch,
        module=keys_module,
        hook="_api_key_owner_checked",
        write=lambda: make_key(user=admin_user, actor=admin_user, name="billing", team=team),
        delete=lambda: team_delete(actor=admin_user, team=Team.objects.get(pk=team.pk)),
    )

    assert delete is None
    key = ApiKey.objects.get(name="billing")
    assert key.team_id is None
    assert AuditEvent.objects.get(action="team.delete").before == {"name": "payments", "api_keys": [str(key)]}


# ---------- What a delete detaches (SET_NULL) is in its audit event ----------


@pytest.mark.django_db
def test_deleting_a_team_records_the_applications_and_keys_it_detaches(admin_user):
    team = team_create(actor=admin_user, data=TeamInput(name="payments"))
    application_create(actor=admin_user, data=ApplicationInput(name="checkout", team="payments"))
    key = make_key(user=admin_user, actor=admin_user, name="billing", team=team).key

    team_delete(actor=admin_user, team=team)

    key.refresh_from_db()
    assert key.team_id is None
    event = AuditEvent.objects.get(action="team.delete")
    assert event.before == {"name": "payments", "applications": ["checkout"], "api_keys": [str(key)]}


@pytest.mark.django_db
def test_deleting_an_application_records_the_agents_and_keys_it_detaches(admin_user):
    from catalog.services import AgentInput, agent_create

    application = application_create(actor=admin_user, data=ApplicationInput(name="checkout"))
    agent_create(actor=admin_user, data=AgentInput(name="refunds", application="checkout"))
    key = make_key(user=admin_user, actor=admin_user, name="billing", application=application).key

    application_delete(actor=admin_user, application=application)

    event = AuditEvent.objects.get(action="application.delete")
    assert event.before == {"name": "checkout", "team": None, "agents": ["refunds"], "api_keys": [str(key)]}


@pytest.mark.django_db
def test_deleting_a_user_records_the_console_tokens_deleted_with_them(admin_user, django_user_model):
    bob = django_user_model.objects.create_user(username="bob", password="x")
    token, _ = console_token_create(actor=admin_user, user=bob, name="ci script")

    user_delete(actor=admin_user, user=bob)

    event = AuditEvent.objects.get(action="user.delete")
    assert event.before["console_tokens"] == [str(token)]


# ---------- The same races on PostgreSQL ----------


@pytest.mark.production
@pytest.mark.django_db(transaction=True)
def test_a_key_issued_while_its_owner_is_deleted_waits_and_finds_the_owner_gone_pg(
    admin_user, django_user_model, monkeypatch
):
    """T1 user_delete(bob): locks bob, no keys ... T2 issues bob a key: waits on bob's row ... T1 DELETE, COMMIT;
    T2 finds no owner: 400. (Before: T2 committed, T1's delete took the key with it.)"""
    bob = django_user_model.objects.create_user(username="bob", password="x")
    import catalog.services.users as users_module

    pause, check = Pause(), users_module.api_keys_of_user

    def check_then_pause(*, user):
        found = check(user=user)
        pause()
        return found

    monkeypatch.setattr(users_module, "api_keys_of_user", check_then_pause)

    outcome, blocked = race(
        lambda: user_delete(actor=admin_user, user=django_user_model.objects.get(pk=bob.pk)),
        lambda: make_key(user=django_user_model.objects.get(pk=bob.pk), actor=admin_user, name="ci"),
        pause,
    )

    assert blocked is True
    assert outcome == {"first": "ok", "second": 400}
    assert not ApiKey.objects.filter(name="ci").exists()


@pytest.mark.production
@pytest.mark.django_db(transaction=True)
def test_a_chain_scoped_to_a_team_being_deleted_waits_and_is_refused_pg(admin_user, catalog, monkeypatch):
    team = team_create(actor=admin_user, data=TeamInput(name="payments"))
    import catalog.services.principals as principals

    pause, check = Pause(), principals.scope_references

    def check_then_pause(*, scope_type, scope_id):
        found = check(scope_type=scope_type, scope_id=scope_id)
        pause()
        return found

    monkeypatch.setattr(principals, "scope_references", check_then_pause)

    outcome, blocked = race(
        lambda: team_delete(actor=admin_user, team=Team.objects.get(pk=team.pk)), lambda: _scoped_chain(team), pause
    )

    assert blocked is True
    assert outcome == {"first": "ok", "second": 400}
    assert _orphan_chains() == []


@pytest.mark.production
@pytest.mark.django_db(transaction=True)
def test_a_team_deleted_while_a_chain_is_scoped_to_it_waits_and_is_refused_pg(admin_user, catalog, monkeypatch):
    team = team_create(actor=admin_user, data=TeamInput(name="payments"))
    import chains.services as chain_services

    pause, validate = Pause(), chain_services.scope_validate

    def validate_then_pause(**kwargs):
        scope = validate(**kwargs)
        pause()
        return scope

    monkeypatch.setattr(chain_services, "scope_validate", validate_then_pause)

    outcome, blocked = race(
        lambda: _scoped_chain(team), lambda: team_delete(actor=admin_user, team=Team.objects.get(pk=team.pk)), pause
    )

    assert blocked is True
    assert outcome == {"first": "ok", "second": 409}
    assert Team.objects.filter(pk=team.pk).exists()
