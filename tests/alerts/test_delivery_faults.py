"""Receivers and addresses that used to hold or break the sender: a head sent a byte at a time, and a host no
HTTP client can send to."""

import socket
import threading
from datetime import timedelta

import pytest
from django.utils import timezone

from alerts.delivery import deliveries_send
from alerts.models import Delivery, DeliveryStatus
from core.errors import ValidationFailed
from tests.alerts.conftest import make_rule
from tests.alerts.test_delivery import _open


@pytest.fixture
def dripping_receiver():
    """A server that answers `HTTP/1.1 200 OK` and then one byte of a header every 0.2 s for a minute: each
    read gets something well within any read timeout, the head never ends."""
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()
    requests: list[bytes] = []

    def handle(conn: socket.socket) -> None:
        with conn:
            requests.append(conn.recv(65536))
            try:
                conn.sendall(b"HTTP/1.1 200 OK\r\nX-Pad: ")
                for _ in range(300):
                    if stop.wait(0.2):  # pacing the receiver's bytes, not synchronising the test
                        break
                    conn.sendall(b"a")
            except OSError:
                pass

    def serve() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            threading.Thread(target=handle, args=(conn,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}/hook", requests
    stop.set()
    server.close()


def test_a_receiver_dripping_its_head_gets_the_whole_post_s_timeout_not_a_minute(db, settings, dripping_receiver):
    # httpx's timeouts bound each read; the sender bounds the whole POST, well inside its claim's lease, so no
    # second sender can claim the delivery while this one still waits for the head.
    url, requests = dripping_receiver
    settings.ALERT_WEBHOOK_TIMEOUT_SECONDS = 1
    now = timezone.now()
    _open(make_rule(webhook_url=url), now)

    result = deliveries_send(now=now)

    delivery = Delivery.objects.get()
    assert result.retrying == [delivery.pk]  # not delivered: the 200's head never ended within the second
    assert (delivery.status, delivery.attempts, delivery.last_error) == ("pending", 1, "No answer within 1 s.")
    assert delivery.claimed_until is None and len(requests) == 1


@pytest.mark.parametrize("url", ["http://\u2603.example.com/hook", "http://xn--a.com/hook"])
def test_a_webhook_host_that_is_no_valid_domain_name_is_refused_when_the_rule_is_saved(db, url):
    with pytest.raises(ValidationFailed) as refused:
        make_rule(webhook_url=url)

    assert refused.value.errors["webhook_url"] == ["Webhook URL's host is not a valid domain name."]


def test_a_delivery_to_an_address_no_client_can_use_is_given_up_and_the_run_goes_on(db, receiver):
    # A rule saved before the check above: its deliveries are given up at their first try, and the due
    # delivery behind it is still sent in the same run.
    now = timezone.now()
    bad = make_rule(name="bad", webhook_url=f"http://127.0.0.1:{receiver.server.server_port}/bad")
    good = make_rule(name="good", webhook_url=f"http://127.0.0.1:{receiver.server.server_port}/good")
    _open(bad, now - timedelta(seconds=1))
    _open(good, now)
    Delivery.objects.filter(alert__rule=bad).update(url="http://xn--a.com/hook")

    result = deliveries_send(now=now)

    given_up = Delivery.objects.get(alert__rule=bad)
    assert (given_up.status, given_up.attempts) == (DeliveryStatus.FAILED, 1)
    assert given_up.last_error.startswith("Not a URL the sender can use: ")
    assert result.failed == [given_up.pk]
    assert result.delivered == [Delivery.objects.get(alert__rule=good).pk]
    assert [r.path for r in receiver.requests] == ["/good"]
