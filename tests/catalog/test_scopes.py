"""Scope validation and overlap; precedence and routing resolution: tests/routing/test_resolution.py."""

import pytest

from catalog.enums import ScopeType
from catalog.scopes import Scope, scope_validate, scopes_overlap
from core.errors import ValidationFailed
from tests.factories import AgentFactory, ApplicationFactory, TeamFactory, UserFactory
from tests.factories.keys import make_key

pytestmark = pytest.mark.django_db


def test_scope_validate_checks_target_exists():
    team = TeamFactory()

    assert scope_validate(scope_type="team", scope_id=team.pk) == Scope("team", team.pk)
    with pytest.raises(ValidationFailed) as exc:
        scope_validate(scope_type="agent", scope_id=424242)
    assert exc.value.errors == {"scope": ["No agent with id 424242 exists."]}
    with pytest.raises(ValidationFailed):
        scope_validate(scope_type="global", scope_id=3)


def test_scopes_overlap_uses_existing_keys():
    team, other_team = TeamFactory(), TeamFactory()
    app = ApplicationFactory()
    agent = AgentFactory()
    user = UserFactory()
    key = make_key(user=user, team=team, agent=agent).key

    assert scopes_overlap(Scope.global_(), Scope(ScopeType.TEAM, team.pk))
    assert scopes_overlap(Scope(ScopeType.TEAM, team.pk), Scope(ScopeType.TEAM, team.pk))
    assert not scopes_overlap(Scope(ScopeType.TEAM, team.pk), Scope(ScopeType.TEAM, other_team.pk))
    assert scopes_overlap(Scope(ScopeType.KEY, key.pk), Scope(ScopeType.TEAM, team.pk))
    assert scopes_overlap(Scope(ScopeType.USER, user.pk), Scope(ScopeType.AGENT, agent.pk))
    assert not scopes_overlap(Scope(ScopeType.TEAM, team.pk), Scope(ScopeType.APPLICATION, app.pk))
