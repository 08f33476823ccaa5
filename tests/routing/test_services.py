"""Guardrail services, and the read-only validate functions the admin calls."""

import pytest

from audit.models import AuditEvent
from core.configbus import config_subscribe, config_unsubscribe
from core.errors import ValidationFailed
from routing.models import Guardrail
from routing.services import (
    AliasInput,
    GuardrailInput,
    RoutingRuleInput,
    alias_validate,
    guardrail_create,
    guardrail_delete,
    guardrail_update,
    guardrail_validate,
    routing_rule_validate,
)
from tests.factories import AgentFactory, AliasFactory, GuardrailFactory, RoutingRuleFactory

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
