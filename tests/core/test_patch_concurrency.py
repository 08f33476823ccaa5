"""Two writers of one row at once: a PATCH keeps the other writer's change to a field it did not send.

A PATCH merges the fields it leaves out from the stored row. Each update view locks the row before it reads it
(`core.api.row_locked_update`), so a PATCH that arrives while another transaction holds the row waits, then
merges into what that transaction saved. Read before the lock, it wrote the other field back as it had been
and undid the other change, with a 200 and an audit event for both.

Production mode only: the race is made certain by seeing the PATCH wait on PostgreSQL's row lock.
"""

import threading
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pytest
from django.db import connections, transaction

from catalog.models import Agent, ApiKey, Application, LlmModel, Provider
from routing.models import Alias, RoutingRule
from tests.factories import (
    AgentFactory,
    AliasFactory,
    ApplicationFactory,
    LlmModelFactory,
    ProviderFactory,
    RoutingRuleFactory,
    TeamFactory,
)
from tests.factories.keys import make_key
from tests.helpers.api import patch_json
from tests.helpers.locks import waits_on_a_lock

pytestmark = [pytest.mark.production, pytest.mark.django_db(transaction=True)]


@dataclass
class Case:
    """`other` changes one field of the row in another transaction; `body` PATCHes a different one."""

    url: str
    row: Any
    other: Callable[[], dict[str, Any]]  # runs the other writer's UPDATE; returns the fields it set
    body: dict[str, Any]
    sent: dict[str, Any]  # the PATCHed fields as stored


def _provider(admin_user) -> Case:
    provider = ProviderFactory(connect_timeout=5.0, read_timeout=60.0)
    return Case(
        url=f"/api/providers/{provider.pk}/",
        row=provider,
        other=lambda: _update(Provider, provider.pk, read_timeout=77.0),
        body={"connect_timeout": 3.0},
        sent={"connect_timeout": 3.0},
    )


def _model(admin_user) -> Case:
    model = LlmModelFactory(context_window=128000)
    return Case(
        url=f"/api/models/{model.pk}/",
        row=model,
        other=lambda: _update(LlmModel, model.pk, context_window=64000),
        body={"output_price_per_mtok": "9.5000"},
        sent={"output_price_per_mtok": Decimal("9.5")},
    )


def _application(admin_user) -> Case:
    application, team = ApplicationFactory(), TeamFactory()
    return Case(
        url=f"/api/applications/{application.pk}/",
        row=application,
        other=lambda: _update(Application, application.pk, team_id=team.pk),
        body={"name": "renamed-app"},
        sent={"name": "renamed-app"},
    )


def _agent(admin_user) -> Case:
    agent, application = AgentFactory(), ApplicationFactory()
    return Case(
        url=f"/api/agents/{agent.pk}/",
        row=agent,
        other=lambda: _update(Agent, agent.pk, application_id=application.pk),
        body={"name": "renamed-agent"},
        sent={"name": "renamed-agent"},
    )


def _key(admin_user) -> Case:
    key, team = make_key(user=admin_user, name="ci key").key, TeamFactory()
    return Case(
        url=f"/api/keys/{key.pk}/",
        row=key,
        other=lambda: _update(ApiKey, key.pk, name="renamed elsewhere"),
        body={"team": team.name},
        sent={"team_id": team.pk},
    )


def _routing_rule(admin_user) -> Case:
    rule = RoutingRuleFactory(enabled=True)
    return Case(
        url=f"/api/routing-rules/{rule.pk}/",
        row=rule,
        other=lambda: _update(RoutingRule, rule.pk, enabled=False),
        body={"name": "renamed-rule"},
        sent={"name": "renamed-rule"},
    )


def _alias(admin_user) -> Case:
    alias, target = AliasFactory(), LlmModelFactory()
    return Case(
        url=f"/api/aliases/{alias.pk}/",
        row=alias,
        other=lambda: _update(Alias, alias.pk, model_id=target.pk),
        body={"name": "renamed-alias"},
        sent={"name": "renamed-alias"},
    )


def _update(model: type, pk: int, **fields: Any) -> dict[str, Any]:
    model._default_manager.filter(pk=pk).update(**fields)
    return fields


@pytest.mark.parametrize(
    "build",
    [_provider, _model, _application, _agent, _key, _routing_rule, _alias],
    ids=["provider", "model", "application", "agent", "key", "routing-rule", "alias"],
)
def test_a_patch_waiting_on_another_writer_keeps_its_change(build, admin_user, admin_client):
    case = build(admin_user)
    holding, release = threading.Event(), threading.Event()
    other_fields: dict[str, Any] = {}
    result: dict[str, Any] = {}

    def other_writer() -> None:
        try:
            with transaction.atomic():
                other_fields.update(case.other())  # the UPDATE holds the row's lock until the commit
                holding.set()
                release.wait(10)
        finally:
            connections.close_all()

    def patcher() -> None:
        try:
            result["response"] = patch_json(admin_client, case.url, case.body)
        finally:
            connections.close_all()

    writer = threading.Thread(target=other_writer)
    writer.start()
    assert holding.wait(10)
    patching = threading.Thread(target=patcher)
    patching.start()
    blocked = waits_on_a_lock(patching)
    release.set()
    writer.join(10)
    patching.join(10)

    assert blocked is True
    assert result["response"].status_code == 200, result["response"].content
    stored = type(case.row)._default_manager.filter(pk=case.row.pk).values(*other_fields, *case.sent).get()
    assert stored == {**other_fields, **case.sent}
