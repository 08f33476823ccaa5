"""The kill switch: force open, drain, release and expiry. Validated, audited, in the circuit's history, obeyed by
this process's engine at once and by another gateway process within a second, until released or expired."""

import subprocess
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from audit.models import AuditEvent
from core.errors import ConflictError, NotFound, ValidationFailed
from health.breaker import ManualClock, MemoryEngine, Outcome, use_engine
from health.models import CircuitControl, CircuitEvent
from health.services import (
    circuit_controls_expire,
    circuit_force_open,
    circuit_release,
    circuit_reset,
    provider_drain,
)
from health.tasks import controls_expire_task
from tests.health.conftest import trip
from tests.servers import delete_namespace, production_env, until

ROOT = Path(__file__).resolve().parents[2]
EVENT_FIELDS = ("kind", "provider", "model", "generation", "actor", "reason")


@pytest.fixture
def live(db):
    """A memory engine on a hand-driven clock starting now (holds expire in real time), in use by the app."""
    clock = ManualClock(round(time.time(), 3))
    engine = MemoryEngine(clock=clock)
    with use_engine(engine):
        yield engine, clock


@pytest.fixture
def publish(django_capture_on_commit_callbacks):
    """Run the on-commit callbacks (config_publish) of the service calls made inside it."""
    return lambda: django_capture_on_commit_callbacks(execute=True)


def events() -> list[tuple]:
    return list(CircuitEvent.objects.order_by("at", "id").values_list(*EVENT_FIELDS))


def errors_of(excinfo) -> dict[str, list[str]]:
    return excinfo.value.errors


def test_force_open_holds_the_circuit_audits_and_records_it(live, catalog, admin_user, publish):
    engine, _ = live
    with publish():
        row = circuit_force_open(
            actor=admin_user, provider="openai", model="gpt-4o", reason="  upstream incident  ", minutes=30
        )

    assert (row.kind, row.provider, row.model, row.reason, row.created_by) == (
        "forced_open",
        "openai",
        "gpt-4o",
        "upstream incident",
        "alice",
    )
    assert row.expires_at - row.created_at == pytest.approx(timedelta(minutes=30), abs=timedelta(seconds=1))
    assert CircuitControl.objects.count() == 1
    audit = AuditEvent.objects.get()
    assert (audit.action, audit.actor_name, audit.object_id) == ("circuit.force_open", "alice", "openai/gpt-4o")
    assert audit.after["reason"] == "upstream incident"
    assert events() == [("forced_open", "openai", "gpt-4o", None, "alice", "upstream incident")]
    assert CircuitEvent.objects.get().until == row.expires_at
    # Published on commit: this process's engine refuses the circuit, and only that one.
    assert (engine.allow("openai", "gpt-4o").allowed, engine.allow("openai", "gpt-4o-mini").allowed) == (False, True)


def test_a_forced_open_circuit_allows_again_at_its_expiry(live, catalog, admin_user, publish):
    engine, clock = live
    with publish():
        row = circuit_force_open(actor=admin_user, provider="openai", model="gpt-4o", reason="incident", minutes=1)

    clock.set(row.expires_at.timestamp() - 0.5)
    before = engine.allow("openai", "gpt-4o").allowed
    clock.set(row.expires_at.timestamp() + 0.002)  # the clock keeps whole milliseconds
    after = engine.allow("openai", "gpt-4o").allowed

    assert (before, after) == (False, True)


def test_a_hold_refuses_the_probe_too_until_released(live, catalog, admin_user, publish):
    engine, clock = live
    trip(engine)
    with publish():
        circuit_force_open(actor=admin_user, provider="openai", model="gpt-4o", reason="incident", minutes=None)

    clock.advance(3600)  # far past the cooldown: without the hold this call would be the probe
    held = engine.allow("openai", "gpt-4o")
    with publish():
        circuit_release(actor=admin_user, provider="openai", model="gpt-4o")
    released = engine.allow("openai", "gpt-4o")

    assert (held.allowed, released.allowed, released.probe) == (False, True, True)


def test_drain_holds_every_circuit_of_the_provider(live, catalog, admin_user, publish):
    engine, _ = live
    with publish():
        row = provider_drain(actor=admin_user, provider="openai", reason="maintenance window", minutes=None)

    allowed = {m: engine.allow(p, m).allowed for p, m in [("openai", "gpt-4o"), ("openai", "gpt-4o-mini")]}

    assert (row.kind, row.model, row.expires_at) == ("drained", "", None)
    assert allowed == {"gpt-4o": False, "gpt-4o-mini": False}
    assert engine.allow("anthropic", "claude-sonnet").allowed is True
    assert AuditEvent.objects.get().action == "provider.drain"
    assert events() == [("drained", "openai", "", None, "alice", "maintenance window")]


def test_release_lifts_the_hold_audits_and_records_it(live, catalog, admin_user, publish):
    engine, _ = live
    with publish():
        circuit_force_open(actor=admin_user, provider="openai", model="gpt-4o", reason="incident", minutes=None)
        provider_drain(actor=admin_user, provider="anthropic", reason="maintenance", minutes=None)
    with publish():
        released = circuit_release(actor=admin_user, provider="openai", model="gpt-4o")
        drain = circuit_release(actor=admin_user, provider="anthropic")

    assert (released.kind, released.model, drain.kind, drain.model) == ("forced_open", "gpt-4o", "drained", "")
    assert CircuitControl.objects.count() == 0
    assert (engine.allow("openai", "gpt-4o").allowed, engine.allow("anthropic", "claude-sonnet").allowed) == (
        True,
        True,
    )
    assert list(AuditEvent.objects.order_by("id").values_list("action", "object_id")) == [
        ("circuit.force_open", "openai/gpt-4o"),
        ("provider.drain", "anthropic"),
        ("circuit.release", "openai/gpt-4o"),
        ("circuit.release", "anthropic"),
    ]
    assert [e for e in events() if e[0] == "released"] == [
        ("released", "openai", "gpt-4o", None, "alice", ""),
        ("released", "anthropic", "", None, "alice", ""),
    ]


def test_releasing_nothing_is_not_found(live, catalog, admin_user):
    provider_drain(actor=admin_user, provider="openai", reason="maintenance", minutes=None)

    with pytest.raises(NotFound) as circuit:
        circuit_release(actor=admin_user, provider="openai", model="gpt-4o")  # only the provider is drained
    with pytest.raises(NotFound) as provider:
        circuit_release(actor=admin_user, provider="anthropic")

    assert (circuit.value.status_code, circuit.value.message) == (
        404,
        "openai/gpt-4o is not forced open: there is nothing to release.",
    )
    assert provider.value.message == "anthropic is not drained: there is nothing to release."
    assert CircuitControl.objects.count() == 1


def test_a_second_hold_on_the_same_target_is_a_conflict(live, catalog, admin_user):
    circuit_force_open(actor=admin_user, provider="openai", model="gpt-4o", reason="first", minutes=None)
    provider_drain(actor=admin_user, provider="openai", reason="first", minutes=None)  # another target: allowed

    with pytest.raises(ConflictError) as forced:
        circuit_force_open(actor=admin_user, provider="openai", model="gpt-4o", reason="second", minutes=5)
    with pytest.raises(ConflictError) as drained:
        provider_drain(actor=admin_user, provider="openai", reason="second", minutes=5)

    assert (forced.value.status_code, forced.value.message) == (
        409,
        "openai/gpt-4o is already forced open; release it first to change the hold.",
    )
    assert drained.value.message == "openai is already drained; release it first to change the hold."
    assert sorted(CircuitControl.objects.values_list("model", "reason")) == [("", "first"), ("gpt-4o", "first")]
    assert AuditEvent.objects.count() == 2


def test_a_hold_past_its_expiry_is_released_as_the_expiry_job_would_and_a_new_one_is_set(live, catalog, admin_user):
    # The expiry job (every 10 s, or never while beat is down) has not removed it yet; the engines already
    # ignore it, so a new hold is no conflict.
    old = CircuitControl.objects.create(
        provider="openai",
        model="gpt-4o",
        kind=CircuitControl.Kind.FORCED_OPEN,
        reason="old",
        created_by="ops",
        expires_at=timezone.now() - timedelta(seconds=5),
    )

    new = circuit_force_open(actor=admin_user, provider="openai", model="gpt-4o", reason="again", minutes=10)

    assert list(CircuitControl.objects.values_list("pk", "reason")) == [(new.pk, "again")]
    release = CircuitEvent.objects.get(kind="released")
    assert (release.actor, release.reason, release.at) == ("expiry", "hold expired", old.expires_at)
    assert list(AuditEvent.objects.order_by("id").values_list("action", flat=True)) == [
        "circuit.release",
        "circuit.force_open",
    ]


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (
            {"provider": "", "model": "", "reason": "", "minutes": None},
            {
                "provider": ["Provider is required."],
                "model": ["Model is required."],
                "reason": ["Reason is required: say why traffic is held off this target."],
            },
        ),
        (
            {"provider": "nope", "model": "gpt-4o", "reason": "   ", "minutes": 0},
            {
                "provider": ["Unknown provider “nope”."],
                "reason": ["Reason is required: say why traffic is held off this target."],
                "minutes": ["Minutes must be between 1 and 10080 (7 days)."],
            },
        ),
        (
            {"provider": "openai", "model": "missing", "reason": "x" * 501, "minutes": 10081},
            {
                "model": ["Unknown model “missing”."],
                "reason": ["Reason is at most 500 characters (got 501)."],
                "minutes": ["Minutes must be between 1 and 10080 (7 days)."],
            },
        ),
        (
            {"provider": "openai", "model": "claude-sonnet", "reason": "bad\u202eidea", "minutes": "soon"},
            {
                "model": ["Model “claude-sonnet” is not served by provider “openai”."],
                "reason": ["Reason cannot contain control or invisible formatting characters."],
                "minutes": ["Minutes must be a whole number (got 'soon'); leave it empty to hold until released."],
            },
        ),
        (
            {"provider": "openai", "model": "gpt-4o", "reason": "ok", "minutes": True},
            {"minutes": ["Minutes must be a whole number (got True); leave it empty to hold until released."]},
        ),
    ],
)
def test_force_open_validation(live, catalog, admin_user, data, expected):
    with pytest.raises(ValidationFailed) as excinfo:
        circuit_force_open(actor=admin_user, **data)

    assert errors_of(excinfo) == expected
    assert (CircuitControl.objects.count(), AuditEvent.objects.count(), CircuitEvent.objects.count()) == (0, 0, 0)


def test_drain_validation(live, catalog, admin_user):
    with pytest.raises(ValidationFailed) as excinfo:
        provider_drain(actor=admin_user, provider="ghost", reason="", minutes=-5)

    assert errors_of(excinfo) == {
        "provider": ["Unknown provider “ghost”."],
        "reason": ["Reason is required: say why traffic is held off this target."],
        "minutes": ["Minutes must be between 1 and 10080 (7 days)."],
    }


def test_force_open_accepts_a_model_a_chain_sends_through_another_provider(live, catalog, admin_user):
    engine, _ = live
    # claude-sonnet's default provider is anthropic; a chain entry served it through openai, so that circuit exists.
    engine.record(engine.allow("openai", "claude-sonnet"), Outcome.of_status(200))

    row = circuit_force_open(actor=admin_user, provider="openai", model="claude-sonnet", reason="odd", minutes="15")

    assert (row.provider, row.model) == ("openai", "claude-sonnet")
    assert row.expires_at - row.created_at == pytest.approx(timedelta(minutes=15), abs=timedelta(seconds=1))


def test_expiry_removes_only_expired_holds_and_records_their_release(live, catalog, admin_user, publish):
    engine, clock = live
    short = circuit_force_open(actor=admin_user, provider="openai", model="gpt-4o", reason="short", minutes=1)
    circuit_force_open(actor=admin_user, provider="openai", model="gpt-4o-mini", reason="long", minutes=60)
    provider_drain(actor=admin_user, provider="anthropic", reason="forever", minutes=None)

    with publish():
        removed = circuit_controls_expire(now=timezone.now() + timedelta(minutes=2))
    again = circuit_controls_expire(now=timezone.now() + timedelta(minutes=2))

    assert (removed, again) == (1, 0)
    assert sorted(CircuitControl.objects.values_list("provider", "model")) == [
        ("anthropic", ""),
        ("openai", "gpt-4o-mini"),
    ]
    release = CircuitEvent.objects.get(kind="released")
    assert (release.provider, release.model, release.actor, release.reason, release.at) == (
        "openai",
        "gpt-4o",
        "expiry",
        "hold expired",
        short.expires_at,
    )
    audit = AuditEvent.objects.filter(action="circuit.release").get()
    assert (audit.actor_name, audit.after) == ("system", {"reason": "hold expired"})
    clock.advance(120)
    assert (engine.allow("openai", "gpt-4o").allowed, engine.allow("openai", "gpt-4o-mini").allowed) == (True, False)


def test_the_expiry_job_runs_the_service(live, catalog, admin_user):
    row = circuit_force_open(actor=admin_user, provider="openai", model="gpt-4o", reason="short", minutes=1)
    CircuitControl.objects.filter(pk=row.pk).update(expires_at=timezone.now() - timedelta(seconds=1))

    removed = controls_expire_task()

    assert removed == 1
    assert CircuitControl.objects.count() == 0
    assert CircuitEvent.objects.filter(kind="released", actor="expiry").count() == 1


def test_reset_records_its_event_with_the_actor_and_the_new_generation(live, catalog, admin_user):
    engine, _ = live
    trip(engine)

    circuit_reset(actor=admin_user, provider="openai", model="gpt-4o")

    generation = engine.get("openai", "gpt-4o").generation
    assert events() == [("reset", "openai", "gpt-4o", generation, "alice", "")]


def test_reset_is_recorded_when_its_generation_was_stored_before(live, catalog, admin_user):
    # A new process (or an emptied Redis) numbers generations from the start again.
    engine, _ = live
    trip(engine)
    CircuitEvent.objects.create(
        provider="openai", model="gpt-4o", kind="opened", at=timezone.now(), generation=2, actor=""
    )

    circuit_reset(actor=admin_user, provider="openai", model="gpt-4o")

    assert [(e[0], e[3], e[4]) for e in events()] == [("opened", 2, ""), ("reset", None, "alice")]


def test_a_failed_reset_records_nothing(live, catalog, admin_user):
    with pytest.raises(ValidationFailed):
        circuit_reset(actor=admin_user, provider="openai", model="gpt-4o")  # never tracked

    assert CircuitEvent.objects.count() == 0


# ----- a second gateway process ----------------------------------------------------------------------------


class Worker:
    """tests/health/control_worker.py in its own OS process, on the test's database and Redis namespace."""

    def __init__(self, env: dict[str, str], namespace: str, start: float) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.health.control_worker", namespace, str(start)],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        line = self.proc.stdout.readline().strip()
        if line != "ready":
            self.proc.kill()
            raise AssertionError(f"worker did not start: {line!r} {self.proc.stderr.read()[-2000:]}")

    def ask(self, command: str) -> str:
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().strip()

    def allowed(self, provider: str, model: str) -> bool:
        return self.ask(f"allow {provider} {model}") == "1"

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.flush()
            self.proc.wait(timeout=30)


@pytest.fixture
def worker_env(redis_url, settings):
    namespace = f"test:breaker:{uuid.uuid4().hex}"
    settings.REDIS_URL = redis_url  # config_publish notifies the other processes through Redis
    made: list[Worker] = []

    def start() -> Worker:
        worker = Worker(production_env(redis_url=redis_url, namespace=namespace), namespace, round(time.time(), 3))
        made.append(worker)
        return worker

    yield start
    for worker in made:
        worker.close()
    delete_namespace(redis_url, namespace)


@pytest.mark.production
@pytest.mark.django_db(transaction=True)
def test_force_open_reaches_another_process_within_a_second_and_expires(worker_env, catalog, admin_user):
    other = worker_env()
    assert other.allowed("openai", "gpt-4o") is True

    row = circuit_force_open(actor=admin_user, provider="openai", model="gpt-4o", reason="incident", minutes=1)
    until(lambda: not other.allowed("openai", "gpt-4o"), 1.0, "the other process refuses the forced-open circuit")
    # A process started now (a restart) loads the hold with its configuration.
    restarted = worker_env()
    at_start = restarted.allowed("openai", "gpt-4o")
    neighbour = other.allowed("openai", "gpt-4o-mini")
    # Move the other process's clock to just before the expiry, then just past it.
    left = row.expires_at.timestamp() - float(other.ask("advance 0"))
    other.ask(f"advance {left - 0.5:.3f}")
    before_expiry = other.allowed("openai", "gpt-4o")
    other.ask("advance 0.502")  # the clock keeps whole milliseconds; the expiry has microseconds
    at_expiry = other.allowed("openai", "gpt-4o")

    assert (at_start, neighbour, before_expiry, at_expiry) == (False, True, False, True)


@pytest.mark.production
@pytest.mark.django_db(transaction=True)
def test_drain_and_release_reach_another_process_within_a_second(worker_env, catalog, admin_user):
    other = worker_env()

    provider_drain(actor=admin_user, provider="openai", reason="maintenance", minutes=None)
    until(
        lambda: not other.allowed("openai", "gpt-4o") and not other.allowed("openai", "gpt-4o-mini"),
        1.0,
        "the other process refuses every circuit of the drained provider",
    )
    untouched = other.allowed("anthropic", "claude-sonnet")
    circuit_release(actor=admin_user, provider="openai")
    until(lambda: other.allowed("openai", "gpt-4o"), 1.0, "the other process allows the released provider again")

    assert untouched is True
    assert CircuitControl.objects.count() == 0


@pytest.mark.production
@pytest.mark.django_db(transaction=True)
def test_the_expiry_job_tells_the_other_process(worker_env, catalog, admin_user):
    other = worker_env()
    row = circuit_force_open(actor=admin_user, provider="openai", model="gpt-4o", reason="incident", minutes=60)
    until(lambda: not other.allowed("openai", "gpt-4o"), 1.0, "the other process refuses the forced-open circuit")
    # Expiry through the row (the other process's clock still reads before it): the job removes it and publishes.
    CircuitControl.objects.filter(pk=row.pk).update(expires_at=timezone.now() - timedelta(seconds=1))

    removed = controls_expire_task()
    until(lambda: other.allowed("openai", "gpt-4o"), 1.0, "the other process allows once the hold is removed")

    assert removed == 1
    assert CircuitEvent.objects.filter(kind="released", actor="expiry").count() == 1


def test_the_expiry_job_locks_every_hold_it_releases_before_its_first_audit_event(catalog):
    """Each hold after the first was locked (by its DELETE) after an audit event had taken the audit log's lock:
    on PostgreSQL that deadlocked with a rename that had locked one of them and then audited. The calls' order
    is what a deadlock needs, and what SQLite, which has no row locks, can show."""
    from unittest import mock

    from django.db.models import QuerySet

    import health.services as health_services
    from health.services import circuit_controls_expire

    past = timezone.now() - timedelta(minutes=5)
    for provider in ("anthropic", "openai"):
        CircuitControl.objects.create(
            provider=provider, model="", kind="drained", reason="r", created_by="a", expires_at=past
        )
    steps: list[str] = []
    lock, audit = QuerySet.select_for_update, health_services.audit_record

    def locking(self, *args, **kwargs):
        if self.model is CircuitControl:
            steps.append("lock")
        return lock(self, *args, **kwargs)

    def auditing(**kwargs):
        steps.append("audit")
        return audit(**kwargs)

    with (
        mock.patch.object(QuerySet, "select_for_update", locking),
        mock.patch.object(health_services, "audit_record", auditing),
    ):
        assert circuit_controls_expire() == 2

    assert steps == ["lock", "audit", "audit"]


def test_force_open_accepts_a_chain_entrys_circuit_before_its_first_request(live, catalog, admin_user):
    """A chain entry sends claude-sonnet through openai: the gateway calls (openai, claude-sonnet), so it can be
    held open before it has taken any traffic (it used to be refused until the breaker tracked it)."""
    from tests.factories import ChainEntryFactory, ChainFactory

    chain = ChainFactory(source_model=catalog["gpt-4o"], entries=[])
    ChainEntryFactory(chain=chain, position=0, model=catalog["claude-sonnet"], provider=catalog["openai"])

    row = circuit_force_open(actor=admin_user, provider="openai", model="claude-sonnet", reason="keys", minutes=None)

    assert (row.provider, row.model) == ("openai", "claude-sonnet")
    with pytest.raises(ValidationFailed) as excinfo:  # a provider no entry routes it through: still refused
        circuit_force_open(actor=admin_user, provider="anthropic", model="gpt-4o", reason="keys", minutes=None)
    assert errors_of(excinfo) == {"model": ["Model “gpt-4o” is not served by provider “anthropic”."]}


def test_releasing_a_hold_past_its_expiry_is_nothing_to_release_and_records_the_expiry(live, catalog, admin_user):
    """The expiry job has not removed it yet, but it holds nothing (the engines ignore it): the operator's
    release is a 404 like a release of nothing, and the hold is released as the job would release it (by
    "expiry", at its expiry time), not as the operator's release after the hold had ended."""
    expired_at = timezone.now() - timedelta(minutes=5)
    CircuitControl.objects.create(
        provider="openai", model="gpt-4o", kind="forced_open", reason="x", expires_at=expired_at, created_by="bob"
    )

    with pytest.raises(NotFound) as excinfo:
        circuit_release(actor=admin_user, provider="openai", model="gpt-4o")

    assert excinfo.value.message == "openai/gpt-4o is not forced open: there is nothing to release."
    assert not CircuitControl.objects.exists()  # kept although the service raised
    release = CircuitEvent.objects.get(kind="released")
    assert (release.actor, release.reason, release.at) == ("expiry", "hold expired", expired_at)
    audited = AuditEvent.objects.get()
    assert (audited.action, audited.actor_name) == ("circuit.release", "system")
