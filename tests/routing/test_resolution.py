"""Routing resolution (routing.resolution): scope precedence and guardrail -> rule -> alias -> rule -> chain.

The pure tests need no database. The last ones seed a configuration, build the gateway's snapshot from it
and check that the gateway resolves through this same module.
"""

import itertools
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field

import pytest

from catalog.enums import ScopeType
from gateway import snapshot as snapshot_module
from gateway.snapshot import Refusal, Route, snapshot_build
from routing.models import Guardrail, GuardrailAction
from routing.resolution import (
    DENY,
    GLOBAL,
    NOT_FOUND,
    SCOPE_PRECEDENCE,
    Denied,
    Resolved,
    most_specific,
    principal_scopes,
    resolve_route,
)
from tests.factories import (
    AgentFactory,
    AliasFactory,
    ApplicationFactory,
    ChainFactory,
    LlmModelFactory,
    RoutingRuleFactory,
    TeamFactory,
    UserFactory,
)
from tests.factories.keys import make_key

IDS: dict[str, int | None] = {"key": 1, "user": 2, "team": 3, "application": 4, "agent": 5, "global": None}
SCOPES = principal_scopes(key_id=1, user_id=2, team_id=3, application_id=4, agent_id=5)
# Every (more specific, less specific) pair of scope types.
PAIRS = list(itertools.combinations(SCOPE_PRECEDENCE, 2))


@dataclass(frozen=True)
class Guard:
    name: str
    action: str
    target_model: str | None = None


@dataclass(frozen=True)
class Tables:
    models: Mapping[str, object] = field(default_factory=dict)
    aliases: Mapping[str, str] = field(default_factory=dict)
    rules: Mapping[tuple[str, str, int | None], str] = field(default_factory=dict)
    guardrails: Mapping[tuple[str | None, str, int | None], Guard] = field(default_factory=dict)
    chains: Mapping[tuple[str, str, int | None], str] = field(default_factory=dict)


def at(scope_type: str) -> tuple[str, int | None]:
    return scope_type, IDS[scope_type]


def tables(**kw: object) -> Tables:
    models = dict.fromkeys(("gpt-4o", "gpt-4o-mini", "claude", "mistral"), "info")
    return Tables(models=models, **kw)  # type: ignore[arg-type]


# --- scopes and precedence --------------------------------------------------------------------


def test_precedence_names_every_scope_type_once_global_last():
    assert sorted(SCOPE_PRECEDENCE) == sorted(ScopeType.values)
    assert SCOPE_PRECEDENCE == ("key", "agent", "user", "team", "application", "global")
    assert GLOBAL == ("global", None)


def test_principal_scopes_are_ordered_most_specific_first():
    assert SCOPES == (("key", 1), ("agent", 5), ("user", 2), ("team", 3), ("application", 4), ("global", None))


def test_principal_without_team_skips_that_scope():
    scopes = principal_scopes(key_id=1, user_id=2, team_id=None, application_id=None, agent_id=None)

    assert scopes == (("key", 1), ("user", 2), ("global", None))


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
def test_most_specific_follows_precedence(present, expected):
    table = {("m", *at(t)): t for t in present}

    assert most_specific(table, "m", SCOPES) == expected


@pytest.mark.parametrize(("specific", "general"), PAIRS)
def test_most_specific_prefers_each_more_specific_scope(specific, general):
    table = {("m", *at(general)): general, ("m", *at(specific)): specific}

    assert most_specific(table, "m", SCOPES) == specific


def test_most_specific_ignores_scopes_of_other_principals_and_other_models():
    table = {("m", "team", 99): "other team", ("m", "user", 77): "other user", ("n", "key", 1): "other model"}

    assert most_specific(table, "m", SCOPES) is None


# --- the full resolution ----------------------------------------------------------------------


def test_plain_model_goes_to_itself_without_chain():
    assert resolve_route(tables(), SCOPES, "gpt-4o") == Resolved("gpt-4o", "gpt-4o", None)


def test_unknown_model_is_not_found():
    assert resolve_route(tables(), SCOPES, "nope") is NOT_FOUND


def test_alias_to_a_model_not_in_the_catalog_is_not_found():
    assert resolve_route(tables(aliases={"smart": "gone"}), SCOPES, "smart") is NOT_FOUND


@pytest.mark.parametrize(("specific", "general"), PAIRS)
def test_rule_of_the_most_specific_scope_wins(specific, general):
    rules = {("gpt-4o", *at(general)): "mistral", ("gpt-4o", *at(specific)): "claude"}

    assert resolve_route(tables(rules=rules), SCOPES, "gpt-4o").model == "claude"


@pytest.mark.parametrize(("specific", "general"), PAIRS)
def test_chain_of_the_most_specific_scope_wins(specific, general):
    chains = {("gpt-4o", *at(general)): "general chain", ("gpt-4o", *at(specific)): "specific chain"}

    assert resolve_route(tables(chains=chains), SCOPES, "gpt-4o").chain == "specific chain"


@pytest.mark.parametrize(("specific", "general"), PAIRS)
def test_guardrail_of_the_most_specific_scope_decides(specific, general):
    deny, rewrite = Guard("deny", DENY), Guard("ok", "rewrite", "claude")
    guards = {("gpt-4o", *at(general)): deny, ("gpt-4o", *at(specific)): rewrite}
    reverse = {("gpt-4o", *at(general)): rewrite, ("gpt-4o", *at(specific)): deny}

    assert resolve_route(tables(guardrails=guards), SCOPES, "gpt-4o") == Resolved("gpt-4o", "claude", None)
    assert resolve_route(tables(guardrails=reverse), SCOPES, "gpt-4o") == Denied(deny)


def test_scopes_of_other_principals_do_not_apply():
    other = tables(
        rules={("gpt-4o", "team", 99): "claude"},
        guardrails={("gpt-4o", "user", 77): Guard("deny", DENY)},
        chains={("gpt-4o", "key", 42): "chain"},
    )

    assert resolve_route(other, SCOPES, "gpt-4o") == Resolved("gpt-4o", "gpt-4o", None)


def test_guardrail_deny_refuses():
    guard = Guard("no gpt-4o", DENY)

    assert resolve_route(tables(guardrails={("gpt-4o", *GLOBAL): guard}), SCOPES, "gpt-4o") == Denied(guard)
    assert DENY == GuardrailAction.DENY


def test_guardrail_rewrite_swaps_the_model_before_rules():
    config = tables(
        guardrails={("gpt-4o", *at("team")): Guard("cheaper", "rewrite", "gpt-4o-mini")},
        rules={("gpt-4o-mini", *GLOBAL): "mistral", ("gpt-4o", *GLOBAL): "claude"},
    )

    assert resolve_route(config, SCOPES, "gpt-4o") == Resolved("gpt-4o", "mistral", None)


def test_rewrite_without_target_keeps_the_model():
    config = tables(guardrails={("gpt-4o", *GLOBAL): Guard("noop", "rewrite", None)})

    assert resolve_route(config, SCOPES, "gpt-4o") == Resolved("gpt-4o", "gpt-4o", None)


def test_guardrail_on_the_model_beats_one_on_every_model_at_the_same_scope():
    config = tables(
        guardrails={
            (None, *at("team")): Guard("deny all", DENY),
            ("gpt-4o", *at("team")): Guard("allow gpt-4o", "rewrite", "gpt-4o"),
        }
    )

    assert resolve_route(config, SCOPES, "gpt-4o") == Resolved("gpt-4o", "gpt-4o", None)
    assert resolve_route(config, SCOPES, "claude") == Denied(Guard("deny all", DENY))


def test_every_model_guardrail_at_a_more_specific_scope_beats_a_model_one():
    config = tables(
        guardrails={
            (None, *at("user")): Guard("deny all", DENY),
            ("gpt-4o", *at("team")): Guard("rewrite", "rewrite", "claude"),
        }
    )

    assert resolve_route(config, SCOPES, "gpt-4o") == Denied(Guard("deny all", DENY))


def test_rule_alias_rule_chain():
    config = tables(
        rules={("gpt-4o", *at("team")): "gpt-4o-mini", ("gpt-4o", *GLOBAL): "claude"},
        aliases={"fast": "gpt-4o"},
        chains={("gpt-4o-mini", *at("user")): "mini chain", ("gpt-4o", *GLOBAL): "gpt-4o chain"},
    )

    # The alias expands to gpt-4o, the team rule (more specific than the global one) rewrites it, and
    # the chain is looked up for the model reached, not the one requested.
    assert resolve_route(config, SCOPES, "fast") == Resolved("fast", "gpt-4o-mini", "mini chain")


def test_rule_to_an_alias_expands_it_then_applies_rules_again():
    config = tables(
        rules={("gpt-4o", *at("key")): "smart", ("claude", *at("agent")): "mistral"},
        aliases={"smart": "claude"},
    )

    assert resolve_route(config, SCOPES, "gpt-4o") == Resolved("gpt-4o", "mistral", None)


def test_rules_apply_at_most_twice():
    config = tables(rules={("gpt-4o", *GLOBAL): "claude", ("claude", *GLOBAL): "mistral"})

    assert resolve_route(config, SCOPES, "gpt-4o").model == "claude"


def test_deny_on_the_model_reached_through_an_alias_or_rule_still_refuses():
    deny = Guard("no claude", DENY)
    via_alias = tables(aliases={"smart": "claude"}, guardrails={("claude", *at("team")): deny})
    via_rule = tables(rules={("gpt-4o", *GLOBAL): "claude"}, guardrails={("claude", *GLOBAL): deny})

    assert resolve_route(via_alias, SCOPES, "smart") == Denied(deny)
    assert resolve_route(via_rule, SCOPES, "gpt-4o") == Denied(deny)


def test_deny_on_the_model_reached_yields_to_a_more_specific_guardrail_on_it():
    config = tables(
        aliases={"smart": "claude"},
        guardrails={("claude", *GLOBAL): Guard("no claude", DENY), ("claude", *at("key")): Guard("ok", "rewrite", "x")},
    )

    # The second look only refuses; it never rewrites again.
    assert resolve_route(config, SCOPES, "smart") == Resolved("smart", "claude", None)


def test_the_second_look_reads_only_guardrails_on_the_model_reached():
    config = tables(
        guardrails={
            ("gpt-4o", *at("key")): Guard("to claude", "rewrite", "claude"),
            (None, *GLOBAL): Guard("deny all", DENY),
        }
    )

    assert resolve_route(config, SCOPES, "gpt-4o") == Resolved("gpt-4o", "claude", None)


def test_the_module_is_pure():
    code = (
        "import sys, routing.resolution; "
        "bad = [m for m in sys.modules if m.split('.')[0] in "
        "('django', 'gateway', 'chains', 'health', 'requestlogs', 'catalog')]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


# --- the gateway resolves through this module -------------------------------------------------


@pytest.fixture
def seeded(transactional_db):
    """Keys with different scopes and a configuration where every step of the resolution matters.

    Transactional: snapshot_build opens its own (on PostgreSQL repeatable-read) transaction, as in the gateway.
    """
    team, app, agent = TeamFactory(), ApplicationFactory(), AgentFactory()
    alice, bob = UserFactory(username="alice"), UserFactory(username="bob")
    gpt, mini, claude = (LlmModelFactory(name=n) for n in ("gpt-4o", "gpt-4o-mini", "claude"))
    LlmModelFactory(name="mistral")
    keys = {
        "full": make_key(user=alice, team=team, application=app, agent=agent, name="full").key,
        "team": make_key(user=alice, team=team, name="team").key,
        "bare": make_key(user=bob, name="bare").key,
    }
    AliasFactory(name="smart", model=gpt)
    AliasFactory(name="careful", model=claude)
    RoutingRuleFactory(source_model=gpt, target_model=mini, scope_type="team", scope_id=team.pk)
    ChainFactory(name="global", source_model=gpt)
    ChainFactory(name="team", source_model=gpt, scope_type="team", scope_id=team.pk)
    ChainFactory(name="mini for alice", source_model=mini, scope_type="user", scope_id=alice.pk)
    ChainFactory(name="user-disabled", source_model=gpt, scope_type="user", scope_id=bob.pk, enabled=False)
    Guardrail.objects.create(name="no claude", model=claude, action="deny", message="no", scope_type="global")
    Guardrail.objects.create(
        name="agent rewrite", model=claude, action="rewrite", target_model=gpt, scope_type="agent", scope_id=agent.pk
    )
    Guardrail.objects.create(
        name="bob none", action="deny", message="off", scope_type="user", scope_id=bob.pk, enabled=False
    )
    return keys


def test_snapshot_keys_carry_principal_scopes(seeded):
    snap = snapshot_build(version=1)
    by_id = {info.id: info for info in snap.keys.values()}

    for key in seeded.values():
        expected = principal_scopes(
            key_id=key.pk,
            user_id=key.user_id,
            team_id=key.team_id,
            application_id=key.application_id,
            agent_id=key.agent_id,
        )
        assert by_id[key.pk].scopes == expected


def test_snapshot_resolution_equals_the_resolver(seeded):
    snap = snapshot_build(version=1)
    names = [*snap.models, *snap.aliases, "invented"]

    for info in snap.keys.values():
        for name in names:
            pure = resolve_route(snap, info.scopes, name)
            served = snap.resolve(info, name)
            if isinstance(pure, Resolved):
                target = snapshot_module.Target(snap.models[pure.model].provider, pure.model)
                assert served == Route(name, pure.model, target, pure.chain)
            elif isinstance(pure, Denied):
                assert isinstance(served, Refusal)
                assert (served.status, served.code) == (403, "guardrail_refused")
                assert pure.guardrail.name in served.message
            else:
                assert isinstance(served, Refusal)
                assert (served.status, served.code) == (404, "model_not_found")


def test_snapshot_picks_most_specific_enabled_chain_and_rules(seeded):
    snap = snapshot_build(version=1)
    key = {info.id: info for info in snap.keys.values()}
    full, team, bare = (key[seeded[n].pk] for n in ("full", "team", "bare"))

    # The team rule sends gpt-4o to gpt-4o-mini; alice's user chain for the mini then applies.
    assert (snap.resolve(team, "gpt-4o").routed_model, snap.resolve(team, "gpt-4o").chain.name) == (
        "gpt-4o-mini",
        "mini for alice",
    )
    # Bob has no team rule; his user chain is disabled, so the global chain serves.
    assert snap.resolve(bare, "smart").chain.name == "global"
    assert snap.resolve(bare, "careful").status == 403
    # The agent's rewrite beats the global deny; the rewritten gpt-4o then follows the team rule.
    assert snap.resolve(full, "claude").routed_model == "gpt-4o-mini"
    # Through the alias the rewrite is not applied (guardrails first see the alias name), but as the most
    # specific guardrail on claude it still shields it from the global deny.
    assert snap.resolve(full, "careful").routed_model == "claude"
    assert snap.resolve(bare, "unknown").status == 404


def test_snapshot_delegates_to_the_resolver(seeded, monkeypatch):
    calls = []

    def spy(tables, scopes, requested):
        calls.append((scopes, requested))
        return resolve_route(tables, scopes, requested)

    monkeypatch.setattr(snapshot_module, "resolve_route", spy)
    snap = snapshot_build(version=1)
    info = next(iter(snap.keys.values()))

    snap.resolve(info, "smart")
    snap.resolve(info, "smart")  # memoised: resolved once

    assert calls == [(info.scopes, "smart")]
