"""The Alerts page's poll keeps the whole page true: the banner, the rules' firing counts and the history come
along out of band, the firing count is announced outside the polled section, delivery times say UTC, and every
control of the swapped sections has a stable id (for the keyboard after a swap)."""

import re

import pytest
from django.utils import timezone

from alerts.models import Alert
from tests.alerts.conftest import make_rule
from tests.alerts.test_views import _fire

pytestmark = pytest.mark.django_db

POLL = {"HX-Request": "true", "HX-Target": "alerts-firing"}


def test_the_banner_has_an_id_on_every_admin_page(admin_client):
    quiet = admin_client.get("/audit/").content.decode()
    _fire(make_rule(name="open too long"))
    loud = admin_client.get("/audit/").content.decode()

    assert '<div id="alert-banner" data-oob-text>' in quiet and "alert firing" not in quiet
    assert '<div id="alert-banner" data-oob-text>' in loud and "1 alert firing" in loud


def test_the_firing_poll_refreshes_banner_rules_and_history_out_of_band(admin_client):
    rule = make_rule(name="open too long")
    _fire(rule)
    old = _fire(rule, subject="anthropic/claude")
    Alert.objects.filter(pk=old.pk).update(state="resolved", resolved_at=timezone.now(), resolution="clear for 5 min")

    full = admin_client.get("/alerts/").content.decode()
    poll = admin_client.get("/alerts/", headers=POLL).content.decode()

    assert "hx-swap-oob" not in full
    assert poll.lstrip().startswith('<section id="alerts-firing"')
    assert '<div id="alert-banner" data-oob-text hx-swap-oob="true">' in poll and "1 alert firing" in poll
    assert re.search(r'<section id="alert-rules"[^>]*hx-swap-oob="true"', poll)
    assert re.search(r'<section id="alerts-history"[^>]*hx-swap-oob="true"', poll) and "anthropic/claude" in poll
    assert '<span class="pill pill-open" title="Alerts firing">1 firing</span>' in poll


def test_the_firing_count_is_announced_outside_the_polled_section(admin_client):
    _fire(make_rule(name="open too long"))

    full = admin_client.get("/alerts/").content.decode()
    poll = admin_client.get("/alerts/", headers=POLL).content.decode()

    assert '<p class="visually-hidden" role="status" id="alerts-live">1 alert firing.</p>' in full
    assert full.index('id="alerts-live"') < full.index('<section id="alerts-firing"')
    assert '<span hidden data-live-for="alerts-live">1 alert firing.</span>' in poll and 'id="alerts-live"' not in poll


def test_every_control_of_the_swapped_sections_has_a_unique_id(admin_client):
    rule = make_rule(name="open too long")
    _fire(rule)

    html = admin_client.get("/alerts/").content.decode()
    sections = html[html.index('<section id="alerts-firing"') : html.index("</main>")]

    ids = []
    for tag, attrs in re.findall(r"<(a|button)\b([^>]*)>", sections):
        found = re.search(r'\bid="([^"]+)"', attrs)
        assert found, f"<{tag}{attrs}> has no id"
        ids.append(found.group(1))
    assert len(ids) == len(set(ids))
    assert f"rule-toggle-{rule.pk}" in ids


def test_the_rule_form_marks_its_error_summary_for_focus(admin_client):
    html = admin_client.post("/alerts/rules/new/", {"name": "", "kind": "circuit_open", "minutes": "-5"}).content
    html = html.decode()

    assert re.search(
        r'<div class="alert alert-error" role="alert" id="error-summary" tabindex="-1" data-error-summary>', html
    )


def test_delivery_attempt_times_say_utc(admin_client, receiver):
    from alerts.delivery import deliveries_send

    alert = _fire(make_rule(name="r", webhook_url=receiver.url + "/hook"))
    receiver.script(500)
    deliveries_send()

    html = admin_client.get(f"/alerts/{alert.pk}/").content.decode()

    assert re.search(r'<div class="al-attempt"><span class="nowrap">#1 · <time [^>]*>\d\d:\d\d:\d\d UTC</time>', html)
