"""`seed_demo` (run by every `make run`) over a database it has seen before, or that someone changed since: it
starts, makes each demo object once, leaves what others made alone, and prints only what still works."""

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management import call_command

from alerts.models import AlertRule
from alerts.services import RuleInput, alert_rule_delete, alert_rule_update
from catalog.models import Agent, ApiKey, Application, LlmModel, Provider, Team
from catalog.services import api_key_revoke
from chains.models import FallbackChain
from routing.models import Alias, RoutingRule

pytestmark = pytest.mark.django_db

DEFAULT_RULES = ["Chain exhausted", "Circuit open over 5 min", "Degraded: over 20% fallback"]


@pytest.fixture
def var(settings, tmp_path):
    settings.VAR_DIR = tmp_path
    settings.SIMULATOR_URL = "http://sim.test:8001"
    return tmp_path


def _users():
    return get_user_model()._default_manager


def _remove_demo_catalog() -> None:
    """What an admin starting over with their own catalog removes in the console; teams and users stay."""
    FallbackChain.objects.all().delete()
    RoutingRule.objects.all().delete()
    Alias.objects.all().delete()
    LlmModel.objects.all().delete()
    Provider.objects.all().delete()


def _seed(capsys) -> str:
    capsys.readouterr()
    call_command("seed_demo")
    return capsys.readouterr().out


# --- fault 2: demo teams and users that exist already ------------------------------------------------------


def test_reseeding_after_the_demo_catalog_was_removed_reuses_the_teams_and_users(var):
    call_command("seed_demo")
    teams = dict(Team.objects.values_list("name", "pk"))
    _remove_demo_catalog()

    call_command("seed_demo")

    assert dict(Team.objects.values_list("name", "pk")) == teams  # the same rows, none made twice
    assert list(Application.objects.values_list("name", flat=True)) == ["checkout"]
    assert list(Agent.objects.values_list("name", flat=True)) == ["refund-bot"]
    assert _users().filter(username__in=["analyst", "developer"]).count() == 2
    assert Provider.objects.count() == 4  # the catalog is back
    support_rule = RoutingRule.objects.get()
    assert support_rule.scope_id == teams["support"]
    assert FallbackChain.objects.get(name="Payments: Claude Sonnet fallback").scope_id == teams["payments"]


def test_a_user_made_before_the_first_run_under_a_demo_name_is_left_alone(var):
    mine = _users().create_user("developer", password="mine")

    call_command("seed_demo")

    mine.refresh_from_db()
    assert mine.check_password("mine")
    assert list(mine.groups.values_list("name", flat=True)) == []  # not given the demo's role
    analyst = _users().get(username="analyst")
    assert list(analyst.groups.values_list("name", flat=True)) == ["bi_read_only"]


def test_a_demo_team_made_before_the_first_run_is_used(var):
    Team.objects.create(name="payments")

    call_command("seed_demo")

    assert Team.objects.filter(name="payments").count() == 1
    assert Application.objects.get(name="checkout").team.name == "payments"


# --- fault 3: default alert rules renamed or deleted -------------------------------------------------------


def test_a_renamed_default_alert_rule_is_not_made_again(var):
    call_command("seed_demo")
    rule = AlertRule.objects.get(name="Chain exhausted")
    alert_rule_update(actor=None, rule_id=rule.pk, data=RuleInput(name="Chain exhausted (pager)", kind="exhausted"))

    call_command("seed_demo")

    assert sorted(AlertRule.objects.values_list("name", flat=True)) == [
        "Chain exhausted (pager)",
        "Circuit open over 5 min",
        "Degraded: over 20% fallback",
    ]


def test_deleted_default_alert_rules_stay_deleted(var):
    call_command("seed_demo")
    for rule in AlertRule.objects.all():
        alert_rule_delete(actor=None, rule_id=rule.pk)

    call_command("seed_demo")

    assert not AlertRule.objects.exists()


def test_the_default_alert_rules_come_with_the_catalog(var):
    call_command("seed_demo")
    assert sorted(AlertRule.objects.values_list("name", flat=True)) == DEFAULT_RULES
    _remove_demo_catalog()
    AlertRule.objects.filter(name="Chain exhausted").delete()

    call_command("seed_demo")  # the catalog is made again: so are the defaults missing from it

    assert sorted(AlertRule.objects.values_list("name", flat=True)) == DEFAULT_RULES


# --- faults 4 and 5: the admin's password ------------------------------------------------------------------


def test_a_password_changed_in_the_console_is_not_printed_as_the_one_to_use(var, capsys):
    call_command("seed_demo")
    stale = (var / "admin_password").read_text().strip()
    admin = _users().get(username="admin")
    admin.set_password("changed-in-the-console")
    admin.save()

    out = _seed(capsys)

    assert stale not in out
    assert "admin / " not in out
    assert "password was changed since seeding" in out
    admin.refresh_from_db()
    assert admin.check_password("changed-in-the-console")  # and the seed did not change it back


def test_the_seeded_password_is_printed_while_it_signs_in(var, capsys):
    call_command("seed_demo")

    out = _seed(capsys)

    printed = out.split("admin / ", 1)[1].split()[0]
    assert _users().get(username="admin").check_password(printed)


def test_an_admin_made_before_the_first_run_keeps_its_password(var, capsys):
    _users().create_superuser("admin", "me@example.com", "my-own-password")

    out = _seed(capsys)

    admin = _users().get(username="admin")
    assert admin.check_password("my-own-password")
    assert not (var / "admin_password").exists()
    assert "admin / " not in out
    assert "its own password" in out
    assert admin.groups.filter(name="admin").exists()


# --- fault 6: a deactivated admin ---------------------------------------------------------------------------


def _deactivate_admin_and_revoke_its_keys() -> None:
    _users().filter(username="admin").update(is_active=False)
    for key in ApiKey.objects.filter(name="demo key"):
        api_key_revoke(actor=None, key=key)


def test_reseeding_with_a_deactivated_admin_whose_key_was_revoked_starts_and_issues_no_key(var, capsys):
    call_command("seed_demo")
    revoked = (var / "demo_gateway_key").read_text().strip()
    _deactivate_admin_and_revoke_its_keys()

    out = _seed(capsys)

    assert ApiKey.objects.filter(revoked_at=None).count() == 0
    assert revoked not in out
    assert "the admin user is deactivated" in out
    assert not (var / "demo_gateway_key").exists()  # so `make run`'s banner does not offer it either


def test_the_key_of_a_deactivated_admin_is_not_printed_as_usable(var, capsys):
    call_command("seed_demo")
    key = (var / "demo_gateway_key").read_text().strip()
    _users().filter(username="admin").update(is_active=False)  # deactivated; its key not revoked

    out = _seed(capsys)

    assert key not in out
    assert "the admin user is deactivated" in out
    assert ApiKey.objects.count() == 1


def test_a_reactivated_admin_gets_a_key_again(var, capsys):
    call_command("seed_demo")
    _deactivate_admin_and_revoke_its_keys()
    call_command("seed_demo")
    _users().filter(username="admin").update(is_active=True)

    out = _seed(capsys)

    key = (var / "demo_gateway_key").read_text().strip()
    assert f"Gateway demo key: {key}" in out
    assert ApiKey.objects.filter(revoked_at=None).count() == 1
    assert Group.objects.get(name="admin").user_set.filter(username="admin").exists()
