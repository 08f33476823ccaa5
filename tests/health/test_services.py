import uuid

import pytest

from audit.models import AuditEvent
from catalog.models import Provider
from core.configbus import config_publish
from core.errors import ServiceUnavailable, ValidationFailed
from health.breaker import (
    BreakerSettings,
    BreakerUnavailable,
    ManualClock,
    MemoryEngine,
    Outcome,
    State,
    build_engine,
    factory,
    use_engine,
)
from health.models import BreakerConfig, BreakerOverride
from health.selectors import breaker_config_get, breaker_config_snapshot, breaker_override_list, circuit_list
from health.services import breaker_config_update, breaker_override_delete, breaker_override_set, circuit_reset
from tests.factories import LlmModelFactory
from tests.health.conftest import closed_port_url, trip

pytestmark = pytest.mark.django_db

T0 = 1_700_000_000.0
REDIS_DOWN = "Redis is unreachable: the circuit cannot be reset on every gateway now; try again when Redis is back."


def test_breaker_config_defaults_before_first_save():
    values = breaker_config_get()

    assert values.as_dict() == {
        "failure_threshold": 5,
        "window_seconds": 60,
        "minimum_requests": 10,
        "initial_cooldown_seconds": 60,
        "cooldown_cap_seconds": 300,
        "failure_status_codes": [429, 500, 502, 503, 504],
    }


def test_breaker_config_update_saves_audits_changed_fields_and_applies_at_once(
    admin_user, engine, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        values = breaker_config_update(
            actor=admin_user, data={"failure_threshold": "3", "window_seconds": 60, "failure_status_codes": "500, 503"}
        )

    assert values.as_dict()["failure_threshold"] == 3
    assert BreakerConfig.objects.get().failure_status_codes == [500, 503]
    event = AuditEvent.objects.get()
    assert (event.action, event.actor_name, event.object_type, event.object_id) == (
        "breaker_config.update",
        "alice",
        "breaker_config",
        "global",
    )
    assert event.before == {"failure_threshold": 5, "failure_status_codes": [429, 500, 502, 503, 504]}
    assert event.after == {"failure_threshold": 3, "failure_status_codes": [500, 503]}
    assert engine.config.default == BreakerSettings(failure_threshold=3, failure_status_codes=frozenset({500, 503}))


def test_breaker_config_update_without_changes_writes_nothing(admin_user):
    breaker_config_update(actor=admin_user, data={"failure_threshold": 5})

    assert (BreakerConfig.objects.count(), AuditEvent.objects.count()) == (0, 0)


@pytest.mark.parametrize(
    ("data", "errors"),
    [
        (
            {"failure_threshold": "abc"},
            {"failure_threshold": ["Failure threshold must be a whole number (got 'abc')."]},
        ),
        ({"failure_threshold": 2.5}, {"failure_threshold": ["Failure threshold must be a whole number (got 2.5)."]}),
        ({"failure_threshold": True}, {"failure_threshold": ["Failure threshold must be a whole number (got True)."]}),
        ({"failure_threshold": 0}, {"failure_threshold": ["Failure threshold must be at least 1."]}),
        ({"failure_threshold": ""}, {"failure_threshold": ["Failure threshold is required."]}),
        ({"minimum_requests": 0}, {"minimum_requests": ["Minimum requests must be at least 1."]}),
        ({"window_seconds": 0}, {"window_seconds": ["Failure window must be between 1 and 3600 seconds (1 hour)."]}),
        ({"window_seconds": 3601}, {"window_seconds": ["Failure window must be between 1 and 3600 seconds (1 hour)."]}),
        (
            {"initial_cooldown_seconds": 29},
            {"initial_cooldown_seconds": ["Initial cooldown must be at least 30 seconds."]},
        ),
        (
            {"initial_cooldown_seconds": 400},
            {"cooldown_cap_seconds": ["Cooldown cap (300 s) must be at least the initial cooldown (400 s)."]},
        ),
        (
            {"cooldown_cap_seconds": 59},
            {"cooldown_cap_seconds": ["Cooldown cap (59 s) must be at least the initial cooldown (60 s)."]},
        ),
        (
            {"cooldown_cap_seconds": 86401},
            {"cooldown_cap_seconds": ["Cooldown cap must be at most 86400 seconds (24 hours)."]},
        ),
        (
            {"failure_status_codes": [500, 500, 99, 600, "x"]},
            {
                "failure_status_codes": [
                    "Status code 500 is listed more than once.",
                    "Status code 99 is outside 100–599.",
                    "Status code 600 is outside 100–599.",
                    "'x' is not a whole number.",
                ]
            },
        ),
        (
            {"failure_status_codes": 500},
            {
                "failure_status_codes": [
                    "Failure status codes must be a list of whole numbers, such as [429, 500, 503]."
                ]
            },
        ),
        (
            {"threshold": 3},
            {
                "threshold": [
                    "Unknown field “threshold”; expected one of: failure_threshold, window_seconds, minimum_requests, "
                    "initial_cooldown_seconds, cooldown_cap_seconds, failure_status_codes."
                ]
            },
        ),
    ],
)
def test_breaker_config_update_rejects_bad_input_and_saves_nothing(admin_user, data, errors):
    with pytest.raises(ValidationFailed) as exc:
        breaker_config_update(actor=admin_user, data={**data})

    assert exc.value.errors == errors
    assert (BreakerConfig.objects.count(), AuditEvent.objects.count()) == (0, 0)


def test_breaker_config_update_reports_every_bad_field_at_once(admin_user):
    with pytest.raises(ValidationFailed) as exc:
        breaker_config_update(
            actor=admin_user, data={"failure_threshold": 0, "minimum_requests": "x", "window_seconds": 0}
        )

    assert sorted(exc.value.errors) == ["failure_threshold", "minimum_requests", "window_seconds"]


def test_breaker_override_set_creates_audits_and_merges_with_global(
    admin_user, single_model_catalog, engine, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        breaker_override_set(
            actor=admin_user, provider="openai", model="gpt-4o", data={"failure_threshold": 2, "window_seconds": ""}
        )

    [override] = breaker_override_list()
    assert override.as_dict() == {
        "provider": "openai",
        "model": "gpt-4o",
        "failure_threshold": 2,
        "window_seconds": None,
        "minimum_requests": None,
        "initial_cooldown_seconds": None,
        "cooldown_cap_seconds": None,
        "failure_status_codes": None,
    }
    assert override.effective == BreakerSettings(failure_threshold=2)
    event = AuditEvent.objects.get()
    assert (event.action, event.object_id, event.before) == ("breaker_override.set", "openai/gpt-4o", None)
    assert event.after == {
        "provider": "openai",
        "model": "gpt-4o",
        "failure_threshold": 2,
        "window_seconds": None,
        "minimum_requests": None,
        "initial_cooldown_seconds": None,
        "cooldown_cap_seconds": None,
        "failure_status_codes": None,
    }
    assert engine.config.for_circuit("openai", "gpt-4o") == BreakerSettings(failure_threshold=2)


def test_breaker_override_set_again_audits_changed_fields_only(admin_user, single_model_catalog):
    breaker_override_set(actor=admin_user, provider="openai", model="gpt-4o", data={"failure_threshold": 2})

    breaker_override_set(actor=admin_user, provider="openai", model="gpt-4o", data={"failure_threshold": 4})

    event = AuditEvent.objects.order_by("-id").first()
    assert (event.before, event.after) == (
        {"provider": "openai", "model": "gpt-4o", "failure_threshold": 2},
        {"provider": "openai", "model": "gpt-4o", "failure_threshold": 4},
    )


@pytest.mark.parametrize(
    ("provider", "model", "data", "errors"),
    [
        ("nope", "gpt-4o", {"failure_threshold": 2}, {"provider": ["Unknown provider “nope”."]}),
        ("openai", "nope", {"failure_threshold": 2}, {"model": ["Unknown model “nope”."]}),
        (
            "openai",
            "gpt-4o",
            {},
            {"__all__": ["Set at least one field; an override with every field empty changes nothing."]},
        ),
        (
            "openai",
            "gpt-4o",
            {"initial_cooldown_seconds": 301},
            {"initial_cooldown_seconds": ["Cooldown cap (300 s) must be at least the initial cooldown (301 s)."]},
        ),
        ("openai", "gpt-4o", {"minimum_requests": -1}, {"minimum_requests": ["Minimum requests must be at least 1."]}),
        (
            "openai",
            "gpt-4o",
            {"cooldown_cap_seconds": 0},
            {"cooldown_cap_seconds": ["Cooldown cap (0 s) must be at least the initial cooldown (60 s)."]},
        ),
    ],
)
def test_breaker_override_set_rejects_bad_input_and_saves_nothing(
    admin_user, single_model_catalog, provider, model, data, errors
):
    with pytest.raises(ValidationFailed) as exc:
        breaker_override_set(actor=admin_user, provider=provider, model=model, data=data)

    assert exc.value.errors == errors
    assert (BreakerOverride.objects.count(), AuditEvent.objects.count()) == (0, 0)


def test_breaker_override_delete_audits_snapshot(admin_user, single_model_catalog):
    breaker_override_set(actor=admin_user, provider="openai", model="gpt-4o", data={"minimum_requests": 3})

    breaker_override_delete(actor=admin_user, provider="openai", model="gpt-4o")

    event = AuditEvent.objects.order_by("-id").first()
    assert (event.action, event.after) == ("breaker_override.delete", None)
    assert event.before["minimum_requests"] == 3
    assert BreakerOverride.objects.count() == 0
    assert breaker_config_snapshot().overrides == {}


def test_circuit_reset_audits_state_and_closes_at_once(admin_user, engine):
    trip(engine)

    before = circuit_reset(actor=admin_user, provider="openai", model="gpt-4o")

    assert before.state is State.OPEN
    assert engine.get("openai", "gpt-4o").state is State.CLOSED
    event = AuditEvent.objects.get()
    assert (event.action, event.actor_name, event.object_type, event.object_id) == (
        "circuit.reset",
        "alice",
        "circuit",
        "openai/gpt-4o",
    )
    assert event.before == {
        "provider": "openai",
        "model": "gpt-4o",
        "state": "open",
        "failure_count": 10,
        "total_requests": 10,
        "cooldown_until": "2023-11-14 22:14:20+00:00",
        "consecutive_opens": 1,
        "last_failure_at": "2023-11-14 22:13:20+00:00",
        "last_failure_status": 503,
        "opened_at": "2023-11-14 22:13:20+00:00",
    }
    assert event.after == {"provider": "openai", "model": "gpt-4o", "state": "closed"}


def test_circuit_reset_of_untracked_circuit_is_refused(admin_user, engine):
    with pytest.raises(ValidationFailed) as exc:
        circuit_reset(actor=admin_user, provider="openai", model="ghost")

    assert exc.value.errors == {"__all__": ["No circuit is tracked for openai/ghost."]}
    assert AuditEvent.objects.count() == 0


def test_circuit_list_rows_carry_effective_thresholds(
    admin_user, single_model_catalog, engine, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        breaker_override_set(actor=admin_user, provider="openai", model="gpt-4o", data={"failure_threshold": 2})
    engine.record(engine.allow("openai", "gpt-4o"), Outcome.of_status(500))
    engine.record(engine.allow("anthropic", "claude"), Outcome.of_status(200))

    rows = [
        (r.provider, r.model, r.state, r.failure_count, r.total_requests, r.failure_threshold, r.has_override)
        for r in circuit_list()
    ]

    assert rows == [
        ("anthropic", "claude", State.CLOSED, 0, 1, 5, False),
        ("openai", "gpt-4o", State.CLOSED, 1, 1, 2, True),
    ]


def test_circuit_reset_while_redis_is_down_is_refused_and_not_audited(admin_user):
    engine = build_engine(
        redis_url=closed_port_url(), namespace=f"test:breaker:{uuid.uuid4().hex}", clock=ManualClock(T0)
    )
    trip(engine)  # decided locally: Redis is down

    with use_engine(engine), pytest.raises(ServiceUnavailable) as exc:
        circuit_reset(actor=admin_user, provider="openai", model="gpt-4o")

    engine.close()
    assert (exc.value.status_code, exc.value.message, exc.value.errors) == (503, REDIS_DOWN, {"__all__": [REDIS_DOWN]})
    assert AuditEvent.objects.count() == 0
    assert engine.get("openai", "gpt-4o").state is State.OPEN


class _RedisLostDuringReset(MemoryEngine):
    """Answers the listing, then loses Redis on the reset itself (as the Redis engine raises then)."""

    def reset(self, provider, model):
        raise BreakerUnavailable("Redis is unreachable")


def test_circuit_reset_that_loses_redis_midway_is_refused_and_not_audited(admin_user):
    engine = _RedisLostDuringReset(clock=ManualClock(T0))
    trip(engine)

    with use_engine(engine), pytest.raises(ServiceUnavailable) as exc:
        circuit_reset(actor=admin_user, provider="openai", model="gpt-4o")

    assert (exc.value.status_code, exc.value.message) == (503, REDIS_DOWN)
    assert AuditEvent.objects.count() == 0


def test_breaker_config_update_refuses_an_initial_cooldown_above_an_override_cap(admin_user, single_model_catalog):
    breaker_override_set(actor=admin_user, provider="openai", model="gpt-4o", data={"cooldown_cap_seconds": 60})

    with pytest.raises(ValidationFailed) as exc:
        breaker_config_update(actor=admin_user, data={"initial_cooldown_seconds": 120})

    assert exc.value.errors == {
        "initial_cooldown_seconds": [
            "Initial cooldown (120 s) is above the cooldown cap of the override(s) openai/gpt-4o (60 s), "
            "which inherit the initial cooldown; change or delete those overrides first."
        ]
    }
    assert (BreakerConfig.objects.count(), AuditEvent.objects.count()) == (0, 1)
    assert breaker_config_get().initial_cooldown_seconds == 60


def test_breaker_config_update_refuses_a_cap_below_the_initial_cooldown_of_overrides(admin_user, single_model_catalog):
    LlmModelFactory(name="gpt-4o-mini", provider=Provider.objects.get(name="openai"))
    for model in ("gpt-4o-mini", "gpt-4o"):
        breaker_override_set(actor=admin_user, provider="openai", model=model, data={"initial_cooldown_seconds": 200})
    breaker_override_set(actor=admin_user, provider="openai", model="gpt-4o", data={"initial_cooldown_seconds": 250})

    with pytest.raises(ValidationFailed) as exc:
        breaker_config_update(actor=admin_user, data={"cooldown_cap_seconds": 100, "initial_cooldown_seconds": 90})

    assert exc.value.errors == {
        "cooldown_cap_seconds": [
            "Cooldown cap (100 s) is below the initial cooldown of the override(s) openai/gpt-4o (250 s), "
            "openai/gpt-4o-mini (200 s), which inherit the cap; change or delete those overrides first."
        ]
    }
    assert (BreakerConfig.objects.count(), AuditEvent.objects.count()) == (0, 3)


def test_breaker_config_update_accepts_cooldowns_an_override_sets_itself(admin_user, single_model_catalog):
    breaker_override_set(
        actor=admin_user,
        provider="openai",
        model="gpt-4o",
        data={"initial_cooldown_seconds": 30, "cooldown_cap_seconds": 60},
    )

    values = breaker_config_update(
        actor=admin_user, data={"initial_cooldown_seconds": 120, "cooldown_cap_seconds": 600}
    )

    assert (values.initial_cooldown_seconds, values.cooldown_cap_seconds) == (120, 600)
    assert breaker_config_snapshot().for_circuit("openai", "gpt-4o") == BreakerSettings(
        initial_cooldown_seconds=30, cooldown_cap_seconds=60
    )


def test_config_subscriber_reads_every_version_this_process_published_included(engine, admin_user):
    """Version numbers are not compared (Redis's counter starts again after an empty restart): the subscriber
    reads what the database holds for every message, this process's own included."""
    breaker_config_update(actor=admin_user, data={"failure_threshold": 7})
    version = config_publish()

    assert factory._load_config_in_subscriber(version).default.failure_threshold == 7


def test_status_codes_saved_again_in_another_order_are_no_change(admin_user, single_model_catalog):
    """A set of codes: the same ones in another order used to be a change, saved and audited as one."""
    breaker_config_update(actor=admin_user, data={"failure_status_codes": [500, 503]})
    breaker_override_set(actor=admin_user, provider="openai", model="gpt-4o", data={"failure_status_codes": "429, 502"})
    audited = AuditEvent.objects.count()

    breaker_config_update(actor=admin_user, data={"failure_status_codes": [503, 500]})
    breaker_override_set(actor=admin_user, provider="openai", model="gpt-4o", data={"failure_status_codes": [502, 429]})

    assert AuditEvent.objects.count() == audited == 2
    assert BreakerConfig.objects.get().failure_status_codes == [500, 503]
    assert BreakerOverride.objects.get().failure_status_codes == [429, 502]


def test_status_codes_of_a_new_global_row_in_another_order_than_the_defaults_are_no_change(admin_user):
    breaker_config_update(actor=admin_user, data={"failure_status_codes": [504, 503, 502, 500, 429]})

    assert not BreakerConfig.objects.exists()
    assert not AuditEvent.objects.exists()
