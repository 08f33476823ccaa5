"""Pairs of writes that used to take their locks in opposite orders (a PostgreSQL deadlock: one of the two was
aborted, a 409 "try again") now take them in the one order of docs/decisions.md, "One lock order": the later
one waits for the earlier, and both end as they would one after the other.

Each test races two real transactions (production mode only, as tests/catalog/test_rename_locks.py): the first
pauses holding its first locks, the second runs into them (the test sees it wait on a lock), then the first goes
on. Taken in the old order, the first would wait on the second's lock: a deadlock.
"""

from typing import Any

import pytest

from audit.models import AuditEvent
from catalog.models import Agent, ApiKey, Application, LlmModel, Provider, Team
from catalog.services import (
    AgentInput,
    ApiKeyInput,
    ApplicationInput,
    LlmModelInput,
    TeamInput,
    agent_create,
    api_key_revoke,
    api_key_update,
    application_create,
    application_delete,
    llm_model_create,
    llm_model_update,
    team_create,
    team_delete,
    user_delete,
)
from chains.models import FallbackChain
from chains.services import ChainInput, EntryInput, chain_create, chain_update
from routing.models import Alias
from routing.services import AliasInput, alias_create
from tests.factories import LlmModelFactory, ProviderFactory
from tests.factories.keys import make_key
from tests.helpers.api import patch_json
from tests.helpers.races import Pause, pause_after, pause_before, race

pytestmark = [pytest.mark.production, pytest.mark.django_db(transaction=True)]


def _status(statuses: dict[str, int], name: str, response: Any) -> None:
    statuses[name] = response.status_code


# ---------- The API's PATCH takes the service's earlier locks before the edited row ----------


def test_a_provider_patch_while_a_model_it_deploys_is_renamed_waits_and_keeps_the_new_name(
    admin_user, admin_client, catalog, monkeypatch
):
    """T1 renames gpt-4o-mini: locks the model ... T2 PATCHes azure (which deploys it): locks the model its
    deployments name first, so waits ... T1 locks azure, moves the deployment, COMMIT; T2 runs again on the row
    T1 saved. (Before: T2 locked azure first and then waited on the model, T1 waited on azure: a deadlock.)"""
    import catalog.services.models as models_module

    azure = ProviderFactory(
        name="azure",
        protocol="azure",
        base_url="https://example.openai.azure.com/openai",
        api_version="2024-10-21",
        deployments={"gpt-4o-mini": "mini-prod"},
    )
    pause, statuses = Pause(), {}
    pause_before(monkeypatch, models_module, "providers_deploying", pause)
    mini = catalog["gpt-4o-mini"]

    outcome, blocked = race(
        lambda: llm_model_update(
            actor=admin_user,
            model=LlmModel.objects.get(pk=mini.pk),
            data=LlmModelInput(name="gpt-4o-mini-2024", provider="openai"),
        ),
        lambda: _status(
            statuses, "patch", patch_json(admin_client, f"/api/providers/{azure.pk}/", {"read_timeout": 45})
        ),
        pause,
    )

    assert blocked is True
    assert outcome == {"first": "ok", "second": "ok"}
    assert statuses == {"patch": 200}
    azure.refresh_from_db()
    assert (azure.deployments, azure.read_timeout) == ({"gpt-4o-mini-2024": "mini-prod"}, 45)


def test_a_model_patch_to_a_name_an_alias_is_taking_waits_and_is_refused(
    admin_user, admin_client, catalog, monkeypatch
):
    """T1 creates alias "fast" → gpt-4o-mini: takes the name's lock ... T2 PATCHes gpt-4o-mini's name to "fast":
    takes the name's lock first, so waits ... T1 locks the model, COMMIT; T2 finds the name taken: 400.
    (Before: T2 locked the model row first, then waited on the name, while T1 waited on the model.)"""
    import routing.services as routing_services

    pause, statuses = Pause(), {}
    pause_after(monkeypatch, routing_services, "model_name_lock", pause)
    mini = catalog["gpt-4o-mini"]

    outcome, blocked = race(
        lambda: alias_create(actor=admin_user, data=AliasInput(name="fast", model="gpt-4o-mini")),
        lambda: _status(statuses, "patch", patch_json(admin_client, f"/api/models/{mini.pk}/", {"name": "fast"})),
        pause,
    )

    assert blocked is True
    assert outcome == {"first": "ok", "second": "ok"}
    assert statuses == {"patch": 400}
    assert LlmModel.objects.get(pk=mini.pk).name == "gpt-4o-mini"
    assert Alias.objects.get(name="fast").model_id == mini.pk


@pytest.mark.parametrize("kind", ["application", "key"])
def test_a_patch_of_a_row_naming_a_team_being_deleted_waits_and_saves_it_detached(
    kind, admin_user, admin_client, monkeypatch
):
    """T1 deletes team payments: locks it ... T2 PATCHes the name of an application (or a key) of that team: locks
    the team first (teams come before applications and keys), so waits ... T1 detaches the row, deletes the
    team, COMMIT; T2 runs again on the detached row: 200. (Before: T2 locked its row, then waited on the team,
    while T1 waited on the row to detach it.)"""
    import catalog.services.principals as principals

    team = team_create(actor=admin_user, data=TeamInput(name="payments"))
    if kind == "application":
        row: Any = application_create(actor=admin_user, data=ApplicationInput(name="checkout", team="payments"))
        url = f"/api/applications/{row.pk}/"
    else:
        row = make_key(user=admin_user, actor=admin_user, name="ci", team=team).key
        url = f"/api/keys/{row.pk}/"
    pause, statuses = Pause(), {}
    pause_after(monkeypatch, principals, "scope_references", pause)

    outcome, blocked = race(
        lambda: team_delete(actor=admin_user, team=Team.objects.get(pk=team.pk)),
        lambda: _status(statuses, "patch", patch_json(admin_client, url, {"name": "renamed"})),
        pause,
    )

    assert blocked is True
    assert outcome == {"first": "ok", "second": "ok"}
    assert statuses == {"patch": 200}
    row.refresh_from_db()
    assert (row.name, row.team_id) == ("renamed", None)


def test_an_agent_patch_while_its_application_is_deleted_waits_and_saves_it_detached(
    admin_user, admin_client, monkeypatch
):
    """As above, one level down: an agent's PATCH locks its application before the agent."""
    import catalog.services.principals as principals

    application = application_create(actor=admin_user, data=ApplicationInput(name="checkout"))
    agent = agent_create(actor=admin_user, data=AgentInput(name="refunds-bot", application="checkout"))
    pause, statuses = Pause(), {}
    pause_after(monkeypatch, principals, "scope_references", pause)

    outcome, blocked = race(
        lambda: application_delete(actor=admin_user, application=Application.objects.get(pk=application.pk)),
        lambda: _status(statuses, "patch", patch_json(admin_client, f"/api/agents/{agent.pk}/", {"name": "renamed"})),
        pause,
    )

    assert blocked is True
    assert outcome == {"first": "ok", "second": "ok"}
    assert statuses == {"patch": 200}
    assert Agent.objects.filter(pk=agent.pk).values_list("name", "application_id").get() == ("renamed", None)


# ---------- A model's update locks every provider it locks in one query, in key order ----------


def test_two_renames_each_deploying_in_the_others_provider_both_commit(admin_user, monkeypatch):
    """Model a is served by azure-2 and deployed in azure-1, model b the other way round. T1 renames a: locks both
    providers ... T2 renames b: waits on the first provider ... T1 COMMIT; T2 goes on. (Before: T1 locked its own
    provider, azure-2, then azure-1 to move the deployment; T2 azure-1 then azure-2: a deadlock.)"""
    import catalog.services.models as models_module

    azure = {"base_url": "https://example.openai.azure.com/openai", "protocol": "azure", "api_version": "2024-10-21"}
    first = ProviderFactory(name="azure-1", **azure)
    second = ProviderFactory(name="azure-2", **azure)
    a = LlmModelFactory(name="model-a", provider=second)
    b = LlmModelFactory(name="model-b", provider=first)
    Provider.objects.filter(pk=first.pk).update(deployments={"model-a": "a-prod"})
    Provider.objects.filter(pk=second.pk).update(deployments={"model-b": "b-prod"})
    pause = Pause()
    pause_before(monkeypatch, models_module, "save_named", pause)

    outcome, blocked = race(
        lambda: llm_model_update(
            actor=admin_user,
            model=LlmModel.objects.get(pk=a.pk),
            data=LlmModelInput(name="model-a2", provider="azure-2"),
        ),
        lambda: llm_model_update(
            actor=admin_user,
            model=LlmModel.objects.get(pk=b.pk),
            data=LlmModelInput(name="model-b2", provider="azure-1"),
        ),
        pause,
    )

    assert blocked is True
    assert outcome == {"first": "ok", "second": "ok"}
    assert Provider.objects.get(pk=first.pk).deployments == {"model-a2": "a-prod"}
    assert Provider.objects.get(pk=second.pk).deployments == {"model-b2": "b-prod"}


# ---------- The admin ----------


def test_an_admin_rename_to_a_name_being_created_waits_and_is_refused(admin_user, admin_client, catalog, monkeypatch):
    """T1 creates model "fast" on openai: takes the name's lock ... T2 saves gpt-4o-mini's change form renamed
    "fast": its validation's locks are released when it ends, so T2 waits on the name ... T1 locks openai,
    COMMIT; T2 finds the name taken. (Before: the form's validation kept openai locked while T2 waited on the
    name, and T1 waited on openai.)"""
    import catalog.services.models as models_module

    pause, statuses = Pause(), {}
    pause_after(monkeypatch, models_module, "model_name_lock", pause)
    mini = catalog["gpt-4o-mini"]
    form = {
        "name": "fast",
        "provider": catalog["openai"].pk,
        "input_price_per_mtok": "0",
        "output_price_per_mtok": "0",
        "context_window": "128000",
        "max_output_tokens": "4096",
    }
    url = f"/admin/catalog/llmmodel/{mini.pk}/change/"

    outcome, blocked = race(
        lambda: llm_model_create(actor=admin_user, data=LlmModelInput(name="fast", provider="openai")),
        lambda: _status(statuses, "change", admin_client.post(url, form)),
        pause,
    )

    assert blocked is True
    assert outcome == {"first": "ok", "second": "ok"}
    assert statuses == {"change": 302}  # back to the form, with the service's refusal as a message
    assert LlmModel.objects.get(pk=mini.pk).name == "gpt-4o-mini"
    assert LlmModel.objects.filter(name="fast").exclude(pk=mini.pk).exists()


def test_a_bulk_revoke_locks_every_selected_key_before_it_revokes_the_first(admin_user, admin_client, monkeypatch):
    """T1 renames key old: locks it ... T2 revokes new and old from the admin's list: locks both first, so waits
    on old before it writes anything ... T1 audits, COMMIT; T2 revokes both. (Before: T2 revoked new first, and
    its audit event took the audit log's lock, then waited on old, while T1 waited on the audit log.)"""
    import catalog.services.keys as keys_module

    old = make_key(user=admin_user, actor=admin_user, name="old").key
    new = make_key(user=admin_user, actor=admin_user, name="new").key  # listed (and revoked) first: newest first
    pause, statuses = Pause(), {}
    pause_before(monkeypatch, keys_module, "audit_update", pause)

    outcome, blocked = race(
        lambda: api_key_update(actor=admin_user, key=ApiKey.objects.get(pk=old.pk), data=ApiKeyInput(name="old-ci")),
        lambda: _status(
            statuses,
            "revoke",
            admin_client.post("/admin/catalog/apikey/", {"action": "revoke", "_selected_action": [old.pk, new.pk]}),
        ),
        pause,
    )

    assert blocked is True
    assert outcome == {"first": "ok", "second": "ok"}
    assert statuses == {"revoke": 302}
    assert [(key.name, key.revoked_at is not None) for key in ApiKey.objects.order_by("pk")] == [
        ("old-ci", True),
        ("new", True),
    ]
    assert AuditEvent.objects.filter(action="api_key.revoke").count() == 2


# ---------- A user's delete locks the rows it detaches before the user ----------


def test_a_user_deleted_while_a_chain_they_created_is_scoped_to_them_waits_and_is_refused(
    admin_user, django_user_model, catalog, monkeypatch
):
    """T1 scopes bob's chain to bob: locks the chain ... T2 deletes bob: locks the chains bob created first (the
    delete sets their creator to null), so waits ... T1 locks bob, COMMIT; T2 sees the chain scoped to bob: 409.
    (Before: T2 locked bob, then waited on the chain to null its creator, while T1 waited on bob.)"""
    import chains.services as chain_services

    bob = django_user_model.objects.create_user(username="bob", password="x")
    chain = chain_create(
        actor=bob, data=ChainInput(name="bob's", source_model="gpt-4o", entries=[EntryInput("claude-sonnet")])
    )
    pause = Pause()
    pause_before(monkeypatch, chain_services, "scope_validate", pause)
    scoped = ChainInput(
        name="bob's", source_model="gpt-4o", entries=[EntryInput("claude-sonnet")], scope_type="user", scope_id=bob.pk
    )

    outcome, blocked = race(
        lambda: chain_update(actor=admin_user, chain_id=chain.pk, version=chain.version, data=scoped),
        lambda: user_delete(actor=admin_user, user=django_user_model.objects.get(pk=bob.pk)),
        pause,
    )

    assert blocked is True
    assert outcome == {"first": "ok", "second": 409}
    assert django_user_model.objects.filter(pk=bob.pk).exists()
    assert FallbackChain.objects.get(pk=chain.pk).scope_id == bob.pk


def test_an_admin_bulk_delete_of_a_user_locks_the_chains_they_created_before_the_user(
    admin_user, admin_client, django_user_model, catalog, monkeypatch
):
    """As above, with the admin's "delete selected": the action locks what every delete of it locks, in order,
    before the first one (the chains a delete nulls, then the users). T2 waits on the chain; T1 COMMIT; the delete
    is refused (a message, 302). (Before: the action locked bob first, then waited on the chain.)"""
    import chains.services as chain_services

    bob = django_user_model.objects.create_user(username="bob", password="x")
    chain = chain_create(
        actor=bob, data=ChainInput(name="bob's", source_model="gpt-4o", entries=[EntryInput("claude-sonnet")])
    )
    pause, statuses = Pause(), {}
    pause_before(monkeypatch, chain_services, "scope_validate", pause)
    scoped = ChainInput(
        name="bob's", source_model="gpt-4o", entries=[EntryInput("claude-sonnet")], scope_type="user", scope_id=bob.pk
    )
    delete = {"action": "delete_selected", "_selected_action": [bob.pk], "post": "yes"}

    outcome, blocked = race(
        lambda: chain_update(actor=admin_user, chain_id=chain.pk, version=chain.version, data=scoped),
        lambda: _status(statuses, "delete", admin_client.post("/admin/auth/user/", delete)),
        pause,
    )

    assert blocked is True
    assert outcome == {"first": "ok", "second": "ok"}
    assert statuses == {"delete": 302}
    assert django_user_model.objects.filter(pk=bob.pk).exists()
    assert FallbackChain.objects.get(pk=chain.pk).scope_id == bob.pk


def test_an_admin_bulk_delete_of_two_teams_locks_the_keys_they_detach_before_the_first_delete(
    admin_user, admin_client, monkeypatch
):
    """T1 revokes a key of team beta: locks the key ... T2 deletes teams alpha and beta from the admin's list: locks
    both teams, their applications and keys first, so waits on the key before it writes anything ... T1 audits,
    COMMIT; T2 deletes both. (Before: alpha's delete audited, taking the audit log's lock, then beta's waited on
    the key to detach it, while T1 waited on the audit log.)"""
    import catalog.services._shared as shared

    alpha = team_create(actor=admin_user, data=TeamInput(name="alpha"))
    beta = team_create(actor=admin_user, data=TeamInput(name="beta"))
    key = make_key(user=admin_user, actor=admin_user, name="ci", team=beta).key
    pause, statuses = Pause(), {}
    pause_before(monkeypatch, shared, "audit_record", pause)
    delete = {"action": "delete_selected", "_selected_action": [alpha.pk, beta.pk], "post": "yes"}

    outcome, blocked = race(
        lambda: api_key_revoke(actor=admin_user, key=ApiKey.objects.get(pk=key.pk)),
        lambda: _status(statuses, "delete", admin_client.post("/admin/catalog/team/", delete)),
        pause,
    )

    assert blocked is True
    assert outcome == {"first": "ok", "second": "ok"}
    assert statuses == {"delete": 302}
    assert not Team.objects.exists()
    key.refresh_from_db()
    assert (key.team_id, key.revoked_at is not None) == (None, True)
