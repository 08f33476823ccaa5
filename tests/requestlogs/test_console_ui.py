"""Request Logs for the keyboard and the clock: the Time column says UTC, every control of the swapped list has a
stable id, a follow poll brings the alert banner along, and the filters' error summary is marked for focus."""

import re

import pytest

pytestmark = pytest.mark.django_db

LIST_URL = "/logs/"


def test_the_time_column_says_utc(rows, admin_client):
    html = admin_client.get(LIST_URL).content.decode()

    assert re.search(r'<a [^>]*id="sort-time"[^>]*>Time \(UTC\) <span aria-hidden="true">▼</span></a>', html)
    assert html.count('data-label="Time (UTC)"') == len(rows)


def test_every_control_of_the_swapped_list_has_a_unique_id(rows, admin_client):
    html = admin_client.get(LIST_URL).content.decode()
    page = html[html.index('<div id="log-page">') : html.index('<dialog id="log-drawer"')]

    ids = []
    for tag, attrs in re.findall(r"<(a|button|summary|select|input)\b([^>]*)>", page):
        if 'type="hidden"' in attrs:
            continue
        found = re.search(r'\bid="([^"]+)"', attrs)
        assert found, f"<{tag}{attrs}> has no id"
        ids.append(found.group(1))
    assert len(ids) == len(set(ids))
    assert {"sort-time", "log-apply", "log-export", "log-filters-toggle"} <= set(ids)


def test_a_follow_poll_brings_the_banner_out_of_band(rows, admin_client):
    poll = admin_client.get(
        LIST_URL + "?follow=1", headers={"HX-Request": "true", "HX-Target": "log-table"}
    ).content.decode()
    full = admin_client.get(LIST_URL + "?follow=1").content.decode()

    assert '<div id="alert-banner" data-oob-text hx-swap-oob="true">' in poll
    assert full.count('id="alert-banner"') == 1 and "hx-swap-oob" not in full


def test_the_filters_error_summary_is_marked_for_focus(rows, admin_client):
    html = admin_client.get(LIST_URL + "?range=custom&from=nonsense").content.decode()

    assert 'id="log-error-summary" tabindex="-1" data-error-summary' in html
