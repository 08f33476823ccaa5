"""The kill-switch and history API: force open, drain, release, a circuit's events, and the hold in the circuit
list. Admin only; in the OpenAPI schema."""

import time
from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from audit.models import AuditEvent
from health.breaker import ManualClock, MemoryEngine, use_engine
from health.models import CircuitControl, CircuitEvent
from tests.health.conftest import trip
from tests.helpers.api import post_json

pytestmark = pytest.mark.django_db

FORCE = "/api/circuits/force-open/"
DRAIN = "/api/circuits/drain/"
RELEASE = "/api/circuits/release/"
EVENTS = "/api/circuits/openai/gpt-4o/events/"
STATUS = {"admin": None, "bi_read_only": 403, "user": 403, "anonymous": 401}


@pytest.fixture
def engine(db):
    """A memory engine on a clock at the real time (holds are compared with it), in use by the app."""
    engine = MemoryEngine(clock=ManualClock(round(time.time(), 3)))
    with use_engine(engine):
        yield engine


def iso(value: datetime | None) -> str | None:
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z") if value is not None else None


def test_force_open_replies_201_with_the_hold(admin_client, engine, catalog):
    response = post_json(
        admin_client, FORCE, {"provider": "openai", "model": "gpt-4o", "reason": "incident 42", "minutes": 30}
    )

    row = CircuitControl.objects.get()
    assert response.status_code == 201
    assert response.json() == {
        "kind": "forced_open",
        "provider": "openai",
        "model": "gpt-4o",
        "reason": "incident 42",
        "until": iso(row.expires_at),
        "created_by": "alice",
        "created_at": iso(row.created_at),
    }
    assert row.expires_at - row.created_at == pytest.approx(timedelta(minutes=30), abs=timedelta(seconds=1))


def test_drain_without_minutes_holds_until_released(admin_client, engine, catalog):
    response = post_json(admin_client, DRAIN, {"provider": "openai", "reason": "maintenance"})

    assert response.status_code == 201
    body = response.json()
    assert (body["kind"], body["provider"], body["model"], body["until"]) == ("drained", "openai", "", None)
    assert AuditEvent.objects.get().action == "provider.drain"


def test_release_replies_200_with_the_hold_lifted(admin_client, engine, catalog):
    post_json(admin_client, FORCE, {"provider": "openai", "model": "gpt-4o", "reason": "incident"})
    post_json(admin_client, DRAIN, {"provider": "anthropic", "reason": "maintenance", "minutes": None})

    circuit = post_json(admin_client, RELEASE, {"provider": "openai", "model": "gpt-4o"})
    drain = post_json(admin_client, RELEASE, {"provider": "anthropic"})

    assert (circuit.status_code, circuit.json()["kind"], circuit.json()["model"]) == (200, "forced_open", "gpt-4o")
    assert (drain.status_code, drain.json()["kind"], drain.json()["model"]) == (200, "drained", "")
    assert CircuitControl.objects.count() == 0


def test_bad_input_is_400_with_field_messages(admin_client, engine, catalog):
    missing = post_json(admin_client, FORCE, {})
    typed = post_json(admin_client, FORCE, {"provider": "openai", "model": "gpt-4o", "reason": "x", "minutes": "x"})
    ranged = post_json(admin_client, DRAIN, {"provider": "nope", "reason": "x" * 501, "minutes": 20000})
    not_object = post_json(admin_client, RELEASE, [1, 2])

    assert (missing.status_code, missing.json()) == (
        400,
        {
            "detail": "Provider is required.",
            "errors": {
                "provider": ["Provider is required."],
                "model": ["Model is required."],
                "reason": ["Reason is required: say why traffic is held off this target."],
            },
        },
    )
    assert (typed.status_code, typed.json()["errors"]) == (400, {"minutes": ["A valid integer is required."]})
    assert (ranged.status_code, ranged.json()["errors"]) == (
        400,
        {
            "provider": ["Unknown provider “nope”."],
            "reason": ["Reason is at most 500 characters (got 501)."],
            "minutes": ["Minutes must be between 1 and 10080 (7 days)."],
        },
    )
    assert (not_object.status_code, not_object.json()["errors"]) == (400, {"__all__": ["Send a JSON object."]})
    assert CircuitControl.objects.count() == 0


def test_a_second_hold_is_409_and_releasing_nothing_is_404(admin_client, engine, catalog):
    post_json(admin_client, FORCE, {"provider": "openai", "model": "gpt-4o", "reason": "first"})

    again = post_json(admin_client, FORCE, {"provider": "openai", "model": "gpt-4o", "reason": "second"})
    nothing = post_json(admin_client, RELEASE, {"provider": "openai"})

    assert (again.status_code, again.json()) == (
        409,
        {
            "detail": "openai/gpt-4o is already forced open; release it first to change the hold.",
            "errors": {"__all__": ["openai/gpt-4o already has a hold; release it first."]},
        },
    )
    assert (nothing.status_code, nothing.json()) == (
        404,
        {
            "detail": "openai is not drained: there is nothing to release.",
            "errors": {"__all__": ["openai has no hold to release."]},
        },
    )


def test_circuit_list_shows_each_circuits_hold(admin_client, engine, catalog):
    trip(engine, "openai", "gpt-4o")
    trip(engine, "openai", "gpt-4o-mini")
    trip(engine, "anthropic", "claude-sonnet")
    post_json(admin_client, FORCE, {"provider": "openai", "model": "gpt-4o", "reason": "incident", "minutes": 5})
    post_json(admin_client, DRAIN, {"provider": "openai", "reason": "maintenance"})
    forced = CircuitControl.objects.get(model="gpt-4o")

    rows = admin_client.get("/api/circuits/").json()

    assert {(r["provider"], r["model"]): r["control"] for r in rows} == {
        # A circuit's own hold wins over its provider's drain.
        ("openai", "gpt-4o"): {"kind": "forced_open", "reason": "incident", "until": iso(forced.expires_at)},
        ("openai", "gpt-4o-mini"): {"kind": "drained", "reason": "maintenance", "until": None},
        ("anthropic", "claude-sonnet"): None,
    }


def test_circuit_list_leaves_out_an_expired_hold(admin_client, engine, catalog):
    trip(engine)
    CircuitControl.objects.create(
        provider="openai",
        model="gpt-4o",
        kind="forced_open",
        reason="old",
        expires_at=timezone.now() - timedelta(seconds=1),
        created_by="alice",
    )

    rows = admin_client.get("/api/circuits/").json()

    assert [r["control"] for r in rows] == [None]


def test_events_newest_first_with_every_field_and_the_providers_drains(admin_client, engine, catalog):
    base = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    CircuitEvent.objects.create(
        provider="openai",
        model="gpt-4o",
        kind="opened",
        at=base,
        generation=1,
        failures=5,
        total=10,
        last_status="503",
        cooldown_seconds=60.0,
    )
    CircuitEvent.objects.create(provider="openai", model="", kind="drained", at=base + timedelta(minutes=1), actor="a")
    CircuitEvent.objects.create(provider="openai", model="gpt-4o-mini", kind="opened", at=base, generation=1)
    CircuitEvent.objects.create(provider="anthropic", model="", kind="drained", at=base)

    response = admin_client.get(EVENTS)

    assert response.status_code == 200
    assert response.json() == [
        {
            "kind": "drained",
            "at": "2026-01-01T12:01:00Z",
            "model": "",
            "generation": None,
            "failures": None,
            "total": None,
            "last_status": "",
            "cooldown_seconds": None,
            "local": False,
            "actor": "a",
            "reason": "",
            "until": None,
        },
        {
            "kind": "opened",
            "at": "2026-01-01T12:00:00Z",
            "model": "gpt-4o",
            "generation": 1,
            "failures": 5,
            "total": 10,
            "last_status": "503",
            "cooldown_seconds": 60.0,
            "local": False,
            "actor": "",
            "reason": "",
            "until": None,
        },
    ]


def test_events_limit_defaults_to_50_and_is_checked(admin_client, engine, catalog):
    base = datetime(2026, 1, 1, tzinfo=UTC)
    CircuitEvent.objects.bulk_create(
        CircuitEvent(provider="openai", model="gpt-4o", kind="half_open", at=base + timedelta(seconds=i), generation=i)
        for i in range(60)
    )

    default = admin_client.get(EVENTS)
    three = admin_client.get(EVENTS, {"limit": 3})
    zero = admin_client.get(EVENTS, {"limit": 0})
    huge = admin_client.get(EVENTS, {"limit": 501})
    word = admin_client.get(EVENTS, {"limit": "all"})

    assert (default.status_code, len(default.json())) == (200, 50)
    assert [e["generation"] for e in three.json()] == [59, 58, 57]
    assert (zero.status_code, zero.json()["errors"]) == (
        400,
        {"limit": ["Ensure this value is greater than or equal to 1."]},
    )
    assert (huge.status_code, huge.json()["errors"]) == (
        400,
        {"limit": ["Ensure this value is less than or equal to 500."]},
    )
    assert (word.status_code, word.json()["errors"]) == (400, {"limit": ["A valid integer is required."]})


def test_events_of_a_model_with_a_slash(admin_client, engine, db):
    CircuitEvent.objects.create(
        provider="meta", model="meta/llama-3", kind="opened", at=datetime(2026, 1, 1, tzinfo=UTC), generation=1
    )

    response = admin_client.get("/api/circuits/meta/meta/llama-3/events/")

    assert [(e["kind"], e["model"]) for e in response.json()] == [("opened", "meta/llama-3")]


@pytest.mark.parametrize(
    ("method", "url", "body", "admin_status"),
    [
        ("get", EVENTS, None, 200),
        ("post", FORCE, {"provider": "openai", "model": "gpt-4o", "reason": "x"}, 201),
        ("post", DRAIN, {"provider": "openai", "reason": "x"}, 201),
        ("post", RELEASE, {"provider": "anthropic"}, 200),
    ],
)
def test_role_matrix(role_client, engine, catalog, method, url, body, admin_status):
    role, client = role_client
    CircuitControl.objects.create(provider="anthropic", model="", kind="drained", reason="r", created_by="alice")
    before = sorted(CircuitControl.objects.values_list("provider", "model"))

    response = client.get(url) if method == "get" else post_json(client, url, body)

    expected = STATUS[role] or admin_status
    assert response.status_code == expected
    if role != "admin":
        assert sorted(CircuitControl.objects.values_list("provider", "model")) == before
        assert AuditEvent.objects.count() == 0


def test_schema_lists_the_history_and_kill_switch_operations(admin_client):
    schema = admin_client.get("/api/schema/", {"format": "json"}).json()
    paths = schema["paths"]

    assert {
        url: sorted(paths[url])
        for url in (
            "/api/circuits/{provider}/{model}/events/",
            "/api/circuits/force-open/",
            "/api/circuits/drain/",
            "/api/circuits/release/",
        )
    } == {
        "/api/circuits/{provider}/{model}/events/": ["get"],
        "/api/circuits/force-open/": ["post"],
        "/api/circuits/drain/": ["post"],
        "/api/circuits/release/": ["post"],
    }
    assert paths["/api/circuits/force-open/"]["post"]["operationId"] == "circuit_force_open"
    assert sorted(paths["/api/circuits/force-open/"]["post"]["responses"]) == [
        "201",
        "400",
        "401",
        "403",
        "409",
        "413",
        "415",
        "429",
    ]
    assert [p["name"] for p in paths["/api/circuits/{provider}/{model}/events/"]["get"]["parameters"]] == [
        "limit",
        "model",
        "provider",
    ]
    schemas = schema["components"]["schemas"]
    assert sorted(schemas["CircuitForceOpenInput"]["properties"]) == ["minutes", "model", "provider", "reason"]
    assert sorted(schemas["CircuitControl"]["properties"]) == [
        "created_at",
        "created_by",
        "kind",
        "model",
        "provider",
        "reason",
        "until",
    ]
    assert "control" in schemas["CircuitListItem"]["properties"]
    assert sorted(schemas["CircuitEvent"]["properties"]) == [
        "actor",
        "at",
        "cooldown_seconds",
        "failures",
        "generation",
        "kind",
        "last_status",
        "local",
        "model",
        "reason",
        "total",
        "until",
    ]


def test_release_of_a_hold_past_its_expiry_is_a_404_and_records_the_expiry(admin_client, engine, catalog):
    expired_at = timezone.now() - timedelta(minutes=5)
    CircuitControl.objects.create(
        provider="openai", model="", kind="drained", reason="x", expires_at=expired_at, created_by="bob"
    )

    response = post_json(admin_client, RELEASE, {"provider": "openai"})

    assert response.status_code == 404
    assert response.json()["detail"] == "openai is not drained: there is nothing to release."
    assert not CircuitControl.objects.exists()
    assert list(CircuitEvent.objects.values_list("kind", "actor", "at")) == [("released", "expiry", expired_at)]
    assert list(AuditEvent.objects.values_list("action", "actor_name")) == [("circuit.release", "system")]
