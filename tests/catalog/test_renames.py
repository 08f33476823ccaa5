"""Rows that name a provider or a model as text (holds, breaker overrides, alert rules) follow its rename, and
keep it from being deleted."""

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from alerts.models import AlertRule
from audit.models import AuditEvent
from health.models import BreakerOverride, CircuitControl, CircuitEvent
from health.selectors import breaker_config_snapshot
from health.services import breaker_override_set, circuit_force_open, provider_drain
from tests.alerts.conftest import make_rule
from tests.helpers.api import patch_json

pytestmark = pytest.mark.django_db


def test_a_renamed_provider_keeps_its_drain_its_overrides_and_its_alert_rules(admin_client, admin_user, catalog):
    """Renamed, a drained provider took traffic again: the drain named a provider that no longer existed."""
    provider_drain(actor=admin_user, provider="openai", reason="migrating", minutes=None)
    breaker_override_set(actor=admin_user, provider="openai", model="gpt-4o", data={"failure_threshold": 2})
    rule = make_rule(name="openai open", kind="circuit_open", provider="openai")

    response = patch_json(admin_client, f"/api/providers/{catalog['openai'].pk}/", {"name": "openai-eu"})

    assert response.status_code == 200, response.content
    config = breaker_config_snapshot()
    assert config.control_for("openai-eu", "gpt-4o", time.time()) is not None
    assert config.for_circuit("openai-eu", "gpt-4o").failure_threshold == 2
    assert config.control_for("openai", "gpt-4o", time.time()) is None
    rule.refresh_from_db()
    assert rule.provider == "openai-eu"
    moved = AuditEvent.objects.filter(action__in=["circuit_control.rename", "breaker_override.rename"])
    assert sorted(moved.values_list("object_id", flat=True)) == ["openai-eu", "openai-eu/gpt-4o"]
    assert AuditEvent.objects.get(action="alert_rule.update").after == {"provider": "openai-eu"}


def test_a_renamed_model_keeps_its_forced_open_circuit_and_its_override(admin_client, admin_user, catalog):
    circuit_force_open(actor=admin_user, provider="openai", model="gpt-4o", reason="bad outputs", minutes=None)
    breaker_override_set(actor=admin_user, provider="openai", model="gpt-4o", data={"failure_threshold": 2})
    rule = make_rule(name="gpt-4o degraded", kind="degraded", model="gpt-4o")

    response = patch_json(admin_client, f"/api/models/{catalog['gpt-4o'].pk}/", {"name": "gpt-4o-2024"})

    assert response.status_code == 200, response.content
    config = breaker_config_snapshot()
    assert config.control_for("openai", "gpt-4o-2024", time.time()) is not None
    assert config.for_circuit("openai", "gpt-4o-2024").failure_threshold == 2
    rule.refresh_from_db()
    assert rule.model == "gpt-4o-2024"


def test_a_rename_onto_a_name_that_already_has_a_hold_is_refused_and_changes_nothing(admin_client, admin_user, catalog):
    provider_drain(actor=admin_user, provider="openai", reason="migrating", minutes=None)
    # A hold left under a name no provider has now (its provider was renamed away before this fix).
    CircuitControl.objects.create(provider="openai-eu", model="", kind="drained", reason="old", created_by="a")

    response = patch_json(admin_client, f"/api/providers/{catalog['openai'].pk}/", {"name": "openai-eu"})

    assert response.status_code == 409
    assert "openai-eu already has a hold of its own" in response.json()["detail"]
    catalog["openai"].refresh_from_db()
    assert catalog["openai"].name == "openai"
    assert sorted(CircuitControl.objects.values_list("provider", flat=True)) == ["openai", "openai-eu"]


def test_a_provider_or_model_a_hold_override_or_alert_rule_names_cannot_be_deleted(admin_client, admin_user, catalog):
    """Deleted, its hold stayed behind, and came back in force for a new provider given the old name."""
    provider_drain(actor=admin_user, provider="anthropic", reason="migrating", minutes=None)
    breaker_override_set(actor=admin_user, provider="openai", model="gemini-pro", data={"failure_threshold": 2})
    make_rule(name="mini", kind="degraded", model="gpt-4o-mini")

    provider = admin_client.delete(f"/api/providers/{catalog['anthropic'].pk}/")
    overridden = admin_client.delete(f"/api/models/{catalog['gemini-pro'].pk}/")
    ruled = admin_client.delete(f"/api/models/{catalog['gpt-4o-mini'].pk}/")

    assert (provider.status_code, overridden.status_code, ruled.status_code) == (409, 409, 409)
    assert provider.json()["errors"]["circuit_holds"] == ["anthropic (drained)"]
    assert overridden.json()["errors"]["circuit_holds"] == ["openai/gemini-pro (breaker override)"]
    assert ruled.json()["errors"]["alert_rules"] == ["mini"]
    assert BreakerOverride.objects.count() == 1 and AlertRule.objects.count() == 1


def test_a_renamed_hold_ends_under_the_old_name_and_starts_under_the_new_in_the_history(
    admin_client, admin_user, catalog
):
    """The history keys holds by name: the old name stayed drained for ever (its release never came), and the new
    name's later release ended a hold that never started."""
    provider_drain(actor=admin_user, provider="openai", reason="migrating", minutes=None)

    patch_json(admin_client, f"/api/providers/{catalog['openai'].pk}/", {"name": "openai-eu"})

    kinds = list(CircuitEvent.objects.order_by("id").values_list("provider", "kind", "reason"))
    assert kinds == [
        ("openai", "drained", "migrating"),
        ("openai", "released", "renamed to openai-eu"),
        ("openai-eu", "drained", "migrating"),
    ]


def test_a_hold_past_its_expiry_neither_refuses_a_rename_onto_its_name_nor_a_delete(admin_client, admin_user, catalog):
    provider_drain(actor=admin_user, provider="openai", reason="migrating", minutes=None)
    expired = timezone.now() - timedelta(minutes=1)
    CircuitControl.objects.create(
        provider="openai-eu", model="", kind="drained", reason="old", created_by="a", expires_at=expired
    )
    CircuitControl.objects.create(
        provider="anthropic", model="claude-sonnet", kind="forced_open", reason="x", created_by="a", expires_at=expired
    )

    renamed = patch_json(admin_client, f"/api/providers/{catalog['openai'].pk}/", {"name": "openai-eu"})
    deleted = admin_client.delete(f"/api/models/{catalog['claude-sonnet'].pk}/")

    assert renamed.status_code == 200, renamed.content
    assert deleted.status_code == 204, deleted.content
    drain = CircuitControl.objects.get(provider="openai-eu")
    assert (drain.reason, drain.expires_at) == ("migrating", None)


def test_a_hold_past_its_expiry_is_released_under_its_old_name_not_moved(admin_client, catalog):
    """Moved, it got a hold event under the new name at the rename's time, after the release its expiry had
    already set: the new name read held for ever in the history."""
    expired = timezone.now() - timedelta(minutes=5)
    CircuitControl.objects.create(
        provider="openai", model="", kind="drained", reason="old", created_by="a", expires_at=expired
    )

    response = patch_json(admin_client, f"/api/providers/{catalog['openai'].pk}/", {"name": "openai-eu"})

    assert response.status_code == 200, response.content
    assert not CircuitControl.objects.exists()
    assert not CircuitEvent.objects.filter(provider="openai-eu").exists()
    released = CircuitEvent.objects.get(provider="openai")
    assert (released.kind, released.at, released.actor) == ("released", expired, "expiry")
