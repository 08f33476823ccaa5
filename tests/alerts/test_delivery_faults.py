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


# ---------- Ports, names and the resolver ----------


@pytest.mark.parametrize("url", ["http://hooks.example.com:65616/hook", "http://hooks.example.com:0/hook"])
def test_a_webhook_port_no_socket_takes_is_refused_when_the_rule_is_saved(db, url):
    with pytest.raises(ValidationFailed) as refused:
        make_rule(webhook_url=url)

    assert refused.value.errors["webhook_url"] == ["Webhook URL's port must be between 1 and 65535."]


def test_a_delivery_to_a_port_no_socket_takes_is_given_up_and_the_run_goes_on(db, receiver):
    """A row saved before the check: its POST raised an error no handler caught, which stopped the run and left
    the row claimed, to stop every later run once its lease ran out."""
    now = timezone.now()
    bad = make_rule(name="bad", webhook_url=receiver.url)
    good = make_rule(name="good", webhook_url=receiver.url)
    _open(bad, now - timedelta(seconds=1))
    _open(good, now)
    Delivery.objects.filter(alert__rule=bad).update(url="http://localhost:65616/hook")

    result = deliveries_send(now=now)

    given_up = Delivery.objects.get(alert__rule=bad)
    assert (given_up.status, given_up.attempts, given_up.claimed_until) == (DeliveryStatus.FAILED, 1, None)
    assert given_up.last_error == "Not a URL the sender can use: port 65616 is not 1-65535."
    assert result.delivered == [Delivery.objects.get(alert__rule=good).pk] and len(receiver.requests) == 1


@pytest.fixture
def resolver(monkeypatch):
    """A name service: `names` maps a host (as looked up) to an address (None: it does not resolve); every lookup
    is counted, and the lookup of a name in `stalled` waits for `gate`."""
    real = socket.getaddrinfo
    state = {"names": {}, "lookups": [], "stalled": set(), "gate": threading.Event(), "waits_ended": 0}

    def getaddrinfo(host, port, *args, **kwargs):
        name = host.decode() if isinstance(host, bytes) else host
        state["lookups"].append(name)
        if name in state["stalled"]:
            state["gate"].wait(5)  # a stalled resolver, given up after 5 s (glibc's default per try)
            state["waits_ended"] += 1
        # As CPython's socket module does with a str host: the "idna" codec, IDNA 2003 (ß becomes ss).
        ascii_name = name if name.isascii() else name.encode("idna").decode("ascii")
        if ascii_name.lower() in state["names"]:
            if state["names"][ascii_name.lower()] is None:
                raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (state["names"][ascii_name.lower()], port))]
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    yield state
    state["gate"].set()


def test_the_check_and_the_post_look_up_the_same_name(db, receiver, resolver):
    port = receiver.server.server_port
    resolver["names"]["hooks.example.test"] = "127.0.0.1"
    rule = make_rule(webhook_url=f"http://hooks.example.test:{port}/hook")
    _open(rule, timezone.now())

    result = deliveries_send()

    assert result.delivered == [Delivery.objects.get().pk]
    (received,) = receiver.requests
    assert received.headers["Host"] == f"hooks.example.test:{port}"
    assert resolver["lookups"] == ["hooks.example.test", "hooks.example.test"]  # the check's, then httpx's


def test_the_check_looks_up_the_name_httpx_would_connect_to(db, receiver, resolver, monkeypatch):
    """IDNA 2003 (Python's socket module) reads faß as fass, IDNA 2008 (httpx) as xn--fa-hia: the check looked
    at one name and the POST went to the other. Here the receiver stands in for the metadata address."""
    import alerts.webhooks as webhooks

    refused = webhooks.address_refused
    monkeypatch.setattr(webhooks, "address_refused", lambda address: address == "127.0.0.1" or refused(address))
    resolver["names"].update({"fass.example.com": "192.0.2.10", "xn--fa-hia.example.com": "127.0.0.1"})
    rule = make_rule(webhook_url=f"http://fa\u00df.example.com:{receiver.server.server_port}/hook")
    _open(rule, timezone.now())

    result = deliveries_send()

    delivery = Delivery.objects.get()
    assert result.failed == [delivery.pk] and receiver.requests == []
    assert delivery.last_error == (
        "Refused: xn--fa-hia.example.com is or resolves to the link-local or metadata address 127.0.0.1."
    )


def test_a_stalled_name_lookup_ends_with_the_posts_deadline(db, resolver, settings):
    """The lookup ran before the POST with no deadline: a resolver that stalled held the sender (and could
    outlast its claim's lease, when a second sender sent the delivery again)."""
    settings.ALERT_WEBHOOK_TIMEOUT_SECONDS = 0.5
    resolver["stalled"].add("stalled-dns.example.test")
    rule = make_rule(webhook_url="http://stalled-dns.example.test/hook")
    _open(rule, timezone.now())

    try:
        result = deliveries_send()
        lookups_ended = resolver["waits_ended"]
    finally:
        resolver["gate"].set()

    delivery = Delivery.objects.get()
    assert lookups_ended == 0  # the sender did not wait for the resolver to give up
    assert result.retrying == [delivery.pk]
    assert (delivery.status, delivery.last_error, delivery.claimed_until) == (
        "pending",
        "No answer within 0.5 s.",
        None,
    )


def test_a_name_that_does_not_resolve_is_retried(db, resolver):
    resolver["names"]["nowhere.example.test"] = None
    rule = make_rule(webhook_url="http://nowhere.example.test/hook")
    _open(rule, timezone.now())

    result = deliveries_send()

    delivery = Delivery.objects.get()
    assert result.retrying == [delivery.pk]
    assert delivery.last_error.startswith("Name lookup failed: gaierror")


def test_stalled_lookups_of_one_name_do_not_hold_another_receiver_s_post(db, receiver, resolver, settings):
    """Lookups abandoned at their deadline keep their threads until the resolver gives up: in a pool shared by
    every POST, four of them made the next receiver's lookup wait behind them, and its delivery fail."""
    settings.ALERT_WEBHOOK_TIMEOUT_SECONDS = 0.5
    resolver["stalled"].add("stalled-dns.example.test")
    now = timezone.now()
    for n in range(4):
        rule = make_rule(name=f"stalled {n}", webhook_url="http://stalled-dns.example.test/hook")
        _open(rule, now - timedelta(seconds=10 - n))
    good = make_rule(name="good", webhook_url=receiver.url)  # an IP literal: its lookup waits on no resolver
    _open(good, now)

    try:
        result = deliveries_send(budget_seconds=30)
        lookups_ended = resolver["waits_ended"]
    finally:
        resolver["gate"].set()

    assert lookups_ended == 0
    assert result.delivered == [Delivery.objects.get(alert__rule=good).pk] and len(receiver.requests) == 1
    assert len(result.retrying) == 4


def test_a_name_whose_first_address_drops_connections_is_sent_over_the_next(db, receiver, settings, monkeypatch):
    """httpx tries a name's addresses in turn (anyio's happy eyeballs): a first address whose accept queue is
    full, so that it drops the connection attempt, does not end the POST."""
    settings.ALERT_WEBHOOK_TIMEOUT_SECONDS = 3
    port = receiver.server.server_port
    real = socket.getaddrinfo

    def getaddrinfo(host, p, *args, **kwargs):
        if (host.decode() if isinstance(host, bytes) else host) == "dual.example.test":
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, p)) for a in ("127.0.0.2", "127.0.0.1")]
        return real(host, p, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    blackhole = socket.socket()
    blackhole.bind(("127.0.0.2", port))
    blackhole.listen(0)
    filler = socket.create_connection(("127.0.0.2", port))  # the accept queue is full: later SYNs are dropped
    try:
        _open(make_rule(webhook_url=f"http://dual.example.test:{port}/hook"), timezone.now())

        result = deliveries_send()
    finally:
        filler.close()
        blackhole.close()

    delivery = Delivery.objects.get()
    assert result.delivered == [delivery.pk], delivery.last_error


@pytest.fixture
def connect_proxy():
    """An HTTP proxy that records the CONNECT line it gets and refuses the tunnel."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    lines: list[str] = []
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            with conn:
                lines.append(conn.recv(65536).split(b"\r\n", 1)[0].decode())
                conn.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}", lines
    stop.set()
    thread.join(5)
    server.close()


def test_an_https_webhook_through_an_egress_proxy_tunnels_to_the_name(db, resolver, connect_proxy, monkeypatch):
    """The sender honours HTTPS_PROXY as httpx does: the tunnel is asked for the webhook's name (a tunnel to the
    address the check found would fail the certificate check, and miss NO_PROXY entries written as names)."""
    proxy, lines = connect_proxy
    for var in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy", "HTTP_PROXY", "http_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HTTPS_PROXY", proxy)
    resolver["names"]["hooks.example.test"] = "192.0.2.10"
    _open(make_rule(webhook_url="https://hooks.example.test/services/T000/B000/XXXX"), timezone.now())

    result = deliveries_send()

    assert lines == ["CONNECT hooks.example.test:443 HTTP/1.1"]
    assert result.retrying == [Delivery.objects.get().pk]  # the proxy's 403
