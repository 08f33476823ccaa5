"""The chain API's `resilience` object and the global default policy (GET/PUT /api/resilience/defaults/)."""

import dataclasses

import pytest

from audit.models import AuditEvent
from chains.models import FallbackChain, ResilienceDefaults
from chains.resilience import DEFAULT_POLICY, RESILIENCE_DEFAULTS
from gateway.snapshot import snapshot_build
from tests.factories import ChainFactory, LlmModelFactory, ProviderFactory
from tests.helpers.api import patch_json, post_json, put_json

LIST_URL = "/api/chains/"
DEFAULTS_URL = "/api/resilience/defaults/"


def chain_body(**overrides) -> dict:
    body = {
        "name": "Primary fallback",
        "source_model": "gpt-4o",
        "entries": [{"model": "claude-sonnet", "provider": None}],
        "scope": {"type": "global", "id": None},
        "enabled": True,
    }
    body.update(overrides)
    return body


def create_chain(client, **overrides) -> dict:
    response = post_json(client, LIST_URL, chain_body(**overrides))
    assert response.status_code == 201, response.json()
    return response.json()


# --- the chain's policy ------------------------------------------------------------------------


def test_create_stores_only_the_knobs_sent_and_audits_them(admin_client, catalog):
    body = create_chain(admin_client, resilience={"enabled": True, "max_retries": 2})

    assert body["resilience"] == {"enabled": True, "max_retries": 2}
    assert FallbackChain.objects.get().resilience == {"enabled": True, "max_retries": 2}
    assert AuditEvent.objects.get(action="chain.create").after["resilience"] == {"enabled": True, "max_retries": 2}
    assert admin_client.get(f"{LIST_URL}{body['id']}/").json()["resilience"] == {"enabled": True, "max_retries": 2}


def test_create_without_a_policy_starts_from_the_global_default(admin_client, admin_user, catalog):
    assert create_chain(admin_client)["resilience"] == {"enabled": False}

    put_json(admin_client, DEFAULTS_URL, {"policy": {"enabled": True}, "version": 1})
    second = create_chain(admin_client, scope={"type": "user", "id": admin_user.pk})

    assert second["resilience"] == {"enabled": True}


@pytest.mark.parametrize(
    ("resilience", "errors"),
    [
        (
            {"enabled": True, "retries": 2},
            {
                "resilience.retries": [
                    "Unknown resilience knob “retries”; known knobs: enabled, max_retries, backoff_base_ms, "
                    "backoff_floor_ms, backoff_cap_ms, retry_after_cap_seconds, max_attempts, "
                    "connect_timeout_seconds, first_token_timeout_seconds, idle_timeout_seconds, deadline_seconds."
                ]
            },
        ),
        ({"max_attempts": 50}, {"resilience.max_attempts": ["Must be between 1 and 20 (got 50)."]}),
        ({"enabled": "yes"}, {"resilience.enabled": ["Must be true or false."]}),
    ],
)
def test_create_refuses_a_bad_policy_with_400_naming_the_knob(admin_client, catalog, resilience, errors):
    response = post_json(admin_client, LIST_URL, chain_body(resilience=resilience))

    assert response.status_code == 400
    assert response.json() == {"detail": next(iter(errors.values()))[0], "errors": errors}
    assert FallbackChain.objects.count() == 0 and AuditEvent.objects.count() == 0


def test_create_refuses_a_policy_that_is_not_an_object(admin_client, catalog):
    response = post_json(admin_client, LIST_URL, chain_body(resilience=[1]))

    assert response.status_code == 400
    assert list(response.json()["errors"]) == ["resilience"]
    assert FallbackChain.objects.count() == 0


def test_put_without_a_policy_keeps_it(admin_client, catalog):
    created = create_chain(admin_client, resilience={"enabled": True, "deadline_seconds": 20})
    url = f"{LIST_URL}{created['id']}/"

    response = put_json(admin_client, url, chain_body(name="Renamed", version=1))

    assert response.status_code == 200
    assert response.json()["resilience"] == {"enabled": True, "deadline_seconds": 20.0}


def test_put_replaces_the_policy_bumps_the_version_and_audits_before_and_after(admin_client, catalog):
    created = create_chain(admin_client, resilience={"enabled": True, "max_retries": 2})
    url = f"{LIST_URL}{created['id']}/"

    response = put_json(admin_client, url, chain_body(resilience={"enabled": False}, version=1))

    assert response.status_code == 200
    assert (response.json()["resilience"], response.json()["version"]) == ({"enabled": False}, 2)
    event = AuditEvent.objects.get(action="chain.update")
    assert (event.before, event.after) == (
        {"resilience": {"enabled": True, "max_retries": 2}},
        {"resilience": {"enabled": False}},
    )


def test_patch_of_the_policy_alone(admin_client, catalog):
    created = create_chain(admin_client)
    url = f"{LIST_URL}{created['id']}/"

    response = patch_json(admin_client, url, {"resilience": {"enabled": True, "max_attempts": 3}, "version": 1})

    assert response.status_code == 200
    body = response.json()
    assert (body["resilience"], body["version"], body["name"]) == (
        {"enabled": True, "max_attempts": 3},
        2,
        "Primary fallback",
    )


def test_patch_with_the_same_policy_keeps_the_version_and_writes_no_event(admin_client, catalog):
    created = create_chain(admin_client, resilience={"enabled": True})
    url = f"{LIST_URL}{created['id']}/"

    response = patch_json(admin_client, url, {"resilience": {"enabled": True}, "version": 1})

    assert response.json()["version"] == 1
    assert not AuditEvent.objects.filter(action="chain.update").exists()


def test_patch_of_the_policy_with_a_stale_version_is_409_and_changes_nothing(admin_client, catalog):
    created = create_chain(admin_client)
    url = f"{LIST_URL}{created['id']}/"
    patch_json(admin_client, url, {"name": "Someone else", "version": 1})

    response = patch_json(admin_client, url, {"resilience": {"enabled": True}, "version": 1})

    assert response.status_code == 409
    assert FallbackChain.objects.get().resilience == {"enabled": False}


def test_patch_with_a_bad_policy_is_400_and_changes_nothing(admin_client, catalog):
    created = create_chain(admin_client)
    url = f"{LIST_URL}{created['id']}/"

    response = patch_json(admin_client, url, {"resilience": {"max_retries": 9}, "version": 1})

    assert response.status_code == 400
    assert response.json()["errors"] == {"resilience.max_retries": ["Must be between 0 and 5 (got 9)."]}
    assert FallbackChain.objects.get().version == 1


# --- the global default policy -----------------------------------------------------------------


def test_defaults_before_any_edit_are_the_built_in_ones(admin_client, db):
    response = admin_client.get(DEFAULTS_URL)

    assert response.status_code == 200
    assert response.json() == {"policy": RESILIENCE_DEFAULTS, "set": {}, "version": 1, "updated_at": None}
    assert not ResilienceDefaults.objects.exists()


def test_defaults_put_replaces_them_and_audits_before_and_after(admin_client, db):
    response = put_json(
        admin_client, DEFAULTS_URL, {"policy": {"max_retries": 3, "deadline_seconds": 30}, "version": 1}
    )

    assert response.status_code == 200
    body = response.json()
    assert (body["set"], body["version"]) == ({"max_retries": 3, "deadline_seconds": 30.0}, 2)
    assert body["policy"] == {**RESILIENCE_DEFAULTS, "max_retries": 3, "deadline_seconds": 30.0}
    assert admin_client.get(DEFAULTS_URL).json()["set"] == {"max_retries": 3, "deadline_seconds": 30.0}
    event = AuditEvent.objects.get(action="resilience_defaults.update")
    assert (event.actor_name, event.object_type) == ("alice", "resilience_defaults")
    assert event.before == {"policy": {}, "max_retries": 1, "deadline_seconds": 60.0}
    assert event.after == {
        "policy": {"max_retries": 3, "deadline_seconds": 30.0},
        "max_retries": 3,
        "deadline_seconds": 30.0,
    }

    # Knobs not sent go back to the built-in defaults.
    again = put_json(admin_client, DEFAULTS_URL, {"policy": {"deadline_seconds": 30}, "version": 2})
    assert (again.json()["policy"]["max_retries"], again.json()["version"]) == (1, 3)


def test_defaults_put_without_a_change_keeps_the_version_and_writes_no_event(admin_client, db):
    put_json(admin_client, DEFAULTS_URL, {"policy": {"max_retries": 3}, "version": 1})

    response = put_json(admin_client, DEFAULTS_URL, {"policy": {"max_retries": 3}, "version": 2})

    assert response.json()["version"] == 2
    assert AuditEvent.objects.filter(action="resilience_defaults.update").count() == 1


def test_defaults_put_with_a_stale_version_is_409(admin_client, db):
    put_json(admin_client, DEFAULTS_URL, {"policy": {"max_retries": 3}, "version": 1})

    response = put_json(admin_client, DEFAULTS_URL, {"policy": {"max_retries": 0}, "version": 1})

    assert response.status_code == 409
    assert response.json()["errors"] == {"version": ["Stale version 1; current is 2."]}
    assert ResilienceDefaults.objects.get().policy == {"max_retries": 3}


def test_defaults_put_refuses_a_bad_policy_naming_the_knob_and_its_bounds(admin_client, db):
    response = put_json(admin_client, DEFAULTS_URL, {"policy": {"idle_timeout_seconds": 0, "nope": 1}, "version": 1})

    assert response.status_code == 400
    errors = response.json()["errors"]
    assert errors["policy.idle_timeout_seconds"] == ["Must be between 0.5 and 600 (got 0)."]
    assert errors["policy.nope"][0].startswith("Unknown resilience knob “nope”")
    assert not ResilienceDefaults.objects.exists() and not AuditEvent.objects.exists()


def test_defaults_put_requires_the_version(admin_client, db):
    response = put_json(admin_client, DEFAULTS_URL, {"policy": {}})

    assert response.status_code == 400
    assert "version" in response.json()["errors"]


@pytest.mark.parametrize("client_name", ["bi_client", "user_client", "anon_client"])
def test_defaults_are_admin_only(request, db, client_name):
    client = request.getfixturevalue(client_name)

    assert client.get(DEFAULTS_URL).status_code in (401, 403)
    assert put_json(client, DEFAULTS_URL, {"policy": {"enabled": True}, "version": 1}).status_code in (401, 403)
    assert not ResilienceDefaults.objects.exists()


# --- the gateway snapshot carries the effective policy ---------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_snapshot_carries_each_chain_s_effective_policy_and_the_provider_timeouts():
    openai = ProviderFactory(name="openai", first_token_timeout_seconds=4.0)
    ProviderFactory(name="anthropic")
    gpt = LlmModelFactory(name="gpt-4o", provider=openai)
    mini = LlmModelFactory(name="gpt-4o-mini", provider=openai)
    on = ChainFactory(name="on", source_model=gpt, resilience={"enabled": True, "max_retries": 2})
    off = ChainFactory(name="off", source_model=mini)
    ResilienceDefaults.objects.create(pk=1, policy={"max_retries": 0, "deadline_seconds": 25.0})

    snap = snapshot_build(version=1)

    by_name = {c.name: c for c in snap.chains.values()}
    assert by_name["on"].id == on.pk and by_name["off"].id == off.pk
    assert by_name["on"].resilience == dataclasses.replace(
        DEFAULT_POLICY, enabled=True, max_retries=2, deadline_seconds=25.0
    )
    assert by_name["off"].resilience == dataclasses.replace(DEFAULT_POLICY, max_retries=0, deadline_seconds=25.0)
    assert by_name["off"].resilience.enabled is False
    assert snap.resilience_defaults.deadline_seconds == 25.0
    assert (snap.providers["openai"].first_token_timeout, snap.providers["openai"].idle_timeout) == (4.0, None)
    assert snap.providers["anthropic"].first_token_timeout is None


@pytest.mark.django_db(transaction=True)
def test_snapshot_without_defaults_row_or_chain_policy_is_the_default_policy_off():
    ChainFactory(name="plain")

    snap = snapshot_build(version=1)

    (chain,) = snap.chains.values()
    assert chain.resilience == DEFAULT_POLICY
    assert snap.resilience_defaults == DEFAULT_POLICY
