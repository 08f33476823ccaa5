"""The routing admin writes through routing.services: the API's validation, wording and audit events."""

import pytest
from django.db import DatabaseError, connection

from audit.models import AuditEvent
from catalog.enums import ScopeType
from routing.models import Alias, Guardrail, RoutingRule
from tests.factories import AliasFactory, GuardrailFactory, RoutingRuleFactory, TeamFactory

pytestmark = pytest.mark.django_db


def events() -> list[tuple]:
    return list(AuditEvent.objects.order_by("id").values_list("action", "object_repr", "before", "after"))


def form_errors(response) -> dict:
    return response.context["adminform"].form.errors


def rule_form(models, **overrides) -> dict:
    data = {
        "name": "Downgrade",
        "source_model": models["gpt-4o"].pk,
        "target_model": models["gpt-4o-mini"].pk,
        "scope_type": "global",
        "scope_id": "",
        "enabled": "on",
    }
    data.update(overrides)
    return data


def guardrail_form(models, **overrides) -> dict:
    data = {
        "name": "No gpt-4o",
        "model": models["gpt-4o"].pk,
        "action": "deny",
        "target_model": "",
        "message": "Too expensive.",
        "scope_type": "global",
        "scope_id": "",
        "enabled": "on",
    }
    data.update(overrides)
    return data


# --- routing rules -----------------------------------------------------------------------------


def test_admin_rule_create_goes_through_the_service(admin_client, models):
    team = TeamFactory(name="payments")

    response = admin_client.post(
        "/admin/routing/routingrule/add/", rule_form(models, name="  Downgrade  ", scope_type="team", scope_id=team.pk)
    )

    assert response.status_code == 302
    rule = RoutingRule.objects.get()
    assert (rule.name, rule.scope_type, rule.scope_id) == ("Downgrade", "team", team.pk)
    assert events() == [
        (
            "routing_rule.create",
            "Downgrade",
            None,
            {
                "name": "Downgrade",
                "source_model": "gpt-4o",
                "target_model": "gpt-4o-mini",
                "scope": {"type": "team", "id": team.pk},
                "enabled": True,
            },
        )
    ]


@pytest.mark.parametrize(
    ("overrides", "errors"),
    [
        ({"target_model": "gpt-4o"}, {"target_model": ["Target model must differ from the source model."]}),
        ({"scope_type": "team", "scope_id": "999999"}, {"scope_id": ["No team with id 999999 exists."]}),
        ({"scope_type": "agent", "scope_id": ""}, {"scope_id": ["Choose the agent this applies to."]}),
        ({"scope_type": "global", "scope_id": "5"}, {"scope_id": ["A global scope takes no target id."]}),
    ],
)
def test_admin_rule_form_shows_the_service_errors_and_saves_nothing(admin_client, models, overrides, errors):
    if overrides.get("target_model") == "gpt-4o":
        overrides["target_model"] = models["gpt-4o"].pk

    response = admin_client.post("/admin/routing/routingrule/add/", rule_form(models, **overrides))

    assert response.status_code == 200
    assert form_errors(response) == errors
    assert (RoutingRule.objects.count(), events()) == (0, [])


def test_admin_rule_form_refuses_a_second_rule_for_the_same_source_and_scope(admin_client, models):
    RoutingRuleFactory(name="Existing", source_model=models["gpt-4o"], target_model=models["claude-sonnet"])

    response = admin_client.post("/admin/routing/routingrule/add/", rule_form(models))

    assert form_errors(response) == {
        "source_model": ["Rule “Existing” already rewrites gpt-4o in this scope; edit it instead."]
    }
    assert (RoutingRule.objects.count(), events()) == (1, [])


def test_admin_rule_change_audits_only_the_changed_fields(admin_client, models):
    rule = RoutingRuleFactory(name="Downgrade", source_model=models["gpt-4o"], target_model=models["gpt-4o-mini"])

    response = admin_client.post(
        f"/admin/routing/routingrule/{rule.pk}/change/", rule_form(models, target_model=models["claude-sonnet"].pk)
    )

    assert response.status_code == 302
    rule.refresh_from_db()
    assert rule.target_model == models["claude-sonnet"]
    assert events() == [
        ("routing_rule.update", "Downgrade", {"target_model": "gpt-4o-mini"}, {"target_model": "claude-sonnet"})
    ]


def test_admin_rule_change_that_changes_nothing_writes_no_event(admin_client, models):
    rule = RoutingRuleFactory(name="Downgrade", source_model=models["gpt-4o"], target_model=models["gpt-4o-mini"])

    response = admin_client.post(f"/admin/routing/routingrule/{rule.pk}/change/", rule_form(models))

    assert response.status_code == 302
    assert events() == []


def test_admin_rule_delete_is_audited_once(admin_client, models):
    rule = RoutingRuleFactory(name="Downgrade", source_model=models["gpt-4o"], target_model=models["gpt-4o-mini"])

    response = admin_client.post(f"/admin/routing/routingrule/{rule.pk}/delete/", {"post": "yes"})

    assert response.status_code == 302
    assert RoutingRule.objects.count() == 0
    assert events() == [
        (
            "routing_rule.delete",
            "Downgrade",
            {
                "name": "Downgrade",
                "source_model": "gpt-4o",
                "target_model": "gpt-4o-mini",
                "scope": {"type": "global", "id": None},
                "enabled": True,
            },
            None,
        )
    ]


# --- aliases -----------------------------------------------------------------------------------


def test_admin_alias_create_goes_through_the_service(admin_client, models):
    response = admin_client.post("/admin/routing/alias/add/", {"name": " fast ", "model": models["gpt-4o-mini"].pk})

    assert response.status_code == 302
    assert list(Alias.objects.values_list("name", "model__name")) == [("fast", "gpt-4o-mini")]
    assert events() == [("alias.create", "fast", None, {"name": "fast", "model": "gpt-4o-mini"})]


@pytest.mark.parametrize(
    ("name", "errors"),
    [
        ("gpt-4o", {"name": ["“gpt-4o” is the name of a model; an alias cannot shadow it."]}),
        ("smart", {"name": ["An alias named “smart” already exists."]}),
    ],
)
def test_admin_alias_form_shows_the_service_errors_and_saves_nothing(admin_client, models, name, errors):
    AliasFactory(name="smart", model=models["gpt-4o"])

    response = admin_client.post("/admin/routing/alias/add/", {"name": name, "model": models["gpt-4o-mini"].pk})

    assert response.status_code == 200
    assert form_errors(response) == errors
    assert (list(Alias.objects.values_list("name", flat=True)), events()) == (["smart"], [])


def test_admin_alias_change_and_delete_are_audited_once_each(admin_client, models):
    alias = AliasFactory(name="fast", model=models["gpt-4o"])

    admin_client.post(f"/admin/routing/alias/{alias.pk}/change/", {"name": "fast", "model": models["claude-sonnet"].pk})
    admin_client.post(f"/admin/routing/alias/{alias.pk}/delete/", {"post": "yes"})

    assert Alias.objects.count() == 0
    assert events() == [
        ("alias.update", "fast", {"model": "gpt-4o"}, {"model": "claude-sonnet"}),
        ("alias.delete", "fast", {"name": "fast", "model": "claude-sonnet"}, None),
    ]


# --- guardrails --------------------------------------------------------------------------------


def test_admin_guardrail_create_goes_through_the_service(admin_client, models):
    response = admin_client.post("/admin/routing/guardrail/add/", guardrail_form(models, message="  Too expensive. "))

    assert response.status_code == 302
    guardrail = Guardrail.objects.get()
    assert (guardrail.name, guardrail.message) == ("No gpt-4o", "Too expensive.")
    assert events() == [
        (
            "guardrail.create",
            "No gpt-4o",
            None,
            {
                "name": "No gpt-4o",
                "model": "gpt-4o",
                "action": "deny",
                "target_model": None,
                "message": "Too expensive.",
                "scope": {"type": "global", "id": None},
                "enabled": True,
            },
        )
    ]


@pytest.mark.parametrize(
    ("overrides", "errors"),
    [
        ({"action": "rewrite"}, {"target_model": ["A rewrite guardrail needs the model to call instead."]}),
        (
            {"action": "rewrite", "target_model": "gpt-4o"},
            {"target_model": ["Target model must differ from the model it rewrites."]},
        ),
        ({"message": ""}, {"message": ["Say why the request is refused; the client sees this message."]}),
        ({"message": "   "}, {"message": ["Say why the request is refused; the client sees this message."]}),
        ({"scope_type": "team", "scope_id": "999999"}, {"scope_id": ["No team with id 999999 exists."]}),
        ({"scope_type": "user", "scope_id": ""}, {"scope_id": ["Choose the user this applies to."]}),
    ],
)
def test_admin_guardrail_form_shows_the_service_errors_and_saves_nothing(admin_client, models, overrides, errors):
    if overrides.get("target_model") == "gpt-4o":
        overrides["target_model"] = models["gpt-4o"].pk

    response = admin_client.post("/admin/routing/guardrail/add/", guardrail_form(models, **overrides))

    assert response.status_code == 200
    assert form_errors(response) == errors
    assert (Guardrail.objects.count(), events()) == (0, [])


def test_admin_guardrail_form_refuses_a_second_guardrail_on_the_same_model_and_scope(admin_client, models):
    GuardrailFactory(name="Older", model=models["gpt-4o"], action="deny", message="No.")

    response = admin_client.post(
        "/admin/routing/guardrail/add/",
        guardrail_form(models, name="Cheaper", action="rewrite", target_model=models["gpt-4o-mini"].pk, message=""),
    )

    assert response.status_code == 200
    assert form_errors(response) == {
        "model": ["Guardrail “Older” already covers gpt-4o in this scope; edit it instead."]
    }
    assert (Guardrail.objects.count(), events()) == (1, [])


def test_admin_guardrail_change_audits_only_the_changed_fields(admin_client, models):
    guardrail = GuardrailFactory(name="No gpt-4o", model=models["gpt-4o"], action="deny", message="Too expensive.")

    response = admin_client.post(
        f"/admin/routing/guardrail/{guardrail.pk}/change/",
        guardrail_form(models, action="rewrite", target_model=models["gpt-4o-mini"].pk, enabled=""),
    )

    assert response.status_code == 302
    guardrail.refresh_from_db()
    assert (guardrail.action, guardrail.target_model, guardrail.enabled) == ("rewrite", models["gpt-4o-mini"], False)
    assert events() == [
        (
            "guardrail.update",
            "No gpt-4o",
            {"action": "deny", "target_model": None, "enabled": True},
            {"action": "rewrite", "target_model": "gpt-4o-mini", "enabled": False},
        )
    ]


def test_admin_guardrail_change_refused_by_the_service_changes_nothing(admin_client, models):
    guardrail = GuardrailFactory(name="No gpt-4o", model=models["gpt-4o"], action="deny", message="Too expensive.")

    response = admin_client.post(f"/admin/routing/guardrail/{guardrail.pk}/change/", guardrail_form(models, message=""))

    assert form_errors(response) == {"message": ["Say why the request is refused; the client sees this message."]}
    guardrail.refresh_from_db()
    assert (guardrail.message, events()) == ("Too expensive.", [])


def test_admin_guardrail_delete_is_audited_once(admin_client, models):
    team = TeamFactory(name="payments")
    guardrail = GuardrailFactory(
        name="Cheaper",
        model=None,
        action="rewrite",
        target_model=models["gpt-4o-mini"],
        scope_type=ScopeType.TEAM,
        scope_id=team.pk,
    )

    response = admin_client.post(f"/admin/routing/guardrail/{guardrail.pk}/delete/", {"post": "yes"})

    assert response.status_code == 302
    assert Guardrail.objects.count() == 0
    assert events() == [
        (
            "guardrail.delete",
            "Cheaper",
            {
                "name": "Cheaper",
                "model": None,
                "action": "rewrite",
                "target_model": "gpt-4o-mini",
                "message": "",
                "scope": {"type": "team", "id": team.pk},
                "enabled": True,
            },
            None,
        )
    ]


# --- bulk delete -------------------------------------------------------------------------------


def _refuse_deleting_alias(name: str) -> tuple[list[str], list[str]]:
    """DDL for a trigger that makes deleting one alias fail in the database, and the DDL that removes it."""
    if connection.vendor == "postgresql":
        create = [
            "CREATE FUNCTION test_refuse_alias_delete() RETURNS trigger AS $$ BEGIN "
            f"IF OLD.name = '{name}' THEN RAISE EXCEPTION 'refused'; END IF; RETURN OLD; END $$ LANGUAGE plpgsql",
            "CREATE TRIGGER test_refuse_alias_delete BEFORE DELETE ON routing_alias "
            "FOR EACH ROW EXECUTE FUNCTION test_refuse_alias_delete()",
        ]
        drop = [
            "DROP TRIGGER IF EXISTS test_refuse_alias_delete ON routing_alias",
            "DROP FUNCTION IF EXISTS test_refuse_alias_delete()",
        ]
    else:
        create = [
            "CREATE TRIGGER test_refuse_alias_delete BEFORE DELETE ON routing_alias "
            f"WHEN OLD.name = '{name}' BEGIN SELECT RAISE(ABORT, 'refused'); END"
        ]
        drop = ["DROP TRIGGER IF EXISTS test_refuse_alias_delete"]
    return create, drop


# Transactional: Django runs "Delete selected" outside a transaction, and the first delete must not commit alone.
@pytest.mark.django_db(transaction=True)
def test_admin_bulk_delete_audits_every_rule_alias_and_guardrail(admin_client, models):
    rules = [
        RoutingRuleFactory(name="A", source_model=models["gpt-4o"], target_model=models["gpt-4o-mini"]),
        RoutingRuleFactory(name="B", source_model=models["claude-sonnet"], target_model=models["gpt-4o-mini"]),
    ]
    aliases = [AliasFactory(name="fast", model=models["gpt-4o"]), AliasFactory(name="smart", model=models["gpt-4o"])]
    guardrails = [
        GuardrailFactory(name="G1", model=None, action="deny", message="No."),
        GuardrailFactory(name="G2", model=None, action="deny", message="No."),
    ]

    for url, objects in (("routingrule", rules), ("alias", aliases), ("guardrail", guardrails)):
        response = admin_client.post(
            f"/admin/routing/{url}/",
            {"action": "delete_selected", "_selected_action": [o.pk for o in objects], "post": "yes"},
        )
        assert response.status_code == 302

    assert (RoutingRule.objects.count(), Alias.objects.count(), Guardrail.objects.count()) == (0, 0, 0)
    assert sorted((action, repr_) for action, repr_, _, _ in events()) == [
        ("alias.delete", "fast"),
        ("alias.delete", "smart"),
        ("guardrail.delete", "G1"),
        ("guardrail.delete", "G2"),
        ("routing_rule.delete", "A"),
        ("routing_rule.delete", "B"),
    ]


@pytest.mark.django_db(transaction=True)
def test_admin_bulk_delete_failing_on_the_second_alias_deletes_none(admin_client, models):
    AliasFactory(name="fast", model=models["gpt-4o"])
    AliasFactory(name="smart", model=models["gpt-4o"])
    create, drop = _refuse_deleting_alias("smart")
    with connection.cursor() as cursor:
        for sql in create:
            cursor.execute(sql)

    try:
        with pytest.raises(DatabaseError):
            admin_client.post(
                "/admin/routing/alias/",
                {
                    "action": "delete_selected",
                    "_selected_action": list(Alias.objects.values_list("pk", flat=True)),
                    "post": "yes",
                },
            )
    finally:
        with connection.cursor() as cursor:
            for sql in drop:
                cursor.execute(sql)

    # "fast" is deleted first (aliases are ordered by name); its delete and audit event rolled back with the batch.
    assert (sorted(Alias.objects.values_list("name", flat=True)), events()) == (["fast", "smart"], [])
