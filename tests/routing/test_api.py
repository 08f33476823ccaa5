import pytest

from audit.models import AuditEvent
from routing.models import Alias, RoutingRule
from tests.factories import AliasFactory, LlmModelFactory, RoutingRuleFactory, TeamFactory
from tests.helpers.api import patch_json, post_json, put_json


def rule_body(**overrides) -> dict:
    body = {
        "name": "Downgrade",
        "source_model": "gpt-4o",
        "target_model": "gpt-4o-mini",
        "scope": {"type": "global", "id": None},
        "enabled": True,
    }
    body.update(overrides)
    return body


# --- routing rules ---------------------------------------------------------------------------


def test_routing_rule_create(admin_client, catalog):
    team = TeamFactory()

    response = post_json(admin_client, "/api/routing-rules/", rule_body(scope={"type": "team", "id": team.pk}))

    assert response.status_code == 201
    rule = RoutingRule.objects.get()
    body = response.json()
    assert {k: v for k, v in body.items() if k not in ("created_at", "updated_at")} == {
        "id": rule.pk,
        "name": "Downgrade",
        "source_model": "gpt-4o",
        "target_model": "gpt-4o-mini",
        "scope": {"type": "team", "id": team.pk},
        "enabled": True,
    }
    event = AuditEvent.objects.get()
    assert (event.action, event.after["scope"]) == ("routing_rule.create", {"type": "team", "id": team.pk})


@pytest.mark.parametrize(
    ("overrides", "errors"),
    [
        ({"name": "  "}, {"name": ["Rule name is required and cannot be only whitespace."]}),
        ({"source_model": ""}, {"source_model": ["Source model is required and cannot be only whitespace."]}),
        ({"target_model": "nope"}, {"target_model": ["Unknown model “nope”."]}),
        ({"target_model": "gpt-4o"}, {"target_model": ["Target model must differ from the source model."]}),
        ({"scope": {"type": "team", "id": 999999}}, {"scope": ["No team with id 999999 exists."]}),
        ({"scope": {"type": "agent"}}, {"scope": ["Choose the agent this applies to."]}),
        ({"enabled": "true"}, {"enabled": ["Must be true or false."]}),
    ],
)
def test_routing_rule_create_refuses_invalid_input(admin_client, catalog, overrides, errors):
    response = post_json(admin_client, "/api/routing-rules/", rule_body(**overrides))

    assert response.status_code == 400
    assert response.json()["errors"] == errors
    assert RoutingRule.objects.count() == 0
    assert AuditEvent.objects.count() == 0


def test_routing_rule_one_per_source_and_scope(admin_client, catalog):
    team = TeamFactory()
    post_json(admin_client, "/api/routing-rules/", rule_body(name="First"))

    same_scope = post_json(admin_client, "/api/routing-rules/", rule_body(name="Second", target_model="gemini-pro"))
    other_scope = post_json(
        admin_client, "/api/routing-rules/", rule_body(name="Team", scope={"type": "team", "id": team.pk})
    )

    assert same_scope.status_code == 400
    assert same_scope.json()["errors"] == {
        "source_model": ["Rule “First” already rewrites gpt-4o in this scope; edit it instead."]
    }
    assert other_scope.status_code == 201
    assert sorted(RoutingRule.objects.values_list("name", flat=True)) == ["First", "Team"]


def test_routing_rule_patch_and_put(admin_client, catalog):
    rule = RoutingRuleFactory(name="r", source_model=catalog["gpt-4o"], target_model=catalog["gpt-4o-mini"])

    patched = patch_json(admin_client, f"/api/routing-rules/{rule.pk}/", {"enabled": False})
    replaced = put_json(admin_client, f"/api/routing-rules/{rule.pk}/", rule_body(target_model="claude-sonnet"))

    assert (patched.status_code, patched.json()["enabled"], patched.json()["target_model"]) == (
        200,
        False,
        "gpt-4o-mini",
    )
    assert (replaced.status_code, replaced.json()["enabled"], replaced.json()["target_model"]) == (
        200,
        True,
        "claude-sonnet",
    )
    assert list(AuditEvent.objects.order_by("id").values_list("after", flat=True)) == [
        {"enabled": False},
        {"name": "Downgrade", "target_model": "claude-sonnet", "enabled": True},
    ]


@pytest.mark.parametrize(
    ("scope", "detail", "errors"),
    [
        ({}, "scope.type: This field is required.", {"scope.type": ["This field is required."]}),
        ({"id": 3}, "scope.type: This field is required.", {"scope.type": ["This field is required."]}),
        (None, "scope: This field may not be null.", {"scope": ["This field may not be null."]}),
    ],
)
def test_routing_rule_patch_refuses_an_incomplete_scope(admin_client, catalog, scope, detail, errors):
    rule = RoutingRuleFactory(name="r", source_model=catalog["gpt-4o"], target_model=catalog["gpt-4o-mini"])

    response = patch_json(admin_client, f"/api/routing-rules/{rule.pk}/", {"scope": scope})

    assert response.status_code == 400
    assert response.json() == {"detail": detail, "errors": errors}
    rule.refresh_from_db()
    assert (rule.scope_type, rule.scope_id) == ("global", None)
    assert AuditEvent.objects.count() == 0


def test_routing_rule_patch_with_a_complete_scope_moves_the_rule(admin_client, catalog):
    team = TeamFactory()
    rule = RoutingRuleFactory(name="r", source_model=catalog["gpt-4o"], target_model=catalog["gpt-4o-mini"])

    response = patch_json(admin_client, f"/api/routing-rules/{rule.pk}/", {"scope": {"type": "team", "id": team.pk}})

    assert (response.status_code, response.json()["scope"]) == (200, {"type": "team", "id": team.pk})


def test_routing_rule_delete(admin_client, catalog):
    rule = RoutingRuleFactory()

    response = admin_client.delete(f"/api/routing-rules/{rule.pk}/")

    assert response.status_code == 204
    assert RoutingRule.objects.count() == 0
    assert AuditEvent.objects.get().action == "routing_rule.delete"


# --- aliases ---------------------------------------------------------------------------------


def test_alias_create_and_list(admin_client, catalog):
    response = post_json(admin_client, "/api/aliases/", {"name": "smart", "model": "gpt-4o"})
    listed = admin_client.get("/api/aliases/")

    assert response.status_code == 201
    assert {k: v for k, v in response.json().items() if k != "created_at"} == {
        "id": Alias.objects.get().pk,
        "name": "smart",
        "model": "gpt-4o",
    }
    assert [(a["name"], a["model"]) for a in listed.json()["results"]] == [("smart", "gpt-4o")]


@pytest.mark.parametrize(
    ("body", "errors"),
    [
        (
            {"name": "gpt-4o-mini", "model": "gpt-4o"},
            {"name": ["“gpt-4o-mini” is the name of a model; an alias cannot shadow it."]},
        ),
        ({"name": "taken", "model": "gpt-4o"}, {"name": ["An alias named “taken” already exists."]}),
        ({"name": " ", "model": "gpt-4o"}, {"name": ["Alias name is required and cannot be only whitespace."]}),
        ({"name": "fast", "model": "nope"}, {"model": ["Unknown model “nope”."]}),
        ({"name": "fast"}, {"model": ["This field is required."]}),
    ],
)
def test_alias_create_refuses_invalid_input(admin_client, catalog, body, errors):
    AliasFactory(name="taken", model=catalog["gpt-4o"])

    response = post_json(admin_client, "/api/aliases/", body)

    assert response.status_code == 400
    assert response.json()["errors"] == errors
    assert list(Alias.objects.values_list("name", flat=True)) == ["taken"]


def test_alias_patch_points_at_another_model(admin_client, catalog):
    alias = AliasFactory(name="smart", model=catalog["gpt-4o"])

    response = patch_json(admin_client, f"/api/aliases/{alias.pk}/", {"model": "claude-sonnet"})

    assert (response.status_code, response.json()["model"]) == (200, "claude-sonnet")
    event = AuditEvent.objects.get()
    assert (event.before, event.after) == ({"model": "gpt-4o"}, {"model": "claude-sonnet"})


def test_alias_rename_onto_a_model_name_is_refused(admin_client, catalog):
    alias = AliasFactory(name="smart", model=catalog["gpt-4o"])
    LlmModelFactory(name="o3")

    response = put_json(admin_client, f"/api/aliases/{alias.pk}/", {"name": "o3", "model": "gpt-4o"})

    assert response.status_code == 400
    assert response.json()["errors"] == {"name": ["“o3” is the name of a model; an alias cannot shadow it."]}
    alias.refresh_from_db()
    assert alias.name == "smart"


def test_alias_delete(admin_client, catalog):
    alias = AliasFactory()

    response = admin_client.delete(f"/api/aliases/{alias.pk}/")

    assert response.status_code == 204
    assert Alias.objects.count() == 0
