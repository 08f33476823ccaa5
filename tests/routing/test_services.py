"""Guardrail services, and the read-only validate functions the admin calls."""

import pytest

from audit.models import AuditEvent
from core.configbus import config_subscribe, config_unsubscribe
from core.errors import ConflictError, ValidationFailed
from routing.models import Guardrail
from routing.services import (
    AliasInput,
    GuardrailInput,
    RoutingRuleInput,
    alias_delete,
    alias_update,
    alias_validate,
    guardrail_create,
    guardrail_delete,
    guardrail_update,
    guardrail_validate,
    routing_rule_delete,
    routing_rule_update,
    routing_rule_validate,
)
from tests.factories import AgentFactory, AliasFactory, GuardrailFactory, RoutingRuleFactory, TeamFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def published():
    versions: list[int] = []
    config_subscribe(versions.append)
    yield versions
    config_unsubscribe(versions.append)


def deny(**overrides) -> GuardrailInput:
    values = {"name": "No gpt-4o", "action": "deny", "model": "gpt-4o", "message": "Too expensive."}
    values.update(overrides)
    return GuardrailInput(**values)


@pytest.mark.parametrize(
    ("data", "errors"),
    [
        (deny(name=""), {"name": ["Guardrail name is required and cannot be only whitespace."]}),
        (deny(name="   "), {"name": ["Guardrail name is required and cannot be only whitespace."]}),
        (deny(name="x" * 201), {"name": ["Guardrail name is at most 200 characters."]}),
        (deny(message=""), {"message": ["Say why the request is refused; the client sees this message."]}),
        (deny(message=" \t "), {"message": ["Say why the request is refused; the client sees this message."]}),
        (
            deny(action="rewrite", message=""),
            {"target_model": ["A rewrite guardrail needs the model to call instead."]},
        ),
        (
            deny(action="rewrite", target_model="gpt-4o"),
            {"target_model": ["Target model must differ from the model it rewrites."]},
        ),
        (deny(action="rewrite", target_model="nope"), {"target_model": ["Unknown model “nope”."]}),
        (deny(model="nope"), {"model": ["Unknown model “nope”."]}),
        (deny(action="allow"), {"action": ["Action must be one of: deny, rewrite."]}),
        (deny(scope_type="team", scope_id=999999), {"scope": ["No team with id 999999 exists."]}),
        (deny(scope_type="agent"), {"scope": ["Choose the agent this applies to."]}),
        (deny(scope_type="global", scope_id=3), {"scope": ["A global scope takes no target id."]}),
        (
            deny(name=" ", message=""),
            {
                "name": ["Guardrail name is required and cannot be only whitespace."],
                "message": ["Say why the request is refused; the client sees this message."],
            },
        ),
    ],
)
def test_guardrail_create_refuses_each_broken_rule_and_saves_nothing(admin_user, models, data, errors):
    with pytest.raises(ValidationFailed) as exc:
        guardrail_create(actor=admin_user, data=data)

    assert exc.value.errors == errors
    assert (Guardrail.objects.count(), AuditEvent.objects.count()) == (0, 0)


def test_guardrail_validate_raises_what_create_would_and_writes_nothing(models):
    with pytest.raises(ValidationFailed) as exc:
        guardrail_validate(data=deny(message=""))

    assert exc.value.message == "Say why the request is refused; the client sees this message."
    guardrail_validate(data=deny())
    assert (Guardrail.objects.count(), AuditEvent.objects.count()) == (0, 0)


def test_guardrail_create_saves_audits_and_publishes_after_commit(
    admin_user, models, published, django_capture_on_commit_callbacks
):
    agent = AgentFactory(name="triage-bot")

    with django_capture_on_commit_callbacks(execute=True):
        guardrail = guardrail_create(
            actor=admin_user,
            data=GuardrailInput(
                name=" Cheaper ",
                action="rewrite",
                model="gpt-4o",
                target_model="gpt-4o-mini",
                scope_type="agent",
                scope_id=agent.pk,
            ),
        )

    assert (guardrail.name, guardrail.model, guardrail.target_model) == (
        "Cheaper",
        models["gpt-4o"],
        models["gpt-4o-mini"],
    )
    event = AuditEvent.objects.get()
    assert (event.action, event.actor_name, event.object_type, event.object_id, event.before, event.after) == (
        "guardrail.create",
        "alice",
        "guardrail",
        str(guardrail.pk),
        None,
        {
            "name": "Cheaper",
            "model": "gpt-4o",
            "action": "rewrite",
            "target_model": "gpt-4o-mini",
            "message": "",
            "scope": {"type": "agent", "id": agent.pk},
            "enabled": True,
        },
    )
    assert len(published) == 1


def test_guardrail_catch_all_rewrite_is_allowed(admin_user, models):
    guardrail = guardrail_create(
        actor=admin_user, data=GuardrailInput(name="Everything cheap", action="rewrite", target_model="gpt-4o-mini")
    )

    assert (guardrail.model, guardrail.target_model) == (None, models["gpt-4o-mini"])


def test_guardrail_update_audits_only_changed_fields(admin_user, models, published, django_capture_on_commit_callbacks):
    guardrail = GuardrailFactory(name="No gpt-4o", model=models["gpt-4o"], action="deny", message="Too expensive.")

    with django_capture_on_commit_callbacks(execute=True):
        guardrail_update(actor=admin_user, guardrail=guardrail, data=deny(message="Use gpt-4o-mini.", enabled=False))

    guardrail.refresh_from_db()
    assert (guardrail.message, guardrail.enabled) == ("Use gpt-4o-mini.", False)
    assert list(AuditEvent.objects.values_list("action", "before", "after")) == [
        (
            "guardrail.update",
            {"message": "Too expensive.", "enabled": True},
            {"message": "Use gpt-4o-mini.", "enabled": False},
        )
    ]
    assert len(published) == 1


def test_guardrail_update_refused_changes_nothing(admin_user, models):
    guardrail = GuardrailFactory(name="No gpt-4o", model=models["gpt-4o"], action="deny", message="Too expensive.")

    with pytest.raises(ValidationFailed):
        guardrail_update(actor=admin_user, guardrail=guardrail, data=deny(action="rewrite"))

    guardrail.refresh_from_db()
    assert (guardrail.action, AuditEvent.objects.count()) == ("deny", 0)


def test_guardrail_update_without_changes_writes_no_event(admin_user, models):
    guardrail = GuardrailFactory(name="No gpt-4o", model=models["gpt-4o"], action="deny", message="Too expensive.")

    guardrail_update(actor=admin_user, guardrail=guardrail, data=deny())

    assert AuditEvent.objects.count() == 0


def test_guardrail_delete_keeps_a_snapshot_and_publishes(
    admin_user, models, published, django_capture_on_commit_callbacks
):
    guardrail = GuardrailFactory(name="No gpt-4o", model=models["gpt-4o"], action="deny", message="Too expensive.")
    pk = guardrail.pk

    with django_capture_on_commit_callbacks(execute=True):
        guardrail_delete(actor=admin_user, guardrail=guardrail)

    assert Guardrail.objects.count() == 0
    assert list(AuditEvent.objects.values_list("action", "object_id", "before", "after")) == [
        (
            "guardrail.delete",
            str(pk),
            {
                "name": "No gpt-4o",
                "model": "gpt-4o",
                "action": "deny",
                "target_model": None,
                "message": "Too expensive.",
                "scope": {"type": "global", "id": None},
                "enabled": True,
            },
            None,
        )
    ]
    assert len(published) == 1


def test_routing_rule_validate_excludes_the_rule_being_edited(models):
    rule = RoutingRuleFactory(name="Downgrade", source_model=models["gpt-4o"], target_model=models["gpt-4o-mini"])
    data = RoutingRuleInput(name="Downgrade", source_model="gpt-4o", target_model="gpt-4o-mini")

    routing_rule_validate(data=data, rule=rule)
    with pytest.raises(ValidationFailed) as exc:
        routing_rule_validate(data=data)

    assert exc.value.errors == {
        "source_model": ["Rule “Downgrade” already rewrites gpt-4o in this scope; edit it instead."]
    }


def test_alias_validate_excludes_the_alias_being_edited(models):
    alias = AliasFactory(name="fast", model=models["gpt-4o"])
    data = AliasInput(name="fast", model="gpt-4o-mini")

    alias_validate(data=data, alias=alias)
    with pytest.raises(ValidationFailed) as exc:
        alias_validate(data=data)

    assert exc.value.errors == {"name": ["An alias named “fast” already exists."]}
    alias.refresh_from_db()
    assert alias.model == models["gpt-4o"]


# --- a row changed or deleted by someone else meanwhile -----------------------------------------


def _rule(models):
    row = RoutingRuleFactory(name="Downgrade", source_model=models["gpt-4o"], target_model=models["gpt-4o-mini"])
    data = RoutingRuleInput(name="Downgrade", source_model="gpt-4o", target_model="claude-sonnet")
    return row, routing_rule_update, routing_rule_delete, "rule", data


def _alias(models):
    row = AliasFactory(name="fast", model=models["gpt-4o"])
    return row, alias_update, alias_delete, "alias", AliasInput(name="fast", model="claude-sonnet")


def _guardrail(models):
    row = GuardrailFactory(name="No gpt-4o", model=models["gpt-4o"], action="deny", message="Too expensive.")
    return row, guardrail_update, guardrail_delete, "guardrail", deny(message="Use gpt-4o-mini.")


ROWS = pytest.mark.parametrize("make", [_rule, _alias, _guardrail], ids=["rule", "alias", "guardrail"])


@ROWS
def test_an_update_of_a_row_deleted_meanwhile_is_a_conflict_and_does_not_bring_it_back(admin_user, models, make):
    row, update, delete, keyword, data = make(models)
    stale = type(row).objects.get(pk=row.pk)  # what the API or the admin read before the other admin deleted it
    delete(actor=admin_user, **{keyword: row})

    with pytest.raises(ConflictError) as exc:
        update(actor=admin_user, **{keyword: stale}, data=data)

    assert "no longer exists" in exc.value.message
    assert not type(row).objects.filter(pk=row.pk).exists()
    assert [a.split(".")[1] for a in AuditEvent.objects.values_list("action", flat=True)] == ["delete"]


@ROWS
def test_a_second_delete_of_the_same_row_is_a_conflict_with_one_audit_event(admin_user, models, make):
    row, _, delete, keyword, _ = make(models)
    stale = type(row).objects.get(pk=row.pk)
    delete(actor=admin_user, **{keyword: row})

    with pytest.raises(ConflictError):
        delete(actor=admin_user, **{keyword: stale})

    assert AuditEvent.objects.count() == 1


@ROWS
def test_an_update_audits_against_the_stored_row_not_the_callers_stale_copy(admin_user, models, make):
    row, update, _, keyword, data = make(models)
    stale = type(row).objects.get(pk=row.pk)
    # Someone else changed the row after the caller read it; the caller's copy still shows the old state.
    type(row).objects.filter(pk=row.pk).update(name="Renamed meanwhile")

    update(actor=admin_user, **{keyword: stale}, data=data)

    event = AuditEvent.objects.get()
    assert event.before["name"] == "Renamed meanwhile"


# --- one guardrail per (model or every model, scope) ---------------------------------------------


def test_a_second_guardrail_on_the_same_model_and_scope_is_refused(admin_user, models):
    first = guardrail_create(actor=admin_user, data=deny())

    with pytest.raises(ValidationFailed) as exc:
        guardrail_create(
            actor=admin_user,
            data=GuardrailInput(name="Cheaper", action="rewrite", model="gpt-4o", target_model="gpt-4o-mini"),
        )

    assert exc.value.errors == {
        "model": ["Guardrail “No gpt-4o” already covers gpt-4o in this scope; edit it instead."]
    }
    assert list(Guardrail.objects.values_list("pk", flat=True)) == [first.pk]


def test_a_second_catch_all_guardrail_in_the_same_scope_is_refused(admin_user, models):
    team = TeamFactory()
    everything = deny(name="Nothing", model=None, scope_type="team", scope_id=team.pk)
    guardrail_create(actor=admin_user, data=everything)

    with pytest.raises(ValidationFailed) as exc:
        guardrail_create(
            actor=admin_user, data=deny(name="Still nothing", model="", scope_type="team", scope_id=team.pk)
        )

    assert exc.value.errors == {
        "model": ["Guardrail “Nothing” already covers every model in this scope; edit it instead."]
    }


def test_guardrails_on_the_same_model_in_other_scopes_or_on_other_models_are_allowed(admin_user, models):
    team = TeamFactory()
    guardrail_create(actor=admin_user, data=deny())
    guardrail_create(actor=admin_user, data=deny(name="Team", scope_type="team", scope_id=team.pk))
    guardrail_create(actor=admin_user, data=deny(name="Every model", model=None))
    guardrail_create(actor=admin_user, data=deny(name="Mini", model="gpt-4o-mini"))

    assert Guardrail.objects.count() == 4


def test_a_guardrail_may_be_saved_again_and_validate_excludes_the_one_being_edited(admin_user, models):
    guardrail = guardrail_create(actor=admin_user, data=deny())

    guardrail_update(actor=admin_user, guardrail=guardrail, data=deny(message="Use gpt-4o-mini."))
    guardrail_validate(data=deny(), guardrail=guardrail)
    with pytest.raises(ValidationFailed):
        guardrail_validate(data=deny())


def test_a_guardrail_cannot_be_moved_onto_another_ones_model_and_scope(admin_user, models):
    guardrail_create(actor=admin_user, data=deny())
    other = guardrail_create(actor=admin_user, data=deny(name="Mini", model="gpt-4o-mini"))

    with pytest.raises(ValidationFailed) as exc:
        guardrail_update(actor=admin_user, guardrail=other, data=deny(name="Mini"))

    assert "model" in exc.value.errors
    other.refresh_from_db()
    assert other.model == models["gpt-4o-mini"]
