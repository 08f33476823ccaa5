import pytest
from django.core.management import CommandError, call_command

from audit.models import AuditEvent
from catalog.keys import key_hash
from catalog.models import ConsoleToken
from catalog.services import console_token_create, console_token_revoke

pytestmark = pytest.mark.django_db


def test_create_api_token_prints_only_the_secret(admin_user, capsys):
    call_command("create_api_token", "alice")

    out = capsys.readouterr().out
    token = ConsoleToken.objects.get()
    assert out == f"{out.strip()}\n"
    assert out.startswith(f"{token.prefix}-")
    assert token.hashed_secret == key_hash(out.strip())
    assert (token.user, token.name, token.revoked_at) == (admin_user, "script", None)


def test_create_api_token_takes_a_name(admin_user, capsys):
    call_command("create_api_token", "alice", "--name", "nightly export")

    assert list(ConsoleToken.objects.values_list("name", flat=True)) == ["nightly export"]


def test_create_api_token_issues_a_new_token_on_each_run(admin_user, capsys):
    call_command("create_api_token", "alice")
    first = capsys.readouterr().out
    call_command("create_api_token", "alice")
    second = capsys.readouterr().out

    assert first != second
    assert ConsoleToken.objects.count() == 2
    assert list(AuditEvent.objects.order_by("id").values_list("action", "actor_name")) == [
        ("console_token.create", "system"),
        ("console_token.create", "system"),
    ]


def test_create_api_token_refuses_unknown_user(db):
    with pytest.raises(CommandError) as exc:
        call_command("create_api_token", "ghost")

    assert str(exc.value) == "No user named 'ghost'; create it first (manage.py createsuperuser)."
    assert ConsoleToken.objects.count() == 0


def test_create_api_token_refuses_a_blank_name(admin_user):
    with pytest.raises(CommandError) as exc:
        call_command("create_api_token", "alice", "--name", "  ")

    assert str(exc.value) == "Token name is required and cannot be only whitespace."
    assert ConsoleToken.objects.count() == 0
    assert AuditEvent.objects.count() == 0


def test_revoke_api_token_revokes_and_audits(admin_user, capsys):
    token, _ = console_token_create(actor=admin_user, user=admin_user, name="ci")

    call_command("revoke_api_token", token.prefix)

    token.refresh_from_db()
    assert token.revoked_at is not None
    assert capsys.readouterr().out == f"Revoked API token {token.prefix} (ci) of alice.\n"
    event = AuditEvent.objects.order_by("id").last()
    assert (event.action, event.actor_name, event.object_id) == ("console_token.revoke", "system", str(token.pk))


def test_revoke_api_token_twice_says_so_and_audits_once(admin_user, capsys):
    token, _ = console_token_create(actor=admin_user, user=admin_user, name="ci")
    token = console_token_revoke(actor=admin_user, token=token)
    capsys.readouterr()

    call_command("revoke_api_token", token.prefix)

    assert capsys.readouterr().out == (
        f"API token {token.prefix} was already revoked at {token.revoked_at.isoformat()}.\n"
    )
    assert list(AuditEvent.objects.order_by("id").values_list("action", flat=True)) == [
        "console_token.create",
        "console_token.revoke",
    ]


def test_revoke_api_token_refuses_unknown_prefix(db):
    with pytest.raises(CommandError) as exc:
        call_command("revoke_api_token", "cpt-00000000")

    assert str(exc.value) == "No API token with prefix 'cpt-00000000'."
