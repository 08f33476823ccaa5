"""circuit_open: a real MemoryEngine on a ManualClock, driven open by recorded 503s, evaluated at stepped times."""

from datetime import UTC, datetime

import pytest
from django.db import transaction

from alerts.delivery import deliveries_send
from alerts.evaluator import EvaluationResult, Finding, _apply, alerts_evaluate
from alerts.models import Alert, Delivery
from alerts.services import alert_open
from health.breaker import ManualClock, MemoryEngine, Outcome, use_engine
from health.models import CircuitControl
from tests.alerts.conftest import make_rule

T0 = 1_700_000_000.0
P, M = "openai", "gpt-4o"


def at(minutes: float) -> datetime:
    return datetime.fromtimestamp(T0 + minutes * 60, tz=UTC)


@pytest.fixture
def clock():
    return ManualClock(T0)


@pytest.fixture
def engine(clock):
    engine = MemoryEngine(clock=clock)
    with use_engine(engine):
        yield engine


def trip(engine, provider=P, model=M):
    for _ in range(10):
        engine.record(engine.allow(provider, model), Outcome.of_status(503))


def close_by_probe(engine, clock, provider=P, model=M):
    """Past the cooldown, a successful probe closes the circuit."""
    clock.advance(120)
    decision = engine.allow(provider, model)
    assert decision.probe
    engine.record(decision, Outcome.of_status(200))


def test_circuit_open_opens_one_alert_notifies_once_and_resolves_after_the_clear_window(
    db, catalog, engine, clock, receiver
):
    rule = make_rule(name="open 5", kind="circuit_open", minutes=5, webhook_url=receiver.url)
    trip(engine)

    early = alerts_evaluate(at(4))
    first = alerts_evaluate(at(5))
    second = alerts_evaluate(at(5.5))
    deliveries_send(now=at(5.5))

    assert early.opened == []
    assert len(first.opened) == 1
    assert second.opened == [] and second.updated == first.opened
    alert = Alert.objects.get()
    assert (alert.rule_id, alert.subject, alert.state) == (rule.pk, "openai/gpt-4o", "firing")
    assert alert.figures["open_minutes"] == 5.5
    assert [b["state"] for b in receiver.bodies()] == ["firing"]

    close_by_probe(engine, clock)  # closed at T0 + 2 min... of clock time; the evaluator's time goes on
    clear = alerts_evaluate(at(6))
    not_yet = alerts_evaluate(at(10.9))
    done = alerts_evaluate(at(11))
    deliveries_send(now=at(11))

    alert.refresh_from_db()
    assert clear.resolved == [] and not_yet.resolved == []
    assert done.resolved == [alert.pk]
    assert (alert.state, alert.resolved_at, alert.resolution) == ("resolved", at(11), "clear for 5 min")
    bodies = receiver.bodies()
    assert [b["state"] for b in bodies] == ["firing", "resolved"]
    assert bodies[0]["subject"] == "openai/gpt-4o" and bodies[0]["kind"] == "circuit_open"
    assert bodies[0]["url"].endswith(f"/alerts/{alert.pk}/")
    assert Delivery.objects.filter(alert=alert, status="delivered").count() == 2


def test_a_condition_back_within_the_window_keeps_the_same_alert(db, catalog, engine, clock):
    make_rule(name="open 5", kind="circuit_open", minutes=5)
    trip(engine)
    alerts_evaluate(at(5))
    close_by_probe(engine, clock)
    alerts_evaluate(at(6))  # clear since 6

    trip(engine)  # opens again at clock T0 + 2 min
    clock.set(T0 + 20 * 60)
    result = alerts_evaluate(at(20))

    alert = Alert.objects.get()
    assert result.opened == [] and result.updated == [alert.pk]
    assert alert.state == "firing" and alert.clear_since is None


def test_filters_and_held_circuits(db, catalog, engine, clock):
    make_rule(name="anthropic only", kind="circuit_open", minutes=1, provider="anthropic")
    make_rule(name="any", kind="circuit_open", minutes=1)
    trip(engine, P, M)
    trip(engine, "anthropic", "claude-sonnet")
    trip(engine, P, "gpt-4o-mini")
    # Then an operator forces it open: deliberate, so no alert for it (the engine itself is left untouched).
    CircuitControl.objects.create(
        provider=P, model="gpt-4o-mini", kind="forced_open", reason="maintenance", created_by="alice"
    )

    alerts_evaluate(at(2))

    assert engine.get(P, "gpt-4o-mini").state != "closed"
    assert sorted(Alert.objects.values_list("rule_name", "subject")) == [
        ("anthropic only", "anthropic/claude-sonnet"),
        ("any", "anthropic/claude-sonnet"),
        ("any", "openai/gpt-4o"),
    ]


def test_disabling_the_rule_resolves_its_alerts_and_notifies(db, catalog, engine, receiver):
    from alerts.services import alert_rule_set_enabled

    rule = make_rule(name="open 1", kind="circuit_open", minutes=1, webhook_url=receiver.url, body_format="slack")
    trip(engine)
    alerts_evaluate(at(2))

    alert_rule_set_enabled(actor=None, rule_id=rule.pk, enabled=False)
    after = alerts_evaluate(at(3))
    deliveries_send()

    alert = Alert.objects.get()
    assert after.rules == 0 and after.opened == []
    assert (alert.state, alert.resolution) == ("resolved", "rule disabled")
    texts = [b["text"] for b in receiver.bodies()]
    assert len(texts) == 2
    assert "*Firing*" in texts[0] and "openai/gpt-4o" in texts[0] and f"/alerts/{alert.pk}/|Open the alert>" in texts[0]
    assert "*Resolved*" in texts[1] and "rule disabled" in texts[1]


def test_an_evaluation_applied_after_a_later_one_changes_nothing(db, catalog, engine, clock):
    # Two evaluations at once (Celery): the one that read its figures at 5.2 min takes the rule's lock after
    # the one of 5.5 min. Its "clear" must not start the clear window before the circuit closed.
    make_rule(name="open 5", kind="circuit_open", minutes=5)
    trip(engine)
    alerts_evaluate(at(5))
    alerts_evaluate(at(5.5))
    close_by_probe(engine, clock)

    stale = alerts_evaluate(at(5.2))
    clear = alerts_evaluate(at(6))
    early = alerts_evaluate(at(10.5))  # five minutes after 5.2, not after 6
    done = alerts_evaluate(at(11))

    alert = Alert.objects.get()
    assert (stale.updated, stale.resolved, clear.resolved, early.resolved) == ([], [], [], [])
    assert done.resolved == [alert.pk]
    assert (alert.state, alert.resolved_at) == ("resolved", at(11))


def test_an_evaluation_applied_after_a_later_one_resolved_the_alert_does_not_reopen_it(db, catalog, engine, clock):
    # The one that read its figures at 10.9 min (the circuit still open to it) takes the rule's lock after the
    # 11 min evaluation resolved the alert: it used to open a new alert dated before that resolution.
    rule = make_rule(name="open 5", kind="circuit_open", minutes=5)
    trip(engine)
    alerts_evaluate(at(5))
    close_by_probe(engine, clock)
    alerts_evaluate(at(6))
    assert len(alerts_evaluate(at(11)).resolved) == 1
    stale = EvaluationResult()

    _apply(rule.pk, [Finding(f"{P}/{M}", {"open_minutes": 10.9}, "Circuit has been open.")], at(10.9), stale)

    assert stale.opened == []
    assert list(Alert.objects.values_list("state", flat=True)) == ["resolved"]


def test_with_redis_away_circuit_alerts_are_left_as_they_were(db, catalog):
    """A worker whose engine cannot reach Redis lists its own view of the circuits (empty in a worker that serves
    no traffic): read as "all closed", it resolved every firing circuit_open alert with "clear for 5 min"."""
    from health.breaker.redis_backend import RedisEngine
    from tests.health.conftest import closed_port_url

    rule = make_rule(name="open 5", kind="circuit_open", minutes=5)
    with transaction.atomic():
        alert_open(rule=rule, subject=f"{P}/{M}", figures={}, summary="open", now=at(0))
    engine = RedisEngine(url=closed_port_url(), namespace="alerts-redis-away", clock=ManualClock(T0))
    try:
        with use_engine(engine):
            first = alerts_evaluate(at(10))
            later = alerts_evaluate(at(16))
    finally:
        engine.close()

    alert = Alert.objects.get()
    assert (first.resolved, later.resolved, first.rules) == ([], [], 1)
    assert (alert.state, alert.clear_since) == ("firing", None)
