"""The Alerts page, the rule editor and the banner: admins only, HTMX and plain requests."""

import pytest
from django.db import transaction
from django.utils import timezone

from alerts.models import Alert, AlertRule
from alerts.services import alert_open
from audit.models import AuditEvent
from tests.alerts.conftest import make_rule

HX = {"HX-Request": "true"}


def _fire(rule, subject="openai/gpt-4o"):
    with transaction.atomic():
        return alert_open(
            rule=rule, subject=subject, figures={"open_minutes": 6}, summary="Open 6 min.", now=timezone.now()
        )


@pytest.mark.parametrize("path", ["/alerts/", "/alerts/rules/new/"])
def test_pages_are_admin_only(role_client, path):
    role, client = role_client

    response = client.get(path)

    expected = {"admin": 200, "bi_read_only": 403, "user": 403, "anonymous": 302}[role]
    assert response.status_code == expected


def test_list_shows_firing_rules_and_history(admin_client):
    rule = make_rule(name="open too long")
    alert = _fire(rule)
    old = _fire(rule, subject="anthropic/claude")
    Alert.objects.filter(pk=old.pk).update(state="resolved", resolved_at=timezone.now(), resolution="clear for 5 min")

    html = admin_client.get("/alerts/").content.decode()

    assert f'id="alert-row-{alert.pk}"' in html and f'id="alert-rule-{rule.pk}"' in html
    assert "clear for 5 min" in html and "anthropic/claude" in html
    assert 'class="al-banner al-banner-severe"' in html


def test_each_subject_carries_its_whole_name_and_an_empty_history_counts_nothing(admin_client):
    # The subject link never wraps; a long one is cut with an ellipsis and its title holds it whole.
    alert = _fire(make_rule(name="open too long"), subject="openai/" + "m" * 120)

    html = admin_client.get("/alerts/").content.decode()

    assert f'title="openai/{"m" * 120}">openai/{"m" * 120}</a>' in html
    assert f'href="/alerts/{alert.pk}/"' in html
    assert "latest 0 resolved" not in html and "No resolved alerts yet" in html


def test_banner_on_every_page_for_admins_only(admin_client, bi_client):
    _fire(make_rule(name="degraded", kind="degraded"), subject="gpt-4o")

    admin_html = admin_client.get("/audit/").content.decode()
    bi_html = bi_client.get("/audit/").content.decode()

    assert (
        'class="al-banner al-banner-warn"' in admin_html and "1 alert firing" in admin_html and "· gpt-4o" in admin_html
    )
    assert 'href="/alerts/">Alerts</a>' in admin_html
    assert "al-banner" not in bi_html and 'href="/alerts/"' not in bi_html


def test_banner_costs_one_query_then_is_cached(admin_client):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from alerts.selectors import alert_banner_forget

    rule = make_rule(name="r")
    for i in range(3):
        _fire(rule, subject=f"openai/m{i}")
    admin_client.get("/audit/")  # warm the session and role caches of the client
    alert_banner_forget()

    with CaptureQueriesContext(connection) as miss:
        html = admin_client.get("/audit/").content.decode()
    with CaptureQueriesContext(connection) as hit:
        cached_html = admin_client.get("/fallback/chains/").content.decode()

    assert len([q for q in miss.captured_queries if "alerts_alert" in q["sql"]]) == 1
    assert [q for q in hit.captured_queries if "alerts_alert" in q["sql"]] == []
    assert "3 alerts firing" in html and "3 alerts firing" in cached_html


def test_an_alert_change_clears_the_cached_banner(admin_client):
    rule = make_rule(name="r")
    _fire(rule, subject="openai/a")
    first = admin_client.get("/audit/").content.decode()

    _fire(rule, subject="openai/b")
    second = admin_client.get("/audit/").content.decode()

    assert "1 alert firing" in first and "2 alerts firing" in second


def test_no_banner_query_when_nothing_renders_it(admin_client):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as ctx:
        admin_client.get("/alerts/", headers={**HX, "HX-Target": "alert-rules"})

    assert not [q for q in ctx.captured_queries if "alerts_alert" in q["sql"] and "LIMIT 101" in q["sql"]]


def test_create_rule_with_field_errors_then_success_over_htmx(admin_client, catalog):
    bad = admin_client.post(
        "/alerts/rules/new/",
        {"name": "", "kind": "degraded", "webhook_url": "ftp://x", "body_format": "json"},
        headers=HX,
    )
    good = admin_client.post(
        "/alerts/rules/new/",
        {
            "name": "degraded",
            "kind": "degraded",
            "minutes": "5",
            "threshold_percent": "30",
            "min_requests": "20",
            "body_format": "json",
            "enabled": "on",
        },
        headers=HX,
    )

    html = bad.content.decode()
    assert bad.status_code == 200 and html.lstrip().startswith('<form id="rule-form"')
    assert "Name is required" in html and "Webhook URL must be a full http:// or https:// address." in html
    assert good.status_code == 204 and good["HX-Redirect"] == "/alerts/"
    rule = AlertRule.objects.get()
    assert (rule.name, rule.threshold_percent, rule.enabled) == ("degraded", 30.0, True)


def test_create_rule_without_htmx_redirects(admin_client):
    response = admin_client.post(
        "/alerts/rules/new/", {"name": "open", "kind": "circuit_open", "minutes": "7", "body_format": "slack"}
    )

    assert response.status_code == 302 and response["Location"] == "/alerts/"
    assert AlertRule.objects.get().minutes == 7


def test_edit_form_shows_the_rule(admin_client):
    rule = make_rule(name="edit me", minutes=9)

    html = admin_client.get(f"/alerts/rules/{rule.pk}/edit/").content.decode()

    assert 'value="edit me"' in html and 'value="9"' in html


def test_toggle_over_htmx_returns_the_rules_table_and_audits(admin_client):
    rule = make_rule(name="r")
    alert = _fire(rule)

    response = admin_client.post(f"/alerts/rules/{rule.pk}/toggle/", {"enabled": "0"}, headers=HX)

    html = response.content.decode()
    assert html.lstrip().startswith('<section id="alert-rules"') and "pill-disabled" in html
    alert.refresh_from_db()
    assert alert.state == "resolved"
    assert AuditEvent.objects.filter(action="alert_rule.disable", object_id=str(rule.pk)).count() == 1


def test_toggle_without_htmx_redirects(admin_client):
    rule = make_rule(name="r", enabled=False)

    response = admin_client.post(f"/alerts/rules/{rule.pk}/toggle/", {"enabled": "1"})

    rule.refresh_from_db()
    assert response.status_code == 302 and rule.enabled is True


def test_delete_keeps_history(admin_client):
    rule = make_rule(name="r")
    alert = _fire(rule)

    confirm = admin_client.get(f"/alerts/rules/{rule.pk}/delete/")
    response = admin_client.post(f"/alerts/rules/{rule.pk}/delete/", headers=HX)

    alert.refresh_from_db()
    assert confirm.status_code == 200 and "Delete rule r" in confirm.content.decode()
    assert response.content.decode().lstrip().startswith('<section id="alert-rules"')
    assert (alert.rule_id, alert.state, alert.resolution, alert.rule_name) == (None, "resolved", "rule deleted", "r")


def test_detail_shows_figures_and_delivery_log(admin_client, receiver):
    from alerts.delivery import deliveries_send

    rule = make_rule(name="r", webhook_url=receiver.url + "/T0/B0/secret-token")
    alert = _fire(rule)
    receiver.script(500)
    deliveries_send()

    html = admin_client.get(f"/alerts/{alert.pk}/").content.decode()
    editor = admin_client.get(f"/alerts/rules/{rule.pk}/edit/").content.decode()

    assert "Open for (min)" in html and "HTTP 500" in html
    # The delivery log shows the target without its path (a webhook's secret); the rule's editor shows it all.
    assert "http://127.0.0.1/… (sha256 " in html and "secret-token" not in html
    assert receiver.url + "/T0/B0/secret-token" in editor
    assert admin_client.get("/alerts/999999/").status_code == 404


def test_detail_is_admin_only(bi_client, user_client):
    alert = _fire(make_rule(name="r"))

    assert bi_client.get(f"/alerts/{alert.pk}/").status_code == 403
    assert user_client.get(f"/alerts/{alert.pk}/").status_code == 403


def test_pages_render_with_the_cache_away(admin_client, settings):
    import socket

    from alerts.selectors import alert_banner

    _fire(make_rule(name="degraded", kind="degraded"), subject="gpt-4o")
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there: every cache call fails with a connection error
    settings.CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": f"redis://127.0.0.1:{port}/0"}
    }
    from django.core.cache import cache

    with pytest.raises(Exception, match=r"(?i)connect"):
        cache.get("anything")

    html = admin_client.get("/alerts/").content.decode()

    assert alert_banner().count == 1
    assert 'class="al-banner al-banner-warn"' in html and "1 alert firing" in html


def test_pages_render_when_the_cache_never_answers(admin_client, settings):
    """A Redis that accepts connections and never answers (a hung server, a black-holed route): with the settings'
    socket timeouts a page waits on the cache briefly (redis-py's own default is 5 s per call) and only once (no
    write after a failed read), and the banner comes from the database."""
    import socket
    import threading

    from alerts.selectors import alert_banner
    from controlplane.settings import CACHE_REDIS_OPTIONS

    _fire(make_rule(name="degraded", kind="degraded"), subject="gpt-4o")
    hole = socket.socket()
    hole.bind(("127.0.0.1", 0))
    hole.listen(16)
    accepted: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                accepted.append(hole.accept()[0])
            except OSError:  # closed
                return

    threading.Thread(target=accept, daemon=True).start()
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": f"redis://127.0.0.1:{hole.getsockname()[1]}/0",
            "OPTIONS": CACHE_REDIS_OPTIONS,
        }
    }
    try:
        count = alert_banner().count
        connections = len(accepted)
        html = admin_client.get("/alerts/").content.decode()
    finally:
        hole.close()
        for conn in accepted:
            conn.close()

    assert count == 1
    assert connections == 1  # the read; a write after it would have waited on a second connection
    assert "1 alert firing" in html
    assert CACHE_REDIS_OPTIONS["socket_timeout"] <= 0.5
