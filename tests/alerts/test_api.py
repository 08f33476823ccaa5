"""/api/alerts/: rule CRUD (400 with field messages, audited), alerts with ?state=, detail with deliveries."""

import pytest
from django.db import transaction
from django.utils import timezone

from alerts.delivery import deliveries_send
from alerts.models import Alert, AlertRule
from alerts.services import alert_open
from audit.models import AuditEvent
from tests.alerts.conftest import make_rule
from tests.helpers.api import post_json, put_json


def _fire(rule, subject="openai/gpt-4o"):
    with transaction.atomic():
        return alert_open(rule=rule, subject=subject, figures={"open_minutes": 6}, summary="Open.", now=timezone.now())


@pytest.mark.parametrize("path", ["/api/alerts/rules/", "/api/alerts/"])
def test_admin_only(role_client, path):
    role, client = role_client

    status = client.get(path).status_code

    assert status == {"admin": 200, "bi_read_only": 403, "user": 403, "anonymous": 401}[role]


def test_create_read_update_delete(admin_client, catalog):
    created = post_json(
        admin_client, "/api/alerts/rules/", {"name": "degraded 4o", "kind": "degraded", "model": "gpt-4o"}
    )
    rule_id = created.json()["id"]
    updated = put_json(
        admin_client,
        f"/api/alerts/rules/{rule_id}/",
        {"name": "degraded 4o", "kind": "degraded", "model": "gpt-4o", "threshold_percent": 35, "enabled": False},
    )
    listed = admin_client.get("/api/alerts/rules/").json()
    deleted = admin_client.delete(f"/api/alerts/rules/{rule_id}/")

    assert created.status_code == 201
    body = created.json()
    assert (body["minutes"], body["threshold_percent"], body["min_requests"], body["min_count"]) == (5, 20.0, 20, None)
    assert updated.status_code == 200 and updated.json()["threshold_percent"] == 35.0 and not updated.json()["enabled"]
    assert listed["count"] == 1 and listed["results"][0]["name"] == "degraded 4o"
    assert deleted.status_code == 204 and not AlertRule.objects.exists()
    assert list(
        AuditEvent.objects.filter(object_type="alert_rule").order_by("id").values_list("action", flat=True)
    ) == [
        "alert_rule.create",
        "alert_rule.update",
        "alert_rule.delete",
    ]


def test_400_with_field_messages(admin_client):
    response = post_json(
        admin_client,
        "/api/alerts/rules/",
        {"name": "", "kind": "exhausted", "min_count": 0, "webhook_url": "gopher://x"},
    )

    assert response.status_code == 400
    assert response.json()["errors"] == {
        "name": ["Name is required and cannot be only whitespace."],
        "min_count": ["Minimum count must be between 1 and 1e+06."],
        "webhook_url": ["Webhook URL must be a full http:// or https:// address."],
    }
    assert not AuditEvent.objects.exists()


def test_400_for_a_bad_kind_and_shape(admin_client):
    response = post_json(admin_client, "/api/alerts/rules/", {"name": "x", "kind": "nope", "enabled": "yes"})

    assert response.status_code == 400
    assert set(response.json()["errors"]) == {"kind", "enabled"}


def test_alert_list_filters_by_state_and_detail_has_deliveries(admin_client, receiver):
    rule = make_rule(name="r", webhook_url=receiver.url)
    firing = _fire(rule)
    resolved = _fire(rule, subject="anthropic/claude")
    Alert.objects.filter(pk=resolved.pk).update(state="resolved", resolved_at=timezone.now())
    deliveries_send()

    only_firing = admin_client.get("/api/alerts/?state=firing").json()
    only_resolved = admin_client.get("/api/alerts/?state=resolved").json()
    bad = admin_client.get("/api/alerts/?state=nope")
    detail = admin_client.get(f"/api/alerts/{firing.pk}/").json()

    assert [a["id"] for a in only_firing["results"]] == [firing.pk]
    assert [a["id"] for a in only_resolved["results"]] == [resolved.pk]
    assert bad.status_code == 400
    (delivery,) = detail["deliveries"]
    assert (delivery["event"], delivery["status"], delivery["attempts"]) == ("opened", "delivered", 1)
    # Delivery records never carry the webhook's path (its secret); the rule endpoint gives admins all of it.
    assert delivery["url"].startswith("http://127.0.0.1/… (sha256 ") and "/hook" not in delivery["url"]
    assert admin_client.get(f"/api/alerts/rules/{rule.pk}/").json()["webhook_url"] == receiver.url
    assert [(a["number"], a["status_code"]) for a in delivery["attempt_log"]] == [(1, 200)]
    assert admin_client.get("/api/alerts/999999/").status_code == 404


def test_schema_lists_the_endpoints(admin_client):
    schema = admin_client.get("/api/schema/", headers={"Accept": "application/json"}).content.decode()

    for path in ("/api/alerts/rules/", "/api/alerts/rules/{rule_id}/", "/api/alerts/", "/api/alerts/{alert_id}/"):
        assert path in schema
