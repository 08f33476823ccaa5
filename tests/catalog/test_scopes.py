import pytest

from catalog.enums import ScopeType
from catalog.scopes import Principal, Scope, resolve_most_specific, scope_validate, scopes_overlap
from chains.selectors import chain_for
from core.errors import ValidationFailed
from tests.factories import AgentFactory, ApplicationFactory, ChainFactory, LlmModelFactory, TeamFactory, UserFactory
from tests.factories.keys import make_key

pytestmark = pytest.mark.django_db

PRINCIPAL = Principal(key_id=1, user_id=2, team_id=3, application_id=4, agent_id=5)


def test_principal_scopes_are_ordered_most_specific_first():
    assert PRINCIPAL.scopes() == (
        Scope("key", 1),
        Scope("agent", 5),
        Scope("user", 2),
        Scope("team", 3),
        Scope("application", 4),
        Scope("global", None),
    )


def test_principal_without_team_skips_that_scope():
    assert Principal(key_id=1, user_id=2).scopes() == (Scope("key", 1), Scope("user", 2), Scope("global", None))


@pytest.mark.parametrize(
    ("present", "expected"),
    [
        (["global", "application", "team", "user", "agent", "key"], "key"),
        (["global", "application", "team", "user", "agent"], "agent"),
        (["global", "application", "team", "user"], "user"),
        (["global", "application", "team"], "team"),
        (["global", "application"], "application"),
        (["global"], "global"),
        ([], None),
    ],
)
def test_resolve_most_specific_follows_precedence(present, expected):
    ids = {"key": 1, "user": 2, "team": 3, "application": 4, "agent": 5, "global": None}
    items = [Scope(t, ids[t]) for t in present]

    chosen = resolve_most_specific(items, PRINCIPAL, lambda s: s)

    assert (chosen.type if chosen else None) == expected


def test_resolve_ignores_scopes_of_other_principals():
    items = [Scope("team", 99), Scope("user", 77)]

    assert resolve_most_specific(items, PRINCIPAL, lambda s: s) is None


def test_chain_for_picks_most_specific_enabled_chain():
    team = TeamFactory()
    user = UserFactory()
    source = LlmModelFactory(name="gpt-4o")
    ChainFactory(name="global", source_model=source)
    ChainFactory(name="team", source_model=source, scope_type="team", scope_id=team.pk)
    ChainFactory(name="user-disabled", source_model=source, scope_type="user", scope_id=user.pk, enabled=False)
    key = make_key(user=user, team=team).key

    chosen = chain_for(model="gpt-4o", principal=Principal.from_key(key))
    other = chain_for(model="gpt-4o", principal=Principal(user_id=user.pk))

    assert chosen.name == "team"
    assert other.name == "global"
    assert chain_for(model="unknown", principal=Principal.from_key(key)) is None


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
