import pytest
from django.core.management import CommandError, call_command
from rest_framework.authtoken.models import Token

pytestmark = pytest.mark.django_db


def test_create_api_token_prints_only_the_token(admin_user, capsys):
    call_command("create_api_token", "alice")

    out = capsys.readouterr().out
    assert out == Token.objects.get(user=admin_user).key + "\n"


def test_create_api_token_returns_the_same_token_on_second_run(admin_user, capsys):
    call_command("create_api_token", "alice")
    first = capsys.readouterr().out
    call_command("create_api_token", "alice")
    second = capsys.readouterr().out

    assert first == second
    assert Token.objects.count() == 1


def test_create_api_token_refuses_unknown_user(db):
    with pytest.raises(CommandError) as exc:
        call_command("create_api_token", "ghost")

    assert str(exc.value) == "No user named 'ghost'; create it first (manage.py createsuperuser)."
    assert Token.objects.count() == 0
