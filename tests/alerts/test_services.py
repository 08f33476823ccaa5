"""Rule writes: validation with field errors, defaults per kind, audit events in the same transaction."""

import pytest

from alerts.models import AlertRule
from alerts.services import RuleInput, alert_rule_create, alert_rule_delete, alert_rule_update
from audit.models import AuditEvent
from core.errors import ValidationFailed


def test_create_fills_the_kind_defaults_and_clears_unused_parameters(db, catalog):
    rule = alert_rule_create(
        actor=None, data=RuleInput(name=" Degraded ", kind="degraded", provider="openai", min_count=9)
    )

    assert (rule.name, rule.minutes, rule.threshold_percent, rule.min_requests) == ("Degraded", 5, 20.0, 20)
    assert (rule.provider, rule.min_count) == ("", None)
    event = AuditEvent.objects.get(action="alert_rule.create")
    assert (event.object_id, event.actor_name, event.after["kind"]) == (str(rule.pk), "system", "degraded")


def test_every_field_error_is_reported_at_once(db, catalog):
    alert_rule_create(actor=None, data=RuleInput(name="taken", kind="exhausted"))

    with pytest.raises(ValidationFailed) as exc:
        alert_rule_create(
            actor=None,
            data=RuleInput(
                name="taken",
                kind="degraded",
                model="no-such-model",
                minutes=0,
                threshold_percent=100,
                min_requests=0,
                webhook_url="ftp://example.com/hook",
                body_format="xml",
            ),
        )

    assert set(exc.value.errors) == {
        "name",
        "model",
        "minutes",
        "threshold_percent",
        "min_requests",
        "webhook_url",
        "body_format",
    }
    assert exc.value.errors["webhook_url"] == ["Webhook URL must be a full http:// or https:// address."]
    assert AlertRule.objects.count() == 1


@pytest.mark.parametrize("url", ["http://hooks.example.com/x", "https://127.0.0.1:9000/hook?a=1"])
def test_http_and_https_webhooks_are_accepted(db, url):
    assert alert_rule_create(actor=None, data=RuleInput(name="r", kind="exhausted", webhook_url=url)).webhook_url == url


@pytest.mark.parametrize("url", ["javascript:alert(1)", "file:///etc/passwd", "hooks.example.com", "http://"])
def test_other_webhooks_are_refused(db, url):
    with pytest.raises(ValidationFailed) as exc:
        alert_rule_create(actor=None, data=RuleInput(name="r", kind="exhausted", webhook_url=url))
    assert list(exc.value.errors) == ["webhook_url"]


def test_update_audits_only_what_changed_and_hides_the_webhook_path(db):
    rule = alert_rule_create(actor=None, data=RuleInput(name="r", kind="circuit_open"))

    alert_rule_update(
        actor=None,
        rule_id=rule.pk,
        data=RuleInput(
            name="r", kind="circuit_open", minutes=10, webhook_url="https://hooks.slack.com/services/T/B/secret"
        ),
    )

    event = AuditEvent.objects.get(action="alert_rule.update")
    assert event.before == {"minutes": 5, "webhook_url": ""}
    assert event.after["minutes"] == 10
    assert event.after["webhook_url"].startswith("https://hooks.slack.com/… (sha256 ")
    assert "secret" not in str(event.after)


def test_delete_is_audited_with_a_snapshot(db):
    rule = alert_rule_create(actor=None, data=RuleInput(name="gone", kind="exhausted", min_count=3))

    alert_rule_delete(actor=None, rule_id=rule.pk)

    event = AuditEvent.objects.get(action="alert_rule.delete")
    assert (event.object_repr, event.before["min_count"]) == ("gone", 3)
    assert not AlertRule.objects.exists()


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data/",
        "http://169.254.10.1:8080/hook",
        "http://[fe80::1]/hook",
        "https://[::ffff:169.254.169.254]/hook",
        "http://[fd00:ec2::254]/hook",
    ],
)
def test_link_local_and_metadata_webhooks_are_refused(db, url):
    with pytest.raises(ValidationFailed) as exc:
        alert_rule_create(actor=None, data=RuleInput(name="r", kind="exhausted", webhook_url=url))

    assert exc.value.errors == {"webhook_url": ["Webhook URL cannot point to a link-local or cloud metadata address."]}


@pytest.mark.parametrize("url", ["http://10.0.0.5:9000/hook", "http://192.168.1.2/hook", "http://[::1]:8080/hook"])
def test_private_and_loopback_webhooks_are_allowed(db, url):
    assert alert_rule_create(actor=None, data=RuleInput(name="r", kind="exhausted", webhook_url=url)).webhook_url == url
