"""degraded and exhausted: real request-log rows through request_logs_insert (which keeps the aggregates)."""

from datetime import timedelta

from django.utils import timezone

from alerts.delivery import deliveries_send
from alerts.evaluator import alerts_evaluate
from alerts.models import Alert
from tests.alerts.conftest import make_rule
from tests.factories.requestlogs import fallback, insert_logs, log_record


def _traffic(now, *, model="gpt-4o", ok=0, fell_back=0, optimistic=0, failed=0):
    at = (now - timedelta(minutes=2)).timestamp()
    records = [log_record(at=at, requested_model=model, routed_model=model) for _ in range(ok)]
    records += [log_record(at=at, requested_model=model, routed_model=model, **fallback()) for _ in range(fell_back)]
    records += [
        log_record(at=at, requested_model=model, routed_model=model, optimistic_primary=True) for _ in range(optimistic)
    ]
    records += [
        log_record(at=at, requested_model=model, routed_model=model, status=503, error_kind="server_error")
        for _ in range(failed)
    ]
    insert_logs(*records)


def test_degraded_opens_once_notifies_once_and_resolves_after_the_window(db, catalog, receiver):
    rule = make_rule(name="degraded", kind="degraded", webhook_url=receiver.url)  # 5 min, 20%, 20 requests
    now = timezone.now()
    _traffic(now, ok=30, fell_back=10)  # 25% of 40
    _traffic(now, model="gpt-4o-mini", ok=10, fell_back=9)  # 47%, but only 19 requests

    first = alerts_evaluate(now)
    second = alerts_evaluate(now + timedelta(seconds=30))
    deliveries_send(now=now + timedelta(seconds=30))

    alert = Alert.objects.get()
    assert len(first.opened) == 1 and second.opened == [] and second.updated == [alert.pk]
    assert (alert.rule_id, alert.subject) == (rule.pk, "gpt-4o")
    assert alert.figures == {
        "source_model": "gpt-4o",
        "requests": 40,
        "fallback": 10,
        "fallback_percent": 25.0,
        "window_minutes": 5,
        "threshold_percent": 20.0,
        "min_requests": 20,
    }
    assert [(b["state"], b["subject"]) for b in receiver.bodies()] == [("firing", "gpt-4o")]

    # The rows age out of the 5-minute window: clear from +6 min, resolved 5 minutes later.
    alerts_evaluate(now + timedelta(minutes=6))
    held = alerts_evaluate(now + timedelta(minutes=10, seconds=59))
    done = alerts_evaluate(now + timedelta(minutes=11))
    deliveries_send(now=now + timedelta(minutes=11))

    assert held.resolved == [] and done.resolved == [alert.pk]
    assert [b["state"] for b in receiver.bodies()] == ["firing", "resolved"]


def test_degraded_share_at_the_threshold_does_not_fire(db, catalog):
    make_rule(name="degraded", kind="degraded", threshold_percent=25)
    now = timezone.now()
    _traffic(now, ok=30, fell_back=10)  # exactly 25%

    assert alerts_evaluate(now).opened == []


def test_exhausted_counts_optimistic_primaries_not_plain_failures(db, catalog, receiver):
    make_rule(name="exhausted", kind="exhausted", min_count=5, webhook_url=receiver.url)
    make_rule(name="exhausted mini", kind="exhausted", min_count=5, model="gpt-4o-mini")
    now = timezone.now()
    # A failure of a target that was tried (its circuit still closed) is not exhaustion: only gpt-4o's five
    # optimistic primaries count, and gpt-4o-mini's nine plain failures open nothing.
    _traffic(now, ok=50, optimistic=5, failed=2)
    _traffic(now, model="gpt-4o-mini", ok=5, failed=9)

    first = alerts_evaluate(now)
    alerts_evaluate(now + timedelta(seconds=30))
    deliveries_send(now=now)

    alert = Alert.objects.get()
    assert len(first.opened) == 1
    assert (alert.rule_name, alert.subject) == ("exhausted", "gpt-4o")
    assert (alert.figures["optimistic"], alert.figures["failed"], alert.figures["exhausted"]) == (5, 2, 5)
    assert [b["state"] for b in receiver.bodies()] == ["firing"]

    alerts_evaluate(now + timedelta(minutes=6))
    done = alerts_evaluate(now + timedelta(minutes=11))
    deliveries_send(now=now + timedelta(minutes=11))

    assert done.resolved == [alert.pk]
    assert [b["state"] for b in receiver.bodies()] == ["firing", "resolved"]


def test_degraded_skips_a_source_model_whose_primary_is_held(db, catalog):
    from health.models import CircuitControl

    make_rule(name="degraded", kind="degraded")
    now = timezone.now()
    _traffic(now, ok=10, fell_back=30)  # gpt-4o (openai): 75% served by fallbacks
    _traffic(now, model="claude-sonnet", ok=10, fell_back=30)  # anthropic: the same share
    _traffic(now, model="gpt-4o-mini", ok=10, fell_back=30)  # openai too
    # The operator forced gpt-4o's primary open and drained anthropic: those fallbacks are deliberate.
    CircuitControl.objects.create(provider="openai", model="gpt-4o", kind="forced_open", reason="x", created_by="a")
    CircuitControl.objects.create(provider="anthropic", model="", kind="drained", reason="x", created_by="a")
    # A hold already past its expiry no longer counts.
    CircuitControl.objects.create(
        provider="openai",
        model="gpt-4o-mini",
        kind="forced_open",
        reason="x",
        created_by="a",
        expires_at=now - timedelta(minutes=1),
    )

    alerts_evaluate(now)

    assert list(Alert.objects.values_list("subject", flat=True)) == ["gpt-4o-mini"]


def test_one_rule_whose_alerts_cannot_be_written_does_not_stop_the_others(db, catalog, monkeypatch):
    """A database error while one rule's alerts were written left the rules after it unevaluated."""
    from django.db import DatabaseError

    import alerts.evaluator as evaluator

    broken = make_rule(name="broken", kind="degraded")
    make_rule(name="fine", kind="degraded")
    now = timezone.now()
    _traffic(now, ok=10, fell_back=30)
    real_open = evaluator.alert_open

    def alert_open(*, rule, **kwargs):
        if rule.pk == broken.pk:
            real_open(rule=rule, **kwargs)  # written, then the transaction fails: rolled back
            raise DatabaseError("could not serialize access")
        return real_open(rule=rule, **kwargs)

    monkeypatch.setattr(evaluator, "alert_open", alert_open)

    result = alerts_evaluate(now)

    fine = Alert.objects.get()
    assert fine.rule_name == "fine"
    assert (result.rules, result.opened) == (2, [fine.pk])
