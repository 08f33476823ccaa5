"""A row naming the acting user (a chain's creator, the resilience defaults' editor, the admin's history entry)
had its foreign key checked by PostgreSQL at COMMIT (Django's foreign keys are DEFERRABLE INITIALLY DEFERRED):
`SELECT … FOR KEY SHARE` on the user, after the transaction's audit event took the audit log's lock. A write
holding that user FOR UPDATE (a rule scoped to them, a key issued to them) and then auditing waited on the audit
log while that COMMIT waited on the user: a deadlock. The service now locks the actor FOR KEY SHARE at the users'
place in the one lock order (`catalog.services.actor_locked`), and the admin writes its history after the commit.
Production mode only: two real transactions race on PostgreSQL.
"""

from typing import Any

import pytest

from catalog.services import ApiKeyInput, api_key_issue
from chains.models import FallbackChain, ResilienceDefaults
from chains.services import ChainInput, EntryInput, chain_create, resilience_defaults_update
from routing.models import RoutingRule
from routing.services import RoutingRuleInput, routing_rule_create
from tests.helpers.races import Pause, pause_after, race

pytestmark = [pytest.mark.production, pytest.mark.django_db(transaction=True)]


def _rule_scoped_to(user: Any, admin: Any) -> Any:
    return lambda: routing_rule_create(
        actor=admin,
        data=RoutingRuleInput(
            name="bob's rule",
            source_model="gpt-4o-mini",
            target_model="gemini-pro",
            scope_type="user",
            scope_id=user.pk,
        ),
    )


def _key_issued_to(user: Any, admin: Any) -> Any:
    return lambda: api_key_issue(actor=admin, data=ApiKeyInput(name="bob's key"), username=user.username)


@pytest.mark.parametrize("other", ["rule_scoped_to_bob", "key_issued_to_bob"])
def test_bob_creates_a_chain_while_an_admin_locks_bob_both_commit(
    other, admin_user, django_user_model, catalog, monkeypatch
):
    """T1: bob creates a chain (created_by = bob): locks bob FOR KEY SHARE, audits ... T2: an admin scopes a rule to
    bob, or issues bob a key: waits on bob ... T1 COMMIT; T2 goes on. (Before: T2 locked bob and waited on the audit
    log, and T1's COMMIT waited on bob for its foreign key check.)"""
    import chains.services as chain_services

    bob = django_user_model.objects.create_user(username="bob", password="x")
    pause = Pause()
    pause_after(monkeypatch, chain_services, "audit_record", pause)
    second = _rule_scoped_to(bob, admin_user) if other == "rule_scoped_to_bob" else _key_issued_to(bob, admin_user)

    outcome, blocked = race(
        lambda: chain_create(
            actor=bob, data=ChainInput(name="bob's", source_model="gpt-4o", entries=[EntryInput("claude-sonnet")])
        ),
        second,
        pause,
    )

    assert blocked is True
    assert outcome == {"first": "ok", "second": "ok"}
    assert FallbackChain.objects.filter(created_by=bob).count() == 1


def test_bob_saves_the_resilience_defaults_while_an_admin_scopes_a_rule_to_bob_both_commit(
    admin_user, django_user_model, catalog, monkeypatch
):
    """As above with ResilienceDefaults.updated_by = bob."""
    import chains.services as chain_services

    bob = django_user_model.objects.create_user(username="bob", password="x")
    row, _ = ResilienceDefaults.objects.get_or_create(pk=ResilienceDefaults.SINGLETON_ID)
    pause = Pause()
    pause_after(monkeypatch, chain_services, "audit_changes", pause)

    outcome, blocked = race(
        lambda: resilience_defaults_update(actor=bob, version=row.version, policy={"enabled": True}),
        _rule_scoped_to(bob, admin_user),
        pause,
    )

    assert blocked is True
    assert outcome == {"first": "ok", "second": "ok"}
    assert RoutingRule.objects.filter(scope_id=bob.pk).count() == 1


def test_an_admin_form_save_while_another_admin_scopes_a_rule_to_its_author_both_commit(
    admin_user, admin_client, django_user_model, catalog, monkeypatch
):
    """T1: admin_user adds an alias in Django's admin: the service audits ... T2: another admin scopes a rule to
    admin_user: locks admin_user, waits on the audit log ... T1 COMMIT, then its history entry; T2 goes on.
    (Before: the history entry, inserted in T1, had its foreign key checked at COMMIT: T1 waited on admin_user.)"""
    import routing.services as routing_services

    other_admin = django_user_model.objects.create_superuser(username="carol", password="x", email="c@example.com")
    pause, statuses = Pause(), {}
    pause_after(monkeypatch, routing_services, "audit_record", pause)

    def add_alias() -> None:
        response = admin_client.post("/admin/routing/alias/add/", {"name": "fast", "model": catalog["gpt-4o"].pk})
        statuses["add"] = response.status_code

    outcome, blocked = race(add_alias, _rule_scoped_to(admin_user, other_admin), pause)

    assert blocked is True
    assert outcome == {"first": "ok", "second": "ok"}
    assert statuses == {"add": 302}
    from django.contrib.admin.models import LogEntry

    from routing.models import Alias

    assert LogEntry.objects.filter(user=admin_user, object_id=str(Alias.objects.get(name="fast").pk)).count() == 1


def test_a_chain_scoped_to_a_user_locks_its_creator_and_that_user_in_key_order(
    admin_user, admin_client, django_user_model, catalog, monkeypatch
):
    """T1: carol creates a chain scoped to dave (carol's key is the lower): locks carol FOR KEY SHARE, then dave ...
    T2: an admin deactivates carol and dave together: locks carol first, so waits ... T1 COMMIT; T2 goes on.
    (Before: T1 locked dave as the scope's target, then carol as the creator, while T2 held carol and waited on
    dave.)"""
    import chains.services as chain_services

    carol = django_user_model.objects.create_user(username="carol", password="x")
    dave = django_user_model.objects.create_user(username="dave", password="x")
    assert carol.pk < dave.pk
    pause, statuses = Pause(), {}
    pause_after(monkeypatch, chain_services, "scope_validate", pause)
    scoped = ChainInput(
        name="dave's", source_model="gpt-4o", entries=[EntryInput("claude-sonnet")], scope_type="user", scope_id=dave.pk
    )

    def deactivate() -> None:
        response = admin_client.post(
            "/admin/auth/user/", {"action": "deactivate_users", "_selected_action": [carol.pk, dave.pk]}
        )
        statuses["deactivate"] = response.status_code

    outcome, blocked = race(lambda: chain_create(actor=carol, data=scoped), deactivate, pause)

    assert blocked is True
    assert outcome == {"first": "ok", "second": "ok"}
    assert statuses == {"deactivate": 302}
    assert FallbackChain.objects.get(name="dave's").created_by_id == carol.pk
    assert set(django_user_model.objects.filter(pk__in=[carol.pk, dave.pk]).values_list("is_active", flat=True)) == {
        False
    }
