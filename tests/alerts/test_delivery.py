"""The webhook sender against a real local receiver: bodies, retries with backoff, give-up, no duplicates."""

import asyncio
import threading
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

from alerts.delivery import backoff, deliveries_send
from alerts.models import Delivery, DeliveryAttempt
from alerts.services import alert_open, alert_resolve
from tests.alerts.conftest import make_rule


def _open(rule, now, subject="openai/gpt-4o"):
    with transaction.atomic():
        return alert_open(rule=rule, subject=subject, figures={"open_minutes": 7.0}, summary="Open 7 min.", now=now)


def test_json_body(db, receiver):
    rule = make_rule(name="json rule", webhook_url=receiver.url)
    now = timezone.now()
    alert = _open(rule, now)

    result = deliveries_send(now=now)

    assert result.delivered == [Delivery.objects.get().pk]
    (request,) = receiver.requests
    assert request.path == "/hook"
    assert request.headers["Content-Type"] == "application/json"
    assert request.body == {
        "rule": "json rule",
        "rule_id": rule.pk,
        "kind": "circuit_open",
        "subject": "openai/gpt-4o",
        "state": "firing",
        "summary": "Open 7 min.",
        "figures": {"open_minutes": 7.0},
        "opened_at": now.isoformat(),
        "resolved_at": None,
        "resolution": "",
        "url": f"http://127.0.0.1:8000/alerts/{alert.pk}/",
    }


def test_slack_body(db, receiver):
    rule = make_rule(name="slack rule", webhook_url=receiver.url, body_format="slack")
    alert = _open(rule, timezone.now())

    deliveries_send()

    assert receiver.bodies() == [
        {
            "text": f":rotating_light: *Firing* · slack rule\nOpen 7 min.\n"
            f"<http://127.0.0.1:8000/alerts/{alert.pk}/|Open the alert>"
        }
    ]


def test_retry_after_a_500_then_success_with_backoff(db, receiver):
    rule = make_rule(webhook_url=receiver.url)
    now = timezone.now()
    _open(rule, now)
    receiver.script(500)

    first = deliveries_send(now=now)
    too_early = deliveries_send(now=now + timedelta(seconds=9))
    second = deliveries_send(now=now + timedelta(seconds=10))

    delivery = Delivery.objects.get()
    assert first.retrying == [delivery.pk] and too_early.delivered == [] and second.delivered == [delivery.pk]
    assert (delivery.status, delivery.attempts) == ("delivered", 2)
    log = list(DeliveryAttempt.objects.filter(delivery=delivery).values_list("number", "at", "status_code", "error"))
    assert log == [(1, now, 500, "HTTP 500"), (2, now + timedelta(seconds=10), 200, "")]
    assert len(receiver.requests) == 2


def test_every_attempt_of_one_delivery_carries_its_idempotency_key_and_no_other_delivery_does(db, receiver):
    """A receiver can drop a repeat: a retry after a lost answer, or a sender that died before recording its POST."""
    rule = make_rule(webhook_url=receiver.url)
    now = timezone.now()
    alert = _open(rule, now)
    receiver.script(500)

    deliveries_send(now=now)
    deliveries_send(now=now + timedelta(seconds=10))
    with transaction.atomic():
        alert_resolve(alert=alert, rule=rule, resolution="circuit closed", now=now + timedelta(seconds=20))
    deliveries_send(now=now + timedelta(seconds=20))

    opened, resolved = Delivery.objects.order_by("id")
    keys = [request.headers["Idempotency-Key"] for request in receiver.requests]
    stamp = int(now.timestamp() * 1000)
    assert keys[:2] == [f"cp-delivery-{opened.pk}-{stamp}"] * 2
    assert keys[2] == f"cp-delivery-{resolved.pk}-{int(resolved.created_at.timestamp() * 1000)}"
    assert len(set(keys)) == 2


def test_backoff_doubles_and_is_capped(settings):
    settings.ALERT_WEBHOOK_BACKOFF_SECONDS = 10
    settings.ALERT_WEBHOOK_BACKOFF_CAP_SECONDS = 60

    assert [backoff(n).total_seconds() for n in range(1, 6)] == [10, 20, 40, 60, 60]


def test_gives_up_after_max_attempts_and_records_each(db, receiver, settings):
    settings.ALERT_WEBHOOK_MAX_ATTEMPTS = 3
    rule = make_rule(webhook_url=receiver.url)
    now = timezone.now()
    _open(rule, now)
    receiver.script(503, 503, 503, 503)

    results = [deliveries_send(now=now + timedelta(seconds=s)) for s in (0, 10, 30, 70, 150)]

    delivery = Delivery.objects.get()
    assert (delivery.status, delivery.attempts, delivery.last_error) == ("failed", 3, "HTTP 503")
    assert [len(r.retrying) for r in results] == [1, 1, 0, 0, 0] and results[2].failed == [delivery.pk]
    assert list(delivery.attempt_log.values_list("number", "status_code")) == [(1, 503), (2, 503), (3, 503)]
    assert len(receiver.requests) == 3


def test_connection_error_is_recorded_and_retried(db):
    import socket

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there: connection refused
    rule = make_rule(webhook_url=f"http://127.0.0.1:{port}/hook")
    now = timezone.now()
    _open(rule, now)

    result = deliveries_send(now=now)

    delivery = Delivery.objects.get()
    attempt = delivery.attempt_log.get()
    assert result.retrying == [delivery.pk]
    assert attempt.status_code is None and attempt.error.startswith("ConnectError")
    assert delivery.next_attempt_at == now + timedelta(seconds=10)


def test_a_delivered_notification_is_never_sent_again(db, receiver):
    rule = make_rule(webhook_url=receiver.url)
    now = timezone.now()
    _open(rule, now)

    deliveries_send(now=now)
    again = deliveries_send(now=now + timedelta(hours=1))

    assert again.delivered == [] and len(receiver.requests) == 1


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_senders_send_each_delivery_once(receiver):
    rule = make_rule(webhook_url=receiver.url)
    now = timezone.now()
    for i in range(6):
        _open(rule, now, subject=f"openai/model-{i}")
    # Every POST waits at the receiver until both senders are inside theirs, so their claims overlap.
    receiver.gate = threading.Event()
    results, errors = [], []

    def send():
        try:
            results.append(deliveries_send(now=now, limit=3, budget_seconds=60))
        except Exception as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=send) for _ in range(2)]
    for t in threads:
        t.start()
    both_inside = receiver.wait_arrived(2)
    receiver.gate.set()
    for t in threads:
        t.join(30)

    assert both_inside and errors == []
    assert all(r.delivered for r in results)  # each sender won some rows
    delivered = sorted(pk for r in results for pk in r.delivered)
    assert delivered == sorted(Delivery.objects.values_list("pk", flat=True))
    assert len(delivered) == len(set(delivered)) == 6
    assert sorted(b["subject"] for b in receiver.bodies()) == [f"openai/model-{i}" for i in range(6)]


@pytest.mark.django_db(transaction=True)
def test_a_slow_receiver_never_lets_a_second_sender_send_a_delivery_again(receiver, settings):
    settings.ALERT_WEBHOOK_TIMEOUT_SECONDS = 5  # a claim's lease: 3 x 5 + 10 = 25 s
    rule = make_rule(webhook_url=receiver.url)
    t0 = timezone.now()
    for i in range(3):
        _open(rule, t0, subject=f"openai/model-{i}")

    # Sender A's clock: every answered POST took 20 s (each one within the lease of its own claim, but two of
    # them outlast a lease taken before the first). While A's second POST stalls, sender B runs at t0 + 30 s.
    def clock():
        with receiver.lock:
            return t0 + timedelta(seconds=20 * len(receiver.requests))

    second, errors = [], []

    def second_sender(number):
        if number != 2:
            return
        try:
            second.append(deliveries_send(now=t0 + timedelta(seconds=30)))
        except Exception as exc:
            errors.append(exc)
        finally:
            connection.close()

    receiver.on_arrival = second_sender

    first = deliveries_send(now=clock, budget_seconds=60)

    by_subject = {d.alert.subject: d.pk for d in Delivery.objects.select_related("alert")}
    assert errors == [] and len(second) == 1
    assert first.delivered == [by_subject["openai/model-0"], by_subject["openai/model-1"]]
    assert second[0].delivered == [by_subject["openai/model-2"]]
    # Each notification reached the receiver exactly once (B found A's current claim still live).
    assert sorted(b["subject"] for b in receiver.bodies()) == [f"openai/model-{i}" for i in range(3)]
    assert set(Delivery.objects.values_list("status", "attempts")) == {("delivered", 1)}


def test_one_run_sends_at_most_its_limit_and_starts_none_after_its_budget(db, receiver):
    rule = make_rule(webhook_url=receiver.url)
    now = timezone.now()
    for i in range(4):
        _open(rule, now, subject=f"openai/model-{i}")

    capped = deliveries_send(now=now, limit=2)
    spent = deliveries_send(now=now, budget_seconds=0)  # the budget is spent once the first POST is done
    rest = deliveries_send(now=now)

    assert (len(capped.delivered), len(spent.delivered), len(rest.delivered)) == (2, 1, 1)
    assert len(receiver.requests) == 4


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data/",
        "http://[fe80::1]:8080/hook",
        "http://[::ffff:169.254.169.254]/hook",
        "http://[fd00:ec2::254]/hook",
        "http://2852039166/hook",  # 169.254.169.254 written as one number: the resolver reads it so
    ],
)
def test_a_delivery_to_a_link_local_or_metadata_address_fails_without_a_post(db, url):
    rule = make_rule(webhook_url="http://127.0.0.1:9/hook")
    now = timezone.now()
    _open(rule, now)
    Delivery.objects.update(url=url)  # e.g. a row written before the check existed

    result = deliveries_send(now=now)

    delivery = Delivery.objects.get()
    assert result.failed == [delivery.pk] and (delivery.status, delivery.attempts) == ("failed", 1)
    attempt = delivery.attempt_log.get()
    assert attempt.status_code is None and attempt.error.startswith("Refused: ")
    assert delivery.last_error == attempt.error


def test_loopback_and_private_targets_stay_allowed(db, receiver):
    from alerts.webhooks import target_check

    rule = make_rule(webhook_url=receiver.url.replace("127.0.0.1", "localhost"))
    _open(rule, timezone.now())

    assert deliveries_send().delivered == [Delivery.objects.get().pk]
    assert asyncio.run(target_check("http://10.1.2.3:8080/hook")) is None
    assert asyncio.run(target_check("http://[::1]/hook")) is None


def test_the_give_up_log_line_hides_the_webhook_path(db, receiver, settings, caplog):
    settings.ALERT_WEBHOOK_MAX_ATTEMPTS = 1
    rule = make_rule(webhook_url=receiver.url + "/T000/B000/very-secret-token")
    _open(rule, timezone.now())
    receiver.script(500)

    with caplog.at_level("WARNING", logger="alerts.delivery"):
        result = deliveries_send()

    assert len(result.failed) == 1
    (line,) = [r.getMessage() for r in caplog.records if r.name == "alerts.delivery"]
    assert "given up" in line and "http://127.0.0.1/… (sha256 " in line
    assert "very-secret-token" not in line and "/hook" not in line


def test_slack_text_escapes_names_and_summaries(db, receiver):
    rule = make_rule(name="<!channel> & <@U123>", webhook_url=receiver.url, body_format="slack")
    with transaction.atomic():
        alert = alert_open(rule=rule, subject="openai/gpt-4o", figures={}, summary="a <b> & c", now=timezone.now())

    deliveries_send()

    (body,) = receiver.bodies()
    assert body["text"] == (
        ":rotating_light: *Firing* · &lt;!channel&gt; &amp; &lt;@U123&gt;\na &lt;b&gt; &amp; c\n"
        f"<http://127.0.0.1:8000/alerts/{alert.pk}/|Open the alert>"
    )


def test_an_alert_s_resolved_waits_for_its_opened_still_in_backoff(db, receiver):
    rule = make_rule(webhook_url=receiver.url)
    now = timezone.now()
    alert = _open(rule, now)
    receiver.script(500)
    deliveries_send(now=now)  # "opened" fails once: its next try is 10 s later
    with transaction.atomic():
        alert_resolve(alert=alert, rule=rule, resolution="clear", now=now + timedelta(seconds=1))

    held = deliveries_send(now=now + timedelta(seconds=2))  # "resolved" is due, its "opened" is not yet
    both = deliveries_send(now=now + timedelta(seconds=10))

    opened, resolved = Delivery.objects.order_by("id")
    assert (held.delivered, held.retrying) == ([], [])
    assert both.delivered == [opened.pk, resolved.pk]
    assert [b["state"] for b in receiver.bodies()] == ["firing", "firing", "resolved"]  # the 500, then in order


def test_a_new_alert_s_firing_waits_for_the_previous_alert_s_resolved_of_the_same_subject(db, receiver):
    """The condition came back while the last alert's "resolved" waited in its backoff: the new "firing" went
    first, and the channel's last word for a firing subject was "resolved"."""
    rule = make_rule(webhook_url=receiver.url)
    t0 = timezone.now()
    first = _open(rule, t0)
    deliveries_send(now=t0)
    with transaction.atomic():
        alert_resolve(alert=first, rule=rule, resolution="clear for 5 min", now=t0 + timedelta(minutes=10))
    receiver.script(503)
    deliveries_send(now=t0 + timedelta(minutes=10))  # "resolved" fails once: its next try is 10 s later
    _open(rule, t0 + timedelta(minutes=10, seconds=1))  # the same subject fires again
    other = _open(rule, t0 + timedelta(minutes=10, seconds=1), subject="openai/other")

    held = deliveries_send(now=t0 + timedelta(minutes=10, seconds=2))
    rest = deliveries_send(now=t0 + timedelta(minutes=10, seconds=10))

    assert held.delivered == [other.deliveries.get().pk]  # another subject is not held back
    assert len(rest.delivered) == 2
    states = [(b["subject"], b["state"]) for b in receiver.bodies()]
    assert [state for subject, state in states if subject == "openai/gpt-4o"] == [
        "firing",
        "resolved",  # the 503
        "resolved",
        "firing",
    ]
