"""Provider Health as the console's rules want it after a swap or a poll: stable ids for the keyboard, the open and
half-open counts announced outside the polled table, the banner along with each poll, times that say UTC, and an
override delete that asks first."""

import re
from datetime import UTC, datetime

import pytest
import time_machine

from health.breaker import ManualClock, MemoryEngine, Outcome, use_engine
from health.models import BreakerOverride
from tests.alerts.conftest import make_rule
from tests.alerts.test_views import _fire

pytestmark = pytest.mark.django_db

T0 = 1_700_000_000.0
HX = {"HX-Request": "true"}
INDEX_URL = "/fallback/health/"
CONFIGURE_URL = "/fallback/health/configure/"


@pytest.fixture
def engine():
    clock = ManualClock(T0)
    with time_machine.travel(datetime.fromtimestamp(T0, UTC), tick=False):
        engine = MemoryEngine(clock=clock)
        with use_engine(engine):
            yield engine


def _open(engine, provider="openai", model="gpt-4o"):
    for _ in range(10):
        engine.record(engine.allow(provider, model), Outcome.of_status(503))


def _circuit_table(html: str) -> str:
    start = html.index('<div id="circuit-table"')
    return html[start : html.index('<dialog id="reset-dialog"')]


def test_every_link_and_control_in_the_polled_table_has_a_unique_id(admin_client, engine, health_catalog):
    _open(engine)
    engine.record(engine.allow("anthropic", "claude-haiku"), Outcome.of_status(200))

    table = _circuit_table(admin_client.get(INDEX_URL).content.decode())

    tags = re.findall(r"<(a|button|summary|input|select|textarea)\b([^>]*)>", table)
    assert tags
    ids = []
    for tag, attrs in tags:
        if tag == "input" and 'type="hidden"' in attrs:
            continue
        found = re.search(r'\bid="([^"]+)"', attrs)
        assert found, f"<{tag}{attrs}> has no id"
        ids.append(found.group(1))
    assert len(ids) == len(set(ids))
    assert {"sort-model", "sort-failure-count", "sort-total-requests"} <= set(ids)


def test_the_counts_are_announced_outside_the_polled_table(admin_client, engine, health_catalog):
    _open(engine)

    html = admin_client.get(INDEX_URL).content.decode()
    poll = admin_client.get(INDEX_URL, headers={**HX, "HX-Target": "circuit-table"}).content.decode()

    live = re.search(r'<p class="visually-hidden" role="status" id="health-live">([^<]*)</p>', html)
    assert live and live.group(1) == "1 circuit open, 0 half-open."
    assert html.index('id="health-live"') < html.index('<div id="circuit-table"')
    assert '<span hidden data-live-for="health-live">1 circuit open, 0 half-open.</span>' in poll
    assert 'id="health-live"' not in poll  # the region itself is never swapped


def test_the_poll_brings_the_alert_banner_out_of_band(admin_client, engine, health_catalog):
    _fire(make_rule(name="open too long"))

    full = admin_client.get(INDEX_URL).content.decode()
    poll = admin_client.get(INDEX_URL, headers={**HX, "HX-Target": "circuit-table"}).content.decode()

    assert full.count('id="alert-banner"') == 1 and "hx-swap-oob" not in full.split('id="alert-banner"')[1][:40]
    assert '<div id="alert-banner" data-oob-text hx-swap-oob="true">' in poll
    assert "1 alert firing" in poll


def test_the_24_hour_strip_says_its_times_are_utc(admin_client, engine, health_catalog):
    _open(engine)

    html = admin_client.get(INDEX_URL).content.decode()

    assert "<span>Last 24 h (UTC)</span>" in html


def test_deleting_an_override_asks_first_and_names_it(admin_client, engine, health_catalog):
    BreakerOverride.objects.create(provider="openai", model="gpt-4o", failure_threshold=3)

    html = admin_client.get(CONFIGURE_URL).content.decode()

    block = re.search(r'<details class="confirm-inline" id="override-delete-[^"]+">.*?</details>', html, re.S)
    assert block, "the delete form sits behind a confirm step"
    step = block.group(0)
    summary = re.search(r"<summary[^>]*>(.*?)</summary>", step, re.S).group(1)
    assert "Delete" in summary and "<button" not in summary  # the first click only unfolds the step
    assert re.search(r'<button type="submit"[^>]*>Delete override openai / gpt-4o</button>', step)
    # Outside the confirm step nothing submits a delete.
    assert html.count("/fallback/health/configure/override/delete/") == step.count(
        "/fallback/health/configure/override/delete/"
    )
