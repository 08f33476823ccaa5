"""The Dashboard: who may see it, each range with traffic (a fallback period visible) and without, links."""

import re
import time
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qs, urlsplit

import pytest
from django.test import Client

from health.breaker import ManualClock, MemoryEngine, Outcome, use_engine
from health.models import CircuitEvent
from requestlogs.services import request_logs_insert
from tests.factories.requestlogs import fallback, log_record

pytestmark = pytest.mark.django_db


@pytest.fixture
def clock():
    return ManualClock(time.time())


@pytest.fixture
def engine(clock):
    engine = MemoryEngine(clock=clock)
    with use_engine(engine):
        yield engine


@pytest.fixture
def outage():
    """Traffic over the last 50 minutes: gpt-4o served by its primary, then by chain step 1 during an outage
    20 to 10 minutes ago, then by the primary again; a few 5xx and a rejected 401."""
    now = time.time()
    records = []
    for minute in range(50, 0, -1):
        at = now - minute * 60
        during = 10 < minute <= 20
        for i in range(4):
            records.append(log_record(at=at + i, **(fallback() if during else {})))
        if minute % 10 == 0:
            records.append(log_record(at=at, status=503, latency_ms=30000.0))
    records.append(log_record(at=now - 90, status=401, served_provider="", served_model="", attempts=[]))
    request_logs_insert(records=records)
    opened = datetime.fromtimestamp(now - 20 * 60, tz=UTC)
    CircuitEvent.objects.create(provider="openai", model="gpt-4o", kind="opened", at=opened, failures=10, total=10)
    CircuitEvent.objects.create(provider="openai", model="gpt-4o", kind="closed", at=opened + timedelta(minutes=10))
    return records


COUNTER = r'<span class="dash-counter-value">{value}</span>\s*<span class="dash-counter-label">{label}'


def html_of(client: Client, url: str = "/") -> str:
    response = client.get(url)
    assert response.status_code == 200
    return response.content.decode()


def test_admin_and_bi_see_the_dashboard_others_go_elsewhere(admin_client, bi_client, user_client, anon_client):
    assert "<h1>Dashboard</h1>" in html_of(admin_client)
    assert "<h1>Dashboard</h1>" in html_of(bi_client)
    assert user_client.get("/").url == "/logs/"
    assert anon_client.get("/").url == "/login/?next=/"


def test_an_account_without_a_role_gets_the_start_page(django_user_model):
    client = Client()
    client.force_login(django_user_model.objects.create_user(username="norole", password="x"))

    html = html_of(client)

    assert "Ask an admin" in html
    assert "<h1>Dashboard</h1>" not in html


def test_nav_shows_the_dashboard_only_to_admin_and_bi(admin_client, bi_client, user_client):
    link = '<a href="/" aria-current="page">Dashboard</a>'

    assert link in html_of(admin_client)
    assert link in html_of(bi_client)
    assert ">Dashboard</a>" not in html_of(user_client, "/logs/")


def test_dashboard_refuses_unsafe_methods(admin_client):
    assert admin_client.post("/").status_code == 405


@pytest.mark.parametrize("range_key", ["1h", "24h", "7d"])
def test_each_range_renders_the_fallback_period(admin_client, engine, outage, range_key):
    html = html_of(admin_client, f"/?range={range_key}")

    assert re.search(rf'<a href="\?range={range_key}"[^>]*aria-current="page"', html)
    assert len(re.findall(r'aria-current="page">Last', html)) == 1
    for panel in ("dash-requests", "dash-fallback", "dash-circuits", "dash-latency", "dash-errors"):
        assert f'id="{panel}"' in html
    # The outage's chain-step-1 requests are drawn in the tier chart, with the legend naming them.
    requests_panel = html.split('id="dash-requests"')[1].split("</section>")[0]
    assert 'class="dash-bar dash-c-step1"' in requests_panel
    assert 'class="dash-bar dash-c-primary"' in requests_panel
    assert "Chain step 1</li>" in requests_panel
    assert "dash-c-failed" in requests_panel
    # The circuit's open period is a lane with its times in words.
    circuits = html.split('id="dash-circuits"')[1].split("</section>")[0]
    assert ">openai / gpt-4o</text>" in circuits
    assert re.search(r"<title>openai / gpt-4o: Open \d\d:\d\d–\d\d:\d\d UTC</title>", circuits)
    assert "gpt-4o · 19.5% over the range" in html  # 40 of its 205 requests (the rejected 401 left out)
    assert 'style="' not in html.split("<main")[1]


def test_series_counts_match_the_traffic(admin_client, engine, outage):
    html = html_of(admin_client, "/?range=1h")

    # 50 minutes x 4 requests, 5 failures and one rejected request.
    assert re.search(COUNTER.format(value=206, label="requests in the last 1 hour"), html)
    assert re.search(COUNTER.format(value=40, label="fallbacks in the last hour"), html)


def test_charts_link_to_the_request_logs_behind_them(admin_client, engine, outage):
    html = html_of(admin_client, "/?range=24h")

    fallback_panel = html.split('id="dash-fallback"')[1].split("</section>")[0]
    # The range as the Dashboard counts it: 96 whole quarter hours, the one under way last.
    heading = re.search(r'href="([^"]+)">Fallback requests', fallback_panel).group(1).replace("&amp;", "&")
    heading = parse_qs(urlsplit(heading).query)
    since, until = (datetime.strptime(heading[k][0], "%Y-%m-%dT%H:%M").replace(tzinfo=UTC) for k in ("from", "to"))
    assert (heading["range"], heading["fallback"]) == (["custom"], ["served"])
    assert until - since == timedelta(hours=24) and until.minute % 15 == 0 and until > datetime.now(UTC)
    bucket_link = (
        r'<a href="/logs/\?range=custom&amp;from=[0-9T:-]+&amp;to=[0-9T:-]+&amp;fallback=served" tabindex="-1">'
    )
    assert re.search(bucket_link, fallback_panel)
    errors_panel = html.split('id="dash-errors"')[1].split("</section>")[0]
    assert re.search(
        r'<a href="/logs/\?range=custom&amp;from=[0-9T:-]+&amp;to=[0-9T:-]+&amp;status=errors"', errors_panel
    )
    assert (
        f"from={heading['from'][0].replace(':', '%3A')}&amp;to={heading['to'][0].replace(':', '%3A')}&amp;status=5xx"
        in html
    )
    assert 'href="/fallback/health/"' in html.split('id="dash-circuits"')[1]


def test_bi_read_only_gets_no_link_to_the_admin_only_provider_health(bi_client, engine, outage):
    """Provider Health answers bi_read_only with a 403: the counter and the circuits panel do not link there."""
    for _ in range(10):
        engine.record(engine.allow("openai", "gpt-4o"), Outcome.of_status(503))

    html = html_of(bi_client, "/?range=24h")

    assert bi_client.get("/fallback/health/").status_code == 403
    assert "/fallback/health/" not in html
    assert re.search(r'<span class="dash-counter-body">' + COUNTER.format(value=1, label="circuit"), html)
    circuits = html.split('id="dash-circuits"')[1].split("</section>")[0]
    assert "Circuits open over time" in circuits
    assert "Provider Health" not in circuits


def test_bucket_links_open_request_logs_with_those_rows(admin_client, engine, outage):
    html = html_of(admin_client, "/?range=1h")
    panel = html.split('id="dash-requests"')[1].split("</section>")[0]
    links = re.findall(r'<a href="(/logs/\?range=custom[^"]+)" tabindex="-1"><rect class="dash-hit"', panel)
    link = links[-15].replace("&amp;", "&")  # 15 minutes ago: the outage, served by chain step 1

    logs = admin_client.get(link).content.decode()

    assert len(links) == 60
    assert logs.count('title="claude via backup"') == 4


def test_empty_dashboard_says_what_to_do(admin_client, engine):
    html = html_of(admin_client, "/?range=1h")

    assert "No traffic in the last 1 hour yet" in html
    assert 'id="dash-requests"' not in html
    assert "No circuit opened in the last 1 hour." in html
    assert '<span class="dash-counter-value">0</span>' in html


def test_unknown_range_falls_back_to_24_hours_and_says_so(admin_client, engine):
    html = html_of(admin_client, "/?range=2y")

    assert "Unknown range “2y”: showing the last 24 hours." in html
    assert re.search(r'<a href="\?range=24h"[^>]*aria-current="page"', html)


def test_circuits_open_now_counts_the_engine_circuits(admin_client, engine):
    for _ in range(10):
        engine.record(engine.allow("openai", "gpt-4o"), Outcome.of_status(503))

    html = html_of(admin_client)

    counter = r'dash-counter-bad">\s*<a href="/fallback/health/" id="dash-link-open">' + COUNTER.format(
        value=1, label="circuit"
    )
    assert re.search(counter, html)
    assert "circuit open now" in html


def test_circuits_open_now_says_how_many_are_half_open(admin_client, engine, clock):
    # Provider Health shows a circuit past its cooldown as half-open: the counter, which counts it as tripped,
    # says so too.
    def trip(model: str) -> None:
        for _ in range(10):
            engine.record(engine.allow("openai", model), Outcome.of_status(503))

    trip("gpt-4o")
    clock.advance(61)  # past the initial cooldown: the next call may probe
    trip("gpt-4o-mini")
    one_of_two = html_of(admin_client)
    clock.advance(61)
    both = html_of(admin_client)

    assert re.search(COUNTER.format(value=2, label="circuits open now"), one_of_two)
    assert "1 of them half-open: probing the provider" in one_of_two
    assert "all half-open: probing the provider" in both


def test_htmx_refresh_returns_the_body_only(admin_client, engine, outage):
    response = admin_client.get("/?range=1h", headers={"HX-Request": "true", "HX-Target": "dashboard-body"})
    full = admin_client.get("/?range=1h")

    html = response.content.decode()
    assert html.lstrip().startswith('<div id="dashboard-body"')
    assert 'hx-get="/?range=1h"' in html
    assert re.search(r'<a href="\?range=1h"[^>]*aria-current="page">Last hour</a>', html)  # the tabs follow
    assert "<html" not in html
    assert "<html" in full.content.decode()
    assert response["Vary"] and "HX-Request" in response["Vary"]


@pytest.mark.parametrize("range_key", ["1h", "24h", "7d"])
def test_page_reads_a_bounded_number_of_queries(admin_client, engine, outage, django_assert_max_num_queries, range_key):
    # A first load: session, user, groups; four chart aggregates; two circuit-event reads; the controls; the
    # two request totals; and the alerts banner (one query, then cached for a few seconds).
    with django_assert_max_num_queries(13):
        admin_client.get(f"/?range={range_key}")


def test_model_names_are_escaped(admin_client, engine):
    request_logs_insert(records=[log_record(requested_model="<b>x</b>", routed_model="<b>x</b>", **fallback())])

    html = html_of(admin_client, "/?range=1h")

    assert "<b>x</b>" not in html
    assert "&lt;b&gt;x&lt;/b&gt;" in html


COUNT = re.compile(r"<strong>([\d,]+)\+?</strong> requests?")


def _link(html: str, label: str) -> str:
    """The href of the counter whose label starts with `label`."""
    found = re.search(
        rf'<a href="([^"]+)" id="dash-link-[a-z]+"><span class="dash-counter-value">[\d,]+</span>\s*'
        rf'<span class="dash-counter-label">{label}',
        html,
    )
    return found.group(1).replace("&amp;", "&")


@pytest.mark.parametrize("range_key", ["1h", "24h", "7d"])
def test_the_range_counter_opens_request_logs_with_as_many_requests(admin_client, engine, range_key):
    # The range is whole buckets (the one under way is the last): a request in the rolling range but before
    # the first bucket, and one stamped later than now in the bucket under way, are counted by the Dashboard
    # exactly when the page its counter opens shows them.
    step = {"1h": 60, "24h": 900, "7d": 3600}[range_key]
    length = {"1h": 3600, "24h": 86400, "7d": 7 * 86400}[range_key]
    now = time.time()
    end = (int(now) // step + 1) * step
    if end - now < 3:
        time.sleep(end - now + 0.1)  # not across a bucket edge while the test runs
        now = time.time()
        end = (int(now) // step + 1) * step
    request_logs_insert(
        records=[
            log_record(at=end - length - 0.5),  # before the first bucket, inside the rolling range when step > 1 s
            log_record(at=end - length + 0.5),  # the first bucket
            log_record(at=now - 1),
            log_record(at=end - 0.5),  # later than now, still in the bucket under way
            log_record(at=end + 0.5),  # the next bucket: on neither
        ]
    )

    html = html_of(admin_client, f"/?range={range_key}")
    total = int(re.search(COUNTER.format(value=r"([\d,]+)", label="requests? in the last"), html).group(1))
    logs = html_of(admin_client, _link(html, "requests? in the last"))

    assert total == 3
    assert int(COUNT.search(logs).group(1)) == total


def test_the_fallback_counter_opens_request_logs_with_as_many_requests(admin_client, engine):
    now = time.time()
    minute_end = (int(now) // 60 + 1) * 60
    if minute_end - now < 3:
        time.sleep(minute_end - now + 0.1)
        now = time.time()
        minute_end = (int(now) // 60 + 1) * 60
    request_logs_insert(
        records=[
            log_record(at=minute_end - 3600 - 0.5, **fallback()),  # before the first minute counted
            log_record(at=minute_end - 3600 + 0.5, **fallback()),
            log_record(at=now - 1, **fallback()),
            log_record(at=now - 1),
            # A chain entry that answered 503: a failed request, in the counters and behind their links.
            log_record(at=now - 1, status=503, **fallback()),
        ]
    )

    html = html_of(admin_client, "/?range=1h")
    logs = html_of(admin_client, _link(html, "fallbacks? in the last hour"))
    today = html_of(admin_client, _link(html, "requests? served by a fallback today"))

    assert re.search(COUNTER.format(value="2", label="fallbacks in the last hour"), html)
    assert int(COUNT.search(logs).group(1)) == 2
    served_today = re.search(COUNTER.format(value=r"(\d+)", label="requests? served by a fallback today"), html)
    assert int(COUNT.search(today).group(1)) == int(served_today.group(1))


def test_the_error_panel_says_there_were_no_errors(admin_client, engine):
    request_logs_insert(records=[log_record(at=time.time() - 5), log_record(at=time.time() - 4)])  # 200s only

    panel = html_of(admin_client, "/?range=1h").split('id="dash-errors"')[1].split("</section>")[0]

    assert "No errors in the last 1 hour." in panel
    assert "<svg" not in panel


def test_an_error_bucket_opens_the_errors_its_title_counts(admin_client, engine):
    """A bucket whose errors are a 4xx, a 499 and a status outside 100-599 lists all three (it used to link to its
    5xx only: none)."""
    now = time.time()
    request_logs_insert(
        records=[
            log_record(at=now - 2, status=429, error_kind="upstream_status"),
            log_record(at=now - 2, status=499),
            log_record(at=now - 2, status=601, error_kind="upstream_status"),
            log_record(at=now - 2),
        ]
    )

    panel = html_of(admin_client, "/?range=1h").split('id="dash-errors"')[1].split("</section>")[0]
    links = re.findall(r'<a href="([^"]+)" tabindex="-1"><rect class="dash-hit"[^>]*><title>([^<]*)</title>', panel)
    [(href, title)] = [(href, title) for href, title in links if "4xx 1," in title]
    assert "Client gone (499) 1" in title and "Other 1" in title
    logs = html_of(admin_client, href.replace("&amp;", "&"))

    assert int(COUNT.search(logs).group(1)) == 3
