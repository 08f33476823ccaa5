"""The Dashboard's poll for the keyboard and screen readers: stable ids on the range tabs and counters, the
counts announced outside the polled body, and the alert banner along with each poll."""

import re

import pytest

from tests.alerts.conftest import make_rule
from tests.alerts.test_views import _fire

pytestmark = pytest.mark.django_db

POLL = {"HX-Request": "true", "HX-Target": "dashboard-body"}


def test_range_tabs_and_counters_keep_their_ids(admin_client):
    html = admin_client.get("/?range=1h").content.decode()
    body = html[html.index('<div id="dashboard-body"') :]

    for key in ("1h", "24h", "7d"):
        assert f'id="range-{key}"' in body
    for name in ("open", "hour", "today", "total"):
        assert f'id="dash-link-{name}"' in body
    ids = re.findall(r'<a [^>]*\bid="([^"]+)"', body)
    assert len(ids) == len(set(ids)) == len(re.findall(r"<a ", body)) - body.count('tabindex="-1"')


def test_the_counts_are_announced_outside_the_polled_body(admin_client):
    html = admin_client.get("/").content.decode()
    poll = admin_client.get("/", headers=POLL).content.decode()

    live = re.search(r'<p class="visually-hidden" role="status" id="dash-live">([^<]*)</p>', html)
    assert live and live.group(1).startswith("0 circuits open, 0 fallbacks in the last hour")
    assert html.index('id="dash-live"') < html.index('<div id="dashboard-body"')
    assert '<span hidden data-live-for="dash-live">0 circuits open' in poll and 'id="dash-live"' not in poll


def test_the_poll_brings_the_banner_out_of_band(admin_client):
    _fire(make_rule(name="open too long"))

    poll = admin_client.get("/", headers=POLL).content.decode()

    assert '<div id="alert-banner" data-oob-text hx-swap-oob="true">' in poll and "1 alert firing" in poll
